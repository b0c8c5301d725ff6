package forwardproxy

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// The shared table of decisions, enforced where the proxy enforces them:
// the dialer's ControlContext hook on the address about to be connected,
// and the CONNECT target's port check.
func TestEgressCasesAreEnforced(t *testing.T) {
	for _, c := range egress.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			g := newEgress(c.Policy)
			var err error
			if c.Addr.IsValid() {
				err = g.control(context.Background(), "tcp", net.JoinHostPort(c.Addr.String(), "443"), nil)
			} else if d := g.checkConnectPort(strconv.Itoa(int(c.Port))); d != nil {
				err = d
			}
			got := ""
			if de, ok := isDenied(err); ok {
				got = de.Reason
			} else if err != nil {
				t.Fatalf("%s: not a refusal of the policy: %v", c.Reason, err)
			}
			if diff := cmp.Diff(c.Denied, got); diff != "" {
				t.Errorf("%s: refused as (-want +got):\n%s", c.Reason, diff)
			}
		})
	}
}

// A CONNECT target's port is text: what is not a port fails closed.
func TestConnectPortText(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		port   string
	}{
		{name: "not a number", reason: "garbage fails closed", port: "https"},
		{name: "too large", reason: "out of range fails closed, even with every port allowed", port: "70000"},
		{name: "empty", reason: "no port is no port", port: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newEgress(egress.Policy{ConnectPorts: []egress.PortRange{{From: 1, To: 65535}}})
			if g.checkConnectPort(tc.port) == nil {
				t.Errorf("%s: port %q allowed", tc.reason, tc.port)
			}
		})
	}
}

// The hook refuses an address it cannot read rather than dialing it.
func TestControlUnparsable(t *testing.T) {
	d, ok := isDenied(newEgress(egress.Policy{}).control(context.Background(), "tcp", "not an address", nil))
	if !ok || d.Reason != "unparsable" {
		t.Errorf("got %v, want a refusal as unparsable", d)
	}
}
