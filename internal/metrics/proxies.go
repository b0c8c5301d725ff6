package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// proxiesDesc describes the proxies-by-phase gauge.
var proxiesDesc = prometheus.NewDesc(
	namespace+"_proxies",
	"Proxy objects, by provider entry and phase.",
	[]string{"provider", "phase"}, nil,
)

// egressAddressesDesc describes the distinct egress addresses of each
// entry's proxies.
var egressAddressesDesc = prometheus.NewDesc(
	namespace+"_egress_addresses",
	"Distinct egress addresses (status.egressIP, as the probes' check URL saw them) among the Proxies of each provider entry.",
	[]string{"provider"}, nil,
)

// ProxiesCollector reports the number of Proxy objects by provider and phase,
// counted from the informer cache at scrape time. Counting at scrape time,
// rather than incrementing and decrementing in the reconciler, cannot drift
// when objects are deleted while the operator is down.
type ProxiesCollector struct {
	// Reader lists Proxies; the manager's cached client.
	Reader client.Reader
	// Timeout bounds one listing.
	Timeout time.Duration
}

// Describe implements prometheus.Collector.
func (c *ProxiesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- proxiesDesc
	ch <- egressAddressesDesc
}

// Collect implements prometheus.Collector.
func (c *ProxiesCollector) Collect(ch chan<- prometheus.Metric) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var list crawlv1alpha1.ProxyList
	if err := c.Reader.List(ctx, &list); err != nil {
		ch <- prometheus.NewInvalidMetric(proxiesDesc, err)
		ch <- prometheus.NewInvalidMetric(egressAddressesDesc, err)
		return
	}
	type key struct{ provider, phase string }
	counts := map[key]int{}
	egress := map[string]map[string]bool{}
	for i := range list.Items {
		p := &list.Items[i]
		phase := string(p.Status.Phase)
		if phase == "" {
			phase = string(crawlv1alpha1.ProxyPhasePending)
		}
		counts[key{p.Spec.Provider, phase}]++
		if p.Status.EgressIP != "" {
			if egress[p.Spec.Provider] == nil {
				egress[p.Spec.Provider] = map[string]bool{}
			}
			egress[p.Spec.Provider][p.Status.EgressIP] = true
		}
	}
	for provider, addrs := range egress {
		ch <- prometheus.MustNewConstMetric(egressAddressesDesc, prometheus.GaugeValue, float64(len(addrs)), provider)
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(proxiesDesc, prometheus.GaugeValue, float64(n), k.provider, k.phase)
	}
}
