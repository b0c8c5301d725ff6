package egress

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// DefaultConnectPorts are the ports CONNECT may reach when a Policy names
// none: HTTPS only, so that a tunnel cannot carry SMTP, SSH or a database
// protocol.
var DefaultConnectPorts = []PortRange{{From: 443, To: 443}}

// Reasons a destination is refused for that are not a DeniedRange's.
const (
	// ReasonDenyList is a destination in Policy.DenyCIDRs.
	ReasonDenyList = "deny-list"
	// ReasonPort is a CONNECT port outside Policy.ConnectPorts.
	ReasonPort = "port"
)

// DeniedRange is one range of the built-in deny list and why it is there.
type DeniedRange struct {
	// Prefix is the range.
	Prefix netip.Prefix
	// Reason is a short word for the kind of range (loopback, private,
	// link-local, ...). It is what a refused client is told; it names no
	// address.
	Reason string
}

// DefaultDeniedRanges are, in the order they are matched, the destinations
// refused unless a Policy's AllowCIDRs reopen them: everything that is not
// the public Internet, where a proxy would let its clients reach the host,
// the cloud's metadata service, the cluster or the private network behind
// it.
var DefaultDeniedRanges = []DeniedRange{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "cgnat"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"}, // TEST-NET-1
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"}, // TEST-NET-2
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},  // TEST-NET-3
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // 255.255.255.255 (broadcast) included
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "unspecified"},          // ::, and the obsolete IPv4-compatible form
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-nat64"}, // translated as the site's own NAT64 decides, to anywhere
	{netip.MustParsePrefix("100::/64"), "reserved"},
	{netip.MustParsePrefix("2001::/32"), "teredo"}, // denied whole: see Teredo
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "link-local"}, // deprecated site-local
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// IPv6 prefixes whose addresses lead to an IPv4 address: a gateway or a
// tunnel sends the packet on to it.
var (
	// NAT64 is the well-known NAT64 prefix: its last 32 bits are an IPv4
	// address that a NAT64 gateway reaches, so they are decided as IPv4.
	// The prefix itself is not denied: IPv6-only clusters reach the IPv4
	// Internet through it.
	NAT64 = netip.MustParsePrefix("64:ff9b::/96")
	// SixToFour is 6to4's prefix (RFC 3056): bits 16 to 48 are the IPv4
	// address of the site's 6to4 router, which a host with a 6to4 route
	// sends the packet to, wrapped in IPv4. The prefix is denied by
	// default (6to4 is deprecated, RFC 7526); where allowCIDRs reopen it,
	// the embedded address is still decided as IPv4.
	SixToFour = netip.MustParsePrefix("2002::/16")
	// Teredo is Teredo's prefix (RFC 4380): bits 32 to 64 are a server's
	// IPv4 address and the last 32 bits, inverted, the client's. It is
	// denied whole, and reopened whole by allowCIDRs: the client's address
	// is not a range of IPv6 addresses (the port lies between), so the
	// guests' nftables sets could not decide it the way the Go proxy
	// would. An administrator who reopens it reopens every IPv4 address
	// behind it.
	Teredo = netip.MustParsePrefix("2001::/32")
)

// embeddings are the prefixes whose embedded IPv4 address is decided as
// IPv4, and the byte it starts at.
var embeddings = []struct {
	prefix netip.Prefix
	at     int
}{{NAT64, 12}, {SixToFour, 2}}

// EmbeddedIPv4 returns the IPv4 address that ip leads to through NAT64 or
// 6to4, and false for any other address.
func EmbeddedIPv4(ip netip.Addr) (netip.Addr, bool) {
	for _, e := range embeddings {
		if e.prefix.Contains(ip) {
			b := ip.As16()
			return netip.AddrFrom4([4]byte(b[e.at : e.at+4])), true
		}
	}
	return netip.Addr{}, false
}

// IPv6Images returns the IPv6 ranges whose embedded IPv4 address
// (EmbeddedIPv4) is in the IPv4 range p: one per prefix that embeds
// IPv4, or none when p is not IPv4.
func IPv6Images(p netip.Prefix) []netip.Prefix {
	p = Normalize(p)
	if !p.Addr().Is4() {
		return nil
	}
	a4 := p.Addr().As4()
	out := make([]netip.Prefix, 0, len(embeddings))
	for _, e := range embeddings {
		b := e.prefix.Addr().As16()
		copy(b[e.at:], a4[:])
		out = append(out, netip.PrefixFrom(netip.AddrFrom16(b), e.at*8+p.Bits()))
	}
	return out
}

