package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// TestErrorTextNamesNoAddress: the text spans and the access log get for
// an error names no member address, however the error that names it is
// wrapped, and keeps the rest.
func TestErrorTextNamesNoAddress(t *testing.T) {
	member := &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 3128}
	member6 := &net.TCPAddr{IP: net.ParseIP("2001:db8::5"), Port: 3128}
	gw := &net.TCPAddr{IP: net.ParseIP("10.9.9.9"), Port: 40000}
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: member, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	timeout := &net.OpError{Op: "dial", Net: "tcp", Addr: member, Err: os.ErrDeadlineExceeded}
	reset := &net.OpError{Op: "read", Net: "tcp", Source: gw, Addr: member6, Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, c := range []struct {
		name, why string
		err       error
		want      string
	}{
		{"dial refused", "a net.OpError's text names the address dialled", refused, "dial tcp: connect: connection refused"},
		{"as connect wraps it", "the member stays named by pool/name", &attemptError{cause: "refused", member: true,
			err: fmt.Errorf("member %s: %w", "crawl/m1", refused)}, "member crawl/m1: dial tcp: connect: connection refused"},
		{"the Transport's dial", "a plain request's dial failure, as giveUp returns it", fmt.Errorf("member %s: %w", "crawl/m1", &dialError{timeout}),
			"member crawl/m1: dial tcp: i/o timeout"},
		{"read on a kept connection", "both ends of a connection, IPv6 too", reset, "read tcp: read: connection reset by peer"},
		{"url.Error", "its URL names the member, credentials and all", &url.Error{Op: "Get", URL: "http://u:p@10.1.2.3:3128/x", Err: io.EOF}, "Get: EOF"},
		{"url.Error around an OpError", "both are cut", &url.Error{Op: "Post", URL: "http://10.1.2.3:3128/", Err: timeout}, "Post: dial tcp: i/o timeout"},
		{"a refusal's cause", "a RefusedError's text ends with its cause's", &forwardproxy.RefusedError{Code: http.StatusBadGateway, Message: "bad gateway",
			Err: fmt.Errorf("member crawl/m1: %w", refused)}, "bad gateway: member crawl/m1: dial tcp: connect: connection refused"},
		{"joined", "every branch of an errors.Join", errors.Join(refused, reset), "dial tcp: connect: connection refused\nread tcp: read: connection reset by peer"},
		{"DNS", "a member named by a host name, and the resolver's address", &net.DNSError{Err: "no such host", Name: "m1.pool.internal", Server: "10.0.0.10:53"},
			"lookup: no such host"},
		{"no address", "text without an address stays as it is", errors.New("member crawl/m1 answered 502 Bad Gateway"), "member crawl/m1 answered 502 Bad Gateway"},
		{"nil", "no error, no text", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := errorText(c.err)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("%s: errorText (-want +got):\n%s", c.why, diff)
			}
			for _, addr := range []string{"10.1.2.3", "2001:db8::5", "m1.pool.internal", "10.0.0.10"} {
				if strings.Contains(got, addr) {
					t.Errorf("%s: %q names %s", c.why, got, addr)
				}
			}
		})
	}
}
