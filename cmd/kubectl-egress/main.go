// Command kubectl-egress is the kubectl plugin of egress-proxies-operator:
// `kubectl egress status|url|rotate|retry|release` (docs/kubectl-plugin.md).
// Install it with
//
//	go install github.com/egress-proxies/egress-proxies-operator/cmd/kubectl-egress@latest
//
// or with krew (plugins/krew/egress.yaml).
package main

import (
	"context"
	"os"
	"os/signal"

	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/egress-proxies/egress-proxies-operator/internal/kubectlegress"
)

func main() {
	// Ctrl-C cancels the calls in flight.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := kubectlegress.Run(ctx, os.Args[1:], genericclioptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	os.Exit(code)
}
