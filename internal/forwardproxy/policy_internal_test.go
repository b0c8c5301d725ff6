package forwardproxy

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Every built-in range is refused with its reason, at both of its ends,
// and the addresses just outside stay reachable unless another range holds
// them. The ranges are not spelled out here: the list itself is the table.
func TestDefaultDeniedRangesAreRefused(t *testing.T) {
	g := newEgress(EgressPolicy{})
	for _, d := range DefaultDeniedRanges {
		first := d.Prefix.Masked().Addr()
		last := lastAddr(d.Prefix)
		for _, ip := range []netip.Addr{first, last} {
			err := g.checkAddr(ip)
			de, ok := isDenied(err)
			if !ok {
				t.Errorf("%s (in %s) is reachable; want it refused as %s", ip, d.Prefix, d.Reason)
				continue
			}
			if diff := cmp.Diff(d.Reason, de.Reason); diff != "" && !overlaps(ip, de.Reason) {
				t.Errorf("%s: reason (-want +got):\n%s", ip, diff)
			}
		}
	}
}

// overlaps reports whether ip is in some built-in range with the given
// reason (::/96 holds :: and ::1 is its own range, for instance).
func overlaps(ip netip.Addr, reason string) bool {
	for _, d := range DefaultDeniedRanges {
		if d.Prefix.Contains(ip) && d.Reason == reason {
			return true
		}
	}
	return false
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func TestEgressDecisions(t *testing.T) {
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	for _, tc := range []struct {
		name       string
		reason     string
		policy     EgressPolicy
		addr       string
		wantReason string // empty: allowed
	}{
		{name: "public v4", reason: "the Internet is what a crawler proxy is for", addr: "198.51.100.7"},
		{name: "public v6", reason: "IPv6 destinations outside the reserved ranges are allowed", addr: "2001:db8::7"},
		{name: "loopback", reason: "the proxy's own host is never a destination by default", addr: "127.0.0.1", wantReason: "loopback"},
		{name: "loopback v6", reason: "::1 is loopback too", addr: "::1", wantReason: "loopback"},
		{name: "metadata", reason: "the cloud metadata service hands out credentials", addr: "169.254.169.254", wantReason: "link-local"},
		{name: "link-local v6", reason: "fe80::/10", addr: "fe80::1", wantReason: "link-local"},
		{name: "ULA", reason: "fc00::/7 is IPv6's private range", addr: "fd12:3456::1", wantReason: "private"},
		{name: "CGNAT", reason: "100.64.0.0/10 is often a provider's internal network", addr: "100.64.0.1", wantReason: "cgnat"},
		{name: "multicast", reason: "multicast is never a web server", addr: "224.0.0.1", wantReason: "multicast"},
		{name: "unspecified", reason: "0.0.0.0 reaches the local host on Linux", addr: "0.0.0.0", wantReason: "unspecified"},
		{name: "unspecified v6", reason: ":: reaches the local host on Linux", addr: "::", wantReason: "unspecified"},
		{name: "broadcast", reason: "255.255.255.255", addr: "255.255.255.255", wantReason: "reserved"},
		{name: "mapped", reason: "an IPv4-mapped IPv6 address is checked as the IPv4 address", addr: "::ffff:127.0.0.1", wantReason: "loopback"},
		{name: "NAT64", reason: "64:ff9b::/96 reaches the embedded IPv4 address through a NAT64 gateway", addr: "64:ff9b::a9fe:a9fe", wantReason: "link-local"},
		{name: "NAT64 public", reason: "a NAT64 address of a public IPv4 address is fine", addr: "64:ff9b::c633:6407"},
		{name: "allowed", reason: "allowCIDRs reopen a built-in range", policy: EgressPolicy{AllowCIDRs: []netip.Prefix{loopback}}, addr: "127.0.0.1"},
		{name: "allowed elsewhere", reason: "allowCIDRs reopen only what they name", policy: EgressPolicy{AllowCIDRs: []netip.Prefix{loopback}}, addr: "169.254.169.254", wantReason: "link-local"},
		{
			name: "deny beats allow", reason: "denyCIDRs win over allowCIDRs: the administrator's explicit never",
			policy: EgressPolicy{AllowCIDRs: []netip.Prefix{loopback}, DenyCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.53/32")}},
			addr:   "127.0.0.53", wantReason: "deny-list",
		},
		{
			name: "deny public", reason: "denyCIDRs add ranges, such as a cluster's public Service range",
			policy: EgressPolicy{DenyCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}, addr: "203.0.113.9", wantReason: "deny-list",
		},
		{
			name: "deny mapped", reason: "a deny range written as IPv4-mapped IPv6 still matches the IPv4 address",
			policy: EgressPolicy{DenyCIDRs: []netip.Prefix{netip.MustParsePrefix("::ffff:203.0.113.0/120")}}, addr: "203.0.113.9", wantReason: "deny-list",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if de, ok := isDenied(newEgress(tc.policy).checkAddr(netip.MustParseAddr(tc.addr))); ok {
				got = de.Reason
			}
			if diff := cmp.Diff(tc.wantReason, got); diff != "" {
				t.Errorf("%s: %s refused as (-want +got):\n%s", tc.reason, tc.addr, diff)
			}
		})
	}
}

func TestConnectPorts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		ports  []PortRange
		port   string
		want   bool
	}{
		{name: "443 by default", reason: "HTTPS is what CONNECT is for", port: "443", want: true},
		{name: "25 by default", reason: "SMTP through a proxy is how spam leaves", port: "25"},
		{name: "22 by default", reason: "no SSH through the proxy", port: "22"},
		{name: "range", reason: "a configured range is inclusive", ports: []PortRange{{8000, 8999}}, port: "8999", want: true},
		{name: "replaces the default", reason: "configured ports replace 443", ports: []PortRange{{8443, 8443}}, port: "443"},
		{name: "not a number", reason: "garbage fails closed", port: "https"},
		{name: "too large", reason: "out of range fails closed", ports: []PortRange{{1, 65535}}, port: "70000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := newEgress(EgressPolicy{ConnectPorts: tc.ports}).checkConnectPort(tc.port) == nil
			if got != tc.want {
				t.Errorf("%s: port %s allowed = %t, want %t", tc.reason, tc.port, got, tc.want)
			}
		})
	}
}

func TestParsePortRange(t *testing.T) {
	for in, want := range map[string]*PortRange{
		"443": {443, 443}, "8000-8999": {8000, 8999}, "1-65535": {1, 65535},
		"0": nil, "65536": nil, "9-8": nil, "": nil, "x": nil, "1-": nil,
	} {
		got, err := ParsePortRange(in)
		switch {
		case want == nil && err == nil:
			t.Errorf("ParsePortRange(%q) = %v, want an error", in, got)
		case want != nil && (err != nil || got != *want):
			t.Errorf("ParsePortRange(%q) = %v, %v; want %v", in, got, err, *want)
		}
	}
}
