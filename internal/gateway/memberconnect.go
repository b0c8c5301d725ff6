package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
)

// A tunnel's CONNECT to its member, the gateway's hot path: a new TCP
// connection per tunnel (a member serves one tunnel per connection), one
// write of the request, rendered into a pooled buffer, and the member's
// answer read into the same buffer. A 200, the answer of nearly every
// tunnel, is recognised there without building an http.Response; any other
// answer, or one that does not look like a plain 200, is parsed by
// http.ReadResponse from the bytes read, as before.

// memberDialer dials members for tunnels. No TCP keep-alive: a tunnel has
// the idle timeout of the gateway's front, and keep-alive's four socket
// options were a third of the dial's system calls (docs/performance.md).
var memberDialer = net.Dialer{KeepAlive: -1}

// maxAnswerHead bounds a member's answer head to a CONNECT: past it the
// attempt fails.
const maxAnswerHead = 4 << 10

// answerBufs are the buffers of memberConnect, each maxAnswerHead bytes.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, maxAnswerHead); return &b }}

// errAnswerTooLarge fails an attempt whose answer head does not fit.
var errAnswerTooLarge = errors.New("the member's answer head is larger than 4 KiB")

// memberAnswer is what a tunnel needs of a member's answer to CONNECT.
type memberAnswer struct {
	// resp is the parsed answer when it was not a plain 200; nil on 200.
	resp *http.Response
	// early are the bytes read after the answer's head: the destination's
	// first bytes, which belong to the tunnel. Nil when there are none.
	early []byte
}

// memberConnect sends CONNECT target, with auth (a Proxy-Authorization
// value, "" for none), on c and reads the member's answer. c's deadline
// bounds both.
func memberConnect(c net.Conn, target, auth string) (memberAnswer, error) {
	bp, _ := answerBufs.Get().(*[]byte) // the pool holds only *[]byte
	defer answerBufs.Put(bp)
	req := appendConnect((*bp)[:0], target, auth)
	if _, err := c.Write(req); err != nil {
		return memberAnswer{}, err
	}
	head, rest, err := readAnswerHead(c, *bp)
	if err != nil {
		return memberAnswer{}, err
	}
	var a memberAnswer
	if len(rest) > 0 {
		a.early = bytes.Clone(rest)
	}
	if isPlain200(head) {
		return a, nil
	}
	// A copy: the answer outlives the pooled buffer (closing its body
	// reads it).
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(bytes.Clone(head))), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return memberAnswer{}, err
	}
	if resp.StatusCode == http.StatusOK {
		// A 200 that the fast path did not take (an HTTP/1.0 form with
		// unusual spacing, say) is still a 200.
		_ = resp.Body.Close()
		return a, nil
	}
	a.resp = resp
	return a, nil
}

// appendConnect renders the CONNECT request for target to b.
func appendConnect(b []byte, target, auth string) []byte {
	b = append(b, "CONNECT "...)
	b = append(b, target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, target...)
	b = append(b, "\r\n"...)
	if auth != "" {
		b = append(b, "Proxy-Authorization: "...)
		b = append(b, auth...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// readAnswerHead reads from c into buf until the empty line that ends an
// answer's head: head is the head, that line included, and rest what was
// read after it.
func readAnswerHead(c io.Reader, buf []byte) (head, rest []byte, err error) {
	n := 0
	for {
		if n == len(buf) {
			return nil, nil, errAnswerTooLarge
		}
		m, err := c.Read(buf[n:])
		n += m
		if end := headEnd(buf[:n]); end > 0 {
			return buf[:end], buf[end:n], nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, nil, err
		}
	}
}

// headEnd returns the length of the head at the start of b, up to and
// including its empty line (CRLF or LF), or 0 when b holds no complete
// head.
func headEnd(b []byte) int {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		rest := b[i+1:]
		switch {
		case bytes.HasPrefix(rest, []byte("\r\n")):
			return i + 3
		case bytes.HasPrefix(rest, []byte("\n")):
			return i + 2
		}
		j := bytes.IndexByte(rest, '\n')
		if j < 0 {
			return 0
		}
		i += 1 + j
	}
	return 0
}

// isPlain200 reports whether head is a 200 answer in its usual form: an
// HTTP/1.x status line with the code 200, then header lines that are each
// a token, a colon and a value without control characters. Anything else
// goes to http.ReadResponse.
func isPlain200(head []byte) bool {
	line, rest, _ := bytes.Cut(head, []byte{'\n'})
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if len(line) < len("HTTP/1.1 200") || (string(line[:9]) != "HTTP/1.1 " && string(line[:9]) != "HTTP/1.0 ") ||
		string(line[9:12]) != "200" || (len(line) > 12 && line[12] != ' ') {
		return false
	}
	if bytes.IndexByte(line, '\r') >= 0 {
		return false
	}
	for {
		var hl []byte
		hl, rest, _ = bytes.Cut(rest, []byte{'\n'})
		hl = bytes.TrimSuffix(hl, []byte{'\r'})
		if len(hl) == 0 {
			return len(rest) == 0
		}
		name, value, ok := bytes.Cut(hl, []byte{':'})
		if !ok || !isFieldName(name) || bytes.ContainsFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			return false
		}
	}
}

// isFieldName reports whether b is an RFC 9110 token.
func isFieldName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
