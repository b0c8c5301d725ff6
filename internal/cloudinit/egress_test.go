package cloudinit

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// checkEgressFiles checks the write_files entries after tinyproxy.conf: the
// ruleset, the unit that loads it at boot and tinyproxy's dependency on it.
func checkEgressFiles(t *testing.T, files []any, p Proxy) {
	t.Helper()
	want := []map[string]any{
		{"path": NftablesPath, "owner": "root:root", "permissions": "0644", "defer": true, "content": NftablesRules(p.Egress)},
		{"path": "/etc/systemd/system/egress-proxy-nftables.service", "owner": "root:root", "permissions": "0644", "defer": true, "content": nftablesUnit},
		{"path": "/etc/systemd/system/tinyproxy.service.d/egress-proxy.conf", "owner": "root:root", "permissions": "0644", "defer": true, "content": tinyproxyDropIn},
	}
	got := make([]map[string]any, 0, len(files))
	for _, f := range files {
		m, ok := f.(map[string]any)
		if !ok {
			t.Fatalf("write_files entry %#v is not a mapping", f)
		}
		got = append(got, m)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("egress files (-want +got):\n%s", diff)
	}
	for _, line := range []string{"ExecStart=/usr/sbin/nft -f " + NftablesPath, "Before=tinyproxy.service", "WantedBy=multi-user.target"} {
		if !strings.Contains(nftablesUnit, line+"\n") {
			t.Errorf("the unit lacks %q: the rules would not load before tinyproxy at every boot", line)
		}
	}
	if !strings.Contains(tinyproxyDropIn, "Requires=egress-proxy-nftables.service\n") {
		t.Error("tinyproxy does not require the rules: it would run without them when they fail to load")
	}
}

// chainRules returns the rule lines of the output chain.
func chainRules(rules string) []string {
	_, chain, _ := strings.Cut(rules, "chain output {\n")
	var out []string
	for line := range strings.SplitSeq(chain, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line == "}" || strings.HasPrefix(line, "type filter") {
			continue
		}
		out = append(out, line)
	}
	return out
}

// setElements returns the elements of the named set.
func setElements(rules, name string) []string {
	_, after, ok := strings.Cut(rules, "set "+name+" {\n")
	if !ok {
		return nil
	}
	_, elems, _ := strings.Cut(after, "elements = { ")
	elems, _, _ = strings.Cut(elems, " }")
	return strings.Split(elems, ", ")
}

