package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "egress_proxies"

// Outcome labels of provider calls that did not fail.
const (
	// OutcomeOK labels a provider call that succeeded.
	OutcomeOK = "ok"
)

// Metrics holds the operator's own collectors. Build it once with New and
// pass it to whatever records.
type Metrics struct {
	// ProviderCallDuration observes every provider call, by entry, type,
	// operation and outcome (ok or the error class).
	ProviderCallDuration *prometheus.HistogramVec
	// ProviderCallErrors counts failed provider calls by entry, type,
	// operation and error class.
	ProviderCallErrors *prometheus.CounterVec
	// CreateToReady observes the time from the provider accepting a create to
	// the Proxy becoming Ready, by entry.
	CreateToReady *prometheus.HistogramVec
	// Replacements counts instances replaced after they stopped or vanished,
	// by entry and reason.
	Replacements *prometheus.CounterVec
	// GCDeletions counts orphaned instances deleted by garbage collection, by
	// entry.
	GCDeletions *prometheus.CounterVec
	// GCLastSuccess is when garbage collection last completed a pass over
	// an entry (its listing and every deletion it tried succeeded), in
	// seconds since the epoch, by entry.
	GCLastSuccess *prometheus.GaugeVec
	// OwnershipUnverified is how many instances of an entry carry this
	// installation's mark with a signature the current ownership key does
	// not verify, at the latest listing, by entry: above zero with no
	// instance verifying, the key was lost or replaced and the entry
	// creates nothing (docs/security.md).
	OwnershipUnverified *prometheus.GaugeVec
	// ProbeDuration observes passed probes through proxies, by entry.
	ProbeDuration *prometheus.HistogramVec
	// ProbeFailures counts failed probes through proxies, by entry.
	ProbeFailures *prometheus.CounterVec
	// PoolMembers is the number of members of each pool, by namespace and
	// pool.
	PoolMembers *prometheus.GaugeVec
	// PoolServing is the number of Serving members of each pool.
	PoolServing *prometheus.GaugeVec
	// PoolRotations counts members replaced by rotation, by namespace, pool
	// and reason (maxAge, requested, template, probe).
	PoolRotations *prometheus.CounterVec
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		ProviderCallDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "provider_call_duration_seconds",
			Help:      "Duration of provider calls, by provider entry, type, operation and outcome (ok or the error class).",
			Buckets:   []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"provider", "type", "operation", "outcome"}),
		ProviderCallErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "provider_call_errors_total",
			Help:      "Failed provider calls, by provider entry, type, operation and error class (Transient, Permanent, NotFound).",
		}, []string{"provider", "type", "operation", "class"}),
		CreateToReady: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "create_to_ready_seconds",
			Help:      "Time from the provider accepting a create to the Proxy becoming Ready, by provider entry.",
			Buckets:   []float64{5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200},
		}, []string{"provider"}),
		Replacements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "replacements_total",
			Help:      "Instances replaced because they stopped or vanished, by provider entry and reason.",
		}, []string{"provider", "reason"}),
		GCDeletions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "gc_deletions_total",
			Help:      "Orphaned instances (whose Proxy no longer exists) deleted by garbage collection, by provider entry.",
		}, []string{"provider"}),
		GCLastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "gc_last_success_timestamp_seconds",
			Help:      "When garbage collection last completed a pass over the provider entry without an error, in seconds since the epoch.",
		}, []string{"provider"}),
		OwnershipUnverified: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "ownership_unverified_instances",
			Help:      "Instances of the provider entry whose mark names this installation but whose signature the current ownership key does not verify, at the latest listing.",
		}, []string{"provider"}),
		ProbeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "probe_duration_seconds",
			Help:      "Duration of passed probes through proxies, by provider entry.",
			Buckets:   []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		}, []string{"provider"}),
		ProbeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "probe_failures_total",
			Help:      "Failed probes through proxies, by provider entry.",
		}, []string{"provider"}),
		PoolMembers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "pool_members",
			Help:      "Members of each ProxyPool, by namespace and pool.",
		}, []string{"namespace", "pool"}),
		PoolServing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "pool_serving_members",
			Help:      "Serving members (the published list's length) of each ProxyPool, by namespace and pool.",
		}, []string{"namespace", "pool"}),
		PoolRotations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "pool_rotations_total",
			Help:      "Pool members replaced by rotation, by namespace, pool and reason (maxAge, requested, template, probe).",
		}, []string{"namespace", "pool", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.ProviderCallDuration, m.ProviderCallErrors, m.CreateToReady, m.Replacements, m.GCDeletions, m.GCLastSuccess, m.OwnershipUnverified,
		m.ProbeDuration, m.ProbeFailures, m.PoolMembers, m.PoolServing, m.PoolRotations} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
