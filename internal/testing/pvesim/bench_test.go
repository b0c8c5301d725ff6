package pvesim

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestJSONBodyParams: POST/PUT accept a JSON body as pveproxy does, with
// numbers and booleans turned into their form values.
func TestJSONBodyParams(t *testing.T) {
	h := newHarness(t, nil)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPut, h.url+"/api2/json/nodes/pve1/qemu/9002/config",
		strings.NewReader(`{"cores": 4, "onboot": true, "tags": "A;b"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "PVEAPIToken="+opToken+"="+opSecret)
	if r := h.do(req); r.code != http.StatusOK {
		t.Fatalf("%s %s", r.status, r.raw)
	}
	m := h.ok(http.MethodGet, "/nodes/pve1/qemu/9002/config", nil).dataMap(t)
	if m["cores"] != float64(4) || m["onboot"] != float64(1) || m["tags"] != "a;b" {
		t.Errorf("config = %v", m)
	}
}

// BenchmarkGetCycle measures the four reads a provider Get makes per
// reconcile (resources, config, status, agent) against a running VM, and
// reports the API calls counted per operation.
func BenchmarkGetCycle(b *testing.B) {
	h := newHarness(b, nil)
	h.cloneAndWait(400, nil)
	h.startAndWait(400)
	h.eventually("agent", func() bool {
		return h.call(http.MethodGet, "/nodes/pve1/qemu/400/agent/network-get-interfaces", nil).code == http.StatusOK
	})
	h.sim.ResetCounters()
	b.ResetTimer()
	for b.Loop() {
		h.ok(http.MethodGet, "/cluster/resources", url.Values{"type": {"vm"}})
		h.ok(http.MethodGet, "/nodes/pve1/qemu/400/config", nil)
		h.ok(http.MethodGet, "/nodes/pve1/qemu/400/status/current", nil)
		h.ok(http.MethodGet, "/nodes/pve1/qemu/400/agent/network-get-interfaces", nil)
	}
	b.StopTimer()
	var total int64
	for _, n := range h.sim.Counters() {
		total += n
	}
	b.ReportMetric(float64(total)/float64(b.N), "calls/op")
}
