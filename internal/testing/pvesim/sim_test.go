package pvesim

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestParameterVerification: unknown, malformed and missing parameters get
// the F1 400 with Proxmox's field error texts, derived from the schema.
func TestParameterVerification(t *testing.T) {
	h := newHarness(t, nil)
	for _, tc := range []struct {
		name, method, path string
		params             url.Values
		field, msg         string
	}{
		{"unknown parameter", http.MethodGet, "/nodes/pve1/qemu/9000/config", url.Values{"bogus": {"1"}},
			"bogus", "property is not defined in schema and the schema does not allow additional properties"},
		{"integer type", http.MethodPost, "/nodes/pve1/qemu/9000/clone", url.Values{"newid": {"abc"}},
			"newid", "type check ('integer') failed - got 'abc'"},
		{"minimum", http.MethodPost, "/nodes/pve1/qemu/9000/clone", url.Values{"newid": {"99"}},
			"newid", "value must have a minimum value of 100"},
		{"missing required", http.MethodPost, "/nodes/pve1/qemu/9000/clone", url.Values{"full": {"1"}},
			"newid", "property is missing and it is not optional"},
		{"boolean", http.MethodPost, "/nodes/pve1/qemu/9000/clone", url.Values{"newid": {"300"}, "full": {"maybe"}},
			"full", "type check ('boolean') failed - got 'maybe'"},
		{"enum", http.MethodGet, "/cluster/resources", url.Values{"type": {"vms"}},
			"type", "value 'vms' does not have a value in the enumeration 'vm, storage, node, sdn'"},
		{"dns-name", http.MethodPost, "/nodes/pve1/qemu/9000/clone", url.Values{"newid": {"300"}, "name": {"bad_name!"}},
			"name", "invalid format - value does not look like a valid DNS name"},
		{"resize pattern", http.MethodPut, "/nodes/pve1/qemu/9002/resize", url.Values{"disk": {"scsi0"}, "size": {"10X"}},
			"size", "value does not match the regex pattern"},
		{"resize enum", http.MethodPut, "/nodes/pve1/qemu/9002/resize", url.Values{"disk": {"net0"}, "size": {"10G"}},
			"disk", ""},
		{"path vmid", http.MethodGet, "/nodes/pve1/qemu/abc/config", nil,
			"vmid", "type check ('integer') failed - got 'abc'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.call(tc.method, tc.path, tc.params)
			if r.status != "400 Parameter verification failed." {
				t.Fatalf("status %q %s", r.status, r.raw)
			}
			got, ok := r.body.Errors[tc.field]
			if !ok || (tc.msg != "" && got != tc.msg) {
				t.Errorf("errors = %v, want %s: %q", r.body.Errors, tc.field, tc.msg)
			}
		})
	}
}

// TestUnknownRouteAndNode: unserved methods are 501; an unknown node fails
// like a failed host name lookup.
func TestUnknownRouteAndNode(t *testing.T) {
	h := newHarness(t, nil)
	if r := h.call(http.MethodGet, "/nodes/pve1/lxc", nil); r.code != http.StatusNotImplemented {
		t.Errorf("unserved: %s", r.status)
	}
	if r := h.call(http.MethodGet, "/nodes/ghost/status", nil); !strings.HasPrefix(r.status, "500 hostname lookup 'ghost' failed") {
		t.Errorf("unknown node: %s", r.status)
	}
}

