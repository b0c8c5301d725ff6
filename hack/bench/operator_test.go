package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// TestTimings: the provider's histogram is keyed by operation and outcome,
// the others by their one telling label; other metrics are left out.
func TestTimings(t *testing.T) {
	reg := prometheus.NewRegistry()
	prov := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "egress_proxies_provider_call_duration_seconds"},
		[]string{"provider", "type", "operation", "outcome"})
	rec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "controller_runtime_reconcile_time_seconds"}, []string{"controller"})
	other := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "something_else_seconds"})
	reg.MustRegister(prov, rec, other)
	prov.WithLabelValues("lab", "proxmox", "create", "InProgress").Observe(0.5)
	prov.WithLabelValues("lab", "proxmox", "create", "InProgress").Observe(1.5)
	prov.WithLabelValues("other", "proxmox", "create", "InProgress").Observe(1)
	prov.WithLabelValues("lab", "proxmox", "get", "ok").Observe(0.25)
	rec.WithLabelValues("proxy").Observe(2)
	other.Observe(9)
	got, err := timings(reg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]timing{
		"provider create InProgress": {Count: 3, Sum: 3}, // entries add up
		"provider get ok":            {Count: 1, Sum: 0.25},
		"reconcile proxy":            {Count: 1, Sum: 2},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("timings (-want +got):\n%s", diff)
	}
}
