package forwardproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// DefaultConnectPorts are the ports CONNECT may reach when an EgressPolicy
// names none: HTTPS only, so that a tunnel cannot carry SMTP, SSH or a
// database protocol.
var DefaultConnectPorts = []PortRange{{From: 443, To: 443}}

// DeniedRange is one range of the built-in deny list and why it is there.
type DeniedRange struct {
	// Prefix is the range.
	Prefix netip.Prefix
	// Reason is a short word for the kind of range (loopback, private,
	// link-local, ...). It is what a refused client is told; it names no
	// address.
	Reason string
}

// DefaultDeniedRanges are, in the order they are matched, the destinations refused unless the policy's
// AllowCIDRs reopen them: everything that is not the public Internet, where
// a proxy would let its clients reach the host, the cloud's metadata
// service, the cluster or the private network behind it.
var DefaultDeniedRanges = []DeniedRange{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "cgnat"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // 255.255.255.255 (broadcast) included
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "unspecified"}, // ::, and the obsolete IPv4-compatible form
	{netip.MustParsePrefix("100::/64"), "reserved"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "link-local"}, // deprecated site-local
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// nat64 is the well-known NAT64 prefix: its last 32 bits are an IPv4
// address that a NAT64 gateway reaches, so they are checked as IPv4.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// PortRange is an inclusive range of TCP ports.
type PortRange struct {
	From, To uint16
}

