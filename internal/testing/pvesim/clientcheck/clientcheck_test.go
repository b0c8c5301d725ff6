package clientcheck

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
)

// Fake test credentials.
const (
	tokenID = "check@pve!client"
	secret  = "c11e4c7e-0000-4c4e-8c4b-00000000c4ec"
)

// TestIndependentClientLifecycle: go-proxmox clones a template, writes the
// config, starts the VM, reads the agent, stops and destroys it, over HTTPS
// trusting the simulator's CA.
func TestIndependentClientLifecycle(t *testing.T) {
	cfg := pvesim.Config{
		Nodes:    []pvesim.NodeConfig{{Name: "pve1"}},
		Storages: []pvesim.StorageConfig{{ID: "local-lvm", Type: "lvmthin", Content: []string{"images"}}},
		Templates: []pvesim.TemplateConfig{{
			VMID: 9000, Node: "pve1", Name: "debian-13", Agent: "1",
			Disks: []pvesim.DiskConfig{{Slot: "scsi0", Storage: "local-lvm", Size: "3G"}},
			Net0:  "virtio=BC:24:11:00:90:00,bridge=vmbr0",
		}},
		Tokens: []pvesim.TokenConfig{{ID: tokenID, Secret: secret, ACL: []pvesim.ACLEntry{{Path: "/", Privileges: []string{"*"}}}}},
		Speed:  1000,
	}
	sim, err := pvesim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	u, err := sim.Serve(context.Background(), pvesim.ServeOptions{Addr: "127.0.0.1:0", TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(sim.CACertPEM())
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	c := proxmox.NewClient(u+"/api2/json", proxmox.WithAPIToken(tokenID, secret), proxmox.WithHTTPClient(hc))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	v, err := c.Version(ctx)
	if err != nil || v.Version == "" {
		t.Fatalf("version: %v %+v", err, v)
	}
	node, err := c.Node(ctx, "pve1")
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	tmpl, err := node.VirtualMachine(ctx, 9000)
	if err != nil {
		t.Fatalf("template: %v", err)
	}
	newid, task, err := tmpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 301, Name: "proxy-abcdefghijklmnop", Full: true, Description: "check\n"})
	if err != nil || newid != 301 {
		t.Fatalf("clone: %v (newid %d)", err, newid)
	}
	wait(ctx, t, task)

	var vm *proxmox.VirtualMachine
	poll(ctx, t, "clone lock released", func() bool {
		vm, err = node.VirtualMachine(ctx, 301)
		return err == nil && vm.Lock == ""
	})
	if vm.Name != "proxy-abcdefghijklmnop" {
		t.Errorf("name = %q", vm.Name)
	}
	task, err = vm.Config(ctx, proxmox.VirtualMachineOption{Name: "cores", Value: 2}, proxmox.VirtualMachineOption{Name: "tags", Value: "Proxy_Operator"})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	wait(ctx, t, task)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if vm.VirtualMachineConfig.Tags != "proxy_operator" {
		t.Errorf("tags = %q", vm.VirtualMachineConfig.Tags)
	}

	task, err = vm.Start(ctx)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	wait(ctx, t, task)
	var ifaces []*proxmox.AgentNetworkIface
	poll(ctx, t, "agent", func() bool {
		ifaces, err = vm.AgentGetNetworkIFaces(ctx)
		if err != nil && !strings.Contains(err.Error(), "QEMU guest agent is not running") {
			t.Fatalf("agent: %v", err)
		}
		return err == nil
	})
	if len(ifaces) != 1 || len(ifaces[0].IPAddresses) == 0 || ifaces[0].IPAddresses[0].IPAddress != pvesim.GuestAddress(301).String() {
		t.Errorf("interfaces = %+v", ifaces)
	}

	task, err = vm.Stop(ctx)
	if err != nil {
		t.Fatalf("stop: %v", err)
	}
	wait(ctx, t, task)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	task, err = vm.Delete(ctx, &proxmox.VirtualMachineDeleteOptions{Purge: true, DestroyUnreferencedDisks: true})
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	wait(ctx, t, task)
	if _, err := node.VirtualMachine(ctx, 301); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("after delete: %v", err)
	}
}

// wait waits for a task to end OK.
func wait(ctx context.Context, t *testing.T, task *proxmox.Task) {
	t.Helper()
	if err := task.Wait(ctx, 5*time.Millisecond, 10*time.Second); err != nil {
		t.Fatalf("task %s: %v", task.UPID, err)
	}
	if !task.IsSuccessful {
		t.Fatalf("task %s: %s", task.UPID, task.ExitStatus)
	}
}

// poll checks cond on a ticker until it holds or ctx ends.
func poll(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
