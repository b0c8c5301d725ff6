package cloudinit

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// guardedConfig is what our part of p's user-data must be once p carries
// extra user-data: the plain render's cloud-config with the guard added.
func guardedConfig(t *testing.T, p Proxy) cloudConfig {
	t.Helper()
	plain := p
	plain.ExtraUserData = ""
	data, err := Render(plain)
	if err != nil {
		t.Fatal(err)
	}
	var cc cloudConfig
	if err := yaml.UnmarshalStrict(bytes.TrimPrefix(data, []byte("#cloud-config\n")), &cc); err != nil {
		t.Fatal(err)
	}
	ports, err := connectPortLines(p.Egress.ConnectPorts)
	if err != nil {
		t.Fatal(err)
	}
	guard(&cc, p, ports)
	return cc
}

// ownPart returns our cloud-config of a two-part user-data.
func ownPart(t *testing.T, data []byte) cloudConfig {
	t.Helper()
	start := bytes.Index(data, []byte("#cloud-config\n"))
	end := -1
	if start >= 0 {
		end = bytes.Index(data[start:], []byte("\n--"+boundary+"\n"))
	}
	if end < 0 {
		t.Fatalf("no cloud-config part before the second boundary:\n%s", data)
	}
	var cc cloudConfig
	if err := yaml.UnmarshalStrict(data[start+len("#cloud-config\n"):start+end], &cc); err != nil {
		t.Fatalf("our part does not decode: %v", err)
	}
	return cc
}

// checkLine matches the drop-in's digest checks.
var checkLine = regexp.MustCompile(`(?m)^ExecStartPre=\+/bin/sh -c '(echo "([0-9a-f]{64})  (\S+)" \| sha256sum --check --strict --quiet -)'$`)

func TestRenderGuard(t *testing.T) {
	p := Proxy{Port: 3128, Username: "crawler", Password: "S3cret-pass", ExtraUserData: "#!/bin/sh\nnft flush ruleset\n"}
	data, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	cc := ownPart(t, data)
	files := map[string]writeFile{}
	for _, f := range cc.WriteFiles {
		files[f.Path] = f
	}
	dropIn, ok := files[guardDropInPath]
	if !ok {
		t.Fatalf("no guard drop-in among %v: a user part that rewrites tinyproxy.conf would go unnoticed", cc.WriteFiles)
	}
	if diff := cmp.Diff(TinyproxyConf(p), files[guardConfPath].Content); diff != "" {
		t.Errorf("the operator's copy of tinyproxy.conf is not what it rendered (-want +got):\n%s", diff)
	}
	if got := files[guardConfPath]; got.Owner != "root:tinyproxy" || got.Permissions != "0640" {
		t.Errorf("the copy holds the password: owner %s, mode %s, want root:tinyproxy 0640", got.Owner, got.Permissions)
	}
	// The copy is put in place first, the rules loaded last, each time
	// tinyproxy starts.
	lines := strings.Split(strings.TrimSpace(dropIn.Content), "\n")
	if want := "ExecStartPre=+/usr/bin/install -m 0640 -o root -g tinyproxy " + guardConfPath + " " + ConfigPath; !strings.Contains(dropIn.Content, want+"\n") ||
		strings.Index(dropIn.Content, want) > strings.Index(dropIn.Content, "sha256sum") {
		t.Errorf("drop-in does not restore the operator's tinyproxy.conf before checking it:\n%s", dropIn.Content)
	}
	if got, want := lines[len(lines)-1], "ExecStartPre=+/usr/sbin/nft -f "+NftablesPath; got != want {
		t.Errorf("last line of the drop-in = %q, want %q: a flushed ruleset must come back before tinyproxy starts", got, want)
	}
	wantRun := [][]string{{"systemctl", "enable", guardUnitName}, {"systemctl", "start", "--no-block", guardUnitName}}
	if diff := cmp.Diff(wantRun, cc.RunCmd[len(cc.RunCmd)-2:]); diff != "" {
		t.Errorf("runcmd must end by queueing the guard, which runs once the user's part is done (-want +got):\n%s", diff)
	}
	if !strings.Contains(files[guardUnitPath].Content, "After=cloud-final.service") {
		t.Errorf("the guard unit must run after cloud-init's final stage, where the user's part runs:\n%s", files[guardUnitPath].Content)
	}

	// The digest checks, run as the guest runs them against the files
	// at a temporary place: they pass for what the operator rendered and
	// fail for a rewritten file.
	checks := checkLine.FindAllStringSubmatch(dropIn.Content, -1)
	rendered := map[string]string{ConfigPath: TinyproxyConf(p), NftablesPath: NftablesRules(p.Egress)}
	if len(checks) != len(rendered) {
		t.Fatalf("drop-in has %d digest checks, want one per file of %v:\n%s", len(checks), rendered, dropIn.Content)
	}
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Fatalf("sha256sum (coreutils) is needed: %v", err)
	}
	for _, c := range checks {
		content, ok := rendered[c[3]]
		if !ok {
			t.Fatalf("digest check of %s, which the operator does not render", c[3])
		}
		tmp := filepath.Join(t.TempDir(), "f")
		script := strings.Replace(c[1], c[3], tmp, 1)
		for _, tc := range []struct {
			name, content string
			pass          bool
		}{
			{"as rendered", content, true},
			{"rewritten by the user's part", strings.ReplaceAll(content, "BasicAuth", "#BasicAuth") + "Allow 0.0.0.0/0\n", false},
			{"emptied", "", false},
		} {
			if err := os.WriteFile(tmp, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			err := exec.Command("/bin/sh", "-c", script).Run()
			if (err == nil) != tc.pass {
				t.Errorf("check of %s %s: error %v, want pass %v", c[3], tc.name, err, tc.pass)
			}
		}
	}

	// Without extra user-data there is no one else's part to guard against.
	plain := p
	plain.ExtraUserData = ""
	out, err := Render(plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte(guardUnitName)) {
		t.Errorf("plain user-data holds the guard")
	}
}
