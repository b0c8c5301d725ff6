package cloudinit

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// Where the guest's egress rules live, and the systemd units that load them
// at every boot (runcmd runs once per instance; the rules must outlive a
// reboot).
const (
	// NftablesPath is the nftables ruleset of the tinyproxy user.
	NftablesPath        = "/etc/egress-proxy/egress.nft"
	nftablesUnitName    = "egress-proxy-nftables.service"
	nftablesUnitPath    = "/etc/systemd/system/" + nftablesUnitName
	tinyproxyDropInPath = "/etc/systemd/system/tinyproxy.service.d/egress-proxy.conf"
)

// nftablesUnit loads the rules before tinyproxy starts, and after the
// distribution's nftables.service, whose /etc/nftables.conf may flush the
// whole ruleset.
var nftablesUnit = nftablesUnitFor(tinyproxyUser, "tinyproxy.service", "")

// nftablesUnitFor is the unit that loads the rules of user before the
// service, with extra [Unit] lines.
func nftablesUnitFor(user, service, extra string) string {
	return `[Unit]
Description=Egress policy of the egress proxy (nftables rules for the ` + user + ` user)
Before=` + service + `
After=network-pre.target nftables.service
` + extra + nftablesUnitRest
}

// nftablesUnitRest is the part of the rules' unit after [Unit].
const nftablesUnitRest = `
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/nft -f ` + NftablesPath + `
ExecStop=/usr/sbin/nft delete table inet egress_proxy

[Install]
WantedBy=multi-user.target
`

// tinyproxyDropIn makes tinyproxy depend on the rules: when they fail to
// load, tinyproxy does not start.
const tinyproxyDropIn = `[Unit]
Requires=` + nftablesUnitName + `
After=` + nftablesUnitName + `
`

// maxConnectPorts bounds the ConnectPort lines: tinyproxy takes one port per
// line, so wide ranges other than 1-65535 (no line: every port) would be
// thousands of lines.
const maxConnectPorts = 1024

// connectPortLines returns the ports of tinyproxy's ConnectPort lines:
// egress.DefaultConnectPorts for the default policy, none when the policy
// allows every port, and an error for ranges too wide to list.
func connectPortLines(ranges []egress.PortRange) ([]int, error) {
	ranges = egress.Policy{ConnectPorts: ranges}.Ports()
	var ports []int
	for _, r := range ranges {
		if r.From <= 1 && r.To == 65535 {
			return nil, nil
		}
		if !r.Valid() {
			return nil, fmt.Errorf("egress policy: CONNECT port range %s is not valid", r)
		}
		for p := int(r.From); p <= int(r.To); p++ {
			ports = append(ports, p)
		}
		if len(ports) > maxConnectPorts {
			return nil, errors.New("egress policy: tinyproxy guests list CONNECT ports one by one; allow at most 1024 ports, or 1-65535 for all")
		}
	}
	return ports, nil
}

// NftablesRules returns the nftables ruleset that enforces e in a guest: for
// packets sent by the tinyproxy user that open connections (the answer path
// to its clients, ct direction reply, stays open), the Go forward proxy's
// decision (egress.Decider.Addr). DenyCIDRs are rejected, then AllowCIDRs
// accepted, then the built-in deny list rejected; an IPv6 address that
// embeds an IPv4 one (NAT64, 6to4) is rejected as well when the IPv4
// address is, which the rule on the "embedded" sets checks before any
// allow rule can accept the IPv6 address. DNS over UDP stays open, since
// resolvers often sit on loopback or a private address, and tinyproxy
// never sends UDP for its clients. The kernel checks the address actually
// connected to, whatever a name resolved to.
func NftablesRules(e egress.Policy) string { return nftablesRules(e, tinyproxyUser) }

// tinyproxyUser is the user tinyproxy runs as on the distributions the
// user-data supports.
const tinyproxyUser = "tinyproxy"

