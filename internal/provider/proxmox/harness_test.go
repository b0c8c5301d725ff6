package proxmox

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/egress-proxies-operator/internal/cloudinit"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/providertest"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/logbuf"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim/guests"
)

// sentinelSecret is the token secret; it must appear in no error, log line
// or span.
const sentinelSecret = "9d41e7c2-5e17-4e1a-b5ec-5e7713e1c0de"

// sentinelPassword is in the user-data; the same rule applies.
const sentinelPassword = "sentinel-password-5b0f33aa"

var simYAML = `
speed: 1000
nodes: [{name: pve1}, {name: pve2}]
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
  - vmid: 9001
    node: pve1
    name: debian-13-cloudinit
    disks: [{slot: scsi0, storage: local-lvm, size: 3G}]
    net0: virtio=BC:24:11:00:90:01,bridge=vmbr0
    agent: "1"
    cloudInitStorage: local-lvm
  - vmid: 9100
    node: pve2
    name: debian-13-pve2
    disks: [{slot: scsi0, storage: local-lvm, size: 3G}]
    boot: order=scsi0
    net0: virtio=BC:24:11:00:91:00,bridge=vmbr0
    agent: "1"
containers:
  - {vmid: 500, node: pve1, name: ct}
tokens:
  - id: "op@pve!t"
    secret: "` + sentinelSecret + `"
    acl:
      - path: /
        privileges: ` + PrivilegesYAML(RootPrivileges) + `
      - path: /storage/seeds
        privileges: ` + PrivilegesYAML(SeedStoragePrivileges) + `
  - id: "noseed@pve!t"
    secret: "a7e0f11e-0000-4000-8000-000000000002"
    acl:
      - path: /
        privileges: ` + PrivilegesYAML(RootPrivileges) + `
`

// testIdentity is the installation every provider of these tests belongs
// to, so that a restarted provider owns what an earlier one made.
var testIdentity = ownershiptest.Identity("proxmox-tests")

type harness struct {
	t      *testing.T
	sim    *pvesim.Sim
	runner *guests.Runner
	entry  *config.Entry
	block  *Block
	logs   *logbuf.Buffer
	ctx    context.Context
}

// newHarness starts a simulator on loopback and an entry pointing at it.
func newHarness(t *testing.T, mod func(*Block)) *harness {
	t.Helper()
	return newHarnessYAML(t, "", mod)
}

