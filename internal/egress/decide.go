package egress

import "net/netip"

// Decider is a Policy ready for decisions: its ranges normalized and its
// ports defaulted. It is safe for concurrent use.
type Decider struct {
	allow, deny []netip.Prefix
	ports       []PortRange
}

// NewDecider returns the Decider of p.
func NewDecider(p Policy) *Decider {
	norm := func(ps []netip.Prefix) []netip.Prefix {
		out := make([]netip.Prefix, 0, len(ps))
		for _, pfx := range ps {
			out = append(out, Normalize(pfx))
		}
		return out
	}
	return &Decider{allow: norm(p.AllowCIDRs), deny: norm(p.DenyCIDRs), ports: p.Ports()}
}

// Addr returns why ip may not be reached, a DeniedRange's Reason or
// ReasonDenyList, or "" when it may. An IPv4-mapped address is decided as
// its IPv4 address, and a NAT64 address as the IPv4 address it embeds too.
func (d *Decider) Addr(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	if reason := d.addr(ip); reason != "" {
		return reason
	}
	if NAT64.Contains(ip) {
		b := ip.As16()
		return d.addr(netip.AddrFrom4([4]byte(b[12:])))
	}
	return ""
}

// addr is the deny -> allow -> built-in decision of one address.
func (d *Decider) addr(ip netip.Addr) string {
	for _, p := range d.deny {
		if p.Contains(ip) {
			return ReasonDenyList
		}
	}
	for _, p := range d.allow {
		if p.Contains(ip) {
			return ""
		}
	}
	for _, r := range DefaultDeniedRanges {
		if r.Prefix.Contains(ip) {
			return r.Reason
		}
	}
	return ""
}

// Port reports whether CONNECT may reach port.
func (d *Decider) Port(port uint16) bool {
	for _, r := range d.ports {
		if r.Contains(port) {
			return true
		}
	}
	return false
}
