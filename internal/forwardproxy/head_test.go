package forwardproxy

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseConnectHead(t *testing.T) {
	const auth = "Basic Y3Jhd2xlcjpwdw=="
	for _, tc := range []struct {
		name    string
		reason  string
		head    string
		want    connectHead
		wantErr *headError
	}{
		{
			name: "plain", reason: "what Go's Transport and curl send",
			head: "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: " + auth + "\r\nUser-Agent: x\r\n\r\n",
			want: connectHead{target: "example.com:443", proxyAuthorization: auth},
		},
		{
			name: "LF line ends", reason: "net/http accepts bare LF line ends too",
			head: "CONNECT example.com:443 HTTP/1.0\nproxy-authorization:" + auth + "\n\n",
			want: connectHead{target: "example.com:443", proxyAuthorization: auth},
		},
		{
			name: "IPv6 target, no Host", reason: "Host means nothing for CONNECT; brackets are allowed",
			head: "CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n",
			want: connectHead{target: "[2001:db8::1]:443"},
		},
		{
			name: "value whitespace", reason: "spaces and tabs around a value are not part of it",
			head: "CONNECT h:443 HTTP/1.1\r\nProxy-Authorization: \t" + auth + " \t\r\nContent-Length: 0\r\n\r\n",
			want: connectHead{target: "h:443", proxyAuthorization: auth},
		},
		{
			name: "lower-case method", reason: "methods are case-sensitive; serveConn never sends this here",
			head: "connect h:443 HTTP/1.1\r\n\r\n", wantErr: errRequestLine,
		},
		{
			name: "two spaces", reason: "an empty target between two spaces",
			head: "CONNECT  h:443 HTTP/1.1\r\n\r\n", wantErr: errRequestLine,
		},
		{
			name: "extra token", reason: "a fourth token ends up in the version, which is then invalid",
			head: "CONNECT h:443 HTTP/1.1 x\r\n\r\n", wantErr: errRequestLine,
		},
		{
			name: "no version", reason: "HTTP/0.9 has no CONNECT",
			head: "CONNECT h:443\r\n\r\n", wantErr: errRequestLine,
		},
		{
			name: "HTTP/2.0", reason: "a well-formed version other than 1.0 and 1.1 is 505, as in net/http",
			head: "CONNECT h:443 HTTP/2.0\r\n\r\n", wantErr: errVersion,
		},
		{
			name: "path target", reason: "CONNECT takes an authority, not a path",
			head: "CONNECT /h:443 HTTP/1.1\r\n\r\n", wantErr: errTarget,
		},
		{
			name: "userinfo target", reason: "userinfo in the target would hide where the tunnel goes",
			head: "CONNECT user@h:443 HTTP/1.1\r\n\r\n", wantErr: errTarget,
		},
		{
			name: "name in brackets", reason: "brackets hold an IPv6 address, which net/http checks too",
			head: "CONNECT [h]:443 HTTP/1.1\r\n\r\n", wantErr: errTarget,
		},
		{
			name: "percent-encoded target", reason: "the name checked must be the name dialed",
			head: "CONNECT h%41:443 HTTP/1.1\r\n\r\n", wantErr: errTarget,
		},
		{
			name: "IPv6 zone in target", reason: "a zone names an interface of the proxy's own host, and its % is an escape net/http refuses (found by FuzzParseConnectHead)",
			head: "CONNECT [fe80::1%eth0]:443 HTTP/1.1\r\n\r\n", wantErr: errTarget,
		},
		{
			name: "control character in target", reason: "a NUL must not reach the resolver",
			head: "CONNECT h\x00:443 HTTP/1.1\r\n\r\n", wantErr: errTarget,
		},
		{
			name: "bare CR in request line", reason: "a bare CR is a line end to some parsers and not to others",
			head: "CONNECT h:443\rHTTP/1.1\r\n\r\n", wantErr: errRequestLine,
		},
		{
			name: "space before colon", reason: "RFC 9112 5.1: such a line must be rejected, or another parser may see another header",
			head: "CONNECT h:443 HTTP/1.1\r\nProxy-Authorization : " + auth + "\r\n\r\n", wantErr: errHeaderLine,
		},
		{
			name: "obsolete line folding", reason: "a folded line continues a header for some parsers and starts one for others",
			head: "CONNECT h:443 HTTP/1.1\r\nX: a\r\n Proxy-Authorization: " + auth + "\r\n\r\n", wantErr: errHeaderLine,
		},
		{
			name: "no colon", reason: "a header line without a name and value",
			head: "CONNECT h:443 HTTP/1.1\r\nProxy-Authorization\r\n\r\n", wantErr: errHeaderLine,
		},
		{
			name: "bare CR in a value", reason: "a bare CR could end the header for a parser behind",
			head: "CONNECT h:443 HTTP/1.1\r\nX: a\rProxy-Authorization: " + auth + "\r\n\r\n", wantErr: errHeaderLine,
		},
		{
			name: "NUL in a value", reason: "control characters are refused",
			head: "CONNECT h:443 HTTP/1.1\r\nX: a\x00b\r\n\r\n", wantErr: errHeaderLine,
		},
		{
			name: "invalid name", reason: "a header name is a token",
			head: "CONNECT h:443 HTTP/1.1\r\nX Y: a\r\n\r\n", wantErr: errHeaderLine,
		},
		{
			name: "two Proxy-Authorization", reason: "parsers disagree on which one counts",
			head: "CONNECT h:443 HTTP/1.1\r\nProxy-Authorization: " + auth + "\r\nproxy-authorization: Basic eDp5\r\n\r\n", wantErr: errDuplicate,
		},
		{
			name: "two Host", reason: "net/http refuses it too",
			head: "CONNECT h:443 HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", wantErr: errDuplicate,
		},
		{
			name: "Transfer-Encoding", reason: "a body would be tunnelled by one parser and read by another",
			head: "CONNECT h:443 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", wantErr: errBody,
		},
		{
			name: "Content-Length", reason: "as Transfer-Encoding",
			head: "CONNECT h:443 HTTP/1.1\r\nContent-Length: 5\r\n\r\n", wantErr: errBody,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseConnectHead([]byte(tc.head), nil)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("%s: error = %v, want %v", tc.reason, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(connectHead{})); diff != "" {
				t.Errorf("%s: (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReadConnectHead(t *testing.T) {
	const head = "CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n"
	long := "X-Long: " + strings.Repeat("v", 6000) + "\r\n"
	for _, tc := range []struct {
		name      string
		reason    string
		in        string
		limit     int
		want      connectHead
		wantErr   error
		wantAfter string // what stays in the reader
	}{
		{
			name: "pipelined bytes", reason: "bytes after the head belong to the tunnel and stay in the reader",
			in: head + "\x16\x03\x01 hello", limit: 1 << 10, want: connectHead{target: "h:443"}, wantAfter: "\x16\x03\x01 hello",
		},
		{
			name: "a line longer than the buffer", reason: "a 6000-byte header spans several buffers and is read whole",
			in: "CONNECT h:443 HTTP/1.1\r\n" + long + "\r\nafter", limit: 8 << 10, want: connectHead{target: "h:443"}, wantAfter: "after",
		},
		{
			name: "LF alone after a full buffer", reason: "the end of a long line is not an empty line",
			// The X line fills the 4 KiB buffer up to its CR; its LF comes
			// alone in the next read.
			in: "CONNECT h:443 HTTP/1.1\r\nX: " + strings.Repeat("v", 4096-len("X: \r")) + "\r\nY: z\r\n\r\n", limit: 8 << 10,
			want: connectHead{target: "h:443"},
		},
		{
			name: "too large", reason: "the limit counts every byte of the head: 431",
			in: "CONNECT h:443 HTTP/1.1\r\n" + long + "\r\n", limit: 4 << 10, wantErr: errHeadTooLarge,
		},
		{
			name: "many small headers", reason: "the limit holds for many lines as for one long one",
			in: "CONNECT h:443 HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", 1000) + "\r\n", limit: 4 << 10, wantErr: errHeadTooLarge,
		},
		{
			name: "cut short", reason: "a head that ends before its empty line is not a request",
			in: "CONNECT h:443 HTTP/1.1\r\nHost: h", limit: 1 << 10, wantErr: io.ErrUnexpectedEOF,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tc.in), 4<<10)
			got, _, err := readConnectHead(br, nil, tc.limit, nil)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("%s: error = %v, want %v", tc.reason, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(connectHead{})); diff != "" {
				t.Errorf("%s: (-want +got):\n%s", tc.reason, diff)
			}
			after, _ := io.ReadAll(br)
			if diff := cmp.Diff(tc.wantAfter, string(after)); diff != "" {
				t.Errorf("%s: left in the reader (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestSniff(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reason  string
		in      string
		want    bool
		wantErr bool
	}{
		{name: "CONNECT", reason: "served by connServer", in: "CONNECT h:443 HTTP/1.1\r\n", want: true},
		{name: "GET", reason: "goes to net/http after the first byte", in: "GET http://h/ HTTP/1.1\r\n"},
		{name: "CONNECTION", reason: "a method that only starts like CONNECT goes to net/http", in: "CONNECTION h:443 HTTP/1.1\r\n"},
		{name: "lower case", reason: "methods are case-sensitive", in: "connect h:443 HTTP/1.1\r\n"},
		{name: "cut inside the method", reason: "no request: nothing to serve", in: "CONN", wantErr: true},
		{name: "nothing", reason: "a connection closed at once", in: "", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tc.in))
			got, err := sniff(br)
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s: error = %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: (-want +got):\n%s", tc.reason, diff)
			}
			if rest, _ := io.ReadAll(br); string(rest) != tc.in {
				t.Errorf("sniff consumed bytes: %q left of %q", rest, tc.in)
			}
		})
	}
}