// String returns "443" or "8000-8999".
func (r PortRange) String() string {
	if r.From == r.To {
		return strconv.Itoa(int(r.From))
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// ParsePortRange parses "443" or "8000-8999".
func ParsePortRange(s string) (PortRange, error) {
	from, to, isRange := strings.Cut(strings.TrimSpace(s), "-")
	f, err := strconv.ParseUint(strings.TrimSpace(from), 10, 16)
	if err != nil || f == 0 {
		return PortRange{}, fmt.Errorf("%q is not a port (1-65535) or a range such as 8000-8999", s)
	}
	t := f
	if isRange {
		if t, err = strconv.ParseUint(strings.TrimSpace(to), 10, 16); err != nil || t < f {
			return PortRange{}, fmt.Errorf("%q is not a port (1-65535) or a range such as 8000-8999", s)
		}
	}
	return PortRange{From: uint16(f), To: uint16(t)}, nil
}

// EgressPolicy says which destinations a Proxy may connect to. The zero
// value is the safe default: the public Internet on any port for plain
// HTTP, port 443 for CONNECT, and none of DefaultDeniedRanges.
//
// An address is decided by the first rule that matches: DenyCIDRs refuse,
// then AllowCIDRs allow, then DefaultDeniedRanges refuse; anything else is
// allowed. So DenyCIDRs always win (an administrator's explicit "never"),
// and AllowCIDRs only reopen parts of the built-in list.
type EgressPolicy struct {
	// AllowCIDRs reopen ranges of DefaultDeniedRanges, for example a
	// private network the crawlers must reach.
	AllowCIDRs []netip.Prefix
	// DenyCIDRs are refused in addition to DefaultDeniedRanges, whatever
	// AllowCIDRs say: the cluster's Service and Pod ranges when they are
	// not private addresses, or anything else the administrator forbids.
	DenyCIDRs []netip.Prefix
	// ConnectPorts are the ports CONNECT may reach; empty means
	// DefaultConnectPorts.
	ConnectPorts []PortRange
}

// String describes the policy for a log line.
func (e EgressPolicy) String() string {
	ports := e.ConnectPorts
	if len(ports) == 0 {
		ports = DefaultConnectPorts
	}
	return fmt.Sprintf("allow %v, deny %v and the defaults, CONNECT ports %v", e.AllowCIDRs, e.DenyCIDRs, ports)
}

// validate checks every range and port range.
func (e EgressPolicy) validate() error {
	for _, p := range slices.Concat(e.AllowCIDRs, e.DenyCIDRs) {
		if !p.IsValid() {
			return fmt.Errorf("forwardproxy: invalid egress range %v", p)
		}
	}
	for _, r := range e.ConnectPorts {
		if r.From == 0 || r.To < r.From {
			return fmt.Errorf("forwardproxy: invalid CONNECT port range %d-%d", r.From, r.To)
		}
	}
	return nil
}

// egress is an EgressPolicy ready for checks.
type egress struct {
	allow, deny []netip.Prefix
	ports       []PortRange
}

func newEgress(e EgressPolicy) *egress {
	g := &egress{ports: e.ConnectPorts}
	if len(g.ports) == 0 {
		g.ports = DefaultConnectPorts
	}
	norm := func(ps []netip.Prefix) []netip.Prefix {
		out := make([]netip.Prefix, 0, len(ps))
		for _, p := range ps {
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
		}
		return out
	}
	g.allow, g.deny = norm(e.AllowCIDRs), norm(e.DenyCIDRs)
	return g
}

// DeniedError says that the egress policy refused a destination. Its
// message names the kind of range or the port, never the address: a
// client must not learn what an internal name resolves to.
type DeniedError struct {
	// Reason is a short word: a DeniedRange's Reason, "deny-list" for
	// DenyCIDRs, or "port" for a CONNECT port that is not allowed.
	Reason string
}

func (e *DeniedError) Error() string {
	if e.Reason == "port" {
		return "egress policy: CONNECT to this port is not allowed"
	}
	return "egress policy: the destination address is " + e.Reason
}

// checkAddr returns a *DeniedError when ip may not be reached.
func (g *egress) checkAddr(ip netip.Addr) error {
	ip = ip.Unmap().WithZone("")
	if reason := g.denied(ip); reason != "" {
		return &DeniedError{Reason: reason}
	}
	if nat64.Contains(ip) {
		b := ip.As16()
		if reason := g.denied(netip.AddrFrom4([4]byte(b[12:]))); reason != "" {
			return &DeniedError{Reason: reason}
		}
	}
	return nil
}

func (g *egress) denied(ip netip.Addr) string {
	for _, p := range g.deny {
		if p.Contains(ip) {
			return "deny-list"
		}
	}
	for _, p := range g.allow {
		if p.Contains(ip) {
			return ""
		}
	}
	for _, d := range DefaultDeniedRanges {
		if d.Prefix.Contains(ip) {
			return d.Reason
		}
	}
	return ""
}

// checkConnectPort returns an error when CONNECT may not reach port.
func (g *egress) checkConnectPort(port string) *DeniedError {
	n, err := strconv.ParseUint(port, 10, 16)
	if err == nil {
		for _, r := range g.ports {
			if n >= uint64(r.From) && n <= uint64(r.To) {
				return nil
			}
		}
	}
	return &DeniedError{Reason: "port"}
}

// control is the net.Dialer's ControlContext: it runs after the name was
// resolved, on the very address about to be connected, so that neither a
// name that resolves to an internal address nor a DNS answer that changes
// between a check and the dial (rebinding) gets through.
func (g *egress) control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &DeniedError{Reason: "unparsable"}
	}
	return g.checkAddr(ap.Addr())
}

// isDenied reports whether err comes from the egress policy.
func isDenied(err error) (*DeniedError, bool) {
	var d *DeniedError
	ok := errors.As(err, &d)
	return d, ok
}

// Resolver looks up the addresses of a host name; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// dialChecked connects to addr (host:port) through d, whose ControlContext
// checks each address. It resolves names itself with r, so that tests can
// make a name resolve anywhere, and tries the addresses in order.
func dialChecked(ctx context.Context, d *net.Dialer, r Resolver, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return d.DialContext(ctx, network, addr)
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, ip := range ips {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	// One refusal by the policy is what the client is told about.
	for _, e := range errs {
		if _, ok := isDenied(e); ok {
			return nil, e
		}
	}
	return nil, errors.Join(errs...)
}
