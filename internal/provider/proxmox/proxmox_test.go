package proxmox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
)

// through sends a GET to target through the HTTP proxy at addr.
func through(t *testing.T, addr netip.AddrPort, user, pass, target string) (int, string) {
	t.Helper()
	pu := &url.URL{Scheme: "http", Host: addr.String()}
	if user != "" {
		pu.User = url.UserPassword(user, pass)
	}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get(target)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestLifecycle drives Create (F12 upload, F19 ide2 and boot order, F3
// start), Get Running with the agent's address (F21), a request through the
// guest's proxy with the rendered credentials, then Delete (F13 seed delete,
// destroy with purge) until nothing is left. Secrets appear in no error, log
// line or span.
func TestLifecycle(t *testing.T) {
	h := newHarness(t, nil)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, root := tp.Tracer("test").Start(h.ctx, "operation")
	h.ctx = ctx
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "reached the origin")
	}))
	defer origin.Close()

	p := h.provider()
	req := h.request("uid-lifecycle", "proxy-lifecycle00000001")
	id := h.create(p, req)
	node, vmid, _, err := parseID(id)
	if err != nil || node != "pve1" {
		t.Fatalf("id %q", id)
	}
	if vmid < 100000 || vmid > 199999 {
		t.Errorf("vmid %d outside the default range", vmid)
	}
	cfg, _ := h.sim.VMConfig(vmid)
	if cfg["ide2"] != "seeds:iso/"+h.seedFile(req.Name)+",media=cdrom" || !strings.HasPrefix(cfg["ide2"], "seeds:iso/proxy-lifecycle00000001-") {
		t.Errorf("ide2 = %q", cfg["ide2"])
	}
	if cfg["tags"] != Tag || cfg["agent"] != "1" || cfg["cores"] != "2" || cfg["memory"] != "512" {
		t.Errorf("config tags=%q agent=%q cores=%q memory=%q", cfg["tags"], cfg["agent"], cfg["cores"], cfg["memory"])
	}
	// A node's planned reboot must start the VM again rather than leave it
	// stopped, which would make the operator replace every VM of the node.
	if cfg["onboot"] != "1" {
		t.Errorf("config onboot=%q, want 1", cfg["onboot"])
	}
	if m, ok := parseMark(cfg["description"]); !ok || m.OwnerUID != "uid-lifecycle" || m.Name != req.Name || m.CreatedAt.IsZero() {
		t.Errorf("mark %+v in %q (F10, F11)", m, cfg["description"])
	}

	inst := h.running(p, id)
	if inst.Address != pvesim.GuestAddress(vmid) {
		t.Errorf("address %s, want %s (F21)", inst.Address, pvesim.GuestAddress(vmid))
	}
	if inst.OwnerUID != "uid-lifecycle" || inst.Name != req.Name || inst.Node != "pve1" || inst.CreatedAt.IsZero() {
		t.Errorf("instance %+v", inst)
	}
	if code, body := through(t, netip.AddrPortFrom(inst.Address, 3128), "u1", sentinelPassword, origin.URL); code != http.StatusOK || body != "reached the origin" {
		t.Fatalf("through the guest's proxy: %d %q", code, body)
	}
	list, err := p.ListByTag(h.ctx)
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].OwnerUID != "uid-lifecycle" {
		t.Errorf("ListByTag = %+v, %v", list, err)
	}

	h.deleteAll(p, id)
	if len(h.vmsNamed(req.Name)) != 0 {
		t.Errorf("VM left: %+v", h.vmsNamed(req.Name))
	}
	if _, ok := h.sim.VolumePath("pve1", "seeds:iso/"+h.seedFile(req.Name)); ok {
		t.Error("seed left on pve1")
	}
	root.End()

	assertNoSecret(t, "logs", h.logs.String())
	if !strings.Contains(h.logs.String(), `"call"="clone"`) {
		t.Errorf("API calls are not logged at V(1): %s", h.logs.String())
	}
	spans := rec.Ended()
	if len(spans) < 10 {
		t.Errorf("%d spans", len(spans))
	}
	for _, s := range spans {
		var text strings.Builder
		text.WriteString(s.Name() + fmt.Sprint(s.Attributes()) + s.Status().Description)
		for _, ev := range s.Events() {
			_, _ = fmt.Fprint(&text, ev.Attributes)
		}
		assertNoSecret(t, "span "+s.Name(), text.String())
		if s.Name() != "operation" && s.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("span %s is not a child of the operation", s.Name())
		}
	}
}

