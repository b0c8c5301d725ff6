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
const nftablesUnit = `[Unit]
Description=Egress policy of the egress proxy (nftables rules for the tinyproxy user)
Before=tinyproxy.service
After=network-pre.target nftables.service

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
// to its clients, ct direction reply, stays open), DenyCIDRs are rejected,
// then AllowCIDRs accepted, then the built-in deny list rejected, as the Go
// forward proxy decides. DNS over UDP stays open, since resolvers often sit
// on loopback or a private address, and tinyproxy never sends UDP for its
// clients. The kernel checks the address actually connected to, whatever a
// name resolved to.
func NftablesRules(e egress.Policy) string {
	var defaults []netip.Prefix
	for _, d := range egress.DefaultDeniedRanges {
		defaults = append(defaults, d.Prefix)
	}
	var b strings.Builder
	b.WriteString("#!/usr/sbin/nft -f\n")
	b.WriteString("# Written by egress-proxies-operator through cloud-init: the egress policy of the proxy user.\n")
	// Declaring the table first makes the delete work on the first load
	// too, so that loading the file again replaces the rules.
	b.WriteString("table inet egress_proxy {}\ndelete table inet egress_proxy\n")
	b.WriteString("table inet egress_proxy {\n")
	writeSets(&b, "deny", e.DenyCIDRs)
	writeSets(&b, "allow", e.AllowCIDRs)
	writeSets(&b, "builtin", defaults)
	b.WriteString("\tchain output {\n")
	b.WriteString("\t\ttype filter hook output priority filter; policy accept;\n")
	b.WriteString("\t\tmeta skuid != \"tinyproxy\" accept\n")
	b.WriteString("\t\tct direction reply accept\n")
	b.WriteString("\t\tudp dport 53 accept\n")
	writeRules(&b, "deny", e.DenyCIDRs, "reject with icmpx type admin-prohibited")
	writeRules(&b, "allow", e.AllowCIDRs, "accept")
	writeRules(&b, "builtin", defaults, "reject with icmpx type admin-prohibited")
	b.WriteString("\t}\n}\n")
	return b.String()
}

// split returns the IPv4 ranges and the IPv6 ones of ps, IPv4-mapped ones
// as IPv4. The IPv6 list also holds each IPv4 range's image in the NAT64
// prefix egress.NAT64, which a NAT64 gateway would translate to it.
func split(ps []netip.Prefix) (v4, v6 []string) {
	for _, p := range ps {
		p = egress.Normalize(p)
		if !p.Addr().Is4() {
			v6 = append(v6, p.String())
			continue
		}
		v4 = append(v4, p.String())
		b := egress.NAT64.Addr().As16()
		a4 := p.Addr().As4()
		copy(b[12:], a4[:])
		v6 = append(v6, netip.PrefixFrom(netip.AddrFrom16(b), 96+p.Bits()).String())
	}
	return v4, v6
}

func writeSets(b *strings.Builder, name string, ps []netip.Prefix) {
	v4, v6 := split(ps)
	for _, s := range []struct {
		family, typ string
		elems       []string
	}{{"4", "ipv4_addr", v4}, {"6", "ipv6_addr", v6}} {
		if len(s.elems) == 0 {
			continue
		}
		// auto-merge: overlapping ranges (the NAT64 images, an allow
		// range inside another) are accepted rather than refused.
		fmt.Fprintf(b, "\tset %s%s {\n\t\ttype %s\n\t\tflags interval\n\t\tauto-merge\n\t\telements = { %s }\n\t}\n",
			name, s.family, s.typ, strings.Join(s.elems, ", "))
	}
}

func writeRules(b *strings.Builder, name string, ps []netip.Prefix, verdict string) {
	v4, v6 := split(ps)
	if len(v4) > 0 {
		fmt.Fprintf(b, "\t\tip daddr @%s4 %s\n", name, verdict)
	}
	if len(v6) > 0 {
		fmt.Fprintf(b, "\t\tip6 daddr @%s6 %s\n", name, verdict)
	}
}
