package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

var (
	// poolDesiredDesc describes the desired members of each pool, which the
	// alert on pools below their Serving target compares with
	// pool_serving_members.
	poolDesiredDesc = prometheus.NewDesc(
		namespace+"_pool_desired_members",
		"Members each ProxyPool asks for (spec.replicas), by namespace and pool.",
		[]string{"namespace", "pool"}, nil,
	)
	// providerHealthyDesc describes the Healthy condition of each
	// ProviderHealth object.
	providerHealthyDesc = prometheus.NewDesc(
		namespace+"_provider_healthy",
		"1 when the provider entry can serve (ProviderHealth Healthy=True), 0 when it cannot (False); "+
			"absent while unknown (a type without a health check, or before the first check). By provider entry and type.",
		[]string{"provider", "type"}, nil,
	)
)

// ObjectsCollector reports, at scrape time and from the informer cache,
// what the pools and ProviderHealth objects say: like ProxiesCollector, it
// cannot drift from the objects.
type ObjectsCollector struct {
	// Reader lists ProxyPools and ProviderHealths; the manager's cached
	// client.
	Reader client.Reader
	// Timeout bounds each listing.
	Timeout time.Duration
}

// Describe implements prometheus.Collector.
func (c *ObjectsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolDesiredDesc
	ch <- providerHealthyDesc
}

// Collect implements prometheus.Collector.
func (c *ObjectsCollector) Collect(ch chan<- prometheus.Metric) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	var pools crawlv1alpha1.ProxyPoolList
	if err := c.Reader.List(ctx, &pools); err != nil {
		ch <- prometheus.NewInvalidMetric(poolDesiredDesc, err)
	} else {
		for i := range pools.Items {
			p := &pools.Items[i]
			desired := int32(1) // the CRD's default
			if p.Spec.Replicas != nil {
				desired = *p.Spec.Replicas
			}
			ch <- prometheus.MustNewConstMetric(poolDesiredDesc, prometheus.GaugeValue, float64(desired), p.Namespace, p.Name)
		}
	}

	var health crawlv1alpha1.ProviderHealthList
	if err := c.Reader.List(ctx, &health); err != nil {
		ch <- prometheus.NewInvalidMetric(providerHealthyDesc, err)
		return
	}
	for i := range health.Items {
		h := &health.Items[i]
		cond := apimeta.FindStatusCondition(h.Status.Conditions, crawlv1alpha1.ConditionHealthy)
		if cond == nil || cond.Status == metav1.ConditionUnknown {
			continue
		}
		v := 0.0
		if cond.Status == metav1.ConditionTrue {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(providerHealthyDesc, prometheus.GaugeValue, v, h.Name, h.Status.Type)
	}
}
