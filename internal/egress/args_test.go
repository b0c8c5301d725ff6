package egress_test

import (
	"flag"
	"io"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

func TestPolicyArgs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		policy egress.Policy
		want   []string
	}{
		{name: "default", reason: "the engine's defaults are the safe policy; members of entries without one keep their arguments"},
		{
			name:   "full",
			reason: "each part of the entry's policy becomes its flag, ranges masked and ports as written",
			policy: egress.Policy{
				AllowCIDRs:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("fd00::1/8")},
				DenyCIDRs:    []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
				ConnectPorts: []egress.PortRange{{From: 443, To: 443}, {From: 8000, To: 8999}},
			},
			want: []string{"--egress-allow-cidrs=127.0.0.0/8,fd00::/8", "--egress-deny-cidrs=203.0.113.0/24", "--connect-ports=443,8000-8999"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.policy.Args()); diff != "" {
				t.Errorf("%s: args (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// The shared table of decisions, rendered: the engine's arguments (a pod's,
// a guest unit's), read back by the flags the engine binds, decide every
// case as the entry's policy does.
func TestEgressCasesAreRenderedAsArgs(t *testing.T) {
	for _, c := range egress.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := egress.BindFlags(fs)
			if err := fs.Parse(c.Policy.Args()); err != nil {
				t.Fatalf("the engine would not start: %v", err)
			}
			p, err := f.Policy()
			if err != nil {
				t.Fatalf("the engine would not start: %v", err)
			}
			if diff := cmp.Diff(c.Denied, c.Decide(egress.NewDecider(p))); diff != "" {
				t.Errorf("%s: the engine refuses as (-want +got):\n%s", c.Reason, diff)
			}
		})
	}
}
