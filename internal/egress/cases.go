package egress

import "net/netip"

// Case is one decision of the shared table: what Policy decides for a
// destination address, or for a CONNECT port. The forward proxy enforces
// these, and the guests' nftables rules and the proxy pods' flags must
// render a policy that decides them the same way.
type Case struct {
	// Name names the case.
	Name string
	// Reason says why the decision is the right one.
	Reason string
	// Policy is the policy decided by.
	Policy Policy
	// Addr is the destination, or the zero Addr when the case is about
	// Port.
	Addr netip.Addr
	// Port is a CONNECT port, when Addr is the zero Addr.
	Port uint16
	// Denied is the reason the destination is refused for (ReasonPort
	// for a port), or "" when it is allowed.
	Denied string
}

// Cases returns the table of decisions, a fresh copy on every call.
func Cases() []Case {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	addr := netip.MustParseAddr
	pfx := func(s string) []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix(s)} }
	return []Case{
		{Name: "public v4", Reason: "the Internet is what a crawler proxy is for", Addr: addr("198.51.100.7")},
		{Name: "public v6", Reason: "IPv6 destinations outside the reserved ranges are allowed", Addr: addr("2001:db8::7")},
		{Name: "loopback", Reason: "the proxy's own host is never a destination by default", Addr: addr("127.0.0.1"), Denied: "loopback"},
		{Name: "loopback v6", Reason: "::1 is loopback too", Addr: addr("::1"), Denied: "loopback"},
		{Name: "metadata", Reason: "the cloud metadata service hands out credentials", Addr: addr("169.254.169.254"), Denied: "link-local"},
		{Name: "link-local v6", Reason: "fe80::/10", Addr: addr("fe80::1"), Denied: "link-local"},
		{Name: "private", Reason: "10.0.0.0/8 is a private network", Addr: addr("10.1.2.3"), Denied: "private"},
		{Name: "ULA", Reason: "fc00::/7 is IPv6's private range", Addr: addr("fd12:3456::1"), Denied: "private"},
		{Name: "CGNAT", Reason: "100.64.0.0/10 is often a provider's internal network", Addr: addr("100.64.0.1"), Denied: "cgnat"},
		{Name: "multicast", Reason: "multicast is never a web server", Addr: addr("224.0.0.1"), Denied: "multicast"},
		{Name: "unspecified", Reason: "0.0.0.0 reaches the local host on Linux", Addr: addr("0.0.0.0"), Denied: "unspecified"},
		{Name: "unspecified v6", Reason: ":: reaches the local host on Linux", Addr: addr("::"), Denied: "unspecified"},
		{Name: "broadcast", Reason: "255.255.255.255", Addr: addr("255.255.255.255"), Denied: "reserved"},
		{Name: "mapped", Reason: "an IPv4-mapped IPv6 address is decided as the IPv4 address", Addr: addr("::ffff:127.0.0.1"), Denied: "loopback"},
		{Name: "NAT64", Reason: "64:ff9b::/96 reaches the embedded IPv4 address through a NAT64 gateway", Addr: addr("64:ff9b::a9fe:a9fe"), Denied: "link-local"},
		{Name: "NAT64 public", Reason: "a NAT64 address of a public IPv4 address is fine", Addr: addr("64:ff9b::c633:6407")},
		{Name: "allowed", Reason: "allowCIDRs reopen a built-in range", Policy: Policy{AllowCIDRs: loopback}, Addr: addr("127.0.0.1")},
		{Name: "allowed elsewhere", Reason: "allowCIDRs reopen only what they name", Policy: Policy{AllowCIDRs: loopback}, Addr: addr("169.254.169.254"), Denied: "link-local"},
		{
			Name: "deny beats allow", Reason: "denyCIDRs win over allowCIDRs: the administrator's explicit never",
			Policy: Policy{AllowCIDRs: loopback, DenyCIDRs: pfx("127.0.0.53/32")}, Addr: addr("127.0.0.53"), Denied: ReasonDenyList,
		},
		{
			Name: "deny public", Reason: "denyCIDRs add ranges, such as a cluster's public Service range",
			Policy: Policy{DenyCIDRs: pfx("203.0.113.0/24")}, Addr: addr("203.0.113.9"), Denied: ReasonDenyList,
		},
		{
			Name: "deny mapped", Reason: "a deny range written as IPv4-mapped IPv6 still matches the IPv4 address",
			Policy: Policy{DenyCIDRs: pfx("::ffff:203.0.113.0/120")}, Addr: addr("203.0.113.9"), Denied: ReasonDenyList,
		},
		{
			Name: "deny NAT64", Reason: "a deny range holds the NAT64 image of its addresses too",
			Policy: Policy{DenyCIDRs: pfx("203.0.113.0/24")}, Addr: addr("64:ff9b::cb00:7109"), Denied: ReasonDenyList,
		},
		{
			Name: "allow v6 private", Reason: "allowCIDRs reopen IPv6 ranges as well",
			Policy: Policy{AllowCIDRs: pfx("fd00::/8")}, Addr: addr("fd12:3456::1"),
		},
		{Name: "443 by default", Reason: "HTTPS is what CONNECT is for", Port: 443},
		{Name: "25 by default", Reason: "SMTP through a proxy is how spam leaves", Port: 25, Denied: ReasonPort},
		{Name: "22 by default", Reason: "no SSH through the proxy", Port: 22, Denied: ReasonPort},
		{Name: "range", Reason: "a configured range is inclusive", Policy: Policy{ConnectPorts: []PortRange{{8000, 8999}}}, Port: 8999},
		{Name: "below the range", Reason: "a configured range starts where it says", Policy: Policy{ConnectPorts: []PortRange{{8000, 8999}}}, Port: 7999, Denied: ReasonPort},
		{Name: "replaces the default", Reason: "configured ports replace 443", Policy: Policy{ConnectPorts: []PortRange{{8443, 8443}}}, Port: 443, Denied: ReasonPort},
		{Name: "every port", Reason: "1-65535 opens every port", Policy: Policy{ConnectPorts: []PortRange{{1, 65535}}}, Port: 25},
	}
}

// Decide returns d's decision on c's destination or port: ReasonPort for
// a port d refuses, Addr's answer for an address.
func (c Case) Decide(d *Decider) string {
	if c.Addr.IsValid() {
		return d.Addr(c.Addr)
	}
	if d.Port(c.Port) {
		return ""
	}
	return ReasonPort
}