// newHarnessYAML is newHarness with extra top-level simulator YAML; a
// speed line in extra replaces simYAML's.
func newHarnessYAML(t *testing.T, extra string, mod func(*Block)) *harness {
	t.Helper()
	simConfig := simYAML
	if strings.HasPrefix(extra, "speed:") || strings.Contains(extra, "\nspeed:") {
		simConfig = strings.Replace(simConfig, "\nspeed: 1000\n", "\n", 1)
	}
	cfg, err := pvesim.ParseConfig([]byte(simConfig + extra))
	if err != nil {
		t.Fatal(err)
	}
	runner := &guests.Runner{}
	t.Cleanup(runner.Close)
	sim, err := pvesim.New(cfg, pvesim.WithGuestRunner(runner))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	base, err := sim.Serve(ctx, pvesim.ServeOptions{Addr: "127.0.0.1:0", TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(tokenFile, []byte("op@pve!t="+sentinelSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, sim.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	poll := 10 * time.Millisecond
	b := &Block{
		APIURL: base, TokenFile: tokenFile, CAFile: caFile,
		Zones:      map[string]Zone{"zone-a": {Nodes: []string{"pve1"}}},
		Images:     map[string]Image{"debian": {TemplateVMID: 9000}},
		ISOStorage: "seeds", AcceptLoopbackAddresses: true,
		Budgets: Budgets{PollInterval: durationPtr(poll)},
	}
	if mod != nil {
		mod(b)
	}
	e := &config.Entry{Name: "lab", Type: TypeName, Zones: []string{"zone-a"}, Images: []string{"debian"},
		MachineTypes: map[string]config.MachineType{"small": {Name: "small", Cores: 2, MemoryMiB: 512}, "big": {Name: "big", Cores: 1, MemoryMiB: 512, DiskGiB: 5}},
		Block:        b}
	logs := &logbuf.Buffer{}
	log := logs.Logger(2)
	return &harness{t: t, sim: sim, runner: runner, entry: e, block: b, logs: logs, ctx: logr.NewContext(ctx, log)}
}

// provider builds a new Provider instance on the harness's entry: a new
// instance is what an operator restart looks like.
func (h *harness) provider() *Provider {
	h.t.Helper()
	p, err := New(h.entry, provider.Deps{Ownership: testIdentity, Entries: []string{h.entry.Name, providertest.SiblingEntry}})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *harness) request(uid, name string) provider.Request {
	h.t.Helper()
	ud, err := cloudinit.Render(cloudinit.Proxy{Port: 3128, Username: "u1", Password: sentinelPassword})
	if err != nil {
		h.t.Fatal(err)
	}
	return provider.Request{OwnerUID: uid, Owner: provider.ObjectRef{Namespace: "ns", Name: "p"}, Name: name,
		Zone: "zone-a", MachineType: "small", Image: "debian", UserData: provider.NewSensitive(ud)}
}

// eventually polls f until it returns true, failing the test after the
// deadline.
func (h *harness) eventually(what string, f func() bool) {
	h.t.Helper()
	poll.Until(h.t, 20*time.Second, func() (bool, string) { return f(), what })
}

// create calls Create until it returns an ID; every error must be InProgress.
func (h *harness) create(p *Provider, req provider.Request) provider.ID {
	h.t.Helper()
	var id provider.ID
	h.eventually("create "+req.Name, func() bool {
		got, err := p.Create(h.ctx, req)
		if err != nil && !provider.IsInProgress(err) {
			h.t.Fatalf("create: %v", err)
		}
		id = got
		return err == nil
	})
	return id
}

// running calls Get until the instance runs with an address.
func (h *harness) running(p *Provider, id provider.ID) provider.Instance {
	h.t.Helper()
	var inst provider.Instance
	h.eventually("running "+string(id), func() bool {
		got, err := p.Get(h.ctx, id)
		if err != nil && !provider.IsTransient(err) {
			h.t.Fatalf("get: %v", err)
		}
		inst = got
		return err == nil && got.State == provider.StateRunning && got.Address.IsValid()
	})
	return inst
}

// deleteAll calls Delete until it returns nil.
func (h *harness) deleteAll(p *Provider, id provider.ID) {
	h.t.Helper()
	h.eventually("delete "+string(id), func() bool {
		err := p.Delete(h.ctx, id)
		if err != nil && !provider.IsInProgress(err) {
			h.t.Fatalf("delete: %v", err)
		}
		return err == nil
	})
}

// vmsNamed lists the simulator's VMs with a name.
func (h *harness) vmsNamed(name string) []pvesim.VMInfo {
	var out []pvesim.VMInfo
	for _, v := range h.sim.VMs() {
		if v.Name == name {
			out = append(out, v)
		}
	}
	return out
}

// foreignClone clones the template to vmid under a name, with no mark, as
// someone else would, and waits until the clone is done.
func (h *harness) foreignClone(vmid int, name string) {
	h.t.Helper()
	c := newClient(h.block.APIURL, h.block.TokenFile, h.block.CAFile, false)
	upid, err := c.clone(h.ctx, "pve1", 9000, url.Values{"newid": {strconv.Itoa(vmid)}, "name": {name}, "full": {"1"}, "description": {"someone else's VM"}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.waitTask(c, "pve1", upid)
	h.eventually("foreign clone unlocked", func() bool {
		for _, v := range h.sim.VMs() {
			if v.VMID == vmid {
				return v.Lock == ""
			}
		}
		return false
	})
}

func (h *harness) waitTask(c *client, node, upid string) {
	h.t.Helper()
	h.eventually("task "+upid, func() bool {
		st, err := c.taskStatus(h.ctx, node, upid)
		if err != nil {
			h.t.Fatal(err)
		}
		if st.Done() && !st.OK() {
			h.t.Fatalf("task %s: %s", upid, st.ExitStatus)
		}
		return st.Done()
	})
}

func durationPtr(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// assertNoSecret fails when a text holds the token secret or the password.
func assertNoSecret(t *testing.T, where, text string) {
	t.Helper()
	for _, s := range []string{sentinelSecret, sentinelPassword} {
		if strings.Contains(text, s) {
			t.Errorf("%s holds a secret: %q", where, text)
		}
	}
}
