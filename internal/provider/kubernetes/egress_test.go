package kubernetes

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
)

func TestEgressArgs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		policy config.EgressPolicy
		want   []string
	}{
		{name: "default", reason: "the subcommand's defaults are the safe policy; pods of entries without one keep their arguments"},
		{
			name:   "full",
			reason: "each part of the entry's policy becomes its flag, ranges masked and ports as written",
			policy: config.EgressPolicy{
				AllowCIDRs:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("fd00::1/8")},
				DenyCIDRs:    []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
				ConnectPorts: []config.PortRange{{From: 443, To: 443}, {From: 8000, To: 8999}},
			},
			want: []string{"--egress-allow-cidrs=127.0.0.0/8,fd00::/8", "--egress-deny-cidrs=203.0.113.0/24", "--connect-ports=443,8000-8999"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, egressArgs(tc.policy)); diff != "" {
				t.Errorf("%s: args (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}
