package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

// An instance that stops right after every create (a broken image) must not
// make the operator create without end: each successor waits longer, the
// waits are in the events, and after the window's limit the Proxy stops
// with ReplacementLoop and no further Create (item 8 of #12).
func TestReplacementLoopIsBoundedAndBacksOff(t *testing.T) {
	ns := newNamespace(t)
	fake := fakeprovider.New(nil)
	fake.SetAfterCreate(func(_ context.Context, id provider.ID) error {
		fake.SetState(id, provider.StateStopped)
		return nil
	})
	op := startOperator(t, operatorOptions{namespace: ns, fake: fake, opts: controller.Options{
		Replacement: controller.ReplacementPolicy{Backoff: 100 * time.Millisecond, Limit: 3, Window: time.Hour},
	}})
	if err := k8s.Create(context.Background(), newProxy(ns, "web")); err != nil {
		t.Fatal(err)
	}
	p := waitPhase(t, ns, "web", crawlv1alpha1.ProxyPhaseFailed, crawlv1alpha1.ReasonReplacementLoop)
	if p.Status.RecentReplacements != 4 || p.Status.Address != "" {
		t.Errorf("recentReplacements %d, address %q; want 4 and none", p.Status.RecentReplacements, p.Status.Address)
	}
	// The first create and one successor for each of the 3 allowed
	// replacements; nothing after, however long we look.
	consistently(t, time.Second, func() (bool, string) {
		n := op.fake.CallCount(provider.OpCreate)
		return n == 4, fmt.Sprintf("Create calls = %d, want 4", n)
	})
	// Each stopped instance was removed before its successor: nothing of
	// the Proxy is left running or stopped.
	if left := op.fake.Instances(); len(left) != 0 {
		t.Errorf("instances left = %+v, want none", left)
	}

	waitEvents(t, ns, "web",
		"the successor is created in 100ms", "the successor is created in 200ms", "the successor is created in 400ms",
		"no successor is created", "ReplacementLoop: The instance was replaced 4 times")
}

// The cap covers the provider's part of a create (Create called until it
// returns the ID); the guest's boot holds no slot. A Proxy in line is
// handed the slot when it frees and woken by it: with a resync of an hour
// and creates that take three calls, the only way the third Proxy can get
// its instance in time is that wake-up.
func TestConcurrentCreatesAreCappedPerEntry(t *testing.T) {
	ns := newNamespace(t)
	cfg, err := config.Parse([]byte(`
providers:
  - name: lab
    type: fake
    maxConcurrentCreates: 1
    zones: [rack-a, rack-b]
    machineTypes:
      small: {cores: 1, memoryMiB: 512, diskGiB: 8}
    images: [debian-12]
`), fakeprovider.Registry())
	if err != nil {
		t.Fatal(err)
	}
	fake := fakeprovider.New(nil)
	fake.CreatesUntilDone = 3
	fake.GetsUntilRunning = 40
	op := startOperator(t, operatorOptions{namespace: ns, fake: fake, cfg: cfg,
		opts: controller.Options{ResyncInterval: time.Hour}})
	names := []string{"one", "two", "three"}
	for _, name := range names {
		if err := k8s.Create(context.Background(), newProxy(ns, name)); err != nil {
			t.Fatal(err)
		}
	}
	queued, bootingTogether := false, false
	eventually(t, 30*time.Second, func() (bool, string) {
		booting := 0
		for _, in := range op.fake.Instances() {
			if in.State == provider.StateProvisioning {
				booting++
			}
		}
		bootingTogether = bootingTogether || booting > 1
		var phases []string
		ready := 0
		for _, name := range names {
			p := getProxy(t, ns, name)
			for _, c := range p.Status.Conditions {
				queued = queued || c.Reason == crawlv1alpha1.ReasonCreateQueued
			}
			if p.Status.Phase == crawlv1alpha1.ProxyPhaseReady {
				ready++
			}
			phases = append(phases, string(p.Status.Phase))
		}
		return ready == len(names), fmt.Sprintf("phases %v", phases)
	})
	if got := op.fake.MaxCreatesInFlight(); got != 1 {
		t.Errorf("at most %d creates were in flight at once with maxConcurrentCreates 1, want 1", got)
	}
	if !queued {
		t.Error("no Proxy showed CreateQueued while another was created")
	}
	if !bootingTogether {
		t.Error("no two instances booted at once: a slot is held past the provider's create")
	}
}
