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
	f.Fuzz(func(t *testing.T, b []byte) {
		var rs []netip.Prefix
		for i := 0; i+1 < len(b) && len(rs) < 64; i += 2 {
			if b[i+1]&1 == 0 {
				a := netip.AddrFrom4([4]byte{b[i], b[i] ^ b[i+1], 0, 0})
				rs = append(rs, netip.PrefixFrom(a, int(b[i+1]>>1)%33))
			} else {
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
	for _, r := range rs {
		r = r.Masked()
		if r.Addr().Is4() != v4 {
			continue
		}
		lo := new(big.Int).SetBytes(r.Addr().AsSlice())
		hi := new(big.Int).Add(lo, pow2(uint(r.Addr().BitLen()-r.Bits())))
		ivs = append(ivs, iv{lo, hi})
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