// Policy says which destinations a proxy may connect to; it is an entry's
// `egressPolicy` in the providers configuration, whose administrator owns
// it, not the author of a Proxy. The zero value is the safe default: the
// public Internet on any port for plain HTTP, DefaultConnectPorts for
// CONNECT, and none of DefaultDeniedRanges.
//
// An address is decided by the first rule that matches: DenyCIDRs refuse,
// then AllowCIDRs allow, then DefaultDeniedRanges refuse; anything else is
// allowed. So DenyCIDRs always win (an administrator's explicit "never"),
// and AllowCIDRs only reopen parts of the built-in list.
type Policy struct {
	// AllowCIDRs reopen parts of the built-in deny list, for example a
	// private network the crawlers must reach.
	AllowCIDRs []netip.Prefix `json:"allowCIDRs,omitempty"`
	// DenyCIDRs are refused as well, whatever AllowCIDRs say: the
	// cluster's Service and Pod ranges when they are public addresses, or
	// anything else the administrator forbids.
	DenyCIDRs []netip.Prefix `json:"denyCIDRs,omitempty"`
	// ConnectPorts are the ports CONNECT may reach, as numbers or
	// "from-to" ranges; empty means DefaultConnectPorts.
	ConnectPorts []PortRange `json:"connectPorts,omitempty"`
}

// IsZero reports whether p is the default policy.
func (p Policy) IsZero() bool {
	return len(p.AllowCIDRs) == 0 && len(p.DenyCIDRs) == 0 && len(p.ConnectPorts) == 0
}

// Ports returns the ports CONNECT may reach: ConnectPorts, or
// DefaultConnectPorts when there are none.
func (p Policy) Ports() []PortRange {
	if len(p.ConnectPorts) == 0 {
		return DefaultConnectPorts
	}
	return p.ConnectPorts
}

// String describes the policy for a log line.
func (p Policy) String() string {
	return fmt.Sprintf("allow %v, deny %v and the defaults, CONNECT ports %v", p.AllowCIDRs, p.DenyCIDRs, p.Ports())
}

// Validate returns an error when a range is not valid or a port range is
// not one of 1 to 65535 with From <= To.
func (p Policy) Validate() error {
	for _, pfx := range slices.Concat(p.AllowCIDRs, p.DenyCIDRs) {
		if !pfx.IsValid() {
			return fmt.Errorf("invalid egress range %v", pfx)
		}
	}
	for _, r := range p.ConnectPorts {
		if !r.Valid() {
			return fmt.Errorf("invalid CONNECT port range %s", r)
		}
	}
	return nil
}

// Normalize returns pfx masked, with an IPv4-mapped IPv6 range written as
// the IPv4 range it maps, the form in which ranges are matched.
func Normalize(pfx netip.Prefix) netip.Prefix {
	if pfx.Addr().Is4In6() && pfx.Bits() >= 96 {
		pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
	}
	return pfx.Masked()
}

// PortRange is an inclusive range of TCP ports; From == To for one port.
type PortRange struct {
	From, To uint16
}

// Valid reports whether r is a port or range within 1 to 65535, From <= To.
func (r PortRange) Valid() bool { return r.From != 0 && r.From <= r.To }

// Contains reports whether port is in r.
func (r PortRange) Contains(port uint16) bool { return port >= r.From && port <= r.To }

