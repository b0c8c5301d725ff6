package main

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

// TestProxyCountsFollowTheAPIServer checks the bench's informer against a
// real API server: what it counts as Ready is what convergence is timed
// by, so a Proxy of another namespace, one not yet Ready and one being
// deleted must not count, and a change must show without a new list.
func TestProxyCountsFollowTheAPIServer(t *testing.T) {
	needEnvtest(t)
	e, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Environment.Stop() })
	c, cfg, scheme := e.Client, e.Config, e.Scheme
	ctx, cancel := context.WithTimeout(context.Background(), poll.Paced(2*time.Minute))
	defer cancel()
	for _, ns := range []string{"counted", "other"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	readyProxy := func(ns, name string, finalizer bool) *crawlv1alpha1.Proxy {
		t.Helper()
		p := newProxy(ns, name, "lab", "zone-a")
		if finalizer {
			p.Finalizers = []string{"bench.test/hold"}
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = crawlv1alpha1.ProxyPhaseReady
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	readyProxy("other", "elsewhere", false)
	readyProxy("counted", "ready", false)
	leaving := readyProxy("counted", "leaving", true)
	if err := c.Create(ctx, newProxy("counted", "booting", "lab", "zone-a")); err != nil {
		t.Fatal(err)
	}

	pc, err := watchProxies(ctx, cfg, scheme, "counted")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pc.close(); err != nil {
			t.Errorf("stopping the informer: %v", err)
		}
	})
	type counts struct{ Ready, Total int }
	// The informer follows a watch: wait for it to see what was written.
	waitCounts := func(want counts) {
		t.Helper()
		var got counts
		err := waitFor(ctx, poll.Paced(time.Minute), func() (bool, string, error) {
			var err error
			got.Ready, got.Total, err = pc.count(ctx)
			return got == want, "", err
		})
		if err != nil {
			t.Fatalf("counts (-want +got):\n%s", cmp.Diff(want, got))
		}
	}
	waitCounts(counts{Ready: 2, Total: 3})

	if err := c.Delete(ctx, leaving); err != nil {
		t.Fatal(err)
	}
	waitCounts(counts{Ready: 1, Total: 3}) // held by its finalizer, not Ready any more
}