// TestFaults covers each fault from Go: unreachable node, failing calls,
// latency, cut connections, task exit status, agent never starting and a
// leftover lock.
func TestFaults(t *testing.T) {
	h := newHarness(t, nil)

	h.sim.SetNodeUnreachable("pve2", true, StatusConnectionError, "Connection refused")
	if r := h.call(http.MethodGet, "/nodes/pve2/status", nil); r.status != "596 Connection refused" {
		t.Errorf("unreachable: %q", r.status)
	}
	h.sim.SetNodeUnreachable("pve2", false, 0, "")
	h.ok(http.MethodGet, "/nodes/pve2/status", nil)

	h.sim.FailNext(http.MethodGet, "/nodes/{node}/qemu/{vmid}/config", 2, 500, "simulated failure")
	for range 2 {
		if r := h.call(http.MethodGet, "/nodes/pve1/qemu/9000/config", nil); r.status != "500 simulated failure" || r.body.Message != "simulated failure\n" {
			t.Errorf("failing call: %q %q", r.status, r.body.Message)
		}
	}
	h.ok(http.MethodGet, "/nodes/pve1/qemu/9000/config", nil)

	h.sim.FailNext("", "/nodes/pve1/qemu/90*/status/current", 1, 503, "glob failure")
	if r := h.call(http.MethodGet, "/nodes/pve1/qemu/9000/status/current", nil); r.status != "503 glob failure" {
		t.Errorf("glob: %q", r.status)
	}

	h.sim.AddLatency(http.MethodGet, "/version", 50*time.Millisecond)
	start := time.Now()
	h.ok(http.MethodGet, "/version", nil)
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Errorf("latency fault: answered in %v", el)
	}

	h.sim.CutNext(http.MethodGet, "/nodes", 1)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, h.url+"/api2/json/nodes", nil)
	req.Header.Set("Authorization", "PVEAPIToken="+opToken+"="+opSecret)
	resp, err := h.hc.Do(req)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	if err == nil {
		t.Errorf("cut connection: read the whole answer")
	}
	h.ok(http.MethodGet, "/nodes", nil)

	h.sim.FailTasks("qmstart", "start failed: QEMU exited with code 1", 1)
	h.cloneAndWait(300, nil)
	upid := h.ok(http.MethodPost, "/nodes/pve1/qemu/300/status/start", nil).dataString(t)
	if exit := h.waitTask(upid); exit != "start failed: QEMU exited with code 1" {
		t.Errorf("task fault exit %q", exit)
	}
	if m := h.ok(http.MethodGet, "/nodes/pve1/qemu/300/status/current", nil).dataMap(t); m["status"] != statusStopped {
		t.Errorf("VM after failed start: %v", m["status"])
	}

	h.sim.SetAgentNeverStarts(300, true)
	h.startAndWait(300)
	if r := h.call(http.MethodGet, "/nodes/pve1/qemu/300/agent/network-get-interfaces", nil); r.status != "500 QEMU guest agent is not running" {
		t.Errorf("agent never: %q", r.status)
	}

	h.sim.SetLock(300, "migrate")
	if r := h.call(http.MethodPost, "/nodes/pve1/qemu/300/status/stop", nil); r.status != "500 VM is locked (migrate)" {
		t.Errorf("lock fault: %q", r.status)
	}
	h.sim.ClearFaults()
}

// TestAdminEndpoint drives faults and counters through the admin HTTP API.
func TestAdminEndpoint(t *testing.T) {
	h := newHarness(t, nil)
	admin, err := h.sim.ServeAdmin(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, body string) int {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, admin+path, strings.NewReader(body))
		resp, err := h.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if c := post("/admin/faults/call", `{"method":"GET","path":"/version","count":1,"status":500,"message":"admin fault"}`); c != http.StatusOK {
		t.Fatalf("add fault: %d", c)
	}
	if r := h.call(http.MethodGet, "/version", nil); r.status != "500 admin fault" {
		t.Errorf("admin fault: %q", r.status)
	}
	if c := post("/admin/faults/node", `{"node":"pve3","unreachable":true}`); c != http.StatusOK {
		t.Fatalf("node fault: %d", c)
	}
	if r := h.call(http.MethodGet, "/nodes/pve3/status", nil); r.code != StatusNoResponse {
		t.Errorf("node fault: %q", r.status)
	}
	if c := post("/admin/faults/lock", `{"vmid":9002,"lock":"backup"}`); c != http.StatusOK {
		t.Fatalf("lock fault: %d", c)
	}
	if c := post("/admin/faults/lock", `{"vmid":1,"lock":"backup"}`); c != http.StatusNotFound {
		t.Errorf("lock on unknown vmid: %d", c)
	}
	h.ok(http.MethodGet, "/nodes/pve1/qemu/9000/status/current", nil)
	h.ok(http.MethodGet, "/nodes/pve1/qemu/9000/status/current", nil)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, admin+"/admin/counters", nil)
	resp, err := h.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var counters map[string]int64
	err = json.NewDecoder(resp.Body).Decode(&counters)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if counters["GET /nodes/{node}/qemu/{vmid}/status/current"] != 2 || counters["GET /version"] != 1 {
		t.Errorf("counters = %v", counters)
	}
	h.sim.ResetCounters()
	if len(h.sim.Counters()) != 0 {
		t.Errorf("reset left %v", h.sim.Counters())
	}
}

