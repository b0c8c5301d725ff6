package libvirt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/nocloud"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/libvirtlab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// fakeLease records a DHCP lease for mac in the lab network's lease status
// file, the file libvirt's lease helper keeps for dnsmasq and libvirt reads
// for net-dhcp-leases: a no-OS domain then "has" an address, so that Get
// reports it Running, as a real guest's lease would make it.
func fakeLease(t *testing.T, l *libvirtlab.Lab, mac, ip string) {
	t.Helper()
	path := "/var/lib/libvirt/dnsmasq/" + l.Bridge + ".status"
	var leases []map[string]any
	if b, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, &leases); err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
	}
	leases = append(leases, map[string]any{
		"ip-address": ip, "mac-address": mac, "hostname": "fake", "expiry-time": time.Now().Add(time.Hour).Unix(),
	})
	b, err := json.Marshal(leases)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// seedDriveSource is what the seed drive of a domain holds: "-" when empty,
// live (domblklist) or in the definition (--inactive).
func seedDriveSource(t *testing.T, l *libvirtlab.Lab, name string, inactive bool) string {
	t.Helper()
	args := []string{"domblklist", "--domain", name}
	if inactive {
		args = append(args, "--inactive")
	}
	for line := range strings.SplitSeq(mustVirsh(t, l, args...), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == seedDrive {
			return f[1]
		}
	}
	t.Fatalf("domain %s has no drive %s", name, seedDrive)
	return ""
}

// TestSeedReleasedOnceConsumed: once Get sees the domain's address (the
// guest has read its seed), the seed drive is emptied, live and in the
// definition, and the seed volume deleted; a restarted operator finishes a
// release that stopped between the two; Delete still leaves nothing.
func TestSeedReleasedOnceConsumed(t *testing.T) {
	l := startLab(t)
	for i, typ := range []string{TypeKVM2, TypeKVM} {
		t.Run(typ, func(t *testing.T) {
			e := labEntry(t, l, typ)
			p := newProvider(t, e)
			req := request("seed-" + typ)
			id := createAll(t, p, req)
			if inst, err := p.Get(ctxT(t), id); err != nil || inst.State != provider.StateProvisioning {
				t.Fatalf("Get before the lease = %+v, %v; want Provisioning", inst, err)
			}
			if !slices.Contains(volumes(t, l), p.seedVolume(req.Name)) {
				t.Fatalf("the seed volume is missing before the guest has an address")
			}
			fakeLease(t, l, macFor(req.OwnerUID, req.Name), "198.51.100."+[]string{"201", "202"}[i])
			// The leases are read at most once per poll interval, and a
			// release that failed is retried at the next Get (a guest
			// without an OS can keep the tray from opening while its
			// firmware waits for the medium: ejectSeedDrive), after a
			// backoff that may reach maxEjectBackoff: the bound leaves
			// room for a few of those (one minute was seen too short in a
			// loaded CI run).
			poll.UntilPaced(t, 3*maxEjectBackoff, func() (bool, string) {
				inst, err := p.Get(ctxT(t), id)
				if err != nil || inst.State != provider.StateRunning {
					return false, fmt.Sprintf("Get with a lease = %+v, %v; want Running", inst, err)
				}
				return !slices.Contains(volumes(t, l), p.seedVolume(req.Name)), "seed volume " + p.seedVolume(req.Name) + " still in the pool after the guest had an address"
			})
			if src := seedDriveSource(t, l, req.Name, false); src != "-" {
				t.Errorf("the running domain's seed drive holds %s, want it empty", src)
			}
			if src := seedDriveSource(t, l, req.Name, true); src != "-" {
				t.Errorf("the definition's seed drive holds %s, want it empty", src)
			}
			// Released once: later Gets make no call for it.
			if _, err := p.Get(ctxT(t), id); err != nil {
				t.Fatal(err)
			}
			before := p.Calls()
			if _, err := p.Get(ctxT(t), id); err != nil {
				t.Fatal(err)
			}
			if n := p.Calls() - before; n > 1 {
				t.Errorf("a Get after the release made %d calls, want at most the shared listing's one", n)
			}
			// A domain that stopped and is created again is started without
			// a new seed: its guest has its configuration on its disk.
			mustVirsh(t, l, "destroy", "--domain", req.Name)
			if again := createAll(t, newProvider(t, e), req); again != id {
				t.Fatalf("Create of the stopped domain = %q, want %q", again, id)
			}
			if slices.Contains(volumes(t, l), p.seedVolume(req.Name)) {
				t.Errorf("Create of a domain whose seed was consumed put a seed volume back")
			}
			deleteAll(t, p, id)
			assertGone(t, l, req.Name)
		})
	}
}

