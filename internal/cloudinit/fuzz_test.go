package cloudinit

import (
	"bytes"
	"errors"
	"io"
	"mime"
	mimemultipart "mime/multipart"
	"net/mail"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// checkOwnPart decodes the operator's #cloud-config strictly and checks its
// shape: tinyproxy and nftables installed, its configuration written where
// it is read, with exactly the directives p asks for, the egress rules and
// their units written, and the services enabled.
func checkOwnPart(t *testing.T, data []byte, p Proxy) {
	t.Helper()
	const header = "#cloud-config\n"
	if !bytes.HasPrefix(data, []byte(header)) {
		t.Fatalf("the operator's part does not start with %q", header)
	}
	var cc cloudConfig
	if err := yaml.UnmarshalStrict(data[len(header):], &cc); err != nil {
		t.Fatalf("the operator's part is not the expected YAML: %v\n%s", err, data)
	}
	// With extra user-data, the guard adds three files and two commands.
	files, cmds := 4, 4
	if p.ExtraUserData != "" {
		files, cmds = 7, 6
	}
	if !cc.PackageUpdate || !slices.Equal(cc.Packages, []string{"tinyproxy", "nftables"}) || len(cc.WriteFiles) != files || len(cc.RunCmd) != cmds {
		t.Fatalf("cloud-config shape: %+v", cc)
	}
	wf := cc.WriteFiles[0]
	if wf.Path != ConfigPath || wf.Permissions != "0640" || wf.Content != TinyproxyConf(p) {
		t.Fatalf("write_files[0] = %+v", wf)
	}
	var want []string
	want = append(want, "Port "+strconv.Itoa(int(p.Port)))
	if p.Username != "" {
		want = append(want, "BasicAuth "+p.Username+" "+p.Password)
	}
	for _, r := range p.AllowedSourceRanges {
		want = append(want, "Allow "+r.Masked().String())
	}
	// The default egress policy: CONNECT to 443 only.
	want = append(want, "ConnectPort 443")
	if rules := cc.WriteFiles[1]; rules.Path != NftablesPath || rules.Content != NftablesRules(p.Egress) {
		t.Fatalf("write_files[1] = %+v, want the egress rules", rules)
	}
	if got := confDirectives(wf.Content); !slices.Equal(got, want) {
		t.Fatalf("tinyproxy directives %q, want %q", got, want)
	}
}

// FuzzRender: for any Proxy the renderer accepts, the user-data is what
// cloud-init expects: our #cloud-config alone, or a two-part MIME message
// whose first part is ours and whose second is the user's, unchanged. The
// user's text can never break out of its part or change ours.
func FuzzRender(f *testing.F) {
	f.Add(int32(3128), "u1", "p4ssw0rd", "203.0.113.0/24", "", "")
	f.Add(int32(8080), "", "", "2001:db8::/32", "198.51.100.7/32", "#cloud-config\npackages: [htop]\n")
	f.Add(int32(3128), "u", "p", "", "", "#!/bin/sh\necho --"+boundary+"\n")
	f.Add(int32(1), "a", "b", "", "", "#!/bin/sh\n\n--x--\nContent-Type: text/cloud-config\n\n#cloud-config\nruncmd: [[reboot]]")
	f.Fuzz(func(t *testing.T, port int32, user, pass, range1, range2, extra string) {
		p := Proxy{Port: port, Username: user, Password: pass, ExtraUserData: extra}
		for _, r := range []string{range1, range2} {
			if pr, err := netip.ParsePrefix(r); err == nil {
				p.AllowedSourceRanges = append(p.AllowedSourceRanges, pr)
			}
		}
		out, err := Render(p)
		if err != nil {
			// A short password is found in any text by chance.
			if len(pass) >= 12 && strings.Contains(err.Error(), pass) {
				t.Fatal("the error quotes the password")
			}
			return
		}
		if p.Username == "" && len(p.AllowedSourceRanges) == 0 {
			t.Fatal("rendered an open proxy")
		}
		if extra == "" {
			checkOwnPart(t, out, p)
			return
		}
		msg, err := mail.ReadMessage(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("not a MIME message: %v", err)
		}
		mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
		if err != nil || mt != "multipart/mixed" {
			t.Fatalf("content type %q, %v", mt, err)
		}
		r := mimemultipart.NewReader(msg.Body, params["boundary"])
		var parts [][]byte
		for {
			part, err := r.NextRawPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("reading part %d: %v", len(parts), err)
			}
			b, err := io.ReadAll(part)
			if err != nil {
				t.Fatalf("reading part %d: %v", len(parts), err)
			}
			parts = append(parts, b)
		}
		if len(parts) != 2 {
			t.Fatalf("%d parts, want ours and the user's", len(parts))
		}
		checkOwnPart(t, parts[0], p)
		if got, want := string(parts[1]), strings.TrimSuffix(extra, "\n"); got != want {
			t.Fatalf("the user's part changed:\n got %q\nwant %q", got, want)
		}
	})
}
