// Command egress-proxy is the forward proxy of a VM member, run in the
// guest as a systemd service: the same engine (internal/proxycmd) as the
// operator's `proxy` subcommand in a kubernetes member's pod, with the same
// flags and defaults, in a static binary that links no API machinery.
// docs/guest-engine.md tells how it reaches a guest and how it runs there.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"

	"github.com/egress-proxies/egress-proxies-operator/internal/proxycmd"
)

func main() { os.Exit(run()) }

// run runs the engine until SIGTERM or SIGINT and returns the exit code.
func run() int {
	// journald stamps each line itself; the text handler keeps the
	// fields one key=value each, as the pods' structured logs have them.
	h := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := proxycmd.Run(ctx, os.Args[1:], proxycmd.Env{Command: "egress-proxy", Getenv: os.Getenv, Log: logr.FromSlogHandler(h)})
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
