package cloudinit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	mimemultipart "mime/multipart"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// cloudInitBinary returns the path of cloud-init, whose own schema check is
// the reference for what a guest accepts. Without it the schema tests skip,
// except in CI (CI=true), where hack/libvirt/install-packages.sh installs
// it: there a missing binary fails rather than silently dropping the check.
func cloudInitBinary(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("cloud-init")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("cloud-init is not installed (CI=true): run hack/libvirt/install-packages.sh; %v", err)
	}
	t.Skipf("cloud-init is not installed, so the rendered user-data is not checked against its schema (hack/libvirt/install-packages.sh installs it): %v", err)
	return ""
}

// deprecationsRE finds a non-empty deprecation list in the output of
// `cloud-init schema`, which exits 0 on deprecated keys: a key deprecated
// today is refused by a later cloud-init.
var deprecationsRE = regexp.MustCompile(`deprecations: \S`)

// cloudConfigSchemaError runs `cloud-init schema --config-file` on one
// #cloud-config document and returns its complaint, or nil when the
// document is valid.
func cloudConfigSchemaError(t *testing.T, bin string, doc []byte) error {
	t.Helper()
	file := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(file, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(context.Background(), bin, "schema", "--config-file", file).CombinedOutput()
	if err != nil {
		return errors.New(strings.TrimSpace(string(out)))
	}
	if deprecationsRE.Match(out) {
		return errors.New(strings.TrimSpace(string(out)))
	}
	if !bytes.Contains(out, []byte("Valid cloud-config")) {
		t.Fatalf("cloud-init schema exited 0 without saying the file is valid: %s", out)
	}
	return nil
}

// cloudConfigParts returns the #cloud-config documents of user-data, as
// cloud-init would read them: the whole data when it is one, else the
// text/cloud-config parts of the MIME message (scripts are not
// cloud-config and have no schema).
func cloudConfigParts(t *testing.T, data []byte) [][]byte {
	t.Helper()
	if bytes.HasPrefix(data, []byte("#cloud-config\n")) {
		return [][]byte{data}
	}
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("user-data is neither #cloud-config nor a MIME message: %v", err)
	}
	_, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		t.Fatalf("MIME content type: %v", err)
	}
	r := mimemultipart.NewReader(msg.Body, params["boundary"])
	var docs [][]byte
	for {
		part, err := r.NextRawPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading MIME part: %v", err)
		}
		mt, _, err := mime.ParseMediaType(part.Header.Get("Content-Type"))
		if err != nil {
			t.Fatalf("part content type: %v", err)
		}
		body, err := io.ReadAll(part)
		if err != nil {
			t.Fatalf("reading MIME part: %v", err)
		}
		if mt == "text/cloud-config" {
			docs = append(docs, body)
		}
	}
	return docs
}

// TestRenderValidatesAgainstCloudInitSchema runs cloud-init's own schema
// check on the user-data of representative proxies. A guest logs "Invalid
// cloud-config provided" for a key or value outside the schema, and may
// ignore it, so the proxy could come up without part of its configuration.
// cloud-init checks the merged configuration of the image and the
// user-data, so a guest's warning may also come from the image's own files;
// this test keeps the operator's part out of it.
func TestRenderValidatesAgainstCloudInitSchema(t *testing.T) {
	bin := cloudInitBinary(t)

	t.Run("checker refuses invalid cloud-config", func(t *testing.T) {
		t.Parallel()
		// Two mistakes cloud-init 22.4 reports: an empty key-type list
		// and a numeric file mode. Without this control, a checker
		// that passed everything would pass the renderer too.
		for _, doc := range []string{
			"#cloud-config\nssh_genkeytypes: []\n",
			"#cloud-config\nwrite_files:\n- path: /etc/x\n  permissions: 640\n  content: x\n",
		} {
			if cloudConfigSchemaError(t, bin, []byte(doc)) == nil {
				t.Errorf("cloud-init schema accepted invalid cloud-config:\n%s", doc)
			}
		}
	})

	tests := []struct {
		name   string
		reason string
		proxy  Proxy
		// wantDocs is how many #cloud-config documents the user-data holds.
		wantDocs int
	}{
		{
			name:     "basic auth",
			reason:   "the common case: credentials, default egress policy (ConnectPort 443)",
			proxy:    Proxy{Port: 3128, Username: "crawler", Password: "s3cr.et_~-X"},
			wantDocs: 1,
		},
		{
			name:     "no auth, source ranges",
			reason:   "Allow lines for IPv4 and IPv6 ranges instead of BasicAuth",
			proxy:    Proxy{Port: 8888, AllowedSourceRanges: prefixes(t, "198.51.100.0/24", "2001:db8::/32")},
			wantDocs: 1,
		},
		{
			name:   "egress policy",
			reason: "deny and allow sets in the nftables file (a long content string) and several ConnectPort lines",
			proxy: Proxy{Port: 3128, Username: "u", Password: "p", Egress: egress.Policy{
				DenyCIDRs:    prefixes(t, "203.0.113.0/24", "2001:db8:1::/48"),
				AllowCIDRs:   prefixes(t, "198.51.100.0/24"),
				ConnectPorts: []egress.PortRange{{From: 443, To: 443}, {From: 8443, To: 8445}},
			}},
			wantDocs: 1,
		},
		{
			name:   "every connect port",
			reason: "1-65535 writes no ConnectPort line at all",
			proxy: Proxy{Port: 3128, Username: "u", Password: "p", Egress: egress.Policy{
				ConnectPorts: []egress.PortRange{{From: 1, To: 65535}},
			}},
			wantDocs: 1,
		},
		{
			name:     "extra cloud-config",
			reason:   "the two-part MIME form: both cloud-config parts must be valid on their own",
			proxy:    Proxy{Port: 3128, Username: "u", Password: "p", ExtraUserData: "#cloud-config\npackages: [htop]\nruncmd:\n  - [echo, extra]\n"},
			wantDocs: 2,
		},
		{
			name:     "guest engine",
			reason:   "the engine's files, units and user instead of packages",
			proxy:    Proxy{Port: 3128, Username: "u", Password: "p", Engine: testEngine()},
			wantDocs: 1,
		},
		{
			name:     "guest engine, extra cloud-config",
			reason:   "the engine with its guard and the user's part",
			proxy:    Proxy{Port: 3128, Username: "u", Password: "p", Engine: testEngine(), ExtraUserData: "#cloud-config\nruncmd:\n  - [echo, extra]\n"},
			wantDocs: 2,
		},
		{
			name:     "extra shell script",
			reason:   "the MIME form with a script part: only our part is cloud-config",
			proxy:    Proxy{Port: 3128, AllowedSourceRanges: prefixes(t, "198.51.100.7/32"), ExtraUserData: "#!/bin/sh\necho extra\n"},
			wantDocs: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data, err := Render(tc.proxy)
			if err != nil {
				t.Fatalf("Render() error = %v (%s)", err, tc.reason)
			}
			docs := cloudConfigParts(t, data)
			if len(docs) != tc.wantDocs {
				t.Fatalf("%d cloud-config documents, want %d (%s)", len(docs), tc.wantDocs, tc.reason)
			}
			for i, doc := range docs {
				if err := cloudConfigSchemaError(t, bin, doc); err != nil {
					t.Errorf("cloud-config document %d is invalid for cloud-init (%s):\n%v", i, tc.reason, err)
				}
			}
		})
	}
}
