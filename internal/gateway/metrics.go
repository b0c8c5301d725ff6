package gateway

import "github.com/prometheus/client_golang/prometheus"

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
	for _, c := range []prometheus.Collector{m.requests, m.failures, m.retries, m.ejections, m.limited, m.members} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
