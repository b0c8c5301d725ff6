package gateway

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the method label.
const (
	// MethodHTTP labels plain (absolute-form) requests.
	MethodHTTP = "HTTP"
	// MethodConnect labels CONNECT tunnels.
	MethodConnect = "CONNECT"
)

// Metrics are the gateway's collectors, per pool and member. Build them
// once with NewMetrics and pass them in Config.Metrics.
type Metrics struct {
	requests  *prometheus.CounterVec
	failures  *prometheus.CounterVec
	retries   *prometheus.CounterVec
	ejections *prometheus.CounterVec
	limited   *prometheus.CounterVec
	members   *prometheus.GaugeVec
	bans      *prometheus.CounterVec
	active    *activeBans
}

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "egress_proxies", Name: "gateway_requests_total",
			Help: "Requests (HTTP) and tunnels (CONNECT) the gateway sent through a member, by pool, member and method.",
		}, []string{"pool", "member", "method"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "egress_proxies", Name: "gateway_member_failures_total",
			Help: "Attempts through a member that failed before the client got an answer, by pool, member and cause (refused, timeout, error, status-<code>).",
		}, []string{"pool", "member", "cause"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "egress_proxies", Name: "gateway_retries_total",
			Help: "Failed attempts through a member that another member took over (failover), by pool, member and method.",
		}, []string{"pool", "member", "method"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "egress_proxies", Name: "gateway_ejections_total",
			Help: "Times a member was ejected for a cool-down after failures in a row, by pool and member.",
		}, []string{"pool", "member"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "egress_proxies", Name: "gateway_member_limited_total",
			Help: "Requests and tunnels a member could not take because it was at a limit (concurrency, or rate to the destination host), by pool, member and limit; a request that no member could take is answered 429.",
		}, []string{"pool", "member", "limit"}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "egress_proxies", Name: "gateway_members",
			Help: "Members the gateway may send to, by pool.",
		}, []string{"pool"}),
	}
	m.bans = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "egress_proxies", Name: "gateway_bans_total",
		Help: "Times a member was banned from a destination host for a cool-down, by pool, member and cause (status-<code>: the destination's answer; report-header, report-username: a crawler's report).",
	}, []string{"pool", "member", "cause"})
	m.active = &activeBans{desc: prometheus.NewDesc("egress_proxies_gateway_bans_active",
		"(member, destination host) bans in force in this gateway pod, by pool.", []string{"pool"}, nil)}
	for _, c := range []prometheus.Collector{m.requests, m.failures, m.retries, m.ejections, m.limited, m.members, m.bans, m.active} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// activeBans is the gauge of the bans in force, counted from a Gateway's
// ban table when scraped: bans end by time, not by an event.
type activeBans struct {
	desc  *prometheus.Desc
	mu    sync.Mutex
	table *banTable
	now   func() time.Time
}

// watchBans makes the gauge count t's bans at now's time.
func (m *Metrics) watchBans(t *banTable, now func() time.Time) {
	m.active.mu.Lock()
	defer m.active.mu.Unlock()
	m.active.table, m.active.now = t, now
}

func (a *activeBans) Describe(ch chan<- *prometheus.Desc) { ch <- a.desc }

func (a *activeBans) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	t, now := a.table, a.now
	a.mu.Unlock()
	if t == nil {
		return
	}
	for pool, n := range t.active(now()) {
		ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, float64(n), pool)
	}
}
