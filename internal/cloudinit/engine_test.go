package cloudinit

import (
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// Digests of no real binary, 64 hex digits each.
var (
	amd64Digest = strings.Repeat("a1", 32)
	arm64Digest = strings.Repeat("b2", 32)
)

func testEngine() *Engine {
	return &Engine{Digests: map[string]string{"amd64": amd64Digest, "arm64": arm64Digest}, PayloadLabel: "EPENGINE"}
}

// renderedEngine renders p and returns its cloud-config and files by path.
func renderedEngine(t *testing.T, p Proxy) (cloudConfig, map[string]writeFile) {
	t.Helper()
	data, err := Render(p)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	docs := cloudConfigParts(t, data)
	var cc cloudConfig
	if err := yaml.Unmarshal(docs[0][len("#cloud-config\n"):], &cc); err != nil {
		t.Fatal(err)
	}
	files := map[string]writeFile{}
	for _, f := range cc.WriteFiles {
		files[f.Path] = f
	}
	return cc, files
}

// execStart returns the engine unit's command line, split.
func execStart(t *testing.T, unit string) []string {
	t.Helper()
	for line := range strings.SplitSeq(unit, "\n") {
		if rest, ok := strings.CutPrefix(line, "ExecStart="); ok {
			return strings.Fields(rest)
		}
	}
	t.Fatalf("the engine's unit has no ExecStart:\n%s", unit)
	return nil
}

func TestRenderEngine(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		proxy        Proxy
		wantArgs     []string
		wantCreds    bool
		wantCaps     string
	}{
		{name: "basic auth", reason: "the common case: credentials through LoadCredential=, the safe policy by the engine's defaults",
			proxy:    Proxy{Port: 3128, Username: "crawler", Password: secretSentinel},
			wantArgs: []string{EngineBinaryPath, "--listen=:3128", "--admin-listen=127.0.0.1:9090"}, wantCreds: true, wantCaps: "CapabilityBoundingSet=\n"},
		{name: "source ranges", reason: "without credentials the ranges are the engine's flag, and no credential is loaded",
			proxy:    Proxy{Port: 8888, AllowedSourceRanges: prefixes(t, "198.51.100.7/24", "2001:db8::/32")},
			wantArgs: []string{EngineBinaryPath, "--listen=:8888", "--admin-listen=127.0.0.1:9090", "--allowed-source-ranges=198.51.100.0/24,2001:db8::/32"}, wantCaps: "CapabilityBoundingSet=\n"},
		{name: "policy and a low port", reason: "the entry's policy as the pods' flags (ports tinyproxy could not list included); port 80 needs the one capability",
			proxy: Proxy{Port: 80, Username: "u", Password: "low-port-" + secretSentinel, Egress: egress.Policy{
				DenyCIDRs: prefixes(t, "203.0.113.0/24"), ConnectPorts: []egress.PortRange{{From: 1024, To: 65535}}}},
			wantArgs:  []string{EngineBinaryPath, "--listen=:80", "--admin-listen=127.0.0.1:9090", "--egress-deny-cidrs=203.0.113.0/24", "--connect-ports=1024-65535"},
			wantCreds: true, wantCaps: "AmbientCapabilities=CAP_NET_BIND_SERVICE\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.proxy.Engine = testEngine()
			cc, files := renderedEngine(t, tc.proxy)
			if cc.PackageUpdate || len(cc.Packages) > 0 {
				t.Errorf("%s: the user-data asks for a package mirror (package_update %t, packages %q); the guest may have none", tc.reason, cc.PackageUpdate, cc.Packages)
			}
			unit := files[engineUnitPath].Content
			if diff := cmp.Diff(tc.wantArgs, execStart(t, unit)); diff != "" {
				t.Errorf("%s: ExecStart (-want +got):\n%s", tc.reason, diff)
			}
			for _, want := range []string{"User=" + EngineUser + "\n", "Requires=" + nftablesUnitName + "\n", "ExecStartPre=+" + engineInstallPath + "\n", tc.wantCaps} {
				if !strings.Contains(unit, want) {
					t.Errorf("%s: the unit lacks %q:\n%s", tc.reason, want, unit)
				}
			}
			if strings.Contains(unit, tc.proxy.Password) && tc.proxy.Password != "" {
				t.Errorf("the unit holds the password; it must reach the engine only as a credential file")
			}
			creds := files[engineCredentialsDir+"/password"]
			if got := creds.Path != ""; got != tc.wantCreds {
				t.Fatalf("%s: credential files written = %t, want %t", tc.reason, got, tc.wantCreds)
			}
			if tc.wantCreds {
				if diff := cmp.Diff([]string{"root:root", "0600", tc.proxy.Password}, []string{creds.Owner, creds.Permissions, creds.Content}); diff != "" {
					t.Errorf("the password file, root's alone (-want +got):\n%s", diff)
				}
				if !strings.Contains(unit, "LoadCredential=password:"+engineCredentialsDir+"/password\n") {
					t.Errorf("the unit does not hand the password over with LoadCredential=:\n%s", unit)
				}
			}
			if rules := files[NftablesPath].Content; !strings.Contains(rules, `meta skuid != "`+EngineUser+`" accept`) {
				t.Errorf("the rules are not the engine user's:\n%s", rules)
			}
			for _, want := range []string{"x86_64) arch=amd64 want=" + amd64Digest + " ;;", "aarch64) arch=arm64 want=" + arm64Digest + " ;;", "/dev/disk/by-label/EPENGINE"} {
				if !strings.Contains(files[engineInstallPath].Content, want) {
					t.Errorf("the install script lacks %q", want)
				}
			}
			if got := cc.RunCmd[len(cc.RunCmd)-1]; !cmp.Equal(got, []string{"systemctl", "restart", engineUnitName}) {
				t.Errorf("the last command is %q, want the engine's restart", got)
			}
		})
	}
}

