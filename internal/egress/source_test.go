package egress_test

import (
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

func TestCheckOpenSources(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		ranges string
		ok     bool
	}{
		{name: "one network", reason: "a team's office network is what auth None is for", ranges: "198.51.100.0/24", ok: true},
		{name: "a /8", reason: "the bound itself is allowed", ranges: "10.0.0.0/8", ok: true},
		{name: "a /7", reason: "twice the bound", ranges: "10.0.0.0/7"},
		{name: "halves", reason: "0.0.0.0/1 and 128.0.0.0/1 are the whole Internet", ranges: "0.0.0.0/1,128.0.0.0/1"},
		{name: "two /8s", reason: "the union counts, not each range", ranges: "10.0.0.0/8,11.0.0.0/8"},
		{name: "overlap", reason: "a range inside another counts once", ranges: "10.0.0.0/8,10.1.0.0/16,10.0.0.0/8", ok: true},
		{name: "v6 /32", reason: "one IPv6 /32 is allowed", ranges: "2001:db8::/32", ok: true},
		{name: "v6 halves", reason: "::/1 and 8000::/1 are every IPv6 address", ranges: "::/1,8000::/1"},
		{name: "v6 two /32", reason: "two /32s are more than one", ranges: "2001:db8::/32,2001:db9::/32"},
		{name: "both families", reason: "each family has its own bound", ranges: "10.0.0.0/8,2001:db8::/32", ok: true},
		{name: "mapped", reason: "an IPv4-mapped /96 is all of IPv4", ranges: "::ffff:0.0.0.0/96"},
		{name: "mapped /8", reason: "an IPv4-mapped /104 is one IPv4 /8", ranges: "::ffff:10.0.0.0/104", ok: true},
		{name: "mapped inside a /32", reason: "::/32 holds ::ffff:0:0/96, and tinyproxy compares IPv4 clients as mapped addresses: every IPv4 client", ranges: "::/32"},
		{name: "mapped inside a /80", reason: "::/80 is 2^48 IPv6 addresses but all of IPv4 as mapped ones", ranges: "::/80"},
		{name: "next to mapped", reason: "a range beside the mapped prefix holds no IPv4 client", ranges: "::fffe:0:0/96", ok: true},
		{name: "zero", reason: "/0 is any source", ranges: "0.0.0.0/0"},
		{name: "none", reason: "no range is any source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := egress.ParsePrefixes(tc.ranges)
			if err != nil {
				t.Fatal(err)
			}
			err = egress.CheckOpenSources(rs)
			if (err == nil) != tc.ok {
				t.Fatalf("%s: CheckOpenSources(%s) = %v, want accepted %t", tc.reason, tc.ranges, err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), egress.OpenSourceRule) {
				t.Errorf("the refusal %q does not name the rule", err)
			}
		})
	}
}

// FuzzCheckOpenSources compares the check with a union computed another
// way (sorted intervals, merged), on ranges made of the input's bytes.
func FuzzCheckOpenSources(f *testing.F) {
	f.Add([]byte{0, 1, 128, 1})
	f.Add([]byte{10, 8, 11, 8, 10, 16})
	f.Add([]byte{0x20, 32, 0x80, 1, 0x21, 32})
	f.Add([]byte{0x00, 161, 0x00, 193})
	f.Fuzz(func(t *testing.T, b []byte) {
		var rs []netip.Prefix
		for i := 0; i+1 < len(b) && len(rs) < 64; i += 2 {
			switch {
			case b[i+1]&1 == 0:
				a := netip.AddrFrom4([4]byte{b[i], b[i] ^ b[i+1], 0, 0})
				rs = append(rs, netip.PrefixFrom(a, int(b[i+1]>>1)%33))
			case b[i]&0x0f == 0:
				// Near and inside ::ffff:0:0/96, which counts as IPv4.
				a := netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: b[i], 13: b[i+1]})
				rs = append(rs, netip.PrefixFrom(a, int(b[i+1]>>1)%129))
			default:
				a := netip.AddrFrom16([16]byte{b[i], b[i+1] ^ 0x5a, b[i] >> 1})
				rs = append(rs, netip.PrefixFrom(a, int(b[i+1]>>1)%129))
			}
		}
		got := egress.CheckOpenSources(slices.Clone(rs)) == nil
		want := len(rs) > 0 && union(rs, true).Cmp(pow2(24)) <= 0 && union(rs, false).Cmp(pow2(96)) <= 0
		if got != want {
			t.Fatalf("CheckOpenSources(%v) accepted %t, the merged union says %t", rs, got, want)
		}
	})
}

func pow2(n uint) *big.Int { return new(big.Int).Lsh(big.NewInt(1), n) }

// union returns how many addresses of one family the ranges cover, by
// merging their intervals.
func union(rs []netip.Prefix, v4 bool) *big.Int {
	type iv struct{ lo, hi *big.Int }
	var ivs []iv
	// IPv4 clients are also the part of an IPv6 range inside
	// ::ffff:0:0/96 (clients compared as IPv4-mapped addresses), shifted
	// down to IPv4; and only that part of it is not IPv6's.
	mlo := new(big.Int).Lsh(big.NewInt(0xffff), 32)
	mhi := new(big.Int).Add(mlo, pow2(32))
	for _, r := range rs {
		r = r.Masked()
		lo := new(big.Int).SetBytes(r.Addr().AsSlice())
		hi := new(big.Int).Add(lo, pow2(uint(r.Addr().BitLen()-r.Bits())))
		switch {
		case r.Addr().Is4() == v4:
			if !v4 && lo.Cmp(mlo) >= 0 && hi.Cmp(mhi) <= 0 {
				continue // wholly mapped: IPv4's
			}
			ivs = append(ivs, iv{lo, hi})
		case v4:
			clo, chi := maxInt(lo, mlo), minInt(hi, mhi)
			if clo.Cmp(chi) < 0 {
				ivs = append(ivs, iv{new(big.Int).Sub(clo, mlo), new(big.Int).Sub(chi, mlo)})
			}
		}
	}
	slices.SortFunc(ivs, func(a, b iv) int { return a.lo.Cmp(b.lo) })
	total := new(big.Int)
	var cur *iv
	for i := range ivs {
		switch {
		case cur == nil:
			cur = &iv{ivs[i].lo, ivs[i].hi}
		case ivs[i].lo.Cmp(cur.hi) <= 0:
			if ivs[i].hi.Cmp(cur.hi) > 0 {
				cur.hi = ivs[i].hi
			}
		default:
			total.Add(total, new(big.Int).Sub(cur.hi, cur.lo))
			cur = &iv{ivs[i].lo, ivs[i].hi}
		}
	}
	if cur != nil {
		total.Add(total, new(big.Int).Sub(cur.hi, cur.lo))
	}
	return total
}

func maxInt(a, b *big.Int) *big.Int {
	if a.Cmp(b) > 0 {
		return a
	}
	return b
}

func minInt(a, b *big.Int) *big.Int {
	if a.Cmp(b) < 0 {
		return a
	}
	return b
}