func TestNftablesRules(t *testing.T) {
	const reject = "reject with icmpx type admin-prohibited"
	head := []string{`meta skuid != "tinyproxy" accept`, "ct direction reply accept", "udp dport 53 accept"}
	for _, tc := range []struct {
		name      string
		reason    string
		policy    egress.Policy
		wantRules []string
		wantSets  map[string][]string
	}{
		{
			name:      "default",
			reason:    "the built-in list is refused to the tinyproxy user; other users and the answer path are untouched",
			wantRules: append(head, "ip daddr @builtin4 "+reject, "ip6 daddr @builtin6 "+reject),
		},
		{
			name:   "widened and narrowed",
			reason: "deny first, then allow, then the built-in list: the Go proxy's order",
			policy: egress.Policy{
				AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
				DenyCIDRs:  []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8::/32")},
			},
			wantRules: append(head,
				"ip daddr @deny4 "+reject, "ip6 daddr @deny6 "+reject,
				"ip daddr @allow4 accept", "ip6 daddr @allow6 accept",
				"ip daddr @builtin4 "+reject, "ip6 daddr @builtin6 "+reject),
			wantSets: map[string][]string{
				"deny4":  {"203.0.113.0/24"},
				"deny6":  {"64:ff9b::cb00:7100/120", "2001:db8::/32"},
				"allow4": {"127.0.0.0/8"},
				"allow6": {"64:ff9b::7f00:0/104"},
			},
		},
		{
			name:   "mapped",
			reason: "an IPv4-mapped range is written as IPv4, which is what the kernel sees",
			policy: egress.Policy{DenyCIDRs: []netip.Prefix{netip.MustParsePrefix("::ffff:203.0.113.0/120")}},
			wantRules: append(head, "ip daddr @deny4 "+reject, "ip6 daddr @deny6 "+reject,
				"ip daddr @builtin4 "+reject, "ip6 daddr @builtin6 "+reject),
			wantSets: map[string][]string{"deny4": {"203.0.113.0/24"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules := NftablesRules(tc.policy)
			if diff := cmp.Diff(tc.wantRules, chainRules(rules)); diff != "" {
				t.Errorf("%s: rules (-want +got):\n%s", tc.reason, diff)
			}
			for name, want := range tc.wantSets {
				if diff := cmp.Diff(want, setElements(rules, name)); diff != "" {
					t.Errorf("set %s (-want +got):\n%s", name, diff)
				}
			}
			// The built-in list is complete in every ruleset, NAT64
			// images included.
			builtin := strings.Join(append(setElements(rules, "builtin4"), setElements(rules, "builtin6")...), " ")
			for _, want := range []string{"127.0.0.0/8", "169.254.0.0/16", "100.64.0.0/10", "fc00::/7", "fe80::/10", "::1/128", "64:ff9b::a9fe:0/112"} {
				if !strings.Contains(builtin, want) {
					t.Errorf("the built-in sets lack %s:\n%s", want, rules)
				}
			}
			if !strings.HasPrefix(rules, "#!/usr/sbin/nft -f\n") || !strings.Contains(rules, "table inet egress_proxy {}\ndelete table inet egress_proxy\n") {
				t.Errorf("the ruleset does not replace an earlier one when loaded again:\n%s", rules)
			}
		})
	}
}

func TestRenderRefusesTooManyConnectPorts(t *testing.T) {
	_, err := Render(Proxy{Port: 3128, Username: "u", Password: "p",
		Egress: egress.Policy{ConnectPorts: []egress.PortRange{{From: 1024, To: 65535}}}})
	if err == nil || !strings.Contains(err.Error(), "at most 1024") {
		t.Errorf("Render = %v, want the ConnectPort limit: tinyproxy lists ports one by one", err)
	}
}

// The shared table of decisions, rendered: the nftables chain, read the
// way the kernel reads it for a new TCP connection of the tinyproxy user
// (first matching daddr rule wins, else the chain accepts), and
// tinyproxy's ConnectPort lines decide every case as the policy does.
func TestEgressCasesAreRendered(t *testing.T) {
	for _, c := range egress.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			var refused bool
			if c.Addr.IsValid() {
				refused = nftRefuses(t, NftablesRules(c.Policy), c.Addr)
			} else {
				ports, err := connectPortLines(c.Policy.ConnectPorts)
				if err != nil {
					t.Fatal(err)
				}
				refused = ports != nil && !slices.Contains(ports, int(c.Port))
			}
			if want := c.Denied != ""; refused != want {
				t.Errorf("%s: the guest refuses = %t, want %t (%q)", c.Reason, refused, want, c.Denied)
			}
		})
	}
}

// nftRefuses evaluates the output chain of rules for a connection to ip.
func nftRefuses(t *testing.T, rules string, ip netip.Addr) bool {
	t.Helper()
	ip = ip.Unmap()
	family := "ip6 daddr @"
	if ip.Is4() {
		family = "ip daddr @"
	}
	for _, rule := range chainRules(rules) {
		set, verdict, ok := strings.Cut(strings.TrimPrefix(rule, family), " ")
		if !ok || !strings.HasPrefix(rule, family) {
			continue
		}
		for _, e := range setElements(rules, set) {
			if netip.MustParsePrefix(e).Contains(ip) {
				return verdict != "accept"
			}
		}
	}
	return false
}
