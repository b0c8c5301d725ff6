package forwardproxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "egress_proxies"

// Values of the method label.
const (
	// MethodConnect labels CONNECT tunnels.
	MethodConnect = "CONNECT"
	// MethodHTTP labels forwarded absolute-form HTTP requests, whatever
	// their HTTP method.
	MethodHTTP = "HTTP"
)

// Values of the direction label.
const (
	// DirectionUp labels bytes from the client to the upstream server.
	DirectionUp = "up"
	// DirectionDown labels bytes from the upstream server to the client.
	DirectionDown = "down"
)

// Metrics holds the forward proxy's collectors. Build it once with
// NewMetrics and pass it in Config.Metrics.
type Metrics struct {
	// Requests counts finished requests by method (CONNECT or HTTP) and
	// status code, refused ones (403, 407, 400) included.
	Requests *prometheus.CounterVec
	// RequestDuration observes how long requests took, by method; for a
	// CONNECT tunnel, how long the tunnel was open.
	RequestDuration *prometheus.HistogramVec
	// Bytes counts body bytes relayed, by direction (up: client to
	// upstream, down: upstream to client), as they flow.
	Bytes *prometheus.CounterVec
	// ActiveConnections is the number of requests being forwarded and
	// CONNECT tunnels open now.
	ActiveConnections prometheus.Gauge
	// ConnectionsRefused counts the client connections that Serve's
	// admission refused or closed before their first request was
	// admitted, by cause (RefusedLimit, RefusedSourceLimit, ...).
	ConnectionsRefused *prometheus.CounterVec

	up, down prometheus.Counter
}

// connectionRefused counts a connection refused by admission; m may be nil.
func (m *Metrics) connectionRefused(cause string) {
	if m != nil {
		m.ConnectionsRefused.WithLabelValues(cause).Inc()
	}
}

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "forward_requests_total",
			Help:      "Requests handled by the forward proxy, by method (CONNECT or HTTP) and status code.",
		}, []string{"method", "code"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "forward_request_duration_seconds",
			Help:      "Duration of forward proxy requests by method (CONNECT or HTTP); for CONNECT, how long the tunnel was open.",
			Buckets:   []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}, []string{"method"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "forward_bytes_total",
			Help:      "Body bytes relayed by the forward proxy, by direction (up: client to upstream, down: upstream to client).",
		}, []string{"direction"}),
		ActiveConnections: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "forward_active_connections",
			Help:      "Requests being forwarded and CONNECT tunnels open now.",
		}),
		ConnectionsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "forward_connections_refused_total",
			Help:      "Client connections refused or closed before their first request was admitted, by cause (limit, source-limit, unauthenticated-source-limit, unauthenticated-evicted, first-request-timeout).",
		}, []string{"cause"}),
	}
	for _, c := range []prometheus.Collector{m.Requests, m.RequestDuration, m.Bytes, m.ActiveConnections, m.ConnectionsRefused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Both directions exist from the start, so that rate() sees the first
	// bytes.
	m.up = m.Bytes.WithLabelValues(DirectionUp)
	m.down = m.Bytes.WithLabelValues(DirectionDown)
	return m, nil
}
