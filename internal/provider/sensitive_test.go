package provider_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// userDataSentinel stands for rendered user-data holding a password. Its hex
// and decimal spellings are checked too: fmt prints bytes that way.
const userDataSentinel = "#cloud-config\nBasicAuth u S3NTINEL-5e9a7b\n"

// leaks reports the spellings of the sentinel found in out.
func leaks(out string) []string {
	var decimal []string
	for _, b := range []byte(userDataSentinel) {
		decimal = append(decimal, strconv.FormatUint(uint64(b), 10))
	}
	var found []string
	for name, spelling := range map[string]string{
		"plain":   "S3NTINEL",
		"hex":     fmt.Sprintf("%x", "S3NTINEL"),
		"HEX":     fmt.Sprintf("%X", "S3NTINEL"),
		"hex0x":   "0x53, 0x33, 0x4e",
		"decimal": strings.Join(decimal[:8], " "),
		"quoted":  fmt.Sprintf("%q", userDataSentinel)[1:20],
	} {
		if strings.Contains(out, spelling) {
			found = append(found, name)
		}
	}
	return found
}

func sensitiveRequest() provider.Request {
	return provider.Request{
		OwnerUID:    "uid-1",
		Owner:       provider.ObjectRef{Namespace: "ns", Name: "p"},
		Name:        "p-abc",
		Zone:        "z1",
		MachineType: "small",
		Image:       "debian-12",
		UserData:    provider.NewSensitive([]byte(userDataSentinel)),
		Proxy: provider.ProxySettings{
			Port:                3128,
			Credentials:         &provider.SecretRef{Namespace: "ns", Name: "p-creds", UsernameKey: "username", PasswordKey: "password"},
			AllowedSourceRanges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		},
	}
}

// holder keeps a Request in an unexported field, where fmt cannot call the
// Request's (or Sensitive's) methods and walks the fields by reflection.
type holder struct {
	req provider.Request
}

func TestSensitiveNeverPrinted(t *testing.T) {
	s := provider.NewSensitive([]byte(userDataSentinel))
	req := sensitiveRequest()
	values := []struct {
		name string
		v    any
	}{
		{"Sensitive", s},
		{"*Sensitive", &s},
		{"Request", req},
		{"*Request", &req},
		{"Request in an unexported field", holder{req: req}},
		{"[]Request", []provider.Request{req}},
	}
	verbs := []struct {
		verb   string
		reason string
	}{
		{"%v", "the default verb of logs and errors"},
		{"%+v", "field names, as in panics and debug logs"},
		{"%#v", "Go syntax, as in test failure messages"},
		{"%s", "string verb, which prints []byte as text"},
		{"%q", "quoted string verb, which prints []byte as text"},
		{"%x", "hex, which prints []byte as hex text"},
		{"%d", "decimal, which prints []byte as numbers and bypasses String()"},
	}
	for _, v := range values {
		for _, vb := range verbs {
			t.Run(v.name+" "+vb.verb, func(t *testing.T) {
				out := fmt.Sprintf(vb.verb, v.v)
				if diff := cmp.Diff([]string(nil), leaks(out)); diff != "" {
					t.Errorf("%s of %s shows the user-data (-want +got) (%s):\n%s\noutput: %s", vb.verb, v.name, vb.reason, diff, out)
				}
			})
		}
	}
}