// FuzzParseConnectHead checks the CONNECT head parser against net/http's:
// whatever it accepts, net/http must read as the same CONNECT request, with
// the same target and the same Proxy-Authorization, so that no head means
// one thing to the proxy and another to a server that follows HTTP as Go
// does. It may refuse more than net/http does. And the same head, read by
// net/http after another request on its connection, passes lateConnectHead
// with the same target, credentials and tunnel headers.
func FuzzParseConnectHead(f *testing.F) {
	for _, seed := range []string{
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic eDp5\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.0\n\n",
		"CONNECT h:443 HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
		"CONNECT h:443 HTTP/1.1\r\nProxy-Authorization : x\r\n\r\n",
		"CONNECT h:443 HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
		"CONNECT h%41:443 HTTP/1.1\r\n\r\n",
		// What net/http reads laxly: a CONNECT after another request,
		// which net/http reads, is checked for these (lateConnectHead).
		"CONNECT h:443 HTTP/1.1\r\nProxy-Authorization: Basic eDp5\r\nProxy-Authorization: Basic eTp6\r\n\r\n",
		"CONNECT h:443 HTTP/1.1\r\nX: a\r\n\tProxy-Authorization: Basic eDp5\r\n\r\n",
		"CONNECT h:443 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"CONNECT h:443 HTTP/1.1\r\nX-Session: a\r\nx-session:  b \r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	want := []string{"X-Session"}
	f.Fuzz(func(t *testing.T, head []byte) {
		br := bufio.NewReader(strings.NewReader(string(head)))
		got, _, err := readConnectHead(br, nil, 64<<10, want)
		if err != nil {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(head))))
		if err != nil {
			t.Fatalf("accepted %q, which net/http refuses: %v", head, err)
		}
		if req.Method != http.MethodConnect || req.Host != got.target {
			t.Errorf("%q: target %q, net/http reads %s %q", head, got.target, req.Method, req.Host)
		}
		if want := req.Header.Get("Proxy-Authorization"); want != got.proxyAuthorization {
			t.Errorf("%q: Proxy-Authorization %q, net/http reads %q", head, got.proxyAuthorization, want)
		}
		// The same head after another request on its connection, read by
		// net/http and checked by lateConnectHead, opens the same tunnel.
		late, herr := lateConnectHead(req, want)
		if herr != nil {
			t.Fatalf("%q: accepted as a connection's first request, refused after another: %v", head, herr)
		}
		if diff := cmp.Diff(got, late, cmp.AllowUnexported(connectHead{})); diff != "" {
			t.Errorf("%q: read after another request (-first +late):\n%s", head, diff)
		}
	})
}
