package forwardproxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// connectHead is what the proxy needs of a CONNECT request's head.
type connectHead struct {
	// target is the request target in authority form (host:port), as
	// sent; it is checked when the tunnel is set up.
	target string
	// proxyAuthorization is the Proxy-Authorization value, "" if absent.
	proxyAuthorization string
	// upstream holds the header fields an Upstream asked to read
	// (TunnelHeaderReader), by canonical name; nil when none was sent.
	upstream http.Header
}

// headError is a request head the proxy refuses to read further: code is
// the status of the answer (400, 431 or 505) and msg its body.
type headError struct {
	code int
	msg  string
}

func (e *headError) Error() string { return e.msg }

// The refusals of a malformed CONNECT head. Their messages say what is
// wrong, never echo the request.
var (
	errHeadTooLarge = &headError{http.StatusRequestHeaderFieldsTooLarge, "request header fields too large"}
	errRequestLine  = &headError{http.StatusBadRequest, "malformed request line"}
	errVersion      = &headError{http.StatusHTTPVersionNotSupported, "unsupported HTTP version"}
	errHeaderLine   = &headError{http.StatusBadRequest, "malformed header line"}
	errDuplicate    = &headError{http.StatusBadRequest, "duplicate Host or Proxy-Authorization header"}
	errBody         = &headError{http.StatusBadRequest, "a CONNECT request carries no body"}
	errTarget       = &headError{http.StatusBadRequest, msgConnectTarget}
)

// msgConnectTarget is the refusal of a CONNECT target that is not host:port,
// on either path.
const msgConnectTarget = "CONNECT needs a host:port target"

// connectPrefix is how every CONNECT request begins; a connection that
// begins otherwise goes to net/http.
const connectPrefix = "CONNECT "

// isConnect reports whether the first bytes of a connection, complete or
// not, may begin a CONNECT request: more is a prefix of "CONNECT " or
// begins with it.
func isConnect(first []byte) bool {
	n := min(len(first), len(connectPrefix))
	return string(first[:n]) == connectPrefix[:n]
}

// readConnectHead reads a CONNECT request's head from br, at most limit
// bytes from the request line to the empty line that ends the headers,
// and parses it, keeping the values of the fields named in want (canonical
// names). What follows the head stays in br: bytes a client sent
// without waiting for the answer belong to the tunnel. An error is either
// a *headError, to answer, or the connection's read error.
func readConnectHead(br *bufio.Reader, scratch []byte, limit int, want []string) (connectHead, []byte, error) {
	head := scratch[:0]
	lineStart := 0
	for {
		frag, err := br.ReadSlice('\n')
		if len(head)+len(frag) > limit {
			return connectHead{}, head, errHeadTooLarge
		}
		head = append(head, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue // a line longer than br's buffer: read on
		}
		if err != nil {
			if errors.Is(err, io.EOF) && len(head) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return connectHead{}, head, err
		}
		if lineStart > 0 && len(trimEOL(head[lineStart:])) == 0 {
			// The empty line after the request line and the headers.
			h, herr := parseConnectHead(head, want)
			return h, head, herr
		}
		lineStart = len(head)
	}
}

// parseConnectHead parses a complete CONNECT request head: the request
// line, the header lines and the empty line, each ended by CRLF or LF.
// It is strict where leniency would let a request mean one thing here and
// another to a server behind or in front of the proxy (RFC 9112): no space
// before a header's colon, no folded lines, no control characters, no
// duplicate Host or Proxy-Authorization, no body. The values of the fields
// named in want (canonical names) are kept in h.upstream, every one of
// them: what a repeated field means is the Upstream's to decide.
func parseConnectHead(head []byte, want []string) (connectHead, error) {
	line, rest, _ := bytes.Cut(head, []byte{'\n'})
	line, ok := cutCR(line)
	if !ok {
		return connectHead{}, errRequestLine
	}
	method, rl, ok1 := strings.Cut(string(line), " ")
	target, proto, ok2 := strings.Cut(rl, " ")
	switch {
	case !ok1 || !ok2 || method != http.MethodConnect || !validProto(proto):
		// Extra spaces end up in proto, which is then invalid.
		return connectHead{}, errRequestLine
	case proto != "HTTP/1.1" && proto != "HTTP/1.0":
		return connectHead{}, errVersion
	case !validTarget(target):
		return connectHead{}, errTarget
	}
	h := connectHead{target: target}
	var sawHost, sawAuth bool
	for {
		var hl []byte
		hl, rest, _ = bytes.Cut(rest, []byte{'\n'})
		hl, ok := cutCR(hl)
		if !ok {
			return connectHead{}, errHeaderLine
		}
		if len(hl) == 0 {
			if len(rest) != 0 {
				// Only the head is parsed here: bytes after its end
				// are the caller's mistake, not the client's.
				return connectHead{}, errHeaderLine
			}
			return h, nil
		}
		name, value, ok := bytes.Cut(hl, []byte{':'})
		if !ok || !validFieldName(name) || !validFieldValue(value) {
			// A line that starts with a space or a tab (obsolete line
			// folding) has no valid name.
			return connectHead{}, errHeaderLine
		}
		value = bytes.Trim(value, " \t")
		switch {
		case equalFold(name, "Proxy-Authorization"):
			if sawAuth {
				return connectHead{}, errDuplicate
			}
			sawAuth, h.proxyAuthorization = true, string(value)
		case equalFold(name, "Host"):
			if sawHost {
				return connectHead{}, errDuplicate
			}
			sawHost = true
		case equalFold(name, "Transfer-Encoding"):
			return connectHead{}, errBody
		case equalFold(name, "Content-Length"):
			if string(value) != "0" {
				return connectHead{}, errBody
			}
		default:
			for _, w := range want {
				if equalFold(name, w) {
					if h.upstream == nil {
						h.upstream = http.Header{}
					}
					h.upstream[w] = append(h.upstream[w], string(value))
				}
			}
		}
	}
}

