package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway/gatewaywatch"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// seriesOf counts, by metric name, the gateway's series that name member.
func seriesOf(t *testing.T, reg *prometheus.Registry, member string) map[string]int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "member" && l.GetValue() == member {
					out[mf.GetName()]++
				}
			}
		}
	}
	return out
}

// TestPerMemberMetrics: each member has its bytes (up and down), the
// latency of its hop, the requests of sessions placed on it and what it
// carries now, for plain requests and tunnels; a member that leaves its
// pool's list leaves no series behind once they had time to be scraped
// (members come and go: the label's values stay bounded by the members
// there are, and those that left recently).
func TestPerMemberMetrics(t *testing.T) {
	ms := startMembers(t, 2)
	origin := ipEcho(t)
	target := tcpEcho(t)
	cs := fake.NewClientset()
	reg, gm := newMetrics(t)
	// Long enough to see the series stay right after the member left, short
	// enough for the test to see them go.
	gm.KeepDepartedFor(poll.Paced(2 * time.Second))
	set := gateway.NewSet()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		gatewaywatch.Watch(ctx, cs, "crawlers", []string{"crawl"}, set, gm, logr.Discard())
	}()
	t.Cleanup(func() { cancel(); <-done })
	publish(t, cs, "crawl", entries(ms)...)
	poll.Until(t, wait, func() (bool, string) { return set.Len() == 2, fmt.Sprintf("%d members", set.Len()) })
	h := startGateway(t, gateway.Config{Members: set, Metrics: gm})

	c := h.client(t, gwUser)
	for range 4 {
		if code, _, _, err := get(c, origin.URL, nil); err != nil || code != 200 {
			t.Fatalf("a request: %d %v", code, err)
		}
	}
	for range 2 {
		tunnelEgress(t, h.addr, target, gwUser)
	}
	s := h.client(t, gwUser+"-session-s1")
	for range 3 {
		_, _, _, _ = get(s, origin.URL, nil)
	}
	sessionOn := set.PlaceSession("s1", 0, time.Now())
	// A request is carried until the gateway closed its answer's body,
	// which may be a moment after the client read the last bytes.
	poll.Until(t, wait, func() (bool, string) {
		n := metric(t, reg, "egress_proxies_gateway_member_in_flight", map[string]string{"pool": "crawl"})
		return n == 0, fmt.Sprintf("%v requests and tunnels still in flight", n)
	})
	for _, m := range ms {
		labels := map[string]string{"pool": "crawl", "member": m.name}
		with := func(k, v string) map[string]string {
			l := map[string]string{k: v}
			for a, b := range labels {
				l[a] = b
			}
			return l
		}
		if got := metric(t, reg, "egress_proxies_gateway_member_bytes_total", with("direction", "down")); got <= 0 {
			t.Errorf("%s: %v bytes down; want the answers' bytes", m.name, got)
		}
		wantSessions := 0.0
		if sessionOn.Name == m.name {
			wantSessions = 3
		}
		got := map[string]float64{
			"sessions":  metric(t, reg, "egress_proxies_gateway_session_requests_total", labels),
			"in flight": metric(t, reg, "egress_proxies_gateway_member_in_flight", labels),
			"latencies": histogramCount(t, reg, "egress_proxies_gateway_member_latency_seconds", labels),
		}
		want := map[string]float64{"sessions": wantSessions, "in flight": 0, "latencies": got["latencies"]}
		if got["latencies"] < 3 {
			want["latencies"] = 3 // 2 requests and a tunnel at least, by round-robin
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", m.name, diff)
		}
	}
	if n := seriesOf(t, reg, ms[1].name)["egress_proxies_gateway_member_in_flight"]; n != 1 {
		t.Errorf("%s has %d in-flight series; want 1", ms[1].name, n)
	}

	publish(t, cs, "crawl", ms[0].entry())
	// Right after it left, the member's series are still there: its last
	// counts must be scraped before they go.
	poll.Until(t, wait, func() (bool, string) { return set.Len() == 1, fmt.Sprintf("%d members", set.Len()) })
	if got := seriesOf(t, reg, ms[1].name); got["egress_proxies_gateway_member_bytes_total"] == 0 {
		t.Errorf("the series of the member that just left are gone at once: %v", got)
	}
	poll.Until(t, wait, func() (bool, string) {
		got := seriesOf(t, reg, ms[1].name)
		return len(got) == 0, fmt.Sprintf("series of the member that left: %v", got)
	})
	if got := seriesOf(t, reg, ms[0].name); got["egress_proxies_gateway_member_bytes_total"] == 0 {
		t.Errorf("the member that stays lost its series: %v", got)
	}
}

// histogramCount is the sample count of a histogram's series with labels.
func histogramCount(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	var n float64
	for _, v := range seriesWith(t, reg, name, labels) {
		n += float64(v.samples)
	}
	return n
}
