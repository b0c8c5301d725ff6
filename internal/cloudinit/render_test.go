package cloudinit

import (
	"bytes"
	"errors"
	"io"
	"mime"
	mimemultipart "mime/multipart"
	"net/mail"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// secretSentinel stands for a password: no error may ever quote it.
const secretSentinel = "S3NTINEL-8f2c1d"

func prefixes(t *testing.T, ss ...string) []netip.Prefix {
	t.Helper()
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// parseCloudConfig checks the #cloud-config header and decodes the rest.
func parseCloudConfig(t *testing.T, data []byte) map[string]any {
	t.Helper()
	const header = "#cloud-config\n"
	if !bytes.HasPrefix(data, []byte(header)) {
		t.Fatalf("user-data does not start with %q: cloud-init would ignore it:\n%s", header, data)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data[len(header):], &doc); err != nil {
		t.Fatalf("rendered cloud-config is not valid YAML: %v\n%s", err, data)
	}
	return doc
}

// confDirectives returns the Port, BasicAuth, Allow and ConnectPort lines of a tinyproxy
// configuration, in order: the lines whose values come from the Proxy.
func confDirectives(conf string) []string {
	var out []string
	for line := range strings.SplitSeq(conf, "\n") {
		for _, d := range []string{"Port ", "BasicAuth ", "Allow ", "ConnectPort "} {
			if strings.HasPrefix(line, d) {
				out = append(out, line)
			}
		}
	}
	return out
}

func TestRenderCloudConfig(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		proxy  Proxy
		// wantDirectives are the Port, BasicAuth and Allow lines of
		// tinyproxy.conf, in order.
		wantDirectives []string
	}{
		{
			name:   "credentials and ranges",
			reason: "both protections are written: BasicAuth with the credentials and one Allow per range",
			proxy: Proxy{Port: 3128, Username: "crawler", Password: "s3cr.et_~-X",
				AllowedSourceRanges: prefixes(t, "192.0.2.0/24", "198.51.100.7/32")},
			wantDirectives: []string{"Port 3128", "BasicAuth crawler s3cr.et_~-X", "Allow 192.0.2.0/24", "Allow 198.51.100.7/32", "ConnectPort 443"},
		},
		{
			name:           "ranges only, unmasked",
			reason:         "a range written with host bits (198.51.100.7/24) must become the network (198.51.100.0/24), IPv6 included; no BasicAuth line without credentials",
			proxy:          Proxy{Port: 8888, AllowedSourceRanges: prefixes(t, "198.51.100.7/24", "2001:db8::1/32")},
			wantDirectives: []string{"Port 8888", "Allow 198.51.100.0/24", "Allow 2001:db8::/32", "ConnectPort 443"},
		},
		{
			name:           "credentials only",
			reason:         "without ranges there is no Allow line, which tinyproxy reads as any source, guarded by BasicAuth; CONNECT to 443 only by default",
			proxy:          Proxy{Port: 65535, Username: "u", Password: "p"},
			wantDirectives: []string{"Port 65535", "BasicAuth u p", "ConnectPort 443"},
		},
		{
			name:   "connect ports",
			reason: "each allowed CONNECT port is one ConnectPort line, ranges expanded",
			proxy: Proxy{Port: 3128, Username: "u", Password: "p", Egress: egress.Policy{
				ConnectPorts: []egress.PortRange{{From: 443, To: 443}, {From: 8443, To: 8445}},
			}},
			wantDirectives: []string{"Port 3128", "BasicAuth u p", "ConnectPort 443", "ConnectPort 8443", "ConnectPort 8444", "ConnectPort 8445"},
		},
		{
			name:   "every connect port",
			reason: "1-65535 is written as no ConnectPort line, which tinyproxy reads as every port",
			proxy: Proxy{Port: 3128, Username: "u", Password: "p", Egress: egress.Policy{
				ConnectPorts: []egress.PortRange{{From: 1, To: 65535}},
			}},
			wantDirectives: []string{"Port 3128", "BasicAuth u p"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := Render(tc.proxy)
			if err != nil {
				t.Fatalf("Render() error = %v (%s)", err, tc.reason)
			}
			doc := parseCloudConfig(t, data)

			if diff := cmp.Diff([]any{"tinyproxy", "nftables"}, doc["packages"]); diff != "" {
				t.Errorf("packages mismatch (-want +got): tinyproxy and nftables must be installed from the image's distribution:\n%s", diff)
			}
			// The egress rules load (and are enabled for every boot)
			// before tinyproxy starts.
			wantRunCmd := []any{
				[]any{"systemctl", "daemon-reload"},
				[]any{"systemctl", "enable", "--now", "egress-proxy-nftables.service"},
				[]any{"systemctl", "enable", "tinyproxy"},
				[]any{"systemctl", "restart", "tinyproxy"},
			}
			if diff := cmp.Diff(wantRunCmd, doc["runcmd"]); diff != "" {
				t.Errorf("runcmd mismatch (-want +got): the rules first, then tinyproxy restarted to read the written configuration:\n%s", diff)
			}

			files, ok := doc["write_files"].([]any)
			if !ok || len(files) != 4 {
				t.Fatalf("write_files = %#v, want four files", doc["write_files"])
			}
			checkEgressFiles(t, files[1:], tc.proxy)
			file, ok := files[0].(map[string]any)
			if !ok {
				t.Fatalf("write_files[0] = %#v, want a mapping", files[0])
			}
			content, ok := file["content"].(string)
			if !ok {
				t.Fatalf("write_files[0].content = %#v, want a string", file["content"])
			}
			delete(file, "content")
			// defer: the tinyproxy group only exists once the package is
			// installed; without it cloud-init fails to chown the file.
			wantFile := map[string]any{"path": "/etc/tinyproxy/tinyproxy.conf", "owner": "root:tinyproxy", "permissions": "0640", "defer": true}
			if diff := cmp.Diff(wantFile, file); diff != "" {
				t.Errorf("write_files[0] mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(TinyproxyConf(tc.proxy), content); diff != "" {
				t.Errorf("written content is not TinyproxyConf (-want +got) (YAML must round-trip it):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantDirectives, confDirectives(content)); diff != "" {
				t.Errorf("tinyproxy directives mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			if !strings.Contains(content, "DisableViaHeader Yes\n") {
				t.Errorf("tinyproxy.conf lacks DisableViaHeader Yes: crawled sites would learn the proxy's clients:\n%s", content)
			}
		})
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	// The same Proxy must always give the same bytes: the Request built from
	// it must be equal across reconciles for Create to be idempotent.
	p := Proxy{Port: 3128, Username: "u", Password: "p",
		AllowedSourceRanges: prefixes(t, "198.51.100.0/24", "2001:db8::/32", "192.0.2.0/24"),
		ExtraUserData:       "#cloud-config\npackages: [htop]\n"}
	first, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := Render(p)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(first), string(again)); diff != "" {
			t.Fatalf("Render() is not deterministic (-first +again):\n%s", diff)
		}
	}
}

// mimePart is one decoded part of a multipart user-data.
type mimePart struct {
	ContentType string
	MergeType   string
	Body        string
}

func TestRenderMultipart(t *testing.T) {
	base := Proxy{Port: 3128, Username: "u", Password: "p"}
	own, err := Render(base)
	if err != nil {
		t.Fatal(err)
	}
	const mergeType = "list(append)+dict(no_replace,recurse_list)+str()"
	// Each part's body is what a MIME parser (Go's here, Python's email
	// package in cloud-init) reads: the line break before a boundary belongs
	// to the boundary (RFC 2046), so our part reads back exactly, and the
	// user's part without its final newline.
	tests := []struct {
		name   string
		reason string
		extra  string
		want   []mimePart
	}{
		{
			name:   "extra cloud-config",
			reason: "a second cloud-config part needs Merge-Type, or its keys would replace ours (packages, write_files, runcmd)",
			extra:  "#cloud-config\npackages: [htop]\n",
			want: []mimePart{
				{ContentType: `text/cloud-config; charset="utf-8"`, Body: string(own)},
				{ContentType: `text/cloud-config; charset="utf-8"`, MergeType: mergeType, Body: "#cloud-config\npackages: [htop]"},
			},
		},
		{
			name:   "extra shell script without final newline",
			reason: "a script is its own part type and is not merged; a final newline is added so that the closing boundary starts a line",
			extra:  "#!/bin/sh\necho hi",
			want: []mimePart{
				{ContentType: `text/cloud-config; charset="utf-8"`, Body: string(own)},
				{ContentType: `text/x-shellscript; charset="utf-8"`, Body: "#!/bin/sh\necho hi"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := base
			p.ExtraUserData = tc.extra
			data, err := Render(p)
			if err != nil {
				t.Fatalf("Render() error = %v (%s)", err, tc.reason)
			}
			msg, err := mail.ReadMessage(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("user-data is not a MIME message: %v\n%s", err, data)
			}
			if diff := cmp.Diff("1.0", msg.Header.Get("MIME-Version")); diff != "" {
				t.Errorf("MIME-Version mismatch (-want +got):\n%s", diff)
			}
			mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
			if err != nil {
				t.Fatalf("Content-Type: %v", err)
			}
			if diff := cmp.Diff("multipart/mixed", mediaType); diff != "" {
				t.Errorf("media type mismatch (-want +got):\n%s", diff)
			}
			mr := mimemultipart.NewReader(msg.Body, params["boundary"])
			var got []mimePart
			for {
				part, err := mr.NextPart()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("reading part %d: %v\n%s", len(got), err, data)
				}
				body, err := io.ReadAll(part)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, mimePart{
					ContentType: part.Header.Get("Content-Type"),
					MergeType:   part.Header.Get("Merge-Type"),
					Body:        string(body),
				})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parts mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			if !bytes.HasSuffix(data, []byte("--"+params["boundary"]+"--\n")) {
				t.Errorf("user-data does not end with the closing boundary (%s):\n%s", tc.reason, data)
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	valid := Proxy{Port: 3128, Username: "user", Password: "pass"}
	with := func(f func(*Proxy)) Proxy {
		p := valid
		f(&p)
		return p
	}
	tests := []struct {
		name    string
		reason  string
		proxy   Proxy
		wantErr string
	}{
		{
			name:    "port 0",
			reason:  "tinyproxy would pick no usable port; the API default must have been applied",
			proxy:   with(func(p *Proxy) { p.Port = 0 }),
			wantErr: "port 0 is out of range 1-65535",
		},
		{
			name:    "port above 65535",
			reason:  "Port is an int32, so values beyond TCP's range are representable",
			proxy:   with(func(p *Proxy) { p.Port = 65536 }),
			wantErr: "port 65536 is out of range 1-65535",
		},
		{
			name:    "only username",
			reason:  "half the credentials would render `BasicAuth user ` which tinyproxy rejects or misreads",
			proxy:   with(func(p *Proxy) { p.Username, p.Password = secretSentinel, "" }),
			wantErr: "username and password must both be set or both be empty",
		},
		{
			name:    "only password",
			reason:  "the mirror case of only a username",
			proxy:   with(func(p *Proxy) { p.Username, p.Password = "", secretSentinel }),
			wantErr: "username and password must both be set or both be empty",
		},
		{
			name:    "invalid characters in password",
			reason:  "a space or newline would inject tinyproxy directives or break the YAML; the error must not quote the password",
			proxy:   with(func(p *Proxy) { p.Password = secretSentinel + " Allow 0.0.0.0/0\n" }),
			wantErr: "username and password may hold only letters, digits and . _ ~ - (at most 128 each)",
		},
		{
			name:    "invalid characters in username",
			reason:  "a colon in the username would break the proxy URL's userinfo",
			proxy:   with(func(p *Proxy) { p.Username = secretSentinel + ":x" }),
			wantErr: "username and password may hold only letters, digits and . _ ~ - (at most 128 each)",
		},
		{
			name:    "password too long",
			reason:  "the length limit is part of the credential check",
			proxy:   with(func(p *Proxy) { p.Password = secretSentinel + strings.Repeat("a", 128) }),
			wantErr: "username and password may hold only letters, digits and . _ ~ - (at most 128 each)",
		},
		{
			name:    "open proxy",
			reason:  "no credentials and no ranges would serve anyone on the internet: refuse",
			proxy:   Proxy{Port: 3128},
			wantErr: "refusing to render an open proxy: without credentials, allowed source ranges are required",
		},
		{
			name:    "extra user-data of unknown kind",
			reason:  "cloud-init would not know how to run a part that is neither cloud-config nor a script",
			proxy:   with(func(p *Proxy) { p.ExtraUserData = "packages: [htop]\n" }),
			wantErr: `extra user-data must start with "#cloud-config" or "#!"`,
		},
		{
			name:    "extra user-data holding the boundary",
			reason:  "the boundary inside a part would cut it short and let the rest be read as a new part",
			proxy:   with(func(p *Proxy) { p.ExtraUserData = "#!/bin/sh\necho '--" + boundary + "'\n" }),
			wantErr: "extra user-data contains the MIME boundary the operator uses",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Render(tc.proxy)
			if err == nil {
				t.Fatalf("Render() = %q, want an error (%s)", got, tc.reason)
			}
			if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
				t.Errorf("error mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			if strings.Contains(err.Error(), secretSentinel) {
				t.Errorf("error quotes a credential: %v", err)
			}
			if got != nil {
				t.Errorf("Render() returned user-data with its error: %q", got)
			}
		})
	}
}
