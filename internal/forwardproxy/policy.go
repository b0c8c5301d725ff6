package forwardproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// egressPolicy is a Config's egress.Policy ready for checks.
type egressPolicy struct {
	*egress.Decider
}

func newEgress(e egress.Policy) *egressPolicy {
	return &egressPolicy{egress.NewDecider(e)}
}

// DeniedError says that the egress policy refused a destination. Its
// message names the kind of range or the port, never the address: a
// client must not learn what an internal name resolves to.
type DeniedError struct {
	// Reason is a short word: an egress.DeniedRange's Reason,
	// egress.ReasonDenyList for DenyCIDRs, or egress.ReasonPort for a
	// CONNECT port that is not allowed.
	Reason string
}

func (e *DeniedError) Error() string {
	if e.Reason == egress.ReasonPort {
		return "egress policy: CONNECT to this port is not allowed"
	}
	return "egress policy: the destination address is " + e.Reason
}

// checkAddr returns a *DeniedError when ip may not be reached.
func (g *egressPolicy) checkAddr(ip netip.Addr) error {
	if reason := g.Addr(ip); reason != "" {
		return &DeniedError{Reason: reason}
	}
	return nil
}

// checkConnectPort returns an error when CONNECT may not reach port.
func (g *egressPolicy) checkConnectPort(port string) *DeniedError {
	if n, err := strconv.ParseUint(port, 10, 16); err == nil && g.Port(uint16(n)) {
		return nil
	}
	return &DeniedError{Reason: egress.ReasonPort}
}

// control is the net.Dialer's ControlContext: it runs after the name was
// resolved, on the very address about to be connected, so that neither a
// name that resolves to an internal address nor a DNS answer that changes
// between a check and the dial (rebinding) gets through.
func (g *egressPolicy) control(_ context.Context, _, address string, _ syscall.RawConn) error {
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
		return nil, fmt.Errorf("lookup %s: no addresses", host)
	}
	// One refusal by the policy is what the client is told about.
	for _, e := range errs {
		if _, ok := isDenied(e); ok {
			return nil, e
		}
	}
	return nil, errors.Join(errs...)
}
