package libvirt

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/libvirtlab"
)

// TestRestartAtEveryStep kills the operator (drops the provider and its
// in-memory state) after every step of Create and of Delete: a fresh
// provider converges on one domain, then on nothing left.
func TestRestartAtEveryStep(t *testing.T) {
	l := startLab(t)
	for _, typ := range []string{TypeKVM2, TypeKVM} {
		t.Run(typ, func(t *testing.T) {
			e := labEntry(t, l, typ)
			// Count the steps of an undisturbed create and delete.
			req := request("steps-" + typ)
			p := newProvider(t, e)
			createSteps := 0
			var id provider.ID
			for ; createSteps < maxSteps; createSteps++ {
				var err error
				if id, err = p.Create(ctxT(t), req); err == nil {
					break
				} else if !provider.IsInProgress(err) {
					t.Fatalf("Create: %v", err)
				}
			}
			deleteSteps := 0
			for ; deleteSteps < maxSteps; deleteSteps++ {
				err := p.Delete(ctxT(t), id)
				if err == nil {
					break
				} else if !provider.IsInProgress(err) {
					t.Fatalf("Delete: %v", err)
				}
			}
			if createSteps < 4 || deleteSteps < 3 {
				t.Fatalf("create took %d steps and delete %d: too few to test restarts between them", createSteps, deleteSteps)
			}
			for k := 1; k <= createSteps; k++ {
				req := request(fmt.Sprintf("crash-%s-%d", typ, k))
				first := newProvider(t, e)
				for range k {
					if _, err := first.Create(ctxT(t), req); err != nil && !provider.IsInProgress(err) {
						t.Fatalf("Create before the restart: %v", err)
					}
				}
				first.Close()
				second := newProvider(t, e)
				id := createAll(t, second, req)
				if n := countPrefix(domains(t, l), req.Name); n != 1 {
					t.Fatalf("restart after create step %d: %d domains named %s, want 1", k, n, req.Name)
				}
				// Now delete, restarting after step j (j from the create's k,
				// so every delete step is interrupted somewhere).
				j := 1 + (k-1)%deleteSteps
				third := newProvider(t, e)
				for range j {
					if err := third.Delete(ctxT(t), id); err != nil && !provider.IsInProgress(err) {
						t.Fatalf("Delete before the restart: %v", err)
					}
				}
				third.Close()
				deleteAll(t, newProvider(t, e), id)
				assertGone(t, l, req.Name)
			}
		})
	}
}

// TestDeleteAtEveryStep deletes a Proxy whose create stopped after each of
// its steps (domain defined, disk created, seed volume created, seed
// uploaded, started), the way the operator does when the instance's ID was
// never recorded: the instances ListByTag finds with the Proxy's owner UID
// are deleted, by the same process and by a restarted one. Nothing is left
// (domain, disk, seed), before and after a garbage collection pass.
func TestDeleteAtEveryStep(t *testing.T) {
	l := startLab(t)
	for _, typ := range []string{TypeKVM2, TypeKVM} {
		t.Run(typ, func(t *testing.T) {
			e := labEntry(t, l, typ)
			for _, restart := range []bool{false, true} {
				for k := 0; ; k++ {
					req := request(fmt.Sprintf("del-%s-%d-%v", typ, k, restart))
					p := newProvider(t, e)
					finished := false
					for range k {
						if _, err := p.Create(ctxT(t), req); err == nil {
							finished = true
						} else if !provider.IsInProgress(err) {
							t.Fatalf("Create: %v", err)
						}
					}
					if restart {
						p.Close()
						p = newProvider(t, e)
					}
					list, err := p.ListByTag(ctxT(t))
					if err != nil {
						t.Fatalf("ListByTag: %v", err)
					}
					found := 0
					for _, in := range list {
						if in.OwnerUID == req.OwnerUID {
							found++
							deleteAll(t, p, in.ID)
						}
					}
					if k > 0 && found != 1 {
						t.Errorf("after %d create steps ListByTag found %d instances of the proxy, want 1", k, found)
					}
					assertGone(t, l, req.Name)
					if _, err := p.ListByTag(ctxT(t)); err != nil {
						t.Fatalf("ListByTag (garbage collection pass): %v", err)
					}
					assertGone(t, l, req.Name)
					if finished {
						break
					}
					if k > maxSteps {
						t.Fatalf("Create did not finish in %d steps", k)
					}
				}
			}
		})
	}
}

