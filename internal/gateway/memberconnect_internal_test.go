package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMemberConnect(t *testing.T) {
	const target = "example.test:443"
	const auth = "Basic dTpw"
	cases := []struct {
		name, reason string
		answer       string // what the member sends, all at once
		oneByte      bool   // sent a byte at a time
		wantStatus   int    // 0: a tunnel (200)
		wantEarly    string
		wantRest     string // read from the connection after the answer
		wantHeader   string // the answer's X-Egress-Denied
		wantErr      error  // errors.Is
	}{
		{name: "200", reason: "the forward proxy's answer opens the tunnel",
			answer: "HTTP/1.1 200 Connection established\r\n\r\n"},
		{name: "200 with headers", reason: "header fields of a 200 are read and dropped",
			answer: "HTTP/1.1 200 OK\r\nVia: 1.1 tinyproxy\r\nX-A: b\tc\r\n\r\n"},
		{name: "200 HTTP/1.0, LF only", reason: "tinyproxy-like HTTP/1.0 answers with bare LF line ends are a 200 too",
			answer: "HTTP/1.0 200 Connection established\n\n"},
		{name: "200 without reason", reason: "the reason phrase may be missing",
			answer: "HTTP/1.1 200\r\n\r\n"},
		{name: "early bytes", reason: "bytes after the head are the destination's and go to the client first",
			answer: "HTTP/1.1 200 Connection established\r\n\r\nSSH-2.0-banner\r\n", wantEarly: "SSH-2.0-banner\r\n"},
		{name: "a byte at a time", reason: "a head split over many reads is put together, and what follows it is left on the connection",
			answer: "HTTP/1.1 200 Connection established\r\nVia: x\r\n\r\nhello", oneByte: true, wantRest: "hello"},
		{name: "refusal", reason: "any other status is parsed in full, with its headers",
			answer:     "HTTP/1.1 403 Forbidden\r\nX-Egress-Denied: port\r\nContent-Length: 5\r\nConnection: close\r\n\r\nnope\n",
			wantStatus: http.StatusForbidden, wantHeader: "port"},
		{name: "2000", reason: "a code that begins with 200 is not 200",
			answer: "HTTP/1.1 2000 Odd\r\n\r\n", wantErr: errAny},
		{name: "folded 200", reason: "a 200 whose header lines are not plain fields is left to http.ReadResponse, as before this fast path (it reads obsolete folding in answers)",
			answer: "HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\nx", wantEarly: "x"},
		{name: "malformed line", reason: "a header line without a colon fails the attempt, as http.ReadResponse says",
			answer: "HTTP/1.1 200 OK\r\nnot a field\r\n\r\n", wantErr: errAny},
		{name: "closed early", reason: "a member that closes before its head ends fails the attempt",
			answer: "HTTP/1.1 200 Conn", wantErr: io.ErrUnexpectedEOF},
		{name: "too large", reason: "an answer head over 4 KiB fails the attempt instead of growing",
			answer: "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxAnswerHead) + "\r\n\r\n", wantErr: errAnswerTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, member := net.Pipe()
			defer func() { _ = client.Close() }()
			gotReq := make(chan string, 1)
			go func() {
				defer func() { _ = member.Close() }()
				buf := make([]byte, 1024)
				n, _ := member.Read(buf)
				gotReq <- string(buf[:n])
				if tc.oneByte {
					for i := range len(tc.answer) {
						if _, err := member.Write([]byte{tc.answer[i]}); err != nil {
							return
						}
					}
					return
				}
				_, _ = io.WriteString(member, tc.answer)
			}()
			_ = client.SetDeadline(time.Now().Add(10 * time.Second))
			a, err := memberConnect(client, target, auth)
			wantReq := "CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\nProxy-Authorization: Basic dTpw\r\n\r\n"
			if got := <-gotReq; got != wantReq {
				t.Errorf("%s: request (-want +got):\n%s", tc.reason, cmp.Diff(wantReq, got))
			}
			switch {
			case errors.Is(tc.wantErr, errAny):
				if err == nil && (a.resp == nil || a.resp.StatusCode == http.StatusOK) {
					t.Fatalf("%s: got a tunnel, want a failed attempt", tc.reason)
				}
				return
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("%s: error %v, want %v", tc.reason, err, tc.wantErr)
				}
				return
			case err != nil:
				t.Fatalf("%s: %v", tc.reason, err)
			}
			status, header := 0, ""
			if a.resp != nil {
				status, header = a.resp.StatusCode, a.resp.Header.Get("X-Egress-Denied")
			}
			if status != tc.wantStatus || header != tc.wantHeader {
				t.Errorf("%s: status %d, X-Egress-Denied %q; want %d, %q", tc.reason, status, header, tc.wantStatus, tc.wantHeader)
			}
			if tc.wantStatus == 0 && string(a.early) != tc.wantEarly {
				t.Errorf("%s: early bytes (-want +got):\n%s", tc.reason, cmp.Diff(tc.wantEarly, string(a.early)))
			}
			if rest, _ := io.ReadAll(client); string(rest) != tc.wantRest {
				t.Errorf("%s: left on the connection (-want +got):\n%s", tc.reason, cmp.Diff(tc.wantRest, string(rest)))
			}
		})
	}
}

// errAny in a case of TestMemberConnect: any failure (an error or a
// refusal), as long as no tunnel opens.
var errAny = errors.New("any failure")

// A request without member credentials has no Proxy-Authorization line.
func TestAppendConnectWithoutAuth(t *testing.T) {
	got := string(appendConnect(nil, "h:1", ""))
	if want := "CONNECT h:1 HTTP/1.1\r\nHost: h:1\r\n\r\n"; got != want {
		t.Errorf("(-want +got):\n%s", cmp.Diff(want, got))
	}
}

// readAnswerHead reads no further than it must when the reader gives one
// byte at a time.
func TestReadAnswerHeadOneByteReader(t *testing.T) {
	r := iotest.OneByteReader(strings.NewReader("HTTP/1.1 200 OK\r\n\r\nrest"))
	head, rest, err := readAnswerHead(r, make([]byte, 64))
	if err != nil || string(head) != "HTTP/1.1 200 OK\r\n\r\n" || len(rest) != 0 {
		t.Errorf("head %q, rest %q, %v", head, rest, err)
	}
}
