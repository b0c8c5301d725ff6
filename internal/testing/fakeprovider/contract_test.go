package fakeprovider_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/providertest"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

// The fake passes the contract suite too: tests of the controllers rely on
// it behaving as a real provider does.
func TestContract(t *testing.T) {
	providertest.Run(t, func(*testing.T) providertest.Harness { return &harness{f: fakeprovider.New(nil)} })
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

// AddForeign: the fake's mark is one flag, so it has no forged form.
func (h *harness) AddForeign(_ *testing.T, kind providertest.Foreign, name string) (provider.ID, bool) {
	if kind != providertest.Unmarked {
		return "", false
	}
	h.foreign++
	id := provider.ID(fmt.Sprintf("foreign/%d", h.foreign))
	h.f.AddInstance(provider.Instance{ID: id, Name: name, State: provider.StateRunning}, false)
	return id, true
}

func (h *harness) Snapshot(_ *testing.T, id provider.ID) string {
	for _, in := range h.f.Instances() {
		if in.ID == id {
			return fmt.Sprintf("%+v", in)
		}
	}
	return ""
}