func countPrefix(names []string, name string) int {
	n := 0
	for _, x := range names {
		if x == name {
			n++
		}
	}
	return n
}

// assertGone checks that no domain or volume of the instance is left.
func assertGone(t *testing.T, l *libvirtlab.Lab, name string) {
	t.Helper()
	if slices.Contains(domains(t, l), name) {
		t.Errorf("domain %s left behind", name)
	}
	for _, v := range volumes(t, l) {
		if strings.HasPrefix(v, name+"-") {
			t.Errorf("volume %s left behind", v)
		}
	}
}

// TestForeignUntouched puts a domain without the mark at a proxy's name,
// and foreign volumes beside it: Create refuses it, Delete leaves it and
// counts it as gone, ListByTag does not list it, nothing of it is touched.
func TestForeignUntouched(t *testing.T) {
	l := startLab(t)
	for _, typ := range []string{TypeKVM2, TypeKVM} {
		t.Run(typ, func(t *testing.T) {
			p := newProvider(t, labEntry(t, l, typ))
			req := request("foreign-" + typ)
			vol := req.Name + "-disk.qcow2"
			mustVirsh(t, l, "vol-create-as", "--pool", l.Pool, "--name", vol, "--capacity", "1M", "--format", "qcow2")
			mustVirsh(t, l, "vol-create-as", "--pool", l.Pool, "--name", "someone-elses.qcow2", "--capacity", "1M", "--format", "qcow2")
			xml := filepath.Join(t.TempDir(), "foreign.xml")
			if err := os.WriteFile(xml, []byte(foreignDomain(req.Name, l.Pool, vol)), 0o600); err != nil {
				t.Fatal(err)
			}
			mustVirsh(t, l, "define", "--file", xml)
			mustVirsh(t, l, "start", "--domain", req.Name)

			_, err := p.Create(ctxT(t), req)
			if !provider.IsPermanent(err) || !strings.Contains(err.Error(), "mark") {
				t.Errorf("Create over a foreign domain = %v, want Permanent naming the mark", err)
			}
			if err := p.Delete(ctxT(t), ID("kvm1", req.Name)); err != nil {
				t.Errorf("Delete of a foreign domain = %v, want nil (left alone, counts as gone)", err)
			}
			list, err := p.ListByTag(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range list {
				if in.Name == req.Name {
					t.Errorf("ListByTag lists the foreign domain: %+v", in)
				}
			}
			if _, err := p.Get(ctxT(t), ID("kvm1", req.Name)); !provider.IsNotFound(err) {
				t.Errorf("Get of a foreign domain = %v, want NotFound", err)
			}
			if st := strings.TrimSpace(mustVirsh(t, l, "domstate", "--domain", req.Name)); st != "running" {
				t.Errorf("the foreign domain is %s, want it still running", st)
			}
			vols := volumes(t, l)
			for _, v := range []string{vol, "someone-elses.qcow2"} {
				if !slices.Contains(vols, v) {
					t.Errorf("foreign volume %s was deleted", v)
				}
			}
			mustVirsh(t, l, "destroy", "--domain", req.Name)
			mustVirsh(t, l, "undefine", "--domain", req.Name)
			mustVirsh(t, l, "vol-delete", "--pool", l.Pool, "--vol", vol)
			mustVirsh(t, l, "vol-delete", "--pool", l.Pool, "--vol", "someone-elses.qcow2")
		})
	}
}

// foreignDomain is a domain someone else made, with a disk of the pool and
// a <metadata> element of another namespace.
func foreignDomain(name, pool, vol string) string {
	return fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name>
  <metadata><other:owner xmlns:other="https://example.org/other"><name>%s</name></other:owner></metadata>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source pool='%s' volume='%s'/>
      <target dev='vda' bus='virtio'/>
    </disk>
  </devices>
</domain>`, name, name, pool, vol)
}
