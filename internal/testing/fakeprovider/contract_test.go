package fakeprovider_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/providertest"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

// The fake passes the contract suite too: tests of the controllers rely on
// it behaving as a real provider does.
func TestContract(t *testing.T) {
	providertest.Run(t, func(*testing.T) providertest.Harness { return &harness{f: fakeprovider.New(nil)} })
}

// With creates and deletes of several steps, as the controllers' tests use
// them, the fake still keeps the contract.
func TestContractMultiStepCreate(t *testing.T) {
	providertest.Run(t, func(*testing.T) providertest.Harness {
		f := fakeprovider.New(nil)
		f.CreatesUntilDone, f.DeletesUntilDone = 2, 2
		return &harness{f: f}
	})
}

const password = "fake-sentinel-password"

// harness: the fake is its own infrastructure, so a "restarted" Provider is
// the same fake.
type harness struct {
	f       *fakeprovider.Provider
	foreign int
}

func (h *harness) Provider(*testing.T) provider.Provider { return h.f }

func (h *harness) Request(_ *testing.T, uid, name string) provider.Request {
	return provider.Request{OwnerUID: uid, Name: name, Zone: "zone-a", MachineType: "small", Image: "debian",
		UserData: provider.NewSensitive([]byte("#cloud-config\npassword: " + password))}
}

func (h *harness) Secrets() []string { return []string{password} }

func (h *harness) MissingID() provider.ID { return "fake/none" }

// Interrupt has one point: the fake stored the instance, and the caller
// sees an error, as when the operator dies right after the infrastructure
// did the work.
func (h *harness) Interrupt(t *testing.T, req provider.Request, n int) bool {
	if n > 1 {
		return false
	}
	h.f.SetAfterCreate(func(context.Context, provider.ID) error {
		return provider.NewTransient(errors.New("the operator died"))
	})
	defer h.f.SetAfterCreate(nil)
	if _, err := h.f.Create(context.Background(), req); err == nil {
		t.Fatal("the interrupted Create succeeded")
	}
	return true
}

func (h *harness) SetOutage(_ *testing.T, on bool) { h.f.SetUnreachable(on) }

// AddForeign adds an instance someone else made: unmarked, with a mark of
// no installation (forged), or with this installation's mark unsigned or
// signed with another key.
func (h *harness) AddForeign(_ *testing.T, kind providertest.Foreign, name string) (provider.ID, bool) {
	h.foreign++
	id := provider.ID(fmt.Sprintf("foreign/%d", h.foreign))
	in := provider.Instance{ID: id, Name: name, OwnerUID: "uid-" + string(kind), State: provider.StateRunning, CreatedAt: time.Now()}
	own := h.f.Identity().Installation()
	switch kind {
	case providertest.Unmarked:
		h.f.AddInstance(provider.Instance{ID: id, Name: name, State: provider.StateRunning}, false)
	case providertest.Forged:
		h.f.AddMarkedInstance(in, "", "")
	case providertest.Unsigned:
		h.f.AddMarkedInstance(in, own, "")
	case providertest.BadSignature:
		forger := fakeprovider.New(nil).ForInstallation(ownershiptest.Identity("forger"))
		forger.AddInstance(in, true)
		_, sig, _ := forger.MarkOf(id)
		h.f.AddMarkedInstance(in, own, sig)
	case providertest.Sibling:
		// The fake's marks name no entry: it cannot tell another entry's
		// instance from its own.
		return "", false
	default:
		return "", false
	}
	return id, true
}

// CopyMark copies the mark of from, signature included, to a new instance
// of the same name (the fake's names need not be unique).
func (h *harness) CopyMark(t *testing.T, from provider.ID) provider.ID {
	installation, sig, ok := h.f.MarkOf(from)
	if !ok {
		t.Fatalf("no instance %s to copy the mark of", from)
	}
	var src provider.Instance
	for _, in := range h.f.Instances() {
		if in.ID == from {
			src = in
		}
	}
	h.foreign++
	src.ID = provider.ID(fmt.Sprintf("foreign/%d", h.foreign))
	h.f.AddMarkedInstance(src, installation, sig)
	return src.ID
}

// OtherInstallation is a view of the same fake for another installation.
func (h *harness) OtherInstallation(*testing.T) provider.Provider {
	return h.f.ForInstallation(ownershiptest.Identity("other-installation"))
}

func (h *harness) Snapshot(_ *testing.T, id provider.ID) string {
	for _, in := range h.f.Instances() {
		if in.ID == id {
			return fmt.Sprintf("%+v", in)
		}
	}
	return ""
}
