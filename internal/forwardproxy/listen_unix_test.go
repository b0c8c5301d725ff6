//go:build unix

package forwardproxy_test

import (
	"context"
	"net"
	"syscall"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// Listen's connections carry no TCP keep-alive (net.Listen's do): the
// proxy's timeouts end silent connections, and keep-alive costs four
// system calls per accepted connection.
func TestListenAcceptsWithoutKeepAlive(t *testing.T) {
	for name, listen := range map[string]func() (net.Listener, error){
		"forwardproxy.Listen": func() (net.Listener, error) { return forwardproxy.Listen(context.Background(), "127.0.0.1:0") },
		"net.Listen":          func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") },
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := listen()
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = ln.Close() }()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			a, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = a.Close() }()
			tc, ok := a.(*net.TCPConn)
			if !ok {
				t.Fatalf("accepted a %T", a)
			}
			raw, err := tc.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var on int
			var serr error
			if err := raw.Control(func(fd uintptr) { on, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) }); err != nil || serr != nil {
				t.Fatal(err, serr)
			}
			// net.Listen is the control: it does turn keep-alive on,
			// so the check can see it.
			if want := name == "net.Listen"; (on != 0) != want {
				t.Errorf("SO_KEEPALIVE = %d on a connection accepted by %s, want on: %t", on, name, want)
			}
		})
	}
}
