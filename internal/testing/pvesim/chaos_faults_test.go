package pvesim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// try sends a request as the operator token and returns the transport or
// body read error, for calls whose answer a fault cuts.
func (h *harness) try(method, path string, params url.Values) error {
	h.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, h.url+"/api2/json"+path, strings.NewReader(params.Encode()))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "PVEAPIToken="+opToken+"="+opSecret)
	resp, err := h.hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	_, err = io.ReadAll(resp.Body)
	return err
}

// TestLoseAnswerTakesEffect: a lost answer cuts the connection after the
// call ran, so the client sees an error while the clone happens (unlike
// CutNext, whose call has no effect).
func TestLoseAnswerTakesEffect(t *testing.T) {
	h := newHarness(t, nil)
	h.sim.LoseAnswerNext(http.MethodPost, "/nodes/{node}/qemu/{vmid}/clone", 1)
	if err := h.try(http.MethodPost, "/nodes/pve1/qemu/9000/clone", url.Values{"newid": {"300"}, "full": {"1"}}); err == nil {
		t.Fatal("the clone's answer arrived whole; want a cut connection")
	}
	h.eventually("the clone of the lost answer", func() bool {
		_, ok := h.sim.VMConfig(300)
		return ok
	})
	// The fault was used up: the next clone answers.
	h.clone(301, nil)

	h.sim.CutNext(http.MethodPost, "/nodes/{node}/qemu/{vmid}/clone", 1)
	if err := h.try(http.MethodPost, "/nodes/pve1/qemu/9000/clone", url.Values{"newid": {"302"}, "full": {"1"}}); err == nil {
		t.Fatal("a cut answer arrived whole")
	}
	if _, ok := h.sim.VMConfig(302); ok {
		t.Error("a cut call (CutNext) cloned a VM; only LoseAnswerNext runs the call")
	}
}

// TestLockTimeout: a lock timeout fails the call with the lock file of the
// path's VMID and leaves the VM as it was; the next call goes through.
func TestLockTimeout(t *testing.T) {
	h := newHarness(t, nil)
	h.cloneAndWait(300, nil)
	h.sim.LockTimeoutNext(http.MethodDelete, "/nodes/{node}/qemu/{vmid}", 1)
	r := h.call(http.MethodDelete, "/nodes/pve1/qemu/300", nil)
	if want := "500 can't lock file '/var/lock/qemu-server/lock-300.conf' - got timeout"; r.status != want {
		t.Fatalf("status %q, want %q", r.status, want)
	}
	if _, ok := h.sim.VMConfig(300); !ok {
		t.Fatal("a destroy that timed out on the lock removed the VM")
	}
	if exit := h.waitTask(h.ok(http.MethodDelete, "/nodes/pve1/qemu/300", nil).dataString(t)); exit != "OK" {
		t.Errorf("destroy after the fault: %q", exit)
	}
}

// TestAgentNeverStartsNext: the fault applies to the next clones only, in
// order, whatever their VMIDs.
func TestAgentNeverStartsNext(t *testing.T) {
	h := newHarness(t, nil)
	h.sim.AgentNeverStartsNext(1)
	h.cloneAndWait(300, nil)
	h.cloneAndWait(301, nil)
	h.startAndWait(300)
	h.startAndWait(301)
	h.eventually("the agent of 301", func() bool {
		return h.call(http.MethodGet, "/nodes/pve1/qemu/301/agent/network-get-interfaces", nil).code == http.StatusOK
	})
	if r := h.call(http.MethodGet, "/nodes/pve1/qemu/300/agent/network-get-interfaces", nil); r.status != "500 QEMU guest agent is not running" {
		t.Errorf("agent of 300 (fault): %q", r.status)
	}
	h.sim.AgentNeverStartsNext(1)
	h.sim.ClearFaults()
	h.cloneAndWait(302, nil)
	h.startAndWait(302)
	h.eventually("the agent of 302 (fault cleared)", func() bool {
		return h.call(http.MethodGet, "/nodes/pve1/qemu/302/agent/network-get-interfaces", nil).code == http.StatusOK
	})
}

