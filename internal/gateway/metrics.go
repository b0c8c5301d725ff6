package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
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
	// listsRefused counts published lists the pool does not control.
	listsRefused *prometheus.CounterVec
	bans         *prometheus.CounterVec
	active       *activeBans
	bytes        *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	sessions     *prometheus.CounterVec
	inFlight     *inFlight

	// departed holds, by pool and member, the pending deletion of the
	// series of a member that left; keepDeparted is how long they stay.
	mu           sync.Mutex
	departed     map[[2]string]*time.Timer
	keepDeparted time.Duration
}

// DefaultKeepDeparted is how long a departed member's series stay: longer
// than any usual scrape interval, so that the last counts of a member that
// failed and was replaced (its retries, its ejection) are scraped before
// they go.
const DefaultKeepDeparted = 5 * time.Minute

// KeepDepartedFor sets how long the series of a member that left its
// pool's list stay before they are deleted (DefaultKeepDeparted unless
// set). It must be called before the metrics are used.
func (m *Metrics) KeepDepartedFor(d time.Duration) { m.keepDeparted = d }

// memberHandles are one member's series, looked up once per member (not
// per request): the hot path only adds to them.
type memberHandles struct {
	up, down                prometheus.Counter
	latencyHTTP, latencyTun prometheus.Observer
	sessions                prometheus.Counter
}

// handlesOf returns mb's series; nil without metrics.
func (m *Metrics) handlesOf(mb *Member) *memberHandles {
	if m == nil {
		return nil
	}
	if h := mb.state.handles.Load(); h != nil {
		return h
	}
	h := &memberHandles{
		up: m.bytes.WithLabelValues(mb.Pool, mb.Name, "up"), down: m.bytes.WithLabelValues(mb.Pool, mb.Name, "down"),
		latencyHTTP: m.latency.WithLabelValues(mb.Pool, mb.Name, MethodHTTP), latencyTun: m.latency.WithLabelValues(mb.Pool, mb.Name, MethodConnect),
		sessions: m.sessions.WithLabelValues(mb.Pool, mb.Name),
	}
	mb.state.handles.CompareAndSwap(nil, h)
	return mb.state.handles.Load()
}

// forget deletes the series of pool's members that left (names) once they
// have been gone for keepDeparted: members come and go, and their series
// must not pile up, but a member's last counts must be scraped first. A
// member back in set by then keeps its series. m may be nil.
func (m *Metrics) forget(set *Set, pool string, names []string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, name := range names {
		key := [2]string{pool, name}
		if m.departed[key] != nil {
			continue
		}
		if m.departed == nil {
			m.departed = map[[2]string]*time.Timer{}
		}
		m.departed[key] = time.AfterFunc(m.keepDeparted, func() {
			m.mu.Lock()
			delete(m.departed, key)
			m.mu.Unlock()
			if set != nil && set.has(pool, name) {
				return
			}
			l := prometheus.Labels{"pool": pool, "member": name}
			for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
				m.requests, m.failures, m.retries, m.ejections, m.limited, m.bans, m.bytes, m.latency, m.sessions,
			} {
				v.DeletePartialMatch(l)
			}
		})
	}
}

// inFlight is the gauge of the requests and tunnels each member carries
// now, read from the members when scraped: a member that left has no
// series.
type inFlight struct {
	desc *prometheus.Desc
	set  atomic.Pointer[Set]
}

func (f *inFlight) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }

func (f *inFlight) Collect(ch chan<- prometheus.Metric) {
	s := f.set.Load()
	if s == nil {
		return
	}
	for _, mb := range s.Members() {
		ch <- prometheus.MustNewConstMetric(f.desc, prometheus.GaugeValue, float64(mb.state.active.Load()), mb.Pool, mb.Name)
	}
}

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		keepDeparted: DefaultKeepDeparted,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "egress_proxies", Name: "gateway_requests_total",
			Help: "Requests (HTTP) and tunnels (CONNECT) the gateway sent through a member, by pool, member and method.",
		}, []string{"pool", "member", "method"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "egress_proxies", Name: "gateway_member_failures_total",
			Help: "Attempts through a member that failed before the client got an answer, by pool, member and cause (refused, timeout, error, status-<code>, body-cut: the member died between its head and its body).",
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
		listsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "egress_proxies", Name: "gateway_lists_refused_total",
			Help: "Versions of a pool's published Secret or ConfigMap that the gateway ignored because the pool does not control them, by pool and reason (configmap-labels, configmap-owner, secret-labels, secret-owner: the labels or the controller reference to the ProxyPool are missing or wrong).",
		}, []string{"pool", "reason"}),
	}
	m.bans = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "egress_proxies", Name: "gateway_bans_total",
		Help: "Times a member was banned from a destination host for a cool-down, by pool, member and cause (status-<code>: the destination's answer; report-header, report-username: a crawler's report).",
	}, []string{"pool", "member", "cause"})
	m.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "egress_proxies", Name: "gateway_member_bytes_total",
		Help: "Bytes of the requests and tunnels the gateway sent through a member, by pool, member and direction (up: from the client, down: to it), counted when each ends.",
	}, []string{"pool", "member", "direction"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "egress_proxies", Name: "gateway_member_latency_seconds",
		Help:    "Time from the gateway's attempt through a member to the member's answer (a plain request's response headers, a tunnel's opening), by pool, member and method: the latency the member's hop adds.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
	}, []string{"pool", "member", "method"})
	m.sessions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "egress_proxies", Name: "gateway_session_requests_total",
		Help: "Requests and tunnels of a session (sent through the member rendezvous placed it on), by pool and member.",
	}, []string{"pool", "member"})
	m.inFlight = &inFlight{desc: prometheus.NewDesc("egress_proxies_gateway_member_in_flight",
		"Requests and tunnels a member carries now through this gateway pod (open tunnels included), by pool and member.", []string{"pool", "member"}, nil)}
	m.active = &activeBans{desc: prometheus.NewDesc("egress_proxies_gateway_bans_active",
		"(member, destination host) bans in force in this gateway pod, by pool.", []string{"pool"}, nil)}
	for _, c := range []prometheus.Collector{m.requests, m.failures, m.retries, m.ejections, m.limited, m.members, m.listsRefused, m.bans, m.active, m.bytes, m.latency, m.sessions, m.inFlight} {
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

// watchSet makes the in-flight gauge read s's members.
func (m *Metrics) watchSet(s *Set) { m.inFlight.set.Store(s) }

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

// countBytes adds the bytes of the request or tunnel of ctx to a member's
// series; h may be nil.
func countBytes(ctx context.Context, h *memberHandles) {
	if h == nil {
		return
	}
	if up, down, ok := forwardproxy.ExchangeBytes(ctx); ok {
		h.up.Add(float64(up))
		h.down.Add(float64(down))
	}
}