// nftablesRules is NftablesRules for the proxy running as user.
func nftablesRules(e egress.Policy, user string) string {
	var defaults []netip.Prefix
	for _, d := range egress.DefaultDeniedRanges {
		defaults = append(defaults, d.Prefix)
	}
	// The images of the deny ranges are rejected outright; those of the
	// built-in ranges when they are not images of allowed ranges.
	deny4, deny6 := split(e.DenyCIDRs)
	allow4, allow6 := split(e.AllowCIDRs)
	builtin4, builtin6 := split(defaults)
	sets := []struct {
		name, typ string
		elems     []string
	}{
		{"deny4", "ipv4_addr", deny4},
		{"deny6", "ipv6_addr", append(deny6, images(e.DenyCIDRs)...)},
		{"allow4", "ipv4_addr", allow4},
		{"allow6", "ipv6_addr", allow6},
		{"allowembedded", "ipv6_addr", images(e.AllowCIDRs)},
		{"builtin4", "ipv4_addr", builtin4},
		{"builtin6", "ipv6_addr", builtin6},
		{"builtinembedded", "ipv6_addr", images(defaults)},
	}
	var b strings.Builder
	b.WriteString("#!/usr/sbin/nft -f\n")
	b.WriteString("# Written by egress-proxies-operator through cloud-init: the egress policy of the proxy user.\n")
	// Declaring the table first makes the delete work on the first load
	// too, so that loading the file again replaces the rules.
	b.WriteString("table inet egress_proxy {}\ndelete table inet egress_proxy\n")
	b.WriteString("table inet egress_proxy {\n")
	has := map[string]bool{}
	for _, s := range sets {
		if len(s.elems) == 0 {
			continue
		}
		has[s.name] = true
		// auto-merge: overlapping ranges (an allow range inside another)
		// are accepted rather than refused.
		fmt.Fprintf(&b, "\tset %s {\n\t\ttype %s\n\t\tflags interval\n\t\tauto-merge\n\t\telements = { %s }\n\t}\n",
			s.name, s.typ, strings.Join(s.elems, ", "))
	}
	const reject = "reject with icmpx type admin-prohibited"
	b.WriteString("\tchain output {\n")
	b.WriteString("\t\ttype filter hook output priority filter; policy accept;\n")
	fmt.Fprintf(&b, "\t\tmeta skuid != %q accept\n", user)
	b.WriteString("\t\tct direction reply accept\n")
	b.WriteString("\t\tudp dport 53 accept\n")
	rule := func(set, match, verdict string) {
		if has[set] {
			fmt.Fprintf(&b, "\t\t%s @%s %s\n", match, set, verdict)
		}
	}
	rule("deny4", "ip daddr", reject)
	rule("deny6", "ip6 daddr", reject)
	if has["allowembedded"] {
		rule("builtinembedded", "ip6 daddr", "ip6 daddr != @allowembedded "+reject)
	} else {
		rule("builtinembedded", "ip6 daddr", reject)
	}
	rule("allow4", "ip daddr", "accept")
	rule("allow6", "ip6 daddr", "accept")
	rule("builtin4", "ip daddr", reject)
	rule("builtin6", "ip6 daddr", reject)
	b.WriteString("\t}\n}\n")
	return b.String()
}

// split returns the IPv4 ranges and the IPv6 ones of ps, IPv4-mapped ones
// as IPv4.
func split(ps []netip.Prefix) (v4, v6 []string) {
	for _, p := range ps {
		p = egress.Normalize(p)
		if p.Addr().Is4() {
			v4 = append(v4, p.String())
		} else {
			v6 = append(v6, p.String())
		}
	}
	return v4, v6
}

// images returns the IPv6 ranges that lead to the IPv4 ranges of ps
// (egress.IPv6Images): their NAT64 and 6to4 addresses.
func images(ps []netip.Prefix) []string {
	var out []string
	for _, p := range ps {
		for _, img := range egress.IPv6Images(p) {
			out = append(out, img.String())
		}
	}
	return out
}