// TestResponseBytes: the simulator counts the body bytes of each successful
// answer under the call's key (what a benchmark reads to see the listings'
// cost to a client), leaves failed answers out, serves the counts on the
// admin API and resets them with the counters.
func TestResponseBytes(t *testing.T) {
	h := newHarness(t, nil)
	admin, err := h.sim.ServeAdmin(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := h.ok(http.MethodGet, "/cluster/resources", url.Values{"type": {"vm"}})
	b := h.ok(http.MethodGet, "/version", nil)
	h.ok(http.MethodGet, "/version", nil)
	if r := h.call(http.MethodGet, "/nodes/pve1/qemu/4242/config", nil); r.code == http.StatusOK {
		t.Fatalf("config of a missing VM answered %s", r.status)
	}
	want := map[string]int64{
		"GET /cluster/resources": int64(len(a.raw)),
		"GET /version":           2 * int64(len(b.raw)),
	}
	if diff := cmp.Diff(want, h.sim.ResponseBytes()); diff != "" {
		t.Errorf("ResponseBytes (-want +got):\n%s", diff)
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, admin+"/admin/bytes", nil)
	resp, err := h.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]int64
	err = json.NewDecoder(resp.Body).Decode(&got)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GET /admin/bytes (-want +got):\n%s", diff)
	}
	req, _ = http.NewRequestWithContext(context.Background(), http.MethodDelete, admin+"/admin/counters", nil)
	if resp, err = h.hc.Do(req); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got := h.sim.ResponseBytes(); len(got) != 0 {
		t.Errorf("after DELETE /admin/counters: %v", got)
	}
}

// TestConcurrencyPerNode: at most MaxConcurrentPerNode requests of a node
// are served at once; the others wait (pveproxy's workers).
func TestConcurrencyPerNode(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxConcurrentPerNode = 2 })
	const lat = 60 * time.Millisecond
	h.sim.AddLatency(http.MethodGet, "/nodes/{node}/status", lat)
	start := time.Now()
	var wg sync.WaitGroup
	var failures atomic.Int32
	for range 4 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, h.url+"/api2/json/nodes/pve1/status", nil)
			req.Header.Set("Authorization", "PVEAPIToken="+opToken+"="+opSecret)
			resp, err := h.hc.Do(req)
			if err != nil || resp.StatusCode != http.StatusOK {
				failures.Add(1)
			}
			if resp != nil {
				_ = resp.Body.Close()
			}
		})
	}
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d requests failed", failures.Load())
	}
	// 4 requests, 2 workers: at least two rounds of latency.
	if el := time.Since(start); el < 2*lat {
		t.Errorf("4 requests on 2 workers took %v, want >= %v", el, 2*lat)
	}
	// Another node is not held up by pve1's queue.
	h.ok(http.MethodGet, "/nodes/pve2/status", nil)
}