// lateConnectHead is parseConnectHead's check for a CONNECT that net/http
// read (serveLateConnect), made on what net/http parsed: the target as
// sent, one Proxy-Authorization at most (net/http refuses a second Host
// itself), no body framing, HTTP/1.0 or 1.1. net/http refuses bare CRs,
// control characters and a space before a colon itself; it joins a folded
// line to the one before, which parseConnectHead refuses. That is taken as
// joined: a CONNECT's head is not passed on, and the tunnel that follows is
// not read as requests by anyone, so no parser behind can read the joined
// field otherwise; a Proxy-Authorization or tunnel header hidden in a fold
// is simply not there.
func lateConnectHead(r *http.Request, want []string) (connectHead, *headError) {
	switch {
	case r.ProtoMajor != 1 || r.ProtoMinor > 1:
		return connectHead{}, errVersion
	case !validTarget(r.RequestURI):
		return connectHead{}, errTarget
	case len(r.Header["Proxy-Authorization"]) > 1:
		return connectHead{}, errDuplicate
	case r.ContentLength != 0 || len(r.TransferEncoding) > 0:
		return connectHead{}, errBody
	}
	h := connectHead{target: r.RequestURI, proxyAuthorization: r.Header.Get("Proxy-Authorization")}
	for _, w := range want {
		if v := r.Header[w]; len(v) > 0 {
			if h.upstream == nil {
				h.upstream = http.Header{}
			}
			h.upstream[w] = slices.Clone(v)
		}
	}
	return h, nil
}

// cutCR removes the CR of a CRLF line end; false if another CR is left,
// since a bare CR is not a line end that every parser agrees on.
func cutCR(line []byte) ([]byte, bool) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	return line, bytes.IndexByte(line, '\r') < 0
}

// trimEOL removes a line's LF or CRLF.
func trimEOL(line []byte) []byte {
	return bytes.TrimSuffix(bytes.TrimSuffix(line, []byte{'\n'}), []byte{'\r'})
}

// validProto reports whether proto looks like HTTP/<digit>.<digit>.
func validProto(proto string) bool {
	return len(proto) == len("HTTP/1.1") && strings.HasPrefix(proto, "HTTP/") &&
		isDigit(proto[5]) && proto[6] == '.' && isDigit(proto[7])
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// validTarget reports whether target may be an authority (host:port or
// [v6]:port) as a request line carries it: letters, digits and the few
// characters that host names, IPv6 literals and ports use. No percent
// encoding, userinfo, path or query, so that the name that is checked is
// the name that is dialed. Whether it is really host:port is checked
// later, by checkTarget. The port is digits,
// the host not empty.
func validTarget(target string) bool {
	host, port, err := net.SplitHostPort(target)
	if err != nil || host == "" || port == "" || len(port) > 5 {
		return false
	}
	for i := range len(port) {
		if !isDigit(port[i]) {
			return false
		}
	}
	if target[0] == '[' {
		// Brackets hold an IPv6 address and nothing else: no zone, which
		// would name an interface of this host and carries a '%'.
		ip, err := netip.ParseAddr(host)
		return err == nil && ip.Is6() && ip.Zone() == ""
	}
	for i := range len(target) {
		c := target[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', isDigit(c):
		case c == '-', c == '.', c == '_', c == ':', c == '[', c == ']':
		default:
			return false
		}
	}
	return true
}

// validFieldName reports whether name is an RFC 9110 token.
func validFieldName(name []byte) bool {
	if len(name) == 0 {
		return false
	}
	for _, c := range name {
		if !isTokenChar(c) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', isDigit(c):
		return true
	default:
		return c < 0x7f && strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
	}
}

// validFieldValue reports whether value holds no control character but
// the horizontal tab (no NUL, no bare CR or LF).
func validFieldValue(value []byte) bool {
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// equalFold compares a header name with an ASCII name, ignoring case.
func equalFold(name []byte, want string) bool {
	if len(name) != len(want) {
		return false
	}
	for i, c := range name {
		if lower(c) != lower(want[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
