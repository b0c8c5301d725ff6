package libvirt

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/libvirtlab"
)

// TestLifecycle runs every operation of both types through the lab's sshd
// against its libvirtd, with a domain that needs no operating system.
func TestLifecycle(t *testing.T) {
	l := startLab(t)
	for _, typ := range []string{TypeKVM2, TypeKVM} {
		t.Run(typ, func(t *testing.T) { testLifecycle(t, l, typ) })
	}
}

func testLifecycle(t *testing.T, l *libvirtlab.Lab, typ string) {
	p := newProvider(t, labEntry(t, l, typ))
	req := request("px-" + typ)
	before := time.Now().Add(-time.Second)
	id := createAll(t, p, req)
	if want := ID("kvm1", req.Name); id != want {
		t.Fatalf("Create = %q, want %q", id, want)
	}
	// Create again is idempotent: the same ID, nothing new.
	if again := createAll(t, p, req); again != id {
		t.Fatalf("second Create = %q, want %q", again, id)
	}
	if got := mustVirsh(t, l, "domstate", "--domain", req.Name); strings.TrimSpace(got) != "running" {
		t.Fatalf("domain state = %q, want running", got)
	}
	doc := mustVirsh(t, l, "dumpxml", "--domain", req.Name)
	facts, err := parseDomain(doc, l.Pool)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := facts.Mark, facts.Marked
	if !strings.Contains(doc, MarkNamespace) || !ok || m.OwnerUID != req.OwnerUID || m.Name != req.Name || m.Owner != "ns/"+req.Name || m.CreatedAt.Before(before.Truncate(time.Second)) {
		t.Fatalf("mark in metadata = %+v (ok %v) from\n%s", m, ok, doc)
	}
	if desc, _ := l.Virsh("desc", "--domain", req.Name); strings.Contains(desc, req.OwnerUID) {
		t.Errorf("the owner UID is in the description %q; the mark belongs in <metadata>", desc)
	}
	vols := volumes(t, l)
	for _, v := range []string{diskVolume(req.Name), p.seedVolume(req.Name)} {
		if !slices.Contains(vols, v) {
			t.Errorf("volume %s missing; volumes: %v", v, vols)
		}
	}
	disk := mustVirsh(t, l, "vol-dumpxml", "--pool", l.Pool, "--vol", diskVolume(req.Name))
	if !strings.Contains(disk, "<backingStore>") || !strings.Contains(disk, noOSVolume) {
		t.Errorf("disk is not an overlay of %s:\n%s", noOSVolume, disk)
	}

	inst, err := p.Get(ctxT(t), id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	// No OS, no lease: running but without an address is still provisioning.
	want := provider.Instance{ID: id, Name: req.Name, OwnerUID: req.OwnerUID, Node: "kvm1", State: provider.StateProvisioning, CreatedAt: inst.CreatedAt}
	if diff := cmp.Diff(want, inst, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	if !inst.CreatedAt.Equal(m.CreatedAt) {
		t.Errorf("CreatedAt = %v, want the mark's %v", inst.CreatedAt, m.CreatedAt)
	}
	list, err := p.ListByTag(ctxT(t))
	if err != nil {
		t.Fatalf("ListByTag: %v", err)
	}
	if len(list) != 1 || list[0].ID != id || list[0].OwnerUID != req.OwnerUID || list[0].State != provider.StateRunning {
		t.Errorf("ListByTag = %+v, want the one running instance %s", list, id)
	}

	deleteAll(t, p, id)
	if slices.Contains(domains(t, l), req.Name) {
		t.Errorf("domain %s is still defined", req.Name)
	}
	vols = volumes(t, l)
	for _, v := range []string{diskVolume(req.Name), p.seedVolume(req.Name)} {
		if slices.Contains(vols, v) {
			t.Errorf("volume %s left behind", v)
		}
	}
	if !slices.Contains(vols, noOSVolume) {
		t.Errorf("the base volume %s was deleted", noOSVolume)
	}
	if err := p.Delete(ctxT(t), id); err != nil {
		t.Errorf("second Delete = %v, want nil", err)
	}
	if _, err := p.Get(ctxT(t), id); !provider.IsNotFound(err) {
		t.Errorf("Get after Delete = %v, want NotFound", err)
	}
}
