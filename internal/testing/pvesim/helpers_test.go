package pvesim

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
)

// Test tokens: obviously fake secrets.
const (
	opToken      = "op@pve!prov"
	opSecret     = "5f0c7a3e-2b1d-4e8f-9a6c-000000000001"
	noSeedToken  = "noseed@pve!prov"
	noSeedSecret = "5f0c7a3e-2b1d-4e8f-9a6c-000000000002"
	nobodyToken  = "nobody@pve!none"
	nobodySecret = "5f0c7a3e-2b1d-4e8f-9a6c-000000000003"
)

// rolePrivs is the F17 role (setup facts in docs/proxmox-behaviour.md) on "/": everything but Datastore.Allocate.
var rolePrivs = proxmox.RootPrivileges

// testConfig is a 3-node cluster with a good template (9000), a template
// with a cloud-init drive (9001) and a container (500).
func testConfig() Config {
	no := false
	seedRole := proxmox.SeedStoragePrivileges
	return Config{
		Nodes: []NodeConfig{{Name: "pve1"}, {Name: "pve2"}, {Name: "pve3"}},
		Storages: []StorageConfig{
			{ID: "local", Type: "dir", Content: []string{"iso", "vztmpl", "backup"}},
			{ID: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}},
			{ID: "seeds", Type: "dir", Content: []string{"iso"}},
		},
		Templates: []TemplateConfig{
			{VMID: 9000, Node: "pve1", Name: "debian-13", Disks: []DiskConfig{{Slot: "scsi0", Storage: "local-lvm", Size: "3G"}},
				Net0: "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0", Agent: "1", Tags: "Debian;template"},
			{VMID: 9001, Node: "pve1", Name: "with-cloudinit", Disks: []DiskConfig{{Slot: "scsi0", Storage: "local-lvm", Size: "3G"}},
				Net0: "virtio=BC:24:11:AA:BB:CD,bridge=vmbr0", Agent: "1", CloudInitStorage: "local-lvm"},
			{VMID: 9002, Node: "pve1", Name: "no-agent", Template: &no, Disks: []DiskConfig{{Slot: "scsi0", Storage: "local-lvm", Size: "3G"}}},
		},
		Containers: []ContainerConfig{{VMID: 500, Node: "pve2", Name: "ct-dns"}},
		Tokens: []TokenConfig{
			{ID: opToken, Secret: opSecret, ACL: []ACLEntry{{Path: "/", Privileges: rolePrivs}, {Path: "/storage/seeds", Privileges: seedRole}}},
			{ID: noSeedToken, Secret: noSeedSecret, ACL: []ACLEntry{{Path: "/", Privileges: rolePrivs}}},
			{ID: nobodyToken, Secret: nobodySecret},
		},
		Speed: 1000,
	}
}

// harness is a running simulator and a client for it.
type harness struct {
	t   testing.TB
	sim *Sim
	url string
	hc  *http.Client
}

// newHarness starts a simulator on 127.0.0.1 with an optional config tweak.
func newHarness(t testing.TB, tweak func(*Config)) *harness {
	t.Helper()
	cfg := testConfig()
	if tweak != nil {
		tweak(&cfg)
	}
	sim, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	u, err := sim.Serve(context.Background(), ServeOptions{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	return &harness{t: t, sim: sim, url: u, hc: &http.Client{Timeout: 10 * time.Second}}
}

// result is an API answer.
type result struct {
	code   int
	status string // "500 Configuration file ..." (code and reason phrase)
	raw    []byte
	body   struct {
		Data    json.RawMessage   `json:"data"`
		Message string            `json:"message"`
		Errors  map[string]string `json:"errors"`
	}
}

// dataString decodes data as a string (a UPID).
func (r *result) dataString(t testing.TB) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(r.body.Data, &s); err != nil {
		t.Fatalf("data is not a string: %s (%s)", r.raw, r.status)
	}
	return s
}

// dataMap decodes data as an object.
func (r *result) dataMap(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body.Data, &m); err != nil {
		t.Fatalf("data is not an object: %s (%s)", r.raw, r.status)
	}
	return m
}

// dataList decodes data as a list of objects.
func (r *result) dataList(t testing.TB) []map[string]any {
	t.Helper()
	var l []map[string]any
	if err := json.Unmarshal(r.body.Data, &l); err != nil {
		t.Fatalf("data is not a list: %s (%s)", r.raw, r.status)
	}
	return l
}

