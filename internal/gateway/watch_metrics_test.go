package gateway_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway/gatewaywatch"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// membersGauge returns egress_proxies_gateway_members by pool, as a
// scrape would see it.
func membersGauge(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "egress_proxies_gateway_members" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// TestWatchGaugesAPoolWithoutAList: a pool whose list never comes (it
// does not exist) has a members gauge of 0 from the start, so that the
// alert on a gateway with no members (EgressProxiesGatewayNoMembers) sees
// it; a pool with a list has its count.
func TestWatchGaugesAPoolWithoutAList(t *testing.T) {
	cs := fake.NewClientset()
	reg := prometheus.NewRegistry()
	m, err := gateway.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	set := gateway.NewSet()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		gatewaywatch.Watch(ctx, cs, "crawlers", []string{"a", "no-such-pool"}, set, m, logr.Discard())
	}()
	t.Cleanup(func() { cancel(); <-done })
	publish(t, cs, "a", gateway.Entry{Name: "a-1", URL: "http://u:p@127.0.0.1:3128"})
	poll.Until(t, wait, func() (bool, string) {
		got := membersGauge(t, reg)
		n, seen := got["no-such-pool"]
		return got["a"] == 1 && seen && n == 0, fmt.Sprintf("members gauge %v, want a=1 and no-such-pool=0", got)
	})
}