func TestSensitiveRedactedForms(t *testing.T) {
	s := provider.NewSensitive([]byte(userDataSentinel))
	req := sensitiveRequest()
	jsonReq, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	jsonS, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	text, err := s.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		reason string
		got    string
		// want is a fragment the output must hold: the redaction marker
		// where the content would be.
		want string
	}{
		{
			name:   "fmt %v of Sensitive",
			reason: "the marker shows that something was there, without what",
			got:    fmt.Sprintf("%v", s),
			want:   "[redacted]",
		},
		{
			name:   "fmt %#v of Request",
			reason: "Go syntax of a Request shows the marker in the UserData field",
			got:    fmt.Sprintf("%#v", req),
			want:   "UserData:[redacted]",
		},
		{
			name:   "json.Marshal of Sensitive",
			reason: "structured loggers (zap) serialise values with encoding/json",
			got:    string(jsonS),
			want:   `"[redacted]"`,
		},
		{
			name:   "json.Marshal of Request",
			reason: "the Request's other fields stay visible; only UserData is replaced",
			got:    string(jsonReq),
			want:   `"UserData":"[redacted]"`,
		},
		{
			name:   "MarshalText",
			reason: "text encoders (YAML, flags) use encoding.TextMarshaler",
			got:    string(text),
			want:   "[redacted]",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff([]string(nil), leaks(tc.got)); diff != "" {
				t.Errorf("output shows the user-data (-want +got) (%s):\n%s\noutput: %s", tc.reason, diff, tc.got)
			}
			if !strings.Contains(tc.got, tc.want) {
				t.Errorf("output %q does not contain %q (%s)", tc.got, tc.want, tc.reason)
			}
		})
	}
}

func TestSensitiveInLoggers(t *testing.T) {
	s := provider.NewSensitive([]byte(userDataSentinel))
	req := sensitiveRequest()
	tests := []struct {
		name   string
		reason string
		log    func(buf *bytes.Buffer)
	}{
		{
			name:   "slog JSON handler",
			reason: "slog's JSON handler uses LogValue and encoding/json",
			log: func(buf *bytes.Buffer) {
				slog.New(slog.NewJSONHandler(buf, nil)).Info("create", "req", req, "ptr", &req, "userData", s, "holder", holder{req: req})
			},
		},
		{
			name:   "slog text handler",
			reason: "slog's text handler formats structs with fmt's %+v",
			log: func(buf *bytes.Buffer) {
				slog.New(slog.NewTextHandler(buf, nil)).Info("create", "req", req, "ptr", &req, "userData", s, "holder", holder{req: req})
			},
		},
		{
			name:   "logr funcr",
			reason: "the operator logs through logr; funcr walks structs by reflection itself",
			log: func(buf *bytes.Buffer) {
				log := funcr.New(func(prefix, args string) { buf.WriteString(prefix + args + "\n") }, funcr.Options{Verbosity: 9})
				log.V(2).Info("create", "req", req, "ptr", &req, "userData", s, "holder", holder{req: req})
				log.WithValues("req", req).Error(nil, "failed", "userData", s)
			},
		},
		{
			name:   "logr funcr JSON",
			reason: "funcr's JSON output mode must redact too",
			log: func(buf *bytes.Buffer) {
				log := funcr.NewJSON(func(obj string) { buf.WriteString(obj + "\n") }, funcr.Options{Verbosity: 9})
				log.V(2).Info("create", "req", req, "ptr", &req, "userData", s)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tc.log(&buf)
			out := buf.String()
			if diff := cmp.Diff([]string(nil), leaks(out)); diff != "" {
				t.Errorf("log output shows the user-data (-want +got) (%s):\n%s\noutput: %s", tc.reason, diff, out)
			}
			// The log line must still be there, with the marker: an empty
			// buffer would pass the leak check for the wrong reason.
			if !strings.Contains(out, "[redacted]") || !strings.Contains(out, "p-abc") {
				t.Errorf("log output lacks the request or the redaction marker (%s):\n%s", tc.reason, out)
			}
		})
	}
}

func TestSensitiveBytes(t *testing.T) {
	tests := []struct {
		name    string
		reason  string
		s       provider.Sensitive
		want    []byte
		wantLen int
	}{
		{
			name:    "content",
			reason:  "Bytes is the one way to the content, for the call that sends it to the infrastructure",
			s:       provider.NewSensitive([]byte(userDataSentinel)),
			want:    []byte(userDataSentinel),
			wantLen: len(userDataSentinel),
		},
		{
			name:    "zero value",
			reason:  "a Request without user-data (container providers) must not panic",
			s:       provider.Sensitive{},
			want:    nil,
			wantLen: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.s.Bytes()); diff != "" {
				t.Errorf("Bytes() mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantLen, tc.s.Len()); diff != "" {
				t.Errorf("Len() mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
}