// callAs sends a request with a token (empty id: no Authorization header).
func (h *harness) callAs(id, secret, method, path string, params url.Values) *result {
	h.t.Helper()
	target := h.url + "/api2/json" + path
	var body io.Reader
	if method == http.MethodGet || method == http.MethodDelete {
		if len(params) > 0 {
			target += "?" + params.Encode()
		}
	} else {
		body = strings.NewReader(params.Encode())
	}
	req, err := http.NewRequestWithContext(context.Background(), method, target, body)
	if err != nil {
		h.t.Fatalf("new request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if id != "" {
		req.Header.Set("Authorization", "PVEAPIToken="+id+"="+secret)
	}
	return h.do(req)
}

// do sends a request and reads the answer.
func (h *harness) do(req *http.Request) *result {
	h.t.Helper()
	resp, err := h.hc.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("read body: %v", err)
	}
	r := &result{code: resp.StatusCode, status: resp.Status, raw: raw}
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &r.body)
	}
	return r
}

// call sends a request as the operator token.
func (h *harness) call(method, path string, params url.Values) *result {
	h.t.Helper()
	return h.callAs(opToken, opSecret, method, path, params)
}

// ok sends a request and fails the test unless it answers 200.
func (h *harness) ok(method, path string, params url.Values) *result {
	h.t.Helper()
	r := h.call(method, path, params)
	if r.code != http.StatusOK {
		h.t.Fatalf("%s %s: %s %s", method, path, r.status, r.raw)
	}
	return r
}

// waitTask polls a task until it stops and returns its exitstatus.
func (h *harness) waitTask(upid string) string {
	h.t.Helper()
	node, ok := parseUPID(upid)
	if !ok {
		h.t.Fatalf("bad UPID %q", upid)
	}
	var exit string
	h.eventually("task "+upid, func() bool {
		m := h.ok(http.MethodGet, "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/status", nil).dataMap(h.t)
		if m["status"] != statusStopped {
			return false
		}
		exit, _ = m["exitstatus"].(string)
		return true
	})
	return exit
}

// eventually polls cond with a ticker until it holds or 10 s pass.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			h.t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// clone clones template 9000 on pve1 and returns the UPID.
func (h *harness) clone(newid int, extra url.Values) string {
	h.t.Helper()
	p := url.Values{"newid": {itoa(newid)}, "full": {"1"}}
	for k, v := range extra {
		p[k] = v
	}
	return h.ok(http.MethodPost, "/nodes/pve1/qemu/9000/clone", p).dataString(h.t)
}

// cloneAndWait clones template 9000 and waits for the task and the lock.
func (h *harness) cloneAndWait(newid int, extra url.Values) {
	h.t.Helper()
	if exit := h.waitTask(h.clone(newid, extra)); exit != "OK" {
		h.t.Fatalf("clone exit %q", exit)
	}
	h.eventually("clone lock released", func() bool {
		m := h.ok(http.MethodGet, "/nodes/pve1/qemu/"+itoa(newid)+"/config", nil).dataMap(h.t)
		_, locked := m["lock"]
		return !locked
	})
}

// startAndWait starts a VM and waits for the task.
func (h *harness) startAndWait(vmid int) {
	h.t.Helper()
	upid := h.ok(http.MethodPost, "/nodes/pve1/qemu/"+itoa(vmid)+"/status/start", nil).dataString(h.t)
	if exit := h.waitTask(upid); exit != "OK" {
		h.t.Fatalf("start exit %q", exit)
	}
}

// upload posts a multipart ISO upload as the given token.
func (h *harness) upload(id, secret, storage, filename string, data []byte) *result {
	h.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("content", "iso")
	fw, err := mw.CreateFormFile("filename", filename)
	if err != nil {
		h.t.Fatal(err)
	}
	_, _ = fw.Write(data)
	_ = mw.Close()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, h.url+"/api2/json/nodes/pve1/storage/"+storage+"/upload", &buf)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "PVEAPIToken="+id+"="+secret)
	return h.do(req)
}

// resourceByVMID finds a /cluster/resources?type=vm entry.
func (h *harness) resourceByVMID(vmid int) map[string]any {
	h.t.Helper()
	for _, e := range h.ok(http.MethodGet, "/cluster/resources", url.Values{"type": {"vm"}}).dataList(h.t) {
		if n, _ := e["vmid"].(float64); int(n) == vmid {
			return e
		}
	}
	return nil
}
