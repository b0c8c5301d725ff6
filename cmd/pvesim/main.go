// Command pvesim runs the Proxmox VE API simulator (internal/testing/pvesim) on a
// loopback address: a cluster from a YAML file, HTTPS with a generated CA
// (or plain HTTP), and an admin endpoint for faults and counters.
//
//	go run ./cmd/pvesim --config cmd/pvesim/example.yaml --ca-out /tmp/pvesim-ca.pem --token-out /tmp/pvesim-token
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim/guests"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		_, _ = fmt.Fprintln(os.Stderr, "pvesim:", err)
		stop()
		os.Exit(1) //nolint:gocritic // exitAfterDefer: stop already ran.
	}
}

// options are the command-line flags.
type options struct {
	config, listen, admin, caOut, tokenOut, addrOut string
	guestNetwork                                    string
	guestAllow                                      []netip.Prefix
	speed                                           float64
	tls, guests                                     bool
}

// parseFlags reads the command line.
func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("pvesim", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.config, "config", "", "cluster description (YAML); required")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8006", "API listen address: loopback, or 198.51.100.0/24 or 203.0.113.0/24 inside a test's own network namespace")
	fs.StringVar(&o.admin, "admin", "127.0.0.1:8007", "admin listen address (loopback only; empty disables)")
	fs.Float64Var(&o.speed, "speed", 0, "speed factor overriding the config's (100 = 100x faster than a real host)")
	fs.BoolVar(&o.tls, "tls", true, "serve HTTPS with a generated CA (false: plain HTTP)")
	fs.BoolVar(&o.guests, "guests", true, "run, in each running VM with a NoCloud seed, the forward proxy its user-data configures, on the VM's loopback address")
	fs.StringVar(&o.guestNetwork, "guest-network", "", "IPv4 prefix the guests take their addresses from instead of loopback (overrides the config's guestNetwork)")
	fs.Func("guest-allow", "a destination prefix the guests' proxies may reach (repeatable; default 127.0.0.0/8)", func(v string) error {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return fmt.Errorf("not a prefix: %w", err)
		}
		o.guestAllow = append(o.guestAllow, p)
		return nil
	})
	fs.StringVar(&o.caOut, "ca-out", "", "write the CA certificate (PEM) to this file")
	fs.StringVar(&o.tokenOut, "token-out", "", "write the first token as <user>@<realm>!<tokenid>=<secret> to this file")
	fs.StringVar(&o.addrOut, "addr-out", "", `once serving, write {"api": URL, "admin": URL} (JSON) to this file; with --listen 127.0.0.1:0 a parent process learns the ports from it`)
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("parse flags: %w", err)
	}
	if o.config == "" {
		return o, errors.New("--config is required")
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return o, nil
}

// run starts the simulator and serves until ctx ends.
func run(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	cfg, err := pvesim.LoadConfig(o.config)
	if err != nil {
		return fmt.Errorf("load config: %w", err)
	}
	if o.speed > 0 {
		cfg.Speed = o.speed
	}
	if o.guestNetwork != "" {
		cfg.GuestNetwork = o.guestNetwork
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("--guest-network: %w", err)
		}
	}
	var simOpts []pvesim.Option
	if o.guests {
		runner := &guests.Runner{Allow: o.guestAllow}
		defer runner.Close()
		simOpts = append(simOpts, pvesim.WithGuestRunner(runner))
	}
	sim, err := pvesim.New(cfg, simOpts...)
	if err != nil {
		return fmt.Errorf("build simulator: %w", err)
	}
	defer func() { _ = sim.Close() }()
	url, err := sim.Serve(ctx, pvesim.ServeOptions{Addr: o.listen, TLS: o.tls})
	if err != nil {
		return fmt.Errorf("serve API: %w", err)
	}
	_, _ = fmt.Fprintf(out, "pvesim: API at %s/api2/json (%d nodes, speed %g)\n", url, len(cfg.Nodes), max(cfg.Speed, 1))
	if o.tls && o.caOut != "" {
		if err := os.WriteFile(o.caOut, sim.CACertPEM(), 0o600); err != nil {
			return fmt.Errorf("write CA file: %w", err)
		}
		_, _ = fmt.Fprintf(out, "pvesim: CA certificate written to %s\n", o.caOut)
	}
	if o.tokenOut != "" {
		if len(cfg.Tokens) == 0 {
			return errors.New("--token-out: the config has no token")
		}
		tk := cfg.Tokens[0]
		if err := os.WriteFile(o.tokenOut, []byte(tk.ID+"="+tk.Secret+"\n"), 0o600); err != nil {
			return fmt.Errorf("write token file: %w", err)
		}
		_, _ = fmt.Fprintf(out, "pvesim: token %s written to %s\n", tk.ID, o.tokenOut)
	}
	var adminURL string
	if o.admin != "" {
		if adminURL, err = sim.ServeAdmin(ctx, o.admin); err != nil {
			return fmt.Errorf("serve admin: %w", err)
		}
		_, _ = fmt.Fprintf(out, "pvesim: admin at %s/admin/\n", adminURL)
	}
	if o.addrOut != "" {
		if err := writeAddresses(o.addrOut, Addresses{API: url, Admin: adminURL}); err != nil {
			return err
		}
	}
	<-ctx.Done()
	_, _ = fmt.Fprintln(out, "pvesim: shutting down")
	return nil
}

// Addresses is what --addr-out writes: the base URLs the simulator serves.
type Addresses struct {
	// API is the API's base URL, without /api2/json.
	API string `json:"api"`
	// Admin is the admin API's base URL; empty when --admin is empty.
	Admin string `json:"admin,omitempty"`
}

// writeAddresses writes a to path through a temporary file and a rename, so
// that a reader polling for the file never sees it half written.
func writeAddresses(path string, a Addresses) error {
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("encode addresses: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write addresses: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write addresses: %w", err)
	}
	return nil
}