// TestThousandsOfVMs clones 2000 VMs and lists them, checking the heap
// stays modest.
func TestThousandsOfVMs(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxConcurrentPerNode = 8 })
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 2000
	var wg sync.WaitGroup
	var failures atomic.Int32
	ids := make(chan int)
	for range 8 {
		wg.Go(func() {
			for id := range ids {
				body := url.Values{"newid": {itoa(id)}, "name": {"vm" + itoa(id)}, "full": {"1"}}.Encode()
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, h.url+"/api2/json/nodes/pve1/qemu/9000/clone", bytes.NewBufferString(body))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Authorization", "PVEAPIToken="+opToken+"="+opSecret)
				resp, err := h.hc.Do(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					failures.Add(1)
				}
				if resp != nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			}
		})
	}
	for i := range n {
		ids <- 1000 + i
	}
	close(ids)
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d clones failed", failures.Load())
	}
	h.eventually("all clones unlocked", func() bool {
		for _, v := range h.sim.VMs() {
			if v.Lock != "" {
				return false
			}
		}
		return true
	})
	list := h.ok(http.MethodGet, "/cluster/resources", url.Values{"type": {"vm"}}).dataList(t)
	if len(list) != n+4 {
		t.Errorf("listed %d entries, want %d", len(list), n+4)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	// Tasks and VMs together: well under 8 KiB per VM.
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew by %d bytes for %d VMs (%d per VM, tasks included)", grown, n, grown/n)
	if grown > n*8<<10 {
		t.Errorf("heap grew by %d bytes for %d VMs", grown, n)
	}
}

// TestListenAddresses: the simulator listens on loopback, or in the
// documentation ranges a test's own network namespace uses, and nowhere
// else; its certificate names the address it listens on.
func TestListenAddresses(t *testing.T) {
	sim, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sim.Close() }()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "10.0.0.1:8006", "192.0.2.1:8006", "198.51.99.255:8006"} {
		if _, err := sim.Serve(context.Background(), ServeOptions{Addr: addr}); err == nil {
			t.Errorf("Serve(%q) accepted an address outside loopback and the test ranges", addr)
		}
		if _, err := sim.ServeAdmin(context.Background(), addr); err == nil {
			t.Errorf("ServeAdmin(%q) accepted an address outside loopback and the test ranges", addr)
		}
	}
	for _, tc := range []struct{ addr, reason string }{
		{"127.0.0.1:0", "loopback"},
		{"[::1]:0", "IPv6 loopback"},
		{"198.51.100.2:8006", "a cluster world's node address (TEST-NET-2)"},
		{"203.0.113.9:8006", "TEST-NET-3, inside a test's namespace only"},
	} {
		if _, err := checkListen(tc.addr); err != nil {
			t.Errorf("%s (%s) refused: %v", tc.addr, tc.reason, err)
		}
	}
	cert, _, err := newCertificates(netip.MustParseAddr("198.51.100.2"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("198.51.100.2"); err != nil {
		t.Errorf("the certificate does not name the listen address: %v", err)
	}
}

// TestGuestNetwork: with guestNetwork, a guest reports (through the agent)
// and is started on the prefix's first address plus its VMID modulo the
// prefix's size, not on loopback.
func TestGuestNetwork(t *testing.T) {
	rr := &recordingRunner{}
	cfg := testConfig()
	cfg.GuestNetwork = "198.51.100.8/29"
	sim, err := New(cfg, WithGuestRunner(rr))
	if err != nil {
		t.Fatal(err)
	}
	u, err := sim.Serve(context.Background(), ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	h := &harness{t: t, sim: sim, url: u, hc: &http.Client{Timeout: 10 * time.Second}}
	h.cloneAndWait(301, nil)
	h.startAndWait(301)
	const want = "198.51.100.13" // 8 + 301 % 8
	h.eventually("runner start", func() bool { return len(rr.snapshot()) == 1 })
	if ev := rr.snapshot(); !strings.HasPrefix(ev[0], "start 301 "+want+" ") {
		t.Errorf("runner events = %v, want a start on %s", ev, want)
	}
	path := "/nodes/pve1/qemu/301/agent/network-get-interfaces"
	h.eventually("guest agent", func() bool { return h.call(http.MethodGet, path, nil).code == http.StatusOK })
	got := string(h.ok(http.MethodGet, path, nil).raw)
	if !strings.Contains(got, `"ip-address":"`+want+`"`) || !strings.Contains(got, `"prefix":29`) {
		t.Errorf("the agent reports %s, want %s/29 on the guest's interface", got, want)
	}
	for _, bad := range []string{"10.0.0.0/8", "2001:db8::/64", "not-a-prefix"} {
		c := testConfig()
		c.GuestNetwork = bad
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), "guestNetwork") {
			t.Errorf("guestNetwork %q: %v, want a refusal naming guestNetwork", bad, err)
		}
	}
}