// TestSeedReleaseRestartSafe: an operator that stopped after emptying the
// drive, before deleting the volume, leaves a seed that no drive names; a
// fresh operator's Get deletes it, and so does a Delete.
func TestSeedReleaseRestartSafe(t *testing.T) {
	l := startLab(t)
	for i, typ := range []string{TypeKVM2, TypeKVM} {
		t.Run(typ, func(t *testing.T) {
			e := labEntry(t, l, typ)
			for j, via := range []string{"get", "delete"} {
				req := request("half-" + via + "-" + typ)
				id := createAll(t, newProvider(t, e), req)
				ejectSeedDrive(t, l, req.Name)
				fresh := newProvider(t, e)
				if !slices.Contains(volumes(t, l), fresh.seedVolume(req.Name)) {
					t.Fatalf("the seed volume must still be there for this test")
				}
				if via == "get" {
					fakeLease(t, l, macFor(req.OwnerUID, req.Name), "198.51.100."+[]string{"211", "212", "213", "214"}[2*i+j])
					poll.UntilPaced(t, 10*time.Second, func() (bool, string) {
						inst, err := fresh.Get(ctxT(t), id)
						return err == nil && inst.State == provider.StateRunning, fmt.Sprintf("Get with a lease = %+v, %v; want Running", inst, err)
					})
					if slices.Contains(volumes(t, l), fresh.seedVolume(req.Name)) {
						t.Errorf("Get of a restarted operator left the seed that no drive names")
					}
				}
				deleteAll(t, fresh, id)
				assertGone(t, l, req.Name)
			}
		})
	}
}

// ejectSeedDrive empties a domain's seed drive as a stopped operator would
// have left it, without racing the guest: the domain is stopped, the drive
// emptied in its definition and the domain started again. A live eject
// right after a start can fail for as long as the firmware of a guest
// without an OS waits for the drive's medium ("Tray of device 'ide0-1-0'
// is not open", seen for over 30 s under load); the operator ejects only
// once the guest has an address, and retries at the next Get.
func ejectSeedDrive(t *testing.T, l *libvirtlab.Lab, name string) {
	t.Helper()
	mustVirsh(t, l, "destroy", "--domain", name)
	mustVirsh(t, l, "change-media", "--domain", name, "--path", seedDrive, "--eject", "--config", "--force")
	mustVirsh(t, l, "start", "--domain", name)
}

// TestSweepOrphanedSeeds: the garbage collector's listing deletes a seed of
// the operator whose domain is gone, and leaves alone a volume named like a
// seed without the operator's token in its name, one with a made-up token,
// a seed of another entry sharing the pool, a seed whose domain exists,
// and every other volume. No volume is read: the name says whose it is.
func TestSweepOrphanedSeeds(t *testing.T) {
	l := startLab(t)
	for _, typ := range []string{TypeKVM2, TypeKVM} {
		t.Run(typ, func(t *testing.T) {
			e := labEntry(t, l, typ)
			p := newProvider(t, e)
			live := request("live-" + typ)
			createAll(t, p, live)
			orphan := p.seedVolume("orphan-" + typ)
			uploadSeed(t, l, orphan, nocloud.InstanceSeed("orphan-"+typ, []byte("#cloud-config\n"), true))
			// Someone else's volume named like a seed, one with a made-up
			// token, and a seed of another entry on the same pool; each
			// holds a seed of its name, so only the name can tell.
			foreign := "someone-" + typ + seedSuffix
			forged := "forged-" + typ + "-abcdefghijklmnop" + seedSuffix
			other := *e
			other.Name = "other-" + e.Name
			neighbour := newProvider(t, &other).seedVolume("neighbour-" + typ)
			for _, v := range []string{foreign, forged, neighbour} {
				name, _, _ := strings.Cut(v, "-"+typ)
				uploadSeed(t, l, v, nocloud.InstanceSeed(name+"-"+typ, []byte("#cloud-config\n"), true))
			}

			if _, err := p.ListByTag(ctxT(t)); err != nil {
				t.Fatalf("ListByTag: %v", err)
			}
			vols := volumes(t, l)
			if slices.Contains(vols, orphan) {
				t.Errorf("orphaned seed %s was not swept", orphan)
			}
			for _, v := range []string{foreign, forged, neighbour, p.seedVolume(live.Name), diskVolume(live.Name), noOSVolume} {
				if !slices.Contains(vols, v) {
					t.Errorf("volume %s was deleted by the sweep", v)
				}
			}
			deleteAll(t, p, ID("kvm1", live.Name))
			for _, v := range []string{foreign, forged, neighbour} {
				mustVirsh(t, l, "vol-delete", "--pool", l.Pool, "--vol", v)
			}
		})
	}
}

// uploadSeed puts the image of s into a new volume of the lab's pool.
func uploadSeed(t *testing.T, l *libvirtlab.Lab, vol string, s nocloud.Seed) {
	t.Helper()
	var b bytes.Buffer
	if _, err := nocloud.Write(&b, s); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "seed.iso")
	if err := os.WriteFile(f, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	mustVirsh(t, l, "vol-create-as", "--pool", l.Pool, "--name", vol, "--capacity", "1M", "--format", "raw")
	mustVirsh(t, l, "vol-upload", "--pool", l.Pool, "--vol", vol, "--file", f)
}