func TestRenderEngineErrors(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		engine       Engine
		want         string
	}{
		{name: "no digest", reason: "a guest could verify nothing", engine: Engine{PayloadLabel: "EPENGINE"}, want: "no binary digest"},
		{name: "unknown arch", reason: "the engine is built for amd64 and arm64 only",
			engine: Engine{Digests: map[string]string{"riscv64": amd64Digest}, PayloadLabel: "EPENGINE"}, want: `"riscv64"`},
		{name: "short digest", reason: "a digest that is not a SHA-256 verifies nothing",
			engine: Engine{Digests: map[string]string{"amd64": "abc"}, PayloadLabel: "EPENGINE"}, want: "amd64 digest is not a SHA-256"},
		{name: "no label", reason: "the guest finds the payload by its label", engine: Engine{Digests: map[string]string{"amd64": amd64Digest}}, want: "label is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(Proxy{Port: 3128, Username: "u", Password: secretSentinel, Engine: &tc.engine})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: Render = %v, want an error with %q", tc.reason, err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), secretSentinel) {
				t.Errorf("the error quotes the password: %v", err)
			}
		})
	}
}

// The shared table of decisions, rendered for the engine: its unit's
// flags, read back as the engine reads them, and the rules of its user,
// read as the kernel does, decide every case as the policy does.
func TestEgressCasesAreRenderedForTheEngine(t *testing.T) {
	for _, c := range egress.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			_, files := renderedEngine(t, Proxy{Port: 3128, Username: "u", Password: "p", Egress: c.Policy, Engine: testEngine()})
			fs := flag.NewFlagSet("egress-proxy", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := egress.BindFlags(fs)
			var policyArgs []string
			for _, a := range execStart(t, files[engineUnitPath].Content)[1:] {
				name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if fs.Lookup(name) != nil {
					policyArgs = append(policyArgs, a)
				}
			}
			if err := fs.Parse(policyArgs); err != nil {
				t.Fatalf("the engine would not start: %v", err)
			}
			p, err := f.Policy()
			if err != nil {
				t.Fatalf("the engine would not start: %v", err)
			}
			if diff := cmp.Diff(c.Denied, c.Decide(egress.NewDecider(p))); diff != "" {
				t.Errorf("%s: the engine refuses as (-want +got):\n%s", c.Reason, diff)
			}
			if c.Addr.IsValid() {
				if got, want := nftRefuses(t, files[NftablesPath].Content, c.Addr), c.Denied != ""; got != want {
					t.Errorf("%s: the engine user's rules refuse = %t, want %t", c.Reason, got, want)
				}
			}
		})
	}
}

// The install script is run by dash, Debian's /bin/sh: it must at least
// parse.
func TestEngineInstallScriptParses(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "install")
	if err := os.WriteFile(path, []byte(engineInstall(*testEngine())), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), sh, "-n", path).CombinedOutput(); err != nil {
		t.Errorf("sh -n: %v\n%s", err, out)
	}
}

// With the user's part, which runs as root after ours, the engine starts
// only while every file of ours has the digest we rendered, loads its
// rules again (a flushed ruleset comes back), and is restarted once that
// part has run.
func TestRenderEngineGuard(t *testing.T) {
	p := Proxy{Port: 3128, Username: "u", Password: secretSentinel, Engine: testEngine(), ExtraUserData: "#!/bin/sh\nsystemctl stop egress-proxy\n"}
	cc, files := renderedEngine(t, p)
	dropIn := files[engineGuardDropIn].Content
	for _, path := range []string{engineInstallPath, engineUnitPath, NftablesPath, nftablesUnitPath, engineCredentialsDir + "/username", engineCredentialsDir + "/password"} {
		want := "echo \"" + sha256Hex(files[path].Content) + "  " + path + "\" | sha256sum --check --strict --quiet -"
		if !strings.Contains(dropIn, want) {
			t.Errorf("the guard does not check %s against what was rendered:\n%s", path, dropIn)
		}
	}
	if !strings.Contains(dropIn, "/usr/sbin/nft -f "+NftablesPath) {
		t.Errorf("the guard does not load the rules again:\n%s", dropIn)
	}
	if unit := files[engineGuardUnitPath].Content; !strings.Contains(unit, "ExecStart=/bin/systemctl restart "+engineUnitName+"\n") || !strings.Contains(unit, "After=cloud-final.service") {
		t.Errorf("the guard unit does not restart the engine after cloud-init's final stage:\n%s", unit)
	}
	if diff := cmp.Diff([][]string{{"systemctl", "enable", engineGuardUnitName}, {"systemctl", "start", "--no-block", engineGuardUnitName}}, cc.RunCmd[len(cc.RunCmd)-2:]); diff != "" {
		t.Errorf("runcmd's last commands (-want +got):\n%s", diff)
	}
}
