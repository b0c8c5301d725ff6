package gateway

import (
	"net"
	"net/url"
	"strings"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// errorText is err's text without the addresses it may name: the gateway
// dials members only, so the address in a dial, read or write error, and
// the URL of a url.Error, is a member's, which no span or access log line
// shows (docs/gateway.md, Traces). Each *net.OpError, *url.Error and
// *net.DNSError in err's chain has its text replaced by its operation and
// cause ("dial tcp: connect: connection refused"); the rest of the text,
// which names the member as pool/name, stays. Wrappers hold their cause's
// text whole (fmt.Errorf's %w), so the replacement finds it.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	text := err.Error()
	for _, r := range addressFree(err, nil) {
		text = strings.ReplaceAll(text, r[0], r[1])
	}
	return text
}

// addressFree appends to out, for each error of err's chain that names an
// address, its text and the text that replaces it.
func addressFree(err error, out [][2]string) [][2]string {
	if oe, ok := err.(*net.OpError); ok { //nolint:errorlint // the chain is walked here, one error at a time.
		return append(out, [2]string{oe.Error(), strings.TrimSpace(oe.Op+" "+oe.Net) + ": " + errorText(oe.Err)})
	}
	if ue, ok := err.(*url.Error); ok { //nolint:errorlint // as above.
		return append(out, [2]string{ue.Error(), ue.Op + ": " + errorText(ue.Err)})
	}
	if de, ok := err.(*net.DNSError); ok { //nolint:errorlint // as above.
		return append(out, [2]string{de.Error(), "lookup: " + de.Err})
	}
	switch u := err.(type) { //nolint:errorlint // as above.
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = addressFree(e, out)
		}
	case interface{ Unwrap() error }:
		if e := u.Unwrap(); e != nil {
			out = addressFree(e, out)
		}
	}
	return out
}

// DescribeError implements forwardproxy.ErrorDescriber: the access log's
// error field names no member address.
func (g *Gateway) DescribeError(err error) string { return errorText(err) }

var _ forwardproxy.ErrorDescriber = (*Gateway)(nil)
