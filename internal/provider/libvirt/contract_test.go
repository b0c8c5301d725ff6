package libvirt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/egress-proxies-operator/internal/cloudinit"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/providertest"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/libvirtlab"
)

// TestContract runs the provider contract suite on both types, each on a
// lab of its own (their instance names would otherwise meet).
func TestContract(t *testing.T) {
	for _, typ := range []string{TypeKVM2, TypeKVM} {
		t.Run(typ, func(t *testing.T) {
			l := startLab(t)
			providertest.Run(t, func(t *testing.T) providertest.Harness {
				return &contractHarness{lab: l, entry: labEntry(t, l, typ)}
			})
		})
	}
}

// contractPassword is the proxy password in every request's user-data.
const contractPassword = "contract-secret-password-7f3a"

// contractHarness is the suite's world: the lab host, a kvm2 or kvm entry
// on it, and the lab's sshd as the outage switch.
type contractHarness struct {
	lab   *libvirtlab.Lab
	entry *config.Entry
}

func (h *contractHarness) Provider(t *testing.T) provider.Provider { return newProvider(t, h.entry) }

func (h *contractHarness) Request(t *testing.T, ownerUID, name string) provider.Request {
	ud, err := cloudinit.Render(cloudinit.Proxy{Port: 3128, Username: "contract", Password: contractPassword})
	if err != nil {
		t.Fatal(err)
	}
	req := request(name)
	req.OwnerUID, req.UserData = ownerUID, provider.NewSensitive(ud)
	return req
}

func (h *contractHarness) Secrets() []string { return []string{contractPassword} }

func (h *contractHarness) MissingID() provider.ID { return ID("kvm1", "contract-missing") }

// Interrupt makes n calls of Create on a provider of its own and drops it:
// Create does one step per call, so call n is interruption point n.
func (h *contractHarness) Interrupt(t *testing.T, req provider.Request, n int) bool {
	p := newProvider(t, h.entry)
	defer p.Close()
	for range n {
		_, err := p.Create(ctxT(t), req)
		if err == nil {
			return false
		}
		if !provider.IsInProgress(err) {
			t.Fatalf("Create before the interruption: %v", err)
		}
	}
	return true
}

func (h *contractHarness) SetOutage(t *testing.T, on bool) {
	if on {
		h.lab.StopSSHD()
		return
	}
	h.lab.StartSSHD()
}

// AddForeign defines a domain as someone else would: unmarked; with a
// mark copied from another domain (it names that one); or with this
// installation's whole mark for the domain itself, unsigned or signed with
// another key.
func (h *contractHarness) AddForeign(t *testing.T, kind providertest.Foreign, name string) (provider.ID, bool) {
	doc := foreignDomain(name, h.lab.Pool, "foreign-"+name+".qcow2")
	m := mark{Installation: testIdentity.Installation(), OwnerUID: "uid-" + string(kind), Name: name, Owner: "ns/x", CreatedAt: time.Now().UTC().Truncate(time.Second)}
	switch kind {
	case providertest.Unmarked:
	case providertest.Forged:
		m.Name = "another-domain"
	case providertest.Unsigned:
	case providertest.BadSignature:
		forger, err := ownership.NewIdentity(testIdentity.Installation(), []byte("a forger's key of thirty-two b.."))
		if err != nil {
			t.Fatal(err)
		}
		m = newMark(forger, h.entry.Name, "kvm1", m.OwnerUID, name, m.Owner, m.CreatedAt)
	case providertest.Sibling:
		m = newMark(testIdentity, providertest.SiblingEntry, "kvm1", m.OwnerUID, name, m.Owner, m.CreatedAt)
	default:
		return "", false
	}
	if kind != providertest.Unmarked {
		el, err := markElement(m)
		if err != nil {
			t.Fatal(err)
		}
		doc = forgedDomain(name, el)
	}
	h.define(t, name, doc)
	return ID("kvm1", name), true
}

func (h *contractHarness) define(t *testing.T, name, doc string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "foreign.xml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	mustVirsh(t, h.lab, "define", "--file", path)
	t.Cleanup(func() { _, _ = h.lab.Virsh("undefine", "--domain", name) })
}

// CopyMark defines a domain of another name (the lab has one host, where
// names are unique) whose metadata is from's, signed mark included.
func (h *contractHarness) CopyMark(t *testing.T, from provider.ID) provider.ID {
	_, name, _ := strings.Cut(string(from), "/")
	src, err := h.lab.Virsh("dumpxml", "--inactive", "--domain", name)
	if err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(src); err != nil || d.Metadata == nil {
		t.Fatalf("reading the metadata of %s: %v", name, err)
	}
	copyName := name + "-copy"
	h.define(t, copyName, forgedDomain(copyName, d.Metadata.XML))
	return ID("kvm1", copyName)
}

// OtherInstallation is a provider of the same entry for another
// installation.
func (h *contractHarness) OtherInstallation(t *testing.T) provider.Provider {
	p, err := New(h.entry, provider.Deps{Ownership: ownershiptest.Identity("other-installation")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Snapshot is the domain's persistent definition and state, or "" when it
// is gone.
func (h *contractHarness) Snapshot(t *testing.T, id provider.ID) string {
	_, name, _ := strings.Cut(string(id), "/")
	doc, err := h.lab.Virsh("dumpxml", "--inactive", "--domain", name)
	if err != nil {
		return ""
	}
	state, _ := h.lab.Virsh("domstate", "--domain", name)
	return state + doc
}

// forgedDomain is a domain with a mark in the operator's namespace that
// names another domain.
func forgedDomain(name, markElement string) string {
	return `<domain type='qemu'><name>` + name + `</name><metadata>` + markElement + `</metadata>` +
		`<memory unit='MiB'>64</memory><vcpu>1</vcpu><os><type arch='x86_64' machine='pc'>hvm</type></os></domain>`
}
