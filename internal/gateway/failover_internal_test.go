package gateway

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scriptedBody gives its reads one by one, then its end.
type scriptedBody struct {
	reads  []string
	end    error
	calls  int
	closed bool
}

func (b *scriptedBody) Read(p []byte) (int, error) {
	b.calls++
	if len(b.reads) == 0 {
		return 0, b.end
	}
	n := copy(p, b.reads[0])
	if b.reads[0] = b.reads[0][n:]; b.reads[0] == "" {
		b.reads = b.reads[1:]
	}
	return n, nil
}

func (b *scriptedBody) Close() error { b.closed = true; return nil }

// TestPrimeBody: the first read of an answer's body decides whether the
// member failed before the client got anything; whatever it read reaches
// the client unchanged, and it never waits for more than what arrived.
func TestPrimeBody(t *testing.T) {
	big := strings.Repeat("b", 2000)
	for _, tc := range []struct {
		reason      string
		method      string
		code        int
		length      int64
		body        *scriptedBody
		wantCause   string // "" when the answer passes on
		wantBody    string
		wantErr     error // the client's read's end
		wantPrimeRd int   // reads of the body before the head is passed on
	}{
		{reason: "a body read whole at once passes on as it is", method: "GET", code: 200, length: 5,
			body: &scriptedBody{reads: []string{"hello"}, end: io.EOF}, wantBody: "hello", wantErr: io.EOF, wantPrimeRd: 1},
		{reason: "a body longer than the priming buffer is given whole, in order", method: "GET", code: 200, length: 2000,
			body: &scriptedBody{reads: []string{big}, end: io.EOF}, wantBody: big, wantErr: io.EOF, wantPrimeRd: 1},
		{reason: "a streamed answer: the head goes on after its first piece, without waiting for the next", method: "GET", code: 200, length: -1,
			body: &scriptedBody{reads: []string{"event: 1\n", "event: 2\n"}, end: io.EOF}, wantBody: "event: 1\nevent: 2\n", wantErr: io.EOF, wantPrimeRd: 1},
		{reason: "an empty body of unknown length (chunked, ended at once) is an answer, not a failure", method: "GET", code: 200, length: -1,
			body: &scriptedBody{end: io.EOF}, wantErr: io.EOF, wantPrimeRd: 1},
		{reason: "a member that died before the first byte: the attempt failed", method: "GET", code: 200, length: 100,
			body: &scriptedBody{end: io.ErrUnexpectedEOF}, wantCause: "body-cut", wantPrimeRd: 1},
		{reason: "a reset before the first byte: the attempt failed", method: "GET", code: 200, length: -1,
			body: &scriptedBody{end: syscall.ECONNRESET}, wantCause: "body-cut", wantPrimeRd: 1},
		{reason: "a reset after the first bytes: the answer is the client's, its end as it came", method: "GET", code: 200, length: 100,
			body: &scriptedBody{reads: []string{"part"}, end: syscall.ECONNRESET}, wantBody: "part", wantErr: syscall.ECONNRESET, wantPrimeRd: 1},
		{reason: "HEAD has no body to wait for", method: "HEAD", code: 200, length: 100, body: &scriptedBody{end: io.EOF}, wantErr: io.EOF},
		{reason: "204 has no body to wait for", method: "GET", code: 204, length: -1, body: &scriptedBody{end: io.EOF}, wantErr: io.EOF},
		{reason: "304 has no body to wait for", method: "GET", code: 304, length: -1, body: &scriptedBody{end: io.EOF}, wantErr: io.EOF},
		{reason: "Content-Length 0 has no body to wait for", method: "GET", code: 200, length: 0, body: &scriptedBody{end: io.EOF}, wantErr: io.EOF},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			req := &http.Request{Method: tc.method}
			resp := &http.Response{StatusCode: tc.code, ContentLength: tc.length, Body: tc.body}
			f := primeBody(req, resp)
			if got := tc.body.calls; got != tc.wantPrimeRd {
				t.Errorf("%d reads before the head went on, want %d: %s", got, tc.wantPrimeRd, tc.reason)
			}
			if tc.wantCause != "" {
				if f == nil || f.cause != tc.wantCause || !f.member || !tc.body.closed {
					t.Errorf("attempt %+v (body closed: %t), want a member failure %q with the body closed: %s", f, tc.body.closed, tc.wantCause, tc.reason)
				}
				return
			}
			if f != nil {
				t.Fatalf("attempt failed (%v): %s", f.err, tc.reason)
			}
			var got strings.Builder
			buf := make([]byte, 7) // smaller than a read, to see the pieces joined in order
			var err error
			for {
				var n int
				n, err = resp.Body.Read(buf)
				got.WriteString(string(buf[:n]))
				if err != nil {
					break
				}
			}
			if diff := cmp.Diff(tc.wantBody, got.String()); diff != "" {
				t.Errorf("body (-want +got):\n%s\n%s", diff, tc.reason)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("the body ended with %v, want %v: %s", err, tc.wantErr, tc.reason)
			}
		})
	}
}