// TestErrorsHoldNoSecret makes calls fail in several ways and checks that
// no error carries the token secret or the user-data.
func TestErrorsHoldNoSecret(t *testing.T) {
	h := newHarness(t, nil)
	p := h.provider()
	req := h.request("uid-secret", "proxy-secret0000000001")
	h.sim.FailNext(http.MethodPost, "/nodes/{node}/storage/{storage}/upload", 1, 500, "upload failed "+sentinelSecret[:3])
	var errs []error
	h.eventually("create with a failed upload", func() bool {
		_, err := p.Create(h.ctx, req)
		if err != nil && !provider.IsInProgress(err) {
			errs = append(errs, err)
		}
		return err == nil
	})
	if len(errs) == 0 {
		t.Fatal("the upload fault produced no error")
	}
	// A wrong secret: 401 (F22).
	if err := os.WriteFile(h.block.TokenFile, []byte("op@pve!t=wrong-"+sentinelSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := h.provider().Get(h.ctx, ID("pve1", 123456, "proxy-nothing000000001"))
	if !provider.IsRefused(err) || !strings.Contains(err.Error(), "Authentication failed!") {
		t.Errorf("Get with a wrong secret: %v, want Refused 401 Authentication failed! (F22)", err)
	}
	errs = append(errs, err)
	for _, e := range errs {
		assertNoSecret(t, "error", e.Error())
		assertNoSecret(t, "error", fmt.Sprintf("%+v %#v", e, e))
	}
	assertNoSecret(t, "logs", h.logs.String())
}

// TestForeignVMsAreNeverTouched puts a foreign VM in the proxy's first VMID
// slot (create step 6 (docs/proxmox-behaviour.md): skipped) and another with the proxy's name but no
// mark (Permanent), and checks neither is changed. The contract suite
// (TestContract) covers Get, Delete and ListByTag of foreign VMs.
func TestForeignVMsAreNeverTouched(t *testing.T) {
	h := newHarness(t, nil)
	p := h.provider()
	req := h.request("uid-foreign", "proxy-foreign000000001")
	slot := p.vmidFor(req.OwnerUID, req.Name)
	h.foreignClone(slot, "someone-elses")
	before, _ := h.sim.VMConfig(slot)

	id := h.create(p, req)
	_, vmid, _, _ := parseID(id)
	if vmid == slot {
		t.Fatalf("cloned onto the foreign VM's slot %d", slot)
	}
	if vmid != slot+1 {
		t.Errorf("vmid %d, want the next free one %d", vmid, slot+1)
	}
	after, _ := h.sim.VMConfig(slot)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("foreign VM changed:\n%v\n%v", before, after)
	}
	if _, err := p.Get(h.ctx, ID("pve1", 500, req.Name)); !provider.IsNotFound(err) {
		t.Errorf("Get of a container: %v, want NotFound", err)
	}

	// A foreign VM carrying our name.
	req2 := h.request("uid-foreign-2", "proxy-foreign000000002")
	h.foreignClone(150000, req2.Name)
	_, err := p.Create(h.ctx, req2)
	if !provider.IsPermanent(err) {
		t.Fatalf("Create with a foreign VM of the same name: %v, want Permanent", err)
	}
	if vms := h.vmsNamed(req2.Name); len(vms) != 1 || vms[0].VMID != 150000 {
		t.Errorf("VMs named %s: %+v", req2.Name, vms)
	}
	for _, v := range h.sim.VMs() {
		if v.VMID == slot || v.VMID == 150000 {
			continue
		}
		if v.VMID != vmid && v.VMID < 9000 {
			t.Errorf("unexpected VM %+v", v)
		}
	}
}

// TestDuplicateRace produces the race of the known limits (docs/proxmox-behaviour.md): provider A clones to the
// second slot while a foreign VM holds the first; the foreign VM goes; a
// restarted provider B, seeing A's clone nameless (F8), clones to the first
// slot. Both converge on one VM and the same ID.
func TestDuplicateRace(t *testing.T) {
	h := newHarnessYAML(t, "timings: {clone: 300s}\n", nil)
	a, b := h.provider(), h.provider()
	req := h.request("uid-race", "proxy-race000000000001")
	slot := a.vmidFor(req.OwnerUID, req.Name)
	h.foreignClone(slot, "someone-elses")

	if _, err := a.Create(h.ctx, req); !provider.IsInProgress(err) {
		t.Fatalf("A: %v", err)
	}
	c := newClient(h.block.APIURL, h.block.TokenFile, h.block.CAFile, false)
	upid, err := c.destroy(h.ctx, "pve1", slot)
	if err != nil {
		t.Fatal(err)
	}
	h.waitTask(c, "pve1", upid)
	if _, err := b.Create(h.ctx, req); !provider.IsInProgress(err) {
		t.Fatalf("B: %v", err)
	}
	cloning := 0
	for _, v := range h.sim.VMs() {
		if v.VMID == slot || v.VMID == slot+1 {
			cloning++
		}
	}
	if cloning != 2 {
		t.Fatalf("the race did not happen: %d clones", cloning)
	}
	var idA, idB provider.ID
	h.eventually("both converge", func() bool {
		if idA == "" {
			got, err := a.Create(h.ctx, req)
			if err != nil && !provider.IsInProgress(err) {
				t.Fatalf("A: %v", err)
			}
			idA = got
		}
		if idB == "" {
			got, err := b.Create(h.ctx, req)
			if err != nil && !provider.IsInProgress(err) {
				t.Fatalf("B: %v", err)
			}
			idB = got
		}
		return idA != "" && idB != ""
	})
	// A last call of each sees the final state.
	idA = h.create(a, req)
	idB = h.create(b, req)
	vms := h.vmsNamed(req.Name)
	if len(vms) != 1 || idA != idB || ID(vms[0].Node, vms[0].VMID, vms[0].Name) != idA {
		t.Fatalf("VMs %+v, A %s, B %s: want one VM and one ID", vms, idA, idB)
	}
	_, kept, _, _ := parseID(idA)
	t.Logf("two clones raced at VMIDs %d and %d; kept %d", slot, slot+1, kept)
	h.running(a, idA)
}

// TestNodeUnreachable: guests of an unreachable node are listed with status
// unknown (F8); Get says Transient naming both causes, never NotFound, and
// Check says Unreachable (595).
func TestNodeUnreachable(t *testing.T) {
	h := newHarness(t, func(b *Block) {
		b.Zones = map[string]Zone{"zone-a": {Nodes: []string{"pve2"}}}
		b.Images = map[string]Image{"debian": {TemplateVMID: 9100}}
	})
	p := h.provider()
	id := h.create(p, h.request("uid-node", "proxy-node000000000001"))
	h.running(p, id)
	if v := p.Check(h.ctx); len(v) != 1 || !v[0].Healthy || v[0].Reason != ReasonReachable {
		t.Fatalf("Check = %+v", v)
	}
	h.sim.SetNodeUnreachable("pve2", true, 595, "")
	h.eventually("Get sees the node down", func() bool {
		_, err := p.Get(h.ctx, id)
		if provider.IsNotFound(err) {
			t.Fatalf("Get of a VM on an unreachable node: NotFound: %v", err)
		}
		if err == nil {
			return false
		}
		if !provider.IsTransient(err) {
			t.Fatalf("Get: %v, want Transient", err)
		}
		// While the shared listing is fresh, the status read answers 595;
		// then the listing shows the VM unknown (F8), which names both causes.
		return strings.Contains(err.Error(), "clone") && strings.Contains(err.Error(), "unreachable")
	})
	v := p.Check(h.ctx)
	if len(v) != 1 || v[0].Healthy || v[0].Reason != ReasonUnreachable || v[0].Target != "pve2" {
		t.Errorf("Check = %+v, want pve2 Unreachable", v)
	}
	if err := p.Delete(h.ctx, id); !provider.IsTransient(err) {
		t.Errorf("Delete on an unreachable node: %v, want Transient", err)
	}
	h.sim.SetNodeUnreachable("pve2", false, 0, "")
	h.deleteAll(p, id)
}

// TestCancelledContextReturnsPromptly: a slow API does not hold a caller
// whose context ended.
func TestCancelledContextReturnsPromptly(t *testing.T) {
	h := newHarness(t, nil)
	p := h.provider()
	h.sim.AddLatency(http.MethodGet, "/cluster/resources", 3*time.Second)
	for name, f := range map[string]func(context.Context) error{
		"create": func(ctx context.Context) error {
			_, err := p.Create(ctx, h.request("uid-ctx", "proxy-ctx0000000000001"))
			return err
		},
		"get": func(ctx context.Context) error {
			_, err := p.Get(ctx, ID("pve1", 100001, "proxy-cancel0000000001"))
			return err
		},
		"delete": func(ctx context.Context) error { return p.Delete(ctx, ID("pve1", 100001, "proxy-cancel0000000001")) },
	} {
		ctx, cancel := context.WithTimeout(h.ctx, 50*time.Millisecond)
		start := time.Now()
		err := f(ctx)
		cancel()
		if time.Since(start) > time.Second {
			t.Errorf("%s took %s after its context ended", name, time.Since(start))
		}
		if !provider.IsTransient(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want Transient deadline exceeded", name, err)
		}
	}
	// The keyed lock gives up too.
	unlock, err := p.names.Lock(h.ctx, "proxy-ctx0000000000002")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(h.ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := p.Create(ctx, h.request("uid-ctx2", "proxy-ctx0000000000002")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Create waiting for its name: %v", err)
	}
}

func total(c map[string]int64) int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// TestAPIEconomy counts API calls with the simulator's counters: Get and
// ListByTag share one cluster-wide listing per poll interval, Get reads the
// VM's qmpstatus (F14: a pause shows only there) from its node's listing,
// also shared (once per pause window in the steady state), and a Running
// VM's address is cached until its uptime goes down: no call of a Get's
// own, only shares of the two listings (known limits in
// docs/proxmox-behaviour.md: four calls per Get).
func TestAPIEconomy(t *testing.T) {
	const proxies = 4
	h := newHarness(t, func(b *Block) { b.Budgets.PollInterval = durationPtr(50 * time.Millisecond) })
	// The provider's clock runs ahead of the wall clock by skew, so that a
	// resync round can move past the listing's cache without sleeping.
	var skew atomic.Int64
	p, err := New(h.entry, provider.Deps{Ownership: testIdentity, Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]provider.ID, proxies)
	h.sim.ResetCounters()
	for i := range proxies {
		ids[i] = h.create(p, h.request("uid-econ-"+strconv.Itoa(i), fmt.Sprintf("proxy-econ%012d", i)))
	}
	createCounters := h.sim.Counters()
	createCalls := total(createCounters)
	createPolls := createCounters["GET /nodes/{node}/tasks/{upid}/status"]
	for _, id := range ids {
		h.running(p, id)
	}
	h.sim.ResetCounters()
	const resyncs = 10
	for range resyncs {
		skew.Add(int64(60 * time.Millisecond)) // longer than the poll interval
		for _, id := range ids {
			inst, err := p.Get(h.ctx, id)
			if err != nil || inst.State != provider.StateRunning || !inst.Address.IsValid() {
				t.Fatalf("Get %s: %+v, %v", id, inst, err)
			}
		}
		if _, err := p.ListByTag(h.ctx); err != nil {
			t.Fatal(err)
		}
	}
	c := h.sim.Counters()
	steady := total(c)
	perProxy := float64(steady) / float64(resyncs*proxies)
	// Shared: fewer listings of either kind than Gets (one per poll
	// interval; not counted exactly, since a loaded machine stretches a
	// resync over several intervals:
	// TestListingServesEveryGetWithinThePollInterval counts them with a
	// clock of its own), and nothing else. The cluster-wide listing of a
	// resync serves its Gets and its ListByTag alike.
	listings, nodeListings := c["GET /cluster/resources"], c["GET /nodes/{node}/qemu"]
	if listings >= resyncs*proxies || nodeListings >= resyncs*proxies || steady != listings+nodeListings {
		t.Errorf("%d calls for %d resyncs of %d proxies (%.2f per proxy per resync): %v; want both listings shared and nothing else",
			steady, resyncs, proxies, perProxy, c)
	}
	if got := c["GET /cluster/resources"]; got != resyncs {
		t.Errorf("%d listings for %d resyncs past the poll interval, want one each: %v", got, resyncs, c)
	}
	h.sim.ResetCounters()
	for _, id := range ids {
		h.deleteAll(p, id)
	}
	deleteCounters := h.sim.Counters()
	deleteCalls := total(deleteCounters)
	deletePolls := deleteCounters["GET /nodes/{node}/tasks/{upid}/status"]
	t.Logf("API calls per proxy: create %.1f (%.1f of them task-status polls, the test calls Create every 3ms), "+
		"steady state %.2f per resync (%d calls for %d resyncs of %d proxies), delete %.1f (%.1f task-status polls)",
		float64(createCalls)/proxies, float64(createPolls)/proxies, perProxy, steady, resyncs, proxies,
		float64(deleteCalls)/proxies, float64(deletePolls)/proxies)
	t.Logf("create counters: %v", createCounters)
	t.Logf("delete counters: %v", deleteCounters)
}

// TestGetMapping: F14 paused is Stopped, F5 agent not running is
// Provisioning, F5 no agent configured is Stopped, F24 hibernated is Stopped.
func TestGetMapping(t *testing.T) {
	h := newHarness(t, nil)
	p := h.provider()
	c := newClient(h.block.APIURL, h.block.TokenFile, h.block.CAFile, false)
	id := h.create(p, h.request("uid-map", "proxy-map0000000000001"))
	_, vmid, _, _ := parseID(id)
	state := func() provider.State {
		t.Helper()
		p2 := h.provider() // no address cache
		inst, err := p2.Get(h.ctx, id)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		return inst.State
	}
	h.sim.SetAgentNeverStarts(vmid, true)
	if s := state(); s != provider.StateProvisioning {
		t.Errorf("agent not running (F5): %s, want Provisioning", s)
	}
	h.sim.SetAgentNeverStarts(vmid, false)
	h.running(p, id)
	task := func(path string, form url.Values) {
		t.Helper()
		upid, err := c.task(h.ctx, call{name: "test", method: http.MethodPost, path: vmPath("pve1", vmid) + path, node: "pve1", vmid: vmid, form: form})
		if err != nil {
			t.Fatal(err)
		}
		h.waitTask(c, "pve1", upid)
	}
	task("/status/suspend", url.Values{})
	if s := state(); s != provider.StateStopped {
		t.Errorf("paused (F14): %s, want Stopped", s)
	}
	task("/status/resume", url.Values{})
	if err := c.setConfig(h.ctx, "pve1", vmid, url.Values{"agent": {"0"}}); err != nil {
		t.Fatal(err)
	}
	if s := state(); s != provider.StateStopped {
		t.Errorf("no agent configured (F5): %s, want Stopped", s)
	}
	if err := c.setConfig(h.ctx, "pve1", vmid, url.Values{"agent": {"1"}}); err != nil {
		t.Fatal(err)
	}
	task("/status/suspend", url.Values{"todisk": {"1"}})
	if s := state(); s != provider.StateStopped {
		t.Errorf("hibernated (F24): %s, want Stopped", s)
	}
	h.deleteAll(p, id) // F24: destroy accepts a hibernated VM
	if len(h.vmsNamed("proxy-map0000000000001")) != 0 {
		t.Error("VM left")
	}
}

// TestTemplateWithCloudInitDriveIsRefused (F19): refused before any clone.
func TestTemplateWithCloudInitDriveIsRefused(t *testing.T) {
	h := newHarness(t, func(b *Block) {
		b.Images = map[string]Image{"debian": {TemplateVMID: 9001}}
	})
	_, err := h.provider().Create(h.ctx, h.request("uid-ci", "proxy-ci00000000000001"))
	if !provider.IsPermanent(err) || !strings.Contains(err.Error(), "cloud-init drive") {
		t.Fatalf("Create: %v, want Permanent about the cloud-init drive", err)
	}
	if n := h.sim.Counters()["POST /nodes/{node}/qemu/{vmid}/clone"]; n != 0 {
		t.Errorf("%d clone calls", n)
	}
	if _, err := h.provider().Create(h.ctx, provider.Request{OwnerUID: "x", Zone: "zone-a", Image: "debian", MachineType: "small"}); !provider.IsPermanent(err) {
		t.Errorf("empty name: %v, want Permanent", err)
	}
}

// TestResizeAndNetworkOverride: the boot disk is found past the CD-ROM that
// ide2 appends (F19) and grown by a task (F20); net0 keeps its MAC.
func TestResizeAndNetworkOverride(t *testing.T) {
	h := newHarness(t, func(b *Block) { b.Bridge = "vmbr1"; b.VLANTag = 4 })
	p := h.provider()
	req := h.request("uid-resize", "proxy-resize0000000001")
	req.MachineType = "big"
	id := h.create(p, req)
	_, vmid, _, _ := parseID(id)
	cfg, _ := h.sim.VMConfig(vmid)
	if !strings.Contains(cfg["scsi0"], "size=5G") {
		t.Errorf("scsi0 = %q, want size=5G", cfg["scsi0"])
	}
	if !strings.Contains(cfg["net0"], "bridge=vmbr1") || !strings.Contains(cfg["net0"], "tag=4") || !strings.HasPrefix(cfg["net0"], "virtio=") {
		t.Errorf("net0 = %q", cfg["net0"])
	}
	if !strings.Contains(cfg["boot"], "ide2") {
		t.Logf("boot = %q", cfg["boot"])
	}
	// Again: same size, no second resize.
	before := h.sim.Counters()["PUT /nodes/{node}/qemu/{vmid}/resize"]
	if _, err := p.Create(h.ctx, req); err != nil {
		t.Fatal(err)
	}
	if after := h.sim.Counters()["PUT /nodes/{node}/qemu/{vmid}/resize"]; after != before {
		t.Errorf("resized again")
	}
	h.deleteAll(p, id)
}

// TestSeedDeleteForbidden (F13): without Datastore.Allocate the seed delete
// is Permanent, and the VM stays so the delete is retried, not leaked.
func TestSeedDeleteForbidden(t *testing.T) {
	h := newHarness(t, nil)
	p := h.provider()
	id := h.create(p, h.request("uid-403", "proxy-forbidden0000001"))
	if err := os.WriteFile(h.block.TokenFile, []byte("noseed@pve!t=a7e0f11e-0000-4000-8000-000000000002"), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	h.eventually("delete reaches the seed", func() bool {
		err = p.Delete(h.ctx, id)
		return !provider.IsInProgress(err)
	})
	if !provider.IsPermanent(err) || !strings.Contains(provider.ActionOf(err), "Datastore.Allocate") {
		t.Fatalf("Delete: %v (action %q), want Permanent naming Datastore.Allocate", err, provider.ActionOf(err))
	}
	if len(h.vmsNamed("proxy-forbidden0000001")) != 1 {
		t.Error("the VM went before its seed")
	}
}

// TestCheckReasons covers the verdicts other than Unreachable.
func TestCheckReasons(t *testing.T) {
	h := newHarness(t, nil)
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		mod    func(b *Block)
		reason string
		noCall bool
	}{
		{name: "healthy", reason: ReasonReachable},
		{name: "token missing", mod: func(b *Block) { b.TokenFile = filepath.Join(dir, "none") }, reason: ReasonCredentialsUnavailable, noCall: true},
		{name: "token malformed", mod: func(b *Block) {
			b.TokenFile = filepath.Join(dir, "bad")
			_ = os.WriteFile(b.TokenFile, []byte(sentinelSecret), 0o600)
		}, reason: ReasonCredentialsUnavailable, noCall: true},
		{name: "wrong secret", mod: func(b *Block) {
			b.TokenFile = filepath.Join(dir, "wrong")
			_ = os.WriteFile(b.TokenFile, []byte("op@pve!t=nope"), 0o600)
		}, reason: ReasonUnauthorized},
		{name: "bad ca", mod: func(b *Block) {
			b.CAFile = filepath.Join(dir, "ca-bad")
			_ = os.WriteFile(b.CAFile, []byte("no certificate here"), 0o600)
		}, reason: ReasonCertificateInvalid},
		{name: "untrusted", mod: func(b *Block) {
			b.CAFile = filepath.Join(dir, "ca-other")
			_ = os.WriteFile(b.CAFile, otherCA(t), 0o600)
		}, reason: ReasonCertificateInvalid},
		{name: "storage missing", mod: func(b *Block) { b.ISOStorage = "nope" }, reason: ReasonStorageNotFound},
		{name: "template missing", mod: func(b *Block) {
			b.Images = map[string]Image{"debian": {TemplateVMID: 9999}}
		}, reason: ReasonTemplateNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := *h.block
			if tc.mod != nil {
				tc.mod(&b)
			}
			e := *h.entry
			e.Block = &b
			p, err := New(&e, provider.Deps{Ownership: testIdentity})
			if err != nil {
				t.Fatal(err)
			}
			h.sim.ResetCounters()
			v := p.Check(h.ctx)
			if len(v) != 1 || v[0].Reason != tc.reason || v[0].Healthy != (tc.reason == ReasonReachable) || v[0].Target != "pve1" {
				t.Fatalf("Check = %+v, want %s", v, tc.reason)
			}
			assertNoSecret(t, "verdict", v[0].Message)
			if tc.noCall && total(h.sim.Counters()) != 0 {
				t.Errorf("requests sent without a usable token: %v", h.sim.Counters())
			}
		})
	}
}

// otherCA returns the CA of another simulator, which did not sign ours.
func otherCA(t *testing.T) []byte {
	t.Helper()
	cfg, err := pvesim.ParseConfig([]byte(simYAML))
	if err != nil {
		t.Fatal(err)
	}
	s, err := pvesim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if _, err := s.Serve(context.Background(), pvesim.ServeOptions{Addr: "127.0.0.1:0", TLS: true}); err != nil {
		t.Fatal(err)
	}
	return s.CACertPEM()
}

// TestTaskOutcomes (F16): a task ending in WARNINGS counts as success; a
// failed start is Transient and the next call starts again.
func TestTaskOutcomes(t *testing.T) {
	h := newHarness(t, nil)
	p := h.provider()
	h.sim.FailTasks("qmclone", "WARNINGS: 1", 1)
	h.sim.FailTasks("qmstart", "start failed: guest refused", 1)
	req := h.request("uid-task", "proxy-task000000000001")
	var failures []error
	var id provider.ID
	h.eventually("create", func() bool {
		got, err := p.Create(h.ctx, req)
		if err != nil && !provider.IsInProgress(err) {
			failures = append(failures, err)
		}
		id = got
		return err == nil
	})
	if len(failures) != 1 || !provider.IsTransient(failures[0]) || !strings.Contains(failures[0].Error(), "start failed") {
		t.Errorf("failures %v, want one Transient failed start", failures)
	}
	if len(h.vmsNamed(req.Name)) != 1 {
		t.Errorf("VMs %+v", h.vmsNamed(req.Name))
	}
	h.deleteAll(p, id)
}

// TestCAFileLoadedLazily: a missing CA file is Transient (the Secret may
// land later) and is read once it appears; a file without a certificate is
// Permanent.
func TestCAFileLoadedLazily(t *testing.T) {
	h := newHarness(t, nil)
	pem, err := os.ReadFile(h.block.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	b := *h.block
	b.CAFile = filepath.Join(t.TempDir(), "later.pem")
	e := *h.entry
	e.Block = &b
	p, err := New(&e, provider.Deps{Ownership: testIdentity})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.ListByTag(h.ctx); !provider.IsTransient(err) {
		t.Fatalf("missing CA: %v, want Transient", err)
	}
	if err := os.WriteFile(b.CAFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	h.eventually("the CA is read once present", func() bool {
		_, err := p.ListByTag(h.ctx)
		return err == nil
	})
	b2 := b
	b2.CAFile = filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(b2.CAFile, []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	e2 := *h.entry
	e2.Block = &b2
	p2, err := New(&e2, provider.Deps{Ownership: testIdentity})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.ListByTag(h.ctx); !provider.IsPermanent(err) {
		t.Errorf("CA file without a certificate: %v, want Permanent", err)
	}
}

// TestAPIErrorShape (F1): the trimmed body message is used, with the
// field errors of a 400; a 401 falls back to the reason phrase (F22).
func TestAPIErrorShape(t *testing.T) {
	h := newHarness(t, nil)
	c := newClient(h.block.APIURL, h.block.TokenFile, h.block.CAFile, false)
	_, err := c.vmConfig(h.ctx, "pve1", 4242)
	ae, ok := apiErr(err)
	if !ok || ae.Status != 500 || ae.Message != "Configuration file 'nodes/pve1/qemu-server/4242.conf' does not exist" || !isMissingVM(err) {
		t.Errorf("F2: %#v", err)
	}
	_, err = c.storageStatus(h.ctx, "pve1", "nope")
	if ae, ok := apiErr(err); !ok || ae.Status != 400 || ae.Fields["storage"] == "" {
		t.Errorf("F23: %#v", err)
	}
	if err := os.WriteFile(h.block.TokenFile, []byte("op@pve!t=wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = c.version(h.ctx)
	if ae, ok := apiErr(err); !ok || ae.Status != 401 || ae.Message != "Authentication failed!" {
		t.Errorf("F22: %#v", err)
	}
}

// TestPrelaunchIsProvisioning (F14): a VM still starting is Provisioning.
func TestPrelaunchIsProvisioning(t *testing.T) {
	h := newHarnessYAML(t, "timings: {start: 3000s}\n", nil)
	p := h.provider()
	req := h.request("uid-pre", "proxy-prelaunch0000001")
	h.eventually("start issued", func() bool {
		_, err := p.Create(h.ctx, req)
		if err != nil && !provider.IsInProgress(err) {
			t.Fatal(err)
		}
		return h.sim.Counters()["POST /nodes/{node}/qemu/{vmid}/status/start"] > 0
	})
	vms := h.vmsNamed(req.Name)
	if len(vms) != 1 {
		t.Fatalf("VMs %+v", vms)
	}
	inst, err := p.Get(h.ctx, ID(vms[0].Node, vms[0].VMID, vms[0].Name))
	if err != nil || inst.State != provider.StateProvisioning {
		t.Errorf("Get while starting: %+v, %v; want Provisioning", inst, err)
	}
	if _, err := p.Create(h.ctx, req); !provider.IsInProgress(err) {
		t.Errorf("Create while starting: %v, want InProgress", err)
	}
}

// TestHelpers covers the parsing helpers: the boot disk past a CD-ROM that
// ide2 appends to the boot order (F19), net0 rewriting, the mark and tags
// (F9, F10).
func TestHelpers(t *testing.T) {
	cfg := map[string]any{"boot": "order=ide2;scsi0", "ide2": "seeds:iso/x-seed.iso,media=cdrom", "scsi0": "local-lvm:vm-1-disk-0,size=3G"}
	if slot, size, ok := bootDisk(cfg); !ok || slot != "scsi0" || size != 3<<30 {
		t.Errorf("bootDisk = %s %d %v", slot, size, ok)
	}
	if got := rewriteNet0("virtio=BC:24:11:00:90:00,bridge=vmbr0,firewall=1", "vmbr1", 4); got != "virtio=BC:24:11:00:90:00,bridge=vmbr1,firewall=1,tag=4" {
		t.Errorf("rewriteNet0 = %s", got)
	}
	m := mark{OwnerUID: "u", Name: "n", Owner: "ns/p", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if got, ok := parseMark("notes by an admin\n" + description(m)); !ok || got != m {
		t.Errorf("parseMark = %+v %v", got, ok)
	}
	if _, ok := parseMark("someone else's VM"); ok {
		t.Error("a description without a mark parsed as one")
	}
	if !hasTag("debian;Proxy_Operator") || hasTag("proxy_operator2") {
		t.Error("hasTag")
	}
	a := firstAddress([]AgentInterface{{Name: "lo"}, {Name: "ens18"}}, false)
	if a.IsValid() {
		t.Error("no address expected")
	}
}

// TestUploadTimesOut (#12 item 11): a storage that never answers an upload
// must not hold the create (and the seed with the proxy password) for ever:
// the upload ends with a Transient error after its timeout, and Create is
// retried later.
func TestUploadTimesOut(t *testing.T) {
	h := newHarness(t, nil)
	p := h.provider()
	p.api.uploadTimeout = 200 * time.Millisecond
	h.sim.AddLatency(http.MethodPost, "/nodes/{node}/storage/{storage}/upload", time.Minute)
	req := h.request("uid-upload-timeout", "proxy-uploadtimeout0001")
	var err error
	h.eventually("create reaches the upload", func() bool {
		_, err = p.Create(h.ctx, req)
		return !provider.IsInProgress(err)
	})
	if !provider.IsTransient(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Create with a stuck upload = %v, want Transient, deadline exceeded", err)
	}
	assertNoSecret(t, "error", err.Error())
}
