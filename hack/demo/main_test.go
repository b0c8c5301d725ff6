package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// The demo runs in the test suite, non-interactively, so that it cannot rot:
// three Proxies go Ready on the simulated cluster and a request goes through
// one of them with its credentials; a pool scales and rotates; the pool
// gateway spreads requests over the members, keeps a session on one, and
// fails none while a member goes (gatewayDemo checks the counts and
// fails the demo otherwise).
func TestDemoRunsToTheEnd(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if testing.Short() {
			t.Skip("the demo needs KUBEBUILDER_ASSETS (run make test)")
		}
		t.Fatal("KUBEBUILDER_ASSETS is not set: run make test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, options{speed: 100, out: &out}); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{"3 of 3 Ready", `200 OK "hello from the origin`, "egress-3 is gone",
		"Desired 4 Ready 4 Serving 4", "rotation done; Serving never below 4", "the first line of proxies.txt",
		"pool gateway for ProxyPool crawl at http://crawler:xxxxx@127.0.0.1:", "20 requests through the gateway, round-robin over the members: 4 egress addresses",
		"10 requests as user crawler-session-demo1: ", " ×10\n", " requests, 0 failed; session demo1 stayed on ",
		"applied ProxyGateway ", "/front: Ready=False ApplyFailed: The operator has no image to run the gateway's pods",
		"done; everything is cleaned up"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
