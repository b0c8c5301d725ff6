package setup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// serveFlags registers, on fs, the flags of the client port's limits and
// drain that the proxy and gateway subcommands share
// (forwardproxy.ServeOptions), and returns them.
func serveFlags(fs *flag.FlagSet) *forwardproxy.ServeOptions {
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

// checkServeFlags refuses limits that would serve no one, or for ever.
func checkServeFlags(o *forwardproxy.ServeOptions) error {
	if o.MaxConnections < 1 || o.MaxConnectionsPerSource < 1 || o.MaxUnauthenticated < 1 || o.MaxUnauthenticatedPerSource < 1 {
		return errors.New("--max-connections, --max-connections-per-source, --max-unauthenticated and --max-unauthenticated-per-source must be at least 1")
	}
	if o.Drain < 0 || o.ReadHeaderTimeout < 0 || o.FirstRequestTimeout < 0 {
		return errors.New("--drain, --read-header-timeout and --first-request-timeout must not be negative")
	}
	return nil
}

// serveWithAdmin serves h on ln with so, and admin on adminLn (when not
// nil) with AdminServeOptions, until ctx is done. The admin server outlives
// the client port's drain, so that /metrics shows the drain; either server
// failing stops the other. It returns once both stopped.
func serveWithAdmin(ctx context.Context, name string, ln net.Listener, h http.Handler, so forwardproxy.ServeOptions,
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

// parseSubcommand parses a subcommand's args on fs: -h prints usage and
// the flags on stderr; positional arguments are refused.
func parseSubcommand(fs *flag.FlagSet, args []string, usage string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fmt.Fprintln(os.Stderr, "Usage: egress-proxies-operator "+usage)
			fs.PrintDefaults()
		}
		return fmt.Errorf("%s: %w", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}
