package egress

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
)

// The most of the address space the allowed source ranges of a proxy
// without authentication may cover together: one /8 of IPv4 (2^24
// addresses) and one /32 of IPv6 (2^96). Past that, a proxy that asks for
// no credentials serves a large part of the Internet: an open proxy in
// several halves. IPv4-mapped IPv6 ranges count as the IPv4 they map.
const (
	MaxOpenSourceBits4 = 24
	MaxOpenSourceBits6 = 96
	// OpenSourceRule names the rule in refusals, so that a message says
	// which rule refused.
	OpenSourceRule = "a proxy without authentication may serve at most one IPv4 /8 and one IPv6 /32 worth of source addresses"
)

// mappedZero is ::ffff:0.0.0.0, the first IPv4-mapped IPv6 address.
var mappedZero = netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff})

// CheckOpenSources returns an error, naming OpenSourceRule, when ranges,
// the allowed source ranges of a proxy without authentication, cover
// together more than MaxOpenSourceBits4 of IPv4 addresses or
// MaxOpenSourceBits6 of IPv6 ones, or none at all; overlapping ranges
// count once. An IPv6 range shorter than /96 that holds the IPv4-mapped
// prefix counts as all of IPv4 too. An invalid range is an error too.
func CheckOpenSources(ranges []netip.Prefix) error {
	if len(ranges) == 0 {
		return fmt.Errorf("no source ranges: %s", OpenSourceRule)
	}
	var v4, v6 []netip.Prefix
	for _, r := range ranges {
		if !r.IsValid() {
			return fmt.Errorf("invalid source range %v", r)
		}
		r = Normalize(r)
		if r.Addr().Is4() {
			v4 = append(v4, r)
			continue
		}
		v6 = append(v6, r)
		if r.Contains(mappedZero) {
			// A range that holds all of ::ffff:0:0/96 serves every IPv4
			// client where the proxy compares clients as IPv4-mapped
			// addresses, as tinyproxy's Allow lines do (::/32 would
			// pass as one IPv6 /32 otherwise).
			v4 = append(v4, netip.PrefixFrom(netip.IPv4Unspecified(), 0))
		}
	}
	if n := covered(v4); n.Cmp(new(big.Int).Lsh(big.NewInt(1), MaxOpenSourceBits4)) > 0 {
		return fmt.Errorf("the IPv4 source ranges cover %s addresses: %s", n, OpenSourceRule)
	}
	if n := covered(v6); n.Cmp(new(big.Int).Lsh(big.NewInt(1), MaxOpenSourceBits6)) > 0 {
		return fmt.Errorf("the IPv6 source ranges cover 2^%d or more addresses: %s", n.BitLen()-1, OpenSourceRule)
	}
	return nil
}

// covered returns how many addresses the union of ps (all of one family,
// masked) holds. Two prefixes are either disjoint or one holds the other,
// so the union is the sum over the prefixes no other one holds.
func covered(ps []netip.Prefix) *big.Int {
	slices.SortFunc(ps, func(a, b netip.Prefix) int { return a.Bits() - b.Bits() })
	var kept []netip.Prefix
	total := new(big.Int)
	for _, p := range ps {
		if slices.ContainsFunc(kept, func(k netip.Prefix) bool { return k.Contains(p.Addr()) }) {
			continue
		}
		kept = append(kept, p)
		total.Add(total, new(big.Int).Lsh(big.NewInt(1), uint(p.Addr().BitLen()-p.Bits())))
	}
	return total
}
