package guests_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/cloudinit"
	"github.com/egress-proxies/egress-proxies-operator/internal/nocloud"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim/guests"
)

var clusterYAML = `
speed: 1000
nodes: [{name: pve1}]
storages:
  - {id: local-lvm, type: lvmthin, content: [images]}
  - {id: seeds, type: dir, content: [iso]}
templates:
  - vmid: 9000
    node: pve1
    name: debian-13
    disks: [{slot: scsi0, storage: local-lvm, size: 3G}]
    boot: order=scsi0
    net0: virtio=BC:24:11:00:90:00,bridge=vmbr0
    agent: "1"
tokens:
  - id: "op@pve!t"
    secret: "9e575000-0000-4000-8000-0000000000e2"
    acl:
      - path: /
        privileges: ` + proxmox.PrivilegesYAML(append([]string{"Datastore.Allocate"}, proxmox.RootPrivileges...)) + `
`

// api is a minimal Proxmox API client for this test: the provider's own
// client does not exist yet, and the point here is the guest, not the client.
type api struct {
	t    *testing.T
	base string
}

func (a api) do(method, path string, body io.Reader, contentType string) map[string]any {
	a.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, a.base+path, body)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "PVEAPIToken=op@pve!t=9e575000-0000-4000-8000-0000000000e2")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		a.t.Fatalf("%s %s: %s %s", method, path, resp.Status, b)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	return out
}

func (a api) form(method, path string, v url.Values) map[string]any {
	a.t.Helper()
	return a.do(method, path, strings.NewReader(v.Encode()), "application/x-www-form-urlencoded")
}

// wait polls the task until it stopped OK.
func (a api) wait(node string, upid any) {
	a.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		st := a.do(http.MethodGet, fmt.Sprintf("/nodes/%s/tasks/%s/status", node, url.PathEscape(fmt.Sprint(upid))), nil, "")
		data, _ := st["data"].(map[string]any)
		if data["status"] == "stopped" {
			if data["exitstatus"] != "OK" {
				a.t.Fatalf("task %v: %v", upid, data["exitstatus"])
			}
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("task %v still running", upid)
		}
	}
}

// TestRequestThroughASimulatedVM drives the simulator as the provider will:
// upload the seed, clone, attach the seed on ide2, start, read the address
// from the agent; then a request through that address with the credentials
// the user-data configured reaches a loopback HTTP server.
func TestRequestThroughASimulatedVM(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, "reached the origin")
	}))
	defer origin.Close()

	cfg, err := pvesim.ParseConfig([]byte(clusterYAML))
	if err != nil {
		t.Fatal(err)
	}
	runner := &guests.Runner{}
	defer runner.Close()
	sim, err := pvesim.New(cfg, pvesim.WithGuestRunner(runner))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sim.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, err := sim.Serve(ctx, pvesim.ServeOptions{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	a := api{t: t, base: base + "/api2/json"}

	userData, err := cloudinit.Render(cloudinit.Proxy{Port: 3128, Username: "u1", Password: "seed-password"})
	if err != nil {
		t.Fatal(err)
	}
	var iso bytes.Buffer
	if _, err := nocloud.Write(&iso, nocloud.Seed{UserData: userData, MetaData: nocloud.MetaData("proxy-e2e", "proxy-e2e")}); err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("content", "iso")
	fw, _ := mw.CreateFormFile("filename", "proxy-e2e-seed.iso")
	_, _ = fw.Write(iso.Bytes())
	_ = mw.Close()
	up := a.do(http.MethodPost, "/nodes/pve1/storage/seeds/upload", &body, mw.FormDataContentType())
	a.wait("pve1", up["data"])

	clone := a.form(http.MethodPost, "/nodes/pve1/qemu/9000/clone", url.Values{"newid": {"101"}, "name": {"proxy-e2e"}, "full": {"1"}})
	a.wait("pve1", clone["data"])
	a.form(http.MethodPost, "/nodes/pve1/qemu/101/config", url.Values{"ide2": {"seeds:iso/proxy-e2e-seed.iso,media=cdrom"}})
	start := a.form(http.MethodPost, "/nodes/pve1/qemu/101/status/start", url.Values{})
	a.wait("pve1", start["data"])

	// The agent answers after the (scaled) boot delay.
	var addr netip.Addr
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if found := agentAddress(t, a.base); found.IsValid() {
			addr = found
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent never reported an address")
		}
	}
	if addr != pvesim.GuestAddress(101) || !addr.IsLoopback() {
		t.Fatalf("agent address %s, want the guest's loopback address %s", addr, pvesim.GuestAddress(101))
	}

	proxyAddr := netip.AddrPortFrom(addr, 3128).String()
	if code, body := through(t, proxyAddr, "u1", "seed-password", origin.URL); code != http.StatusOK || body != "reached the origin" {
		t.Fatalf("through the guest with credentials: %d %q", code, body)
	}
	if code, _ := through(t, proxyAddr, "", "", origin.URL); code != http.StatusProxyAuthRequired {
		t.Errorf("without credentials: %d, want 407", code)
	}

	// Stopping the VM stops its proxy.
	stop := a.form(http.MethodPost, "/nodes/pve1/qemu/101/status/stop", url.Values{})
	a.wait("pve1", stop["data"])
	if code, _ := through(t, proxyAddr, "u1", "seed-password", origin.URL); code == http.StatusOK {
		t.Error("the guest still serves after the VM stopped")
	}
}

// agentAddress reads the first non-loopback-interface IPv4 address the agent
// reports, or an invalid address while the agent is not up.
func agentAddress(t *testing.T, base string) netip.Addr {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/nodes/pve1/qemu/101/agent/network-get-interfaces", nil)
	req.Header.Set("Authorization", "PVEAPIToken=op@pve!t=9e575000-0000-4000-8000-0000000000e2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return netip.Addr{}
	}
	var out struct {
		Data struct {
			Result []struct {
				Name string `json:"name"`
				IPs  []struct {
					Address string `json:"ip-address"`
					Type    string `json:"ip-address-type"`
				} `json:"ip-addresses"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	for _, iface := range out.Data.Result {
		if iface.Name == "lo" {
			continue
		}
		for _, ip := range iface.IPs {
			if a, err := netip.ParseAddr(ip.Address); err == nil && ip.Type == "ipv4" {
				return a
			}
		}
	}
	return netip.Addr{}
}