// String returns "443" or "8000-8999", the form ParsePortRange reads.
func (r PortRange) String() string {
	if r.From == r.To {
		return strconv.Itoa(int(r.From))
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// parsePortRange reads "443" or "8000-8999" without checking the bounds.
func parsePortRange(s string) (PortRange, error) {
	from, to, isRange := strings.Cut(strings.TrimSpace(s), "-")
	f, err := strconv.ParseUint(strings.TrimSpace(from), 10, 16)
	if err != nil {
		return PortRange{}, fmt.Errorf("%q is not a port (1-65535) or a range such as 8000-8999", s)
	}
	t := f
	if isRange {
		if t, err = strconv.ParseUint(strings.TrimSpace(to), 10, 16); err != nil {
			return PortRange{}, fmt.Errorf("%q is not a port (1-65535) or a range such as 8000-8999", s)
		}
	}
	return PortRange{From: uint16(f), To: uint16(t)}, nil
}

// ParsePortRange parses "443" or "8000-8999", within 1 to 65535.
func ParsePortRange(s string) (PortRange, error) {
	r, err := parsePortRange(s)
	if err == nil && !r.Valid() {
		err = fmt.Errorf("%q is not a port (1-65535) or a range such as 8000-8999", s)
	}
	return r, err
}

// UnmarshalJSON reads a port number (443) or a string ("443",
// "8000-8999"). It leaves the bounds to Validate, so that the providers
// configuration can say which entry is wrong.
func (r *PortRange) UnmarshalJSON(b []byte) error {
	var s string
	if len(b) > 0 && b[0] != '"' {
		s = string(b)
	} else if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := parsePortRange(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// MarshalJSON writes the form UnmarshalJSON reads.
func (r PortRange) MarshalJSON() ([]byte, error) { return json.Marshal(r.String()) }

// Flag names of the engine for a Policy, which the kubernetes provider
// writes into its pods' arguments and cloud-init into a guest's unit
// (Policy.Args, read back by BindFlags).
const (
	FlagAllowCIDRs   = "egress-allow-cidrs"
	FlagDenyCIDRs    = "egress-deny-cidrs"
	FlagConnectPorts = "connect-ports"
)

// Flags are the flag values of a Policy, bound to a flag.FlagSet by
// BindFlags.
type Flags struct {
	allow, deny, ports string
}

// BindFlags defines the Policy's flags on fs.
func BindFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.allow, FlagAllowCIDRs, "", "Comma-separated CIDRs that reopen parts of the built-in deny list of destinations (loopback, link-local, private, CGNAT, multicast, reserved, documentation, 6to4, Teredo, local-use NAT64).")
	fs.StringVar(&f.deny, FlagDenyCIDRs, "", "Comma-separated CIDRs refused as destinations whatever --"+FlagAllowCIDRs+" say.")
	fs.StringVar(&f.ports, FlagConnectPorts, FormatPorts(DefaultConnectPorts), "Comma-separated ports or from-to ranges that CONNECT may reach.")
	return f
}

// Policy returns the policy the flags say.
func (f *Flags) Policy() (Policy, error) {
	var p Policy
	var err error
	if p.AllowCIDRs, err = ParsePrefixes(f.allow); err != nil {
		return p, fmt.Errorf("--%s: %w", FlagAllowCIDRs, err)
	}
	if p.DenyCIDRs, err = ParsePrefixes(f.deny); err != nil {
		return p, fmt.Errorf("--%s: %w", FlagDenyCIDRs, err)
	}
	for s := range strings.SplitSeq(f.ports, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		r, err := ParsePortRange(s)
		if err != nil {
			return p, fmt.Errorf("--%s: %w", FlagConnectPorts, err)
		}
		p.ConnectPorts = append(p.ConnectPorts, r)
	}
	if len(p.ConnectPorts) == 0 {
		return p, fmt.Errorf("--%s: at least one port (the default is %s)", FlagConnectPorts, FormatPorts(DefaultConnectPorts))
	}
	return p, nil
}

// Args returns the flags (BindFlags's) that say p, for the engine's command
// line: a kubernetes member's pod arguments and a VM guest's unit. Parts
// left empty are not written, so that the engine's defaults (the safe
// policy) apply.
func (p Policy) Args() []string {
	var args []string
	if len(p.AllowCIDRs) > 0 {
		args = append(args, "--"+FlagAllowCIDRs+"="+FormatPrefixes(p.AllowCIDRs))
	}
	if len(p.DenyCIDRs) > 0 {
		args = append(args, "--"+FlagDenyCIDRs+"="+FormatPrefixes(p.DenyCIDRs))
	}
	if len(p.ConnectPorts) > 0 {
		args = append(args, "--"+FlagConnectPorts+"="+FormatPorts(p.ConnectPorts))
	}
	return args
}

// ParsePrefixes parses a comma-separated list of CIDRs; empty items are
// skipped.
func ParsePrefixes(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for s := range strings.SplitSeq(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR such as 203.0.113.0/24: %w", s, err)
		}
		out = append(out, pfx)
	}
	return out, nil
}

// FormatPrefixes writes ranges, masked, as ParsePrefixes reads them.
func FormatPrefixes(ps []netip.Prefix) string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Masked().String())
	}
	return strings.Join(out, ",")
}

// FormatPorts writes port ranges as the --connect-ports flag reads them.
func FormatPorts(rs []PortRange) string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.String())
	}
	return strings.Join(out, ",")
}