// TestMutationLog: every mutating call that passed authentication is
// recorded with its caller, VMID, clone target, volume and outcome, also
// when a fault, a lock or a permission check refused it; reads and
// unauthenticated calls are not.
func TestMutationLog(t *testing.T) {
	h := newHarness(t, nil)
	h.cloneAndWait(300, nil)
	h.sim.SetLock(300, "backup")
	h.call(http.MethodPost, "/nodes/pve1/qemu/300/status/start", nil)
	h.sim.SetLock(300, "")
	h.sim.FailNext(http.MethodPut, "/nodes/{node}/qemu/{vmid}/config", 1, 500, "boom")
	h.call(http.MethodPut, "/nodes/pve1/qemu/300/config", url.Values{"description": {"x"}})
	h.callAs(noSeedToken, noSeedSecret, http.MethodDelete, "/nodes/pve1/storage/seeds/content/"+url.PathEscape("seeds:iso/a.iso"), nil)
	h.upload(opToken, opSecret, "seeds", "b.iso", []byte("seed"))
	h.call(http.MethodGet, "/nodes/pve1/qemu/300/config", nil)
	h.callAs(opToken, "00000000-0000-4000-8000-000000000000", http.MethodDelete, "/nodes/pve1/qemu/300", nil)

	op, noSeed := "op@pve!prov", "noseed@pve!prov"
	want := []Mutation{
		{Token: op, Method: http.MethodPost, Route: "/nodes/{node}/qemu/{vmid}/clone", Path: "/nodes/pve1/qemu/9000/clone",
			Node: "pve1", VMID: 9000, NewID: 300, Status: http.StatusOK, Effect: true},
		{Token: op, Method: http.MethodPost, Route: "/nodes/{node}/qemu/{vmid}/status/start", Path: "/nodes/pve1/qemu/300/status/start",
			Node: "pve1", VMID: 300, Status: http.StatusInternalServerError, Effect: true},
		{Token: op, Method: http.MethodPut, Route: "/nodes/{node}/qemu/{vmid}/config", Path: "/nodes/pve1/qemu/300/config",
			Node: "pve1", VMID: 300, Status: http.StatusInternalServerError},
		{Token: noSeed, Method: http.MethodDelete, Route: "/nodes/{node}/storage/{storage}/content/{volume}",
			Path: "/nodes/pve1/storage/seeds/content/seeds:iso%2Fa.iso", Node: "pve1", Volume: "seeds:iso/a.iso", Status: http.StatusForbidden, Effect: true}, // F13: the handler checks the storage
		{Token: op, Method: http.MethodPost, Route: "/nodes/{node}/storage/{storage}/upload", Path: "/nodes/pve1/storage/seeds/upload",
			Node: "pve1", Volume: "seeds:iso/b.iso", Status: http.StatusOK, Effect: true},
	}
	if diff := cmp.Diff(want, h.sim.Mutations(), cmpopts.IgnoreFields(Mutation{}, "At")); diff != "" {
		t.Errorf("mutations (-want +got):\n%s", diff)
	}
	if got := len(h.sim.MutationsOf(300)); got != 3 {
		t.Errorf("MutationsOf(300) = %d calls, want 3 (the clone onto it, the start, the config write)", got)
	}
}

