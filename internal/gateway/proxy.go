package gateway

import (
	"errors"
	"net/netip"
	"time"

	"github.com/go-logr/logr"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// ProxyOptions are the forward proxy's settings in front of a Gateway.
type ProxyOptions struct {
	// AllowedSourceRanges are the clients served; empty: any client with
	// the gateway's credentials.
	AllowedSourceRanges []netip.Prefix
	// AllowOpen must be set to run without credentials and without
	// source ranges.
	AllowOpen bool
	// MaxConcurrent and IdleTimeout: see forwardproxy.Config.
	MaxConcurrent int
	IdleTimeout   time.Duration
	// Metrics and Log are the forward proxy's.
	Metrics *forwardproxy.Metrics
	Log     logr.Logger
	// AccessLog, when set, gets one line per request and tunnel at its
	// V(0) (forwardproxy.Config.AccessLog); otherwise they go to Log at
	// V(1).
	AccessLog logr.Logger
}

// NewProxy returns the forward proxy that serves g: everything in front of
// the members (source ranges, parser, caps, timeouts) is the product's
// forward proxy. It refuses an open gateway unless o.AllowOpen says so.
func NewProxy(g *Gateway, o ProxyOptions) (*forwardproxy.Proxy, error) {
	if g.auth == nil && len(o.AllowedSourceRanges) == 0 && !o.AllowOpen {
		return nil, errors.New("gateway: refusing to run an open gateway: set credentials or allowed source ranges")
	}
	return forwardproxy.New(forwardproxy.Config{
		Upstream: g, AllowedSourceRanges: o.AllowedSourceRanges, AllowOpen: o.AllowOpen,
		MaxConcurrent: o.MaxConcurrent, IdleTimeout: o.IdleTimeout, Metrics: o.Metrics, Log: o.Log, AccessLog: o.AccessLog, ProxyStatus: g.name,
		// The members apply their own egress policy, ports included; the
		// gateway reaches no destination itself.
		Egress: egress.Policy{ConnectPorts: []egress.PortRange{{From: 1, To: 65535}}},
	})
}
