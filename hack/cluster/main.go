// Command cluster starts the test cluster of internal/testing/kubelab by
// hand (`make cluster`), with the operator's image imported, prints its
// kubeconfig, and tears everything down on Ctrl-C (or SIGTERM).
//
//	sudo make cluster
//	export KUBECONFIG=<the path it prints>
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/kubelab"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

// run is main with its deferred cleanup (the signal handler's stop), which
// a log.Fatal in main itself would skip.
func run() error {
	images := flag.String("images", "", "comma-separated docker-format tarballs to import (make image writes bin/egress-proxies-operator-image.tar)")
	flag.Parse()
	if why := kubelab.Supported(); why != "" {
		return errors.New(why)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var tarballs []string
	if *images != "" {
		tarballs = strings.Split(*images, ",")
	}
	c, err := kubelab.New(ctx, kubelab.Options{Images: tarballs, Logf: log.Printf})
	if err != nil {
		if c != nil {
			// Not ctx: Ctrl-C may have ended it, the diagnostics are wanted still.
			fmt.Fprintln(os.Stderr, c.Diagnostics(context.Background()))
			_ = c.Stop()
		}
		return err
	}
	fmt.Printf("\nThe cluster is up. In another shell:\n\n  export KUBECONFIG=%s\n  %s/kubectl get nodes\n\nCtrl-C tears it down.\n", c.Kubeconfig, c.Bin)
	<-ctx.Done()
	return c.Stop()
}
