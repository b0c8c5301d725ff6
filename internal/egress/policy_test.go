package egress_test

import (
	"encoding/json"
	"flag"
	"io"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// The shared table, against the one decision.
func TestCases(t *testing.T) {
	for _, c := range egress.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			if diff := cmp.Diff(c.Denied, c.Decide(egress.NewDecider(c.Policy))); diff != "" {
				t.Errorf("%s: refused as (-want +got):\n%s", c.Reason, diff)
			}
		})
	}
}

// Every built-in range is refused with its reason, at both of its ends.
// The ranges are not spelled out here: the list itself is the table.
func TestDefaultDeniedRangesAreRefused(t *testing.T) {
	d := egress.NewDecider(egress.Policy{})
	for _, r := range egress.DefaultDeniedRanges {
		for _, ip := range []netip.Addr{r.Prefix.Masked().Addr(), lastAddr(r.Prefix)} {
			got := d.Addr(ip)
			if got == "" {
				t.Errorf("%s (in %s) is reachable; want it refused as %s", ip, r.Prefix, r.Reason)
				continue
			}
			if got != r.Reason && !overlaps(ip, got) {
				t.Errorf("%s (in %s) refused as %s, want %s", ip, r.Prefix, got, r.Reason)
			}
		}
	}
}

// overlaps reports whether ip is in some built-in range with the given
// reason (::/96 holds :: and ::1 is its own range, for instance).
func overlaps(ip netip.Addr, reason string) bool {
	for _, r := range egress.DefaultDeniedRanges {
		if r.Prefix.Contains(ip) && r.Reason == reason {
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

func TestParsePortRange(t *testing.T) {
	for in, want := range map[string]*egress.PortRange{
		"443": {443, 443}, "8000-8999": {8000, 8999}, "1-65535": {1, 65535}, " 80 - 81 ": {80, 81},
		"0": nil, "65536": nil, "9-8": nil, "": nil, "x": nil, "1-": nil,
	} {
		got, err := egress.ParsePortRange(in)
		switch {
		case want == nil && err == nil:
			t.Errorf("ParsePortRange(%q) = %v, want an error", in, got)
		case want != nil && (err != nil || got != *want):
			t.Errorf("ParsePortRange(%q) = %v, %v; want %v", in, got, err, *want)
		}
	}
}

// The configuration writes ports as numbers or strings; what is written
// back reads the same.
func TestPortRangeJSON(t *testing.T) {
	var got []egress.PortRange
	if err := json.Unmarshal([]byte(`[443, "8000-8999", "8443"]`), &got); err != nil {
		t.Fatal(err)
	}
	want := []egress.PortRange{{443, 443}, {8000, 8999}, {8443, 8443}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("decoded (-want +got):\n%s", diff)
	}
	b, err := json.Marshal(got)
	if err != nil || string(b) != `["443","8000-8999","8443"]` {
		t.Errorf("encoded %s, %v", b, err)
	}
	if err := json.Unmarshal([]byte(`["https"]`), &got); err == nil {
		t.Error("a name decoded as a port")
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reason  string
		args    []string
		want    egress.Policy
		wantErr bool
	}{
		{name: "defaults", reason: "no flag is the default policy, with its CONNECT ports spelled out", want: egress.Policy{ConnectPorts: egress.DefaultConnectPorts}},
		{
			name: "all", reason: "each flag fills its part",
			args: []string{"--egress-allow-cidrs=127.0.0.0/8, fd00::/8", "--egress-deny-cidrs=203.0.113.0/24", "--connect-ports=443,8000-8999"},
			want: egress.Policy{
				AllowCIDRs:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("fd00::/8")},
				DenyCIDRs:    []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
				ConnectPorts: []egress.PortRange{{443, 443}, {8000, 8999}},
			},
		},
		{name: "no ports", reason: "CONNECT to no port at all is a mistake, not a policy", args: []string{"--connect-ports="}, wantErr: true},
		{name: "bad port", reason: "port 0 is refused", args: []string{"--connect-ports=0"}, wantErr: true},
		{name: "bad range", reason: "a CIDR must parse", args: []string{"--egress-deny-cidrs=10.0.0.0/33"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := egress.BindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.Policy()
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s: err = %v, want an error: %t", tc.reason, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("%s: policy (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for name, p := range map[string]egress.Policy{
		"zero allow prefix": {AllowCIDRs: []netip.Prefix{{}}},
		"zero deny prefix":  {DenyCIDRs: []netip.Prefix{{}}},
		"port 0":            {ConnectPorts: []egress.PortRange{{From: 0, To: 10}}},
		"reversed range":    {ConnectPorts: []egress.PortRange{{From: 10, To: 9}}},
	} {
		if p.Validate() == nil {
			t.Errorf("%s: Validate accepted %v", name, p)
		}
	}
	if err := (egress.Policy{}).Validate(); err != nil {
		t.Errorf("the default policy is not valid: %v", err)
	}
}