// recordingRunner records GuestRunner calls.
type recordingRunner struct {
	mu     sync.Mutex
	events []string
}

func (r *recordingRunner) Start(g Guest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "start "+itoa(g.VMID)+" "+g.Address.String()+" "+g.SeedPath)
	return nil
}

func (r *recordingRunner) Stop(g Guest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "stop "+itoa(g.VMID))
}

func (r *recordingRunner) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// TestGuestRunnerSeam: the runner hears start (with address and seed path)
// and stop.
func TestGuestRunnerSeam(t *testing.T) {
	rr := &recordingRunner{}
	cfg := testConfig()
	sim, err := New(cfg, WithGuestRunner(rr))
	if err != nil {
		t.Fatal(err)
	}
	u, err := sim.Serve(context.Background(), ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	h := &harness{t: t, sim: sim, url: u, hc: &http.Client{Timeout: 10 * time.Second}}
	h.cloneAndWait(301, nil)
	h.waitTask(h.upload(opToken, opSecret, "seeds", "s.iso", []byte("seed")).dataString(t))
	h.ok(http.MethodPut, "/nodes/pve1/qemu/301/config", url.Values{"ide2": {"seeds:iso/s.iso,media=cdrom"}})
	h.startAndWait(301)
	h.waitTask(h.ok(http.MethodPost, "/nodes/pve1/qemu/301/status/stop", nil).dataString(t))
	h.eventually("runner events", func() bool { return len(rr.snapshot()) == 2 })
	ev := rr.snapshot()
	if !strings.HasPrefix(ev[0], "start 301 "+GuestAddress(301).String()+" ") || !strings.Contains(ev[0], "pveupload-") || ev[1] != "stop 301" {
		t.Errorf("events = %v", ev)
	}
}

// TestParseConfig: YAML with durations, and validation errors.
func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`
nodes: [{name: n1}]
storages: [{id: local-lvm, content: [images]}]
templates: [{vmid: 9000, node: n1, name: t, disks: [{slot: scsi0, storage: local-lvm, size: 3G}]}]
tokens: [{id: "a@pve!b", secret: "fa4e0000-0000-4000-8000-000000000001", acl: [{path: /, privileges: ["*"]}]}]
timings: {clone: 2s, agentBoot: 30}
speed: 10
`))
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(c.Timings.Clone) != 2*time.Second || time.Duration(c.Timings.AgentBoot) != 30*time.Second {
		t.Errorf("timings = %+v", c.Timings)
	}
	for _, bad := range []string{
		`nodes: []`,
		`{nodes: [{name: n1}], templates: [{vmid: 9000, node: n2, name: t}]}`,
		`{nodes: [{name: n1}], tokens: [{id: "nouser", secret: "fa4e0000-0000-4000-8000-000000000002"}]}`,
		`{nodes: [{name: n1}], unknownField: 1}`,
		// Token secrets are lowercase UUIDs, as a real host generates them.
		`{nodes: [{name: n1}], tokens: [{id: "a@pve!b", secret: "not-a-uuid"}]}`,
		`{nodes: [{name: n1}], tokens: [{id: "a@pve!b", secret: "FA4E0000-0000-4000-8000-000000000001"}]}`,
		`{nodes: [{name: n1}], tokens: [{id: "a@pve!b"}]}`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}
