package proxycmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// ServeFlags registers, on fs, the flags of the client port's limits and
// drain that the proxy (in pods and guests) and the gateway share
// (forwardproxy.ServeOptions), and returns them.
func ServeFlags(fs *flag.FlagSet) *forwardproxy.ServeOptions {
	o := &forwardproxy.ServeOptions{}
	fs.DurationVar(&o.Drain, "drain", 25*time.Second, "On shutdown, how long requests and tunnels in flight may go on.")
	fs.IntVar(&o.MaxConnections, "max-connections", forwardproxy.DefaultMaxConnections, "Client connections open at once; more get 503 and are closed.")
	fs.IntVar(&o.MaxConnectionsPerSource, "max-connections-per-source", forwardproxy.DefaultMaxConnectionsPerSource, "Client connections one client address holds at once; more get 503 and are closed.")
	fs.IntVar(&o.MaxUnauthenticated, "max-unauthenticated", forwardproxy.DefaultMaxUnauthenticated, "Client connections whose first request is not admitted yet; past it the oldest of them is closed.")
	fs.IntVar(&o.MaxUnauthenticatedPerSource, "max-unauthenticated-per-source", forwardproxy.DefaultMaxUnauthenticatedPerSource, "Such connections of one client address; more get 503 and are closed.")
	fs.DurationVar(&o.FirstRequestTimeout, "first-request-timeout", forwardproxy.DefaultFirstRequestTimeout, "A client connection whose first request is not admitted (read, credentials checked) that long after it opened is closed.")
	fs.DurationVar(&o.ReadHeaderTimeout, "read-header-timeout", forwardproxy.DefaultReadHeaderTimeout, "Time a client has to send a request's headers.")
	return o
}

// CheckServeFlags refuses limits that would serve no one, or for ever.
func CheckServeFlags(o *forwardproxy.ServeOptions) error {
	if o.MaxConnections < 1 || o.MaxConnectionsPerSource < 1 || o.MaxUnauthenticated < 1 || o.MaxUnauthenticatedPerSource < 1 {
		return errors.New("--max-connections, --max-connections-per-source, --max-unauthenticated and --max-unauthenticated-per-source must be at least 1")
	}
	if o.Drain < 0 || o.ReadHeaderTimeout < 0 || o.FirstRequestTimeout < 0 {
		return errors.New("--drain, --read-header-timeout and --first-request-timeout must not be negative")
	}
	return nil
}

// ServeWithAdmin serves h on ln with so, and admin on adminLn (when not
// nil) with AdminServeOptions, until ctx is done. The admin server outlives
// the client port's drain, so that /metrics shows the drain; either server
// failing stops the other. It returns once both stopped.
func ServeWithAdmin(ctx context.Context, name string, ln net.Listener, h http.Handler, so forwardproxy.ServeOptions,
	adminLn net.Listener, admin http.Handler) error {
	clientCtx, stopClient := context.WithCancel(ctx)
	defer stopClient()
	adminCtx, stopAdmin := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAdmin()
	results := make(chan error, 2)
	go func() {
		err := forwardproxy.ServeWith(clientCtx, ln, h, so)
		if err != nil {
			err = fmt.Errorf("%s: serving --listen %s: %w", name, ln.Addr(), err)
		}
		stopAdmin()
		results <- err
	}()
	running := 1
	if adminLn != nil {
		running++
		go func() {
			err := forwardproxy.ServeWith(adminCtx, adminLn, admin, AdminServeOptions)
			if err != nil {
				err = fmt.Errorf("%s: serving --admin-listen %s: %w", name, adminLn.Addr(), err)
			}
			stopClient()
			results <- err
		}()
	}
	var errs []error
	for range running {
		errs = append(errs, <-results)
	}
	return errors.Join(errs...)
}

// ParseSubcommand parses a command's args on fs: -h prints usage (the
// whole command line, as "egress-proxy [flags]") and the flags on stderr;
// positional arguments are refused.
func ParseSubcommand(fs *flag.FlagSet, args []string, usage string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fmt.Fprintln(os.Stderr, "Usage: "+usage)
			fs.PrintDefaults()
		}
		return fmt.Errorf("%s: %w", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}

// AdminDrain is the shutdown window of an admin server (/healthz,
// /readyz, /metrics), whose requests are short.
const AdminDrain = 5 * time.Second

// AdminServeOptions are the limits of a proxy or gateway pod's admin
// server, apart from its client port's so that no client can starve the
// kubelet's probes: its requests are short, so each connection serves one
// request and closes, a slow client has a few seconds, and the few slots
// it has go first to whoever sends a request (the oldest silent
// connection makes room for a new one; docs/security.md).
var AdminServeOptions = forwardproxy.ServeOptions{
	Drain:                       AdminDrain,
	ReadHeaderTimeout:           2 * time.Second,
	WriteTimeout:                10 * time.Second,
	DisableKeepAlives:           true,
	MaxConnections:              64,
	MaxConnectionsPerSource:     16,
	MaxUnauthenticated:          32,
	MaxUnauthenticatedPerSource: 8,
	FirstRequestTimeout:         2 * time.Second,
}

// AdminHandler serves /healthz and /metrics (reg's) for a proxy or
// gateway pod's admin server.
func AdminHandler(reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}