// TestOutOfBandChanges: a VM placed, crashed or removed behind the client's
// back shows in the API and is not recorded as a mutation.
func TestOutOfBandChanges(t *testing.T) {
	h := newHarness(t, nil)
	no := false
	foreign := TemplateConfig{VMID: 4242, Node: "pve2", Name: "colleague", Template: &no, Tags: "proxy_operator",
		Disks: []DiskConfig{{Slot: "scsi0", Storage: "local-lvm", Size: "2G"}}, Extra: map[string]string{"description": "hand\nwritten"}}
	if err := h.sim.AddVM(foreign); err != nil {
		t.Fatal(err)
	}
	if err := h.sim.AddVM(foreign); err == nil {
		t.Error("AddVM onto a taken VMID succeeded")
	}
	conf := h.ok(http.MethodGet, "/nodes/pve2/qemu/4242/config", nil).dataMap(t)
	if conf["tags"] != "proxy_operator" || conf["description"] != "hand\nwritten" || conf["name"] != "colleague" {
		t.Errorf("placed VM config: %v", conf)
	}
	if vols := h.sim.StorageVolumes("pve2", "local-lvm"); !strings.Contains(strings.Join(vols, " "), "vm-4242-disk-0") {
		t.Errorf("placed VM's disk missing: %v", vols)
	}

	h.cloneAndWait(300, nil)
	h.startAndWait(300)
	if !h.sim.Crash(300) {
		t.Fatal("Crash: no running VM 300")
	}
	if m := h.ok(http.MethodGet, "/nodes/pve1/qemu/300/status/current", nil).dataMap(t); m["status"] != statusStopped {
		t.Errorf("after Crash: %v", m["status"])
	}
	if h.sim.Crash(300) {
		t.Error("Crash of a stopped VM reported a running one")
	}
	if !h.sim.Vanish(4242) || h.sim.Vanish(9000) {
		t.Error("Vanish: want the placed VM removed and the template kept")
	}
	if r := h.call(http.MethodGet, "/nodes/pve2/qemu/4242/config", nil); r.code != http.StatusInternalServerError {
		t.Errorf("vanished VM still answers: %s", r.status)
	}
	if vols := h.sim.StorageVolumes("pve2", "local-lvm"); strings.Contains(strings.Join(vols, " "), "vm-4242") {
		t.Errorf("vanished VM's disk left: %v", vols)
	}
	for _, m := range h.sim.Mutations() {
		if m.VMID == 4242 || (m.VMID == 300 && m.Route != "/nodes/{node}/qemu/{vmid}/status/start") {
			t.Errorf("an out-of-band change was recorded as a mutation: %+v", m)
		}
	}
}

// TestAdminChaosFaults: the new faults and the mutation log through the
// admin API.
func TestAdminChaosFaults(t *testing.T) {
	h := newHarness(t, nil)
	admin, err := h.sim.ServeAdmin(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	send := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequestWithContext(context.Background(), method, admin+path, strings.NewReader(body))
		resp, err := h.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}
	if code, _ := send(http.MethodPost, "/admin/faults/call", `{"method":"POST","path":"/nodes/{node}/qemu/{vmid}/status/start","count":1,"lockTimeout":true}`); code != http.StatusOK {
		t.Fatalf("lock timeout fault: %d", code)
	}
	if code, _ := send(http.MethodPost, "/admin/faults/agent", `{"next":1}`); code != http.StatusOK {
		t.Fatalf("agent fault: %d", code)
	}
	h.cloneAndWait(300, nil)
	if r := h.call(http.MethodPost, "/nodes/pve1/qemu/300/status/start", nil); !strings.Contains(r.status, "lock-300.conf' - got timeout") {
		t.Errorf("start under the lock timeout fault: %q", r.status)
	}
	h.startAndWait(300)
	if r := h.call(http.MethodGet, "/nodes/pve1/qemu/300/agent/network-get-interfaces", nil); r.status != "500 QEMU guest agent is not running" {
		t.Errorf("agent of the next clone: %q", r.status)
	}
	var muts []Mutation
	_, body := send(http.MethodGet, "/admin/mutations", "")
	if err := json.Unmarshal(body, &muts); err != nil {
		t.Fatal(err)
	}
	if len(muts) != 3 || muts[1].Status != http.StatusInternalServerError || muts[2].Status != http.StatusOK {
		t.Errorf("mutations through the admin API: %+v", muts)
	}
}
