package cloudinitparse

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/egress-proxies-operator/internal/cloudinit"
)

// cloudConfigWriting returns a #cloud-config whose write_files holds the
// given entries (maps of path, content, defer, append, encoding).
func cloudConfigWriting(t *testing.T, entries ...map[string]any) string {
	t.Helper()
	body, err := yaml.Marshal(map[string]any{"write_files": entries})
	if err != nil {
		t.Fatal(err)
	}
	return "#cloud-config\n" + string(body)
}

// confEntry is a write_files entry for tinyproxy's configuration.
func confEntry(content string) map[string]any {
	return map[string]any{"path": cloudinit.ConfigPath, "content": content}
}

// mimeUserData builds a multipart user-data from raw parts (each its
// headers, a blank line and its body).
func mimeUserData(parts ...string) string {
	var b strings.Builder
	b.WriteString("Content-Type: multipart/mixed; boundary=\"BOUNDARY\"\nMIME-Version: 1.0\n\n")
	for _, p := range parts {
		b.WriteString("--BOUNDARY\n" + p + "\n")
	}
	b.WriteString("--BOUNDARY--\n")
	return b.String()
}

// nested wraps a MIME part (headers, blank line, body) in depth multipart
// levels, each with its own boundary.
func nested(part string, depth int) string {
	for i := range depth {
		b := fmt.Sprintf("LEVEL%d", i)
		part = "Content-Type: multipart/mixed; boundary=\"" + b + "\"\n\n--" + b + "\n" + part + "\n--" + b + "--\n"
	}
	return "MIME-Version: 1.0\n" + part
}

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// settingsView shows Settings with its ranges as strings, for cmp.Diff
// (netip.Prefix has unexported fields).
type settingsView struct {
	Port               int32
	Username, Password string
	Allow              []string
}

func view(s Settings) settingsView {
	v := settingsView{Port: s.Port, Username: s.Username, Password: s.Password}
	for _, p := range s.Allow {
		v.Allow = append(v.Allow, p.String())
	}
	return v
}

func TestParseTinyproxyRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		proxy  cloudinit.Proxy
		want   Settings
	}{
		{
			name:   "no auth, ranges",
			reason: "each range becomes an Allow, masked to its network, in order; no credentials",
			proxy:  cloudinit.Proxy{Port: 3128, AllowedSourceRanges: prefixes(t, "10.1.2.3/8", "192.0.2.7/32")},
			want:   Settings{Port: 3128, Allow: prefixes(t, "10.0.0.0/8", "192.0.2.7/32")},
		},
		{
			name:   "auth, no ranges",
			reason: "credentials become BasicAuth; no Allow line means any source",
			proxy:  cloudinit.Proxy{Port: 8888, Username: "crawler", Password: "s3cr.et_~-X"},
			want:   Settings{Port: 8888, Username: "crawler", Password: "s3cr.et_~-X"},
		},
		{
			name:   "IPv6 ranges and auth",
			reason: "IPv6 ranges survive rendering and parsing, a /128 included",
			proxy:  cloudinit.Proxy{Port: 65535, Username: "u", Password: "p", AllowedSourceRanges: prefixes(t, "2001:db8::1/32", "2001:db8:1::5/128", "0.0.0.0/0")},
			want:   Settings{Port: 65535, Username: "u", Password: "p", Allow: prefixes(t, "2001:db8::/32", "2001:db8:1::5/128", "0.0.0.0/0")},
		},
		{
			name:   "extra user-data script",
			reason: "the configuration is found in the text/cloud-config part of the multipart message; the script part is skipped",
			proxy:  cloudinit.Proxy{Port: 3128, Username: "u", Password: "p", ExtraUserData: "#!/bin/sh\necho " + cloudinit.ConfigPath + "\n"},
			want:   Settings{Port: 3128, Username: "u", Password: "p"},
		},
		{
			name:   "extra cloud-config",
			reason: "a second cloud-config part merges into ours; our write_files entry is kept",
			proxy:  cloudinit.Proxy{Port: 3128, AllowedSourceRanges: prefixes(t, "198.51.100.0/24"), ExtraUserData: "#cloud-config\npackages: [htop]\n"},
			want:   Settings{Port: 3128, Allow: prefixes(t, "198.51.100.0/24")},
		},
		{
			name:   "extra cloud-config writing files",
			reason: "the user's write_files list is appended to ours (Merge-Type list(append)), not replacing it",
			proxy: cloudinit.Proxy{Port: 3128, Username: "u", Password: "p",
				ExtraUserData: "#cloud-config\nwrite_files:\n  - path: /etc/motd\n    content: hello\n"},
			want: Settings{Port: 3128, Username: "u", Password: "p"},
		},
		{
			name:   "extra cloud-config writing tinyproxy.conf",
			reason: "ours is deferred to cloud-init's final stage, so it overwrites the user's earlier write",
			proxy: cloudinit.Proxy{Port: 3128, Username: "u", Password: "p",
				ExtraUserData: "#cloud-config\nwrite_files:\n  - path: " + cloudinit.ConfigPath + "\n    content: |\n      Port 1\n"},
			want: Settings{Port: 3128, Username: "u", Password: "p"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := cloudinit.Render(tc.proxy)
			if err != nil {
				t.Fatalf("cloudinit.Render() error = %v", err)
			}
			got, err := ParseTinyproxy(data)
			if err != nil {
				t.Fatalf("ParseTinyproxy(cloudinit.Render()) error = %v (%s)", err, tc.reason)
			}
			if diff := cmp.Diff(view(tc.want), view(got)); diff != "" {
				t.Errorf("settings mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestParseTinyproxy(t *testing.T) {
	const conf = "Port 3128\nBasicAuth u p\nAllow 10.0.0.0/8\n"
	want := Settings{Port: 3128, Username: "u", Password: "p", Allow: prefixes(t, "10.0.0.0/8")}
	tests := []struct {
		name     string
		reason   string
		userData []byte
		want     Settings
	}{
		{
			name:     "single addresses",
			reason:   "an Allow of an address alone is a single host: /32 for IPv4, /128 for IPv6",
			userData: []byte(cloudConfigWriting(t, confEntry("Port 80\nAllow 192.0.2.7\nAllow 2001:db8::1\n"))),
			want:     Settings{Port: 80, Allow: prefixes(t, "192.0.2.7/32", "2001:db8::1/128")},
		},
		{
			name:     "unmasked range",
			reason:   "tinyproxy matches 10.1.2.3/8 as the network 10.0.0.0/8; Settings holds what the guest enforces",
			userData: []byte(cloudConfigWriting(t, confEntry("Port 80\nAllow 10.1.2.3/8\n"))),
			want:     Settings{Port: 80, Allow: prefixes(t, "10.0.0.0/8")},
		},
		{
			name:     "comments, blank lines, case and spacing",
			reason:   "tinyproxy's directive names are case-insensitive, and comments and other directives do not count",
			userData: []byte(cloudConfigWriting(t, confEntry("# Port 1\n\n  port\t3128  \nBASICAUTH u p\nTimeout 600\n#Allow 0.0.0.0/0\nallow 10.0.0.0/8\n"))),
			want:     want,
		},
		{
			name:     "gzip-compressed user-data",
			reason:   "cloud-init decompresses gzip user-data before reading it",
			userData: gzipped(t, cloudConfigWriting(t, confEntry(conf))),
			want:     want,
		},
		{
			name:   "base64 content",
			reason: "write_files decodes encoding: b64 content",
			userData: []byte(cloudConfigWriting(t, map[string]any{
				"path": cloudinit.ConfigPath, "encoding": "b64", "content": base64.StdEncoding.EncodeToString([]byte(conf)),
			})),
			want: want,
		},
		{
			name:   "gzip and base64 content",
			reason: "write_files decodes encoding: gz+b64 content",
			userData: []byte(cloudConfigWriting(t, map[string]any{
				"path": cloudinit.ConfigPath, "encoding": "gz+b64", "content": base64.StdEncoding.EncodeToString(gzipped(t, conf)),
			})),
			want: want,
		},
		{
			name:   "append",
			reason: "an entry with append: true adds to the file instead of replacing it",
			userData: []byte(cloudConfigWriting(t, confEntry(conf),
				map[string]any{"path": cloudinit.ConfigPath, "content": "Allow 192.0.2.0/24\n", "append": true})),
			want: Settings{Port: 3128, Username: "u", Password: "p", Allow: prefixes(t, "10.0.0.0/8", "192.0.2.0/24")},
		},
		{
			name:     "last write wins",
			reason:   "two entries for the same path: the later one overwrites the earlier",
			userData: []byte(cloudConfigWriting(t, confEntry("Port 1\n"), confEntry(conf))),
			want:     want,
		},
		{
			name:   "deferred write after a later non-deferred one",
			reason: "deferred entries are written in the final stage, after every non-deferred entry, whatever the list order",
			userData: []byte(cloudConfigWriting(t,
				map[string]any{"path": cloudinit.ConfigPath, "content": conf, "defer": true}, confEntry("Port 1\n"))),
			want: want,
		},
		{
			name:     "path not clean",
			reason:   "cloud-init writes /etc//tinyproxy/./tinyproxy.conf to the same file",
			userData: []byte(cloudConfigWriting(t, map[string]any{"path": "/etc//tinyproxy/./tinyproxy.conf", "content": conf})),
			want:     want,
		},
		{
			name:   "base64 MIME part",
			reason: "a part with Content-Transfer-Encoding: base64 is decoded before it is read",
			userData: []byte(mimeUserData("Content-Type: text/cloud-config\nContent-Transfer-Encoding: base64\n\n" +
				base64.StdEncoding.EncodeToString([]byte(cloudConfigWriting(t, confEntry(conf)))))),
			want: want,
		},
		{
			name:     "untyped MIME part",
			reason:   "cloud-init types a text/plain part by its #cloud-config first line",
			userData: []byte(mimeUserData("Content-Type: text/plain\n\n" + cloudConfigWriting(t, confEntry(conf)))),
			want:     want,
		},
		{
			name:   "untyped script part",
			reason: "a text/plain part that starts with #! is a script, not YAML to parse",
			userData: []byte(mimeUserData(
				"Content-Type: text/plain\n\n#!/bin/sh\necho: [\n",
				"Content-Type: text/cloud-config\n\n"+cloudConfigWriting(t, confEntry(conf)))),
			want: want,
		},
		{
			name:     "nested multipart",
			reason:   "cloud-init descends into a multipart part inside the multipart message",
			userData: []byte(nested("Content-Type: text/cloud-config\n\n"+cloudConfigWriting(t, confEntry(conf)), 3)),
			want:     want,
		},
		{
			name:   "merge_how in the document appends",
			reason: "a part's own merge_how (list of name/settings) appends its write_files like a Merge-Type header",
			userData: []byte(mimeUserData(
				"Content-Type: text/cloud-config\n\n"+cloudConfigWriting(t, confEntry(conf)),
				"Content-Type: text/cloud-config\n\n#cloud-config\nmerge_how:\n  - name: list\n    settings: [append]\nwrite_files:\n  - path: /etc/motd\n    content: hi\n")),
			want: want,
		},
		{
			name:   "prepend",
			reason: "list(prepend) puts a later part's entries first, so the earlier part's write of the same path comes last and wins",
			userData: []byte(mimeUserData(
				"Content-Type: text/cloud-config\n\n"+cloudConfigWriting(t, confEntry(conf)),
				"Content-Type: text/cloud-config\nMerge-Type: list(prepend)+dict(recurse_list)+str()\n\n"+cloudConfigWriting(t, confEntry("Port 1\n")))),
			want: want,
		},
		{
			name:   "no_replace keeps ours",
			reason: "under dict(no_replace) without recurse_list, a later part's write_files does not replace the earlier one",
			userData: []byte(mimeUserData(
				"Content-Type: text/cloud-config\n\n"+cloudConfigWriting(t, confEntry(conf)),
				"Content-Type: text/cloud-config\nMerge-Type: dict(no_replace)+list()+str()\n\n"+cloudConfigWriting(t, confEntry("Port 1\n")))),
			want: want,
		},
		{
			name:   "later part without write_files",
			reason: "a part with no write_files key leaves the earlier list alone, even without a Merge-Type",
			userData: []byte(mimeUserData(
				"Content-Type: text/cloud-config\n\n"+cloudConfigWriting(t, confEntry(conf)),
				"Content-Type: text/cloud-config\n\n#cloud-config\npackages: [htop]\n")),
			want: want,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTinyproxy(tc.userData)
			if err != nil {
				t.Fatalf("ParseTinyproxy() error = %v (%s)", err, tc.reason)
			}
			if diff := cmp.Diff(view(tc.want), view(got)); diff != "" {
				t.Errorf("settings mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestParseTinyproxyErrors(t *testing.T) {
	withConf := func(conf string) []byte { return []byte(cloudConfigWriting(t, confEntry(conf))) }
	tests := []struct {
		name     string
		reason   string
		userData []byte
		noConfig bool // the error must wrap ErrNoTinyproxyConfig
		wantErr  string
	}{
		{
			name: "shell script", reason: "a script user-data configures nothing we can read",
			userData: []byte("#!/bin/sh\necho " + secretSentinel + " > " + cloudinit.ConfigPath + "\n"), noConfig: true,
			wantErr: "user-data writes no /etc/tinyproxy/tinyproxy.conf: it holds no cloud-config (a #cloud-config document or a text/cloud-config part)",
		},
		{
			name: "empty", reason: "no user-data at all", userData: nil, noConfig: true,
			wantErr: "user-data writes no /etc/tinyproxy/tinyproxy.conf: it holds no cloud-config",
		},
		{
			name: "cloud-config without write_files", reason: "a cloud-config that only installs packages leaves tinyproxy's default configuration",
			userData: []byte("#cloud-config\npackages: [tinyproxy]\n"), noConfig: true,
			wantErr: "user-data writes no /etc/tinyproxy/tinyproxy.conf: no write_files entry of its 1 cloud-config part(s) has that path",
		},
		{
			name: "other files only", reason: "only the exact path counts",
			userData: []byte(cloudConfigWriting(t, map[string]any{"path": "/etc/tinyproxy/tinyproxy.conf.bak", "content": "Port 1\n"})), noConfig: true,
			wantErr: "no write_files entry of its 1 cloud-config part(s) has that path",
		},
		{
			name: "multipart with only a script", reason: "the script part is not cloud-config",
			userData: []byte(mimeUserData("Content-Type: text/x-shellscript\n\n#!/bin/sh\ntrue\n")), noConfig: true,
			wantErr: "it holds no cloud-config",
		},
		{
			name: "later part replaces write_files", reason: "without Merge-Type, cloud-init replaces the earlier part's write_files: the renderer's Merge-Type header is what keeps our entry",
			userData: []byte(mimeUserData(
				"Content-Type: text/cloud-config\n\n"+cloudConfigWriting(t, confEntry("Port 3128\n")),
				"Content-Type: text/cloud-config\n\n"+cloudConfigWriting(t, map[string]any{"path": "/etc/motd", "content": "hi"}))),
			noConfig: true,
			wantErr:  "no write_files entry of its 2 cloud-config part(s) has that path",
		},
		{
			name: "invalid YAML", reason: "the YAML error quotes the document, which holds the password: only the line is kept",
			userData: []byte("#cloud-config\nwrite_files:\n  - path: " + cloudinit.ConfigPath + "\n    content: \"BasicAuth u " + secretSentinel + "\n  bad: [\n"),
			wantErr:  "cloud-config part 1: not valid cloud-config YAML (near line",
		},
		{
			name: "YAML tag mismatch", reason: "go-yaml quotes the value it cannot decode (`S3NTINEL` as a !!int): the error must drop it",
			userData: []byte("#cloud-config\nwrite_files:\n- path: " + cloudinit.ConfigPath + "\n  content: !!int " + secretSentinel + "\n"),
			wantErr:  "cloud-config part 1: not valid cloud-config YAML",
		},
		{
			name: "YAML map key", reason: "sigs.k8s.io/yaml quotes an invalid map key, here holding the password",
			userData: []byte("#cloud-config\nwrite_files:\n- path: x\n  {BasicAuth: " + secretSentinel + "}: y\n"),
			wantErr:  "cloud-config part 1: not valid cloud-config YAML",
		},
		{
			name: "invalid YAML type", reason: "a mapping where write_files expects a list",
			userData: []byte("#cloud-config\nwrite_files: {content: " + secretSentinel + "}\n"),
			wantErr:  "cloud-config part 1: not valid cloud-config YAML",
		},
		{
			name: "no Port", reason: "the renderer always writes Port; without it the guest would listen on tinyproxy's default",
			userData: withConf("BasicAuth u " + secretSentinel + "\n"),
			wantErr:  "/etc/tinyproxy/tinyproxy.conf has no Port directive",
		},
		{
			name: "Port not a number", reason: "a Port tinyproxy cannot parse",
			userData: withConf("Port http\n"),
			wantErr:  "/etc/tinyproxy/tinyproxy.conf line 1: Port is not a number in range 1-65535",
		},
		{
			name: "Port out of range", reason: "Port 0 or above 65535 is not a TCP port",
			userData: withConf("Port 65536\n"),
			wantErr:  "line 1: Port is not a number in range 1-65535",
		},
		{
			name: "two Ports", reason: "two Port lines are ambiguous",
			userData: withConf("Port 1\nPort 2\n"),
			wantErr:  "line 2: a second Port directive",
		},
		{
			name: "BasicAuth with an extra value", reason: "a password with a space would render three values; the error must not quote them",
			userData: withConf("Port 1\nBasicAuth u " + secretSentinel + " x\n"),
			wantErr:  "line 2: BasicAuth takes a user and a password, found 3 values",
		},
		{
			name: "BasicAuth without password", reason: "half the credentials",
			userData: withConf("Port 1\nBasicAuth " + secretSentinel + "\n"),
			wantErr:  "line 2: BasicAuth takes a user and a password, found 1 values",
		},
		{
			name: "two BasicAuth", reason: "Settings holds one user; a second line means the rendering went wrong",
			userData: withConf("Port 1\nBasicAuth u " + secretSentinel + "\nBasicAuth v " + secretSentinel + "\n"),
			wantErr:  "line 3: a second BasicAuth directive",
		},
		{
			name: "Allow a hostname", reason: "the renderer writes only addresses and ranges",
			userData: withConf("Port 1\nAllow " + secretSentinel + ".example.com\n"),
			wantErr:  "line 2: Allow is not an IP address or CIDR range",
		},
		{
			name: "Allow a bad range", reason: "a prefix length beyond the address size",
			userData: withConf("Port 1\nAllow 10.0.0.0/33\n"),
			wantErr:  "line 2: Allow is not an IP address or CIDR range",
		},
		{
			name: "unknown encoding", reason: "cloud-init would not know how to write it",
			userData: []byte(cloudConfigWriting(t, map[string]any{"path": cloudinit.ConfigPath, "encoding": "rot13", "content": secretSentinel})),
			wantErr:  `write_files entry 1 for /etc/tinyproxy/tinyproxy.conf: unknown encoding "rot13"`,
		},
		{
			name: "bad base64 content", reason: "undecodable content",
			userData: []byte(cloudConfigWriting(t, map[string]any{"path": cloudinit.ConfigPath, "encoding": "b64", "content": "!!" + secretSentinel})),
			wantErr:  "write_files entry 1 for /etc/tinyproxy/tinyproxy.conf: decoding base64 content",
		},
		{
			name: "MIME nested too deep", reason: "nesting is bounded",
			userData: []byte(nested("Content-Type: text/cloud-config\n\n"+cloudConfigWriting(t, confEntry("Port 1\n")), 6)),
			wantErr:  "MIME parts are nested more than 4 deep",
		},
		{
			name: "malformed message header", reason: "net/mail quotes the malformed header line, here the password's",
			userData: []byte("MIME-Version: 1.0\nBasicAuth u " + secretSentinel + "\n\n"),
			wantErr:  "user-data has a MIME-Version header but its MIME header is malformed",
		},
		{
			name: "malformed part header", reason: "a part without headers: mime/multipart quotes its first line, here the password's",
			userData: []byte(mimeUserData("BasicAuth u " + secretSentinel + "\n\nx")),
			wantErr:  "a part of the multipart user-data has a malformed MIME header",
		},
		{
			name: "broken MIME", reason: "a MIME-Version header on something that is not a MIME message",
			userData: []byte("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\n\n" + secretSentinel),
			wantErr:  "parsing a MIME Content-Type",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTinyproxy(tc.userData)
			if err == nil {
				t.Fatalf("ParseTinyproxy() = %+v, want an error (%s)", view(got), tc.reason)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseTinyproxy() error = %q, want it to contain %q (%s)", err, tc.wantErr, tc.reason)
			}
			if strings.Contains(err.Error(), secretSentinel) {
				t.Errorf("ParseTinyproxy() error quotes the password: %q", err)
			}
			if got := errors.Is(err, ErrNoTinyproxyConfig); got != tc.noConfig {
				t.Errorf("errors.Is(err, ErrNoTinyproxyConfig) = %v, want %v", got, tc.noConfig)
			}
		})
	}
}

func prefixes(t *testing.T, ss ...string) []netip.Prefix {
	t.Helper()
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// secretSentinel stands for a password: no error may ever quote it.
const secretSentinel = "S3NTINEL-8f2c1d"
