package libvirt

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// lockedTray is a host whose guest keeps its CD-ROM tray locked: the first
// locked forced ejects are accepted and leave the medium in the drive, as
// QEMU does when the guest does not open the tray; the next one empties
// it. It records the ejects and the seed deletions, and whether a seed was
// deleted while still in a drive.
type lockedTray struct {
	*fakeHost
	specs                map[string]domainSpec
	locked               int
	ejects, deletes      int
	deletedWhileAttached bool
}

func (l *lockedTray) ejectMedia(_ context.Context, _ Host, name, _ string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ejects++
	if l.ejects <= l.locked {
		return nil
	}
	s := l.specs[name]
	s.Seed = ""
	doc, err := domainXML(s)
	if err != nil {
		return err
	}
	l.domains[name].xml = doc
	return nil
}

func (l *lockedTray) deleteVolume(_ context.Context, _ Host, pool, vol string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deletes++
	for _, d := range l.domains {
		if f, err := parseDomain(d.xml, pool); err == nil && slices.Contains(f.Volumes, vol) {
			l.deletedWhileAttached = true
		}
	}
	return nil
}

// TestSeedStaysUntilTheLockedTrayLetsGo: while the guest holds the tray,
// the seed (it holds the proxy's password) is neither deleted from under
// the drive nor given up on: the eject is confirmed from the live
// definition and tried again at later Gets after a backoff, with no eject
// in between, and the volume goes once the drive is empty; then no more
// calls.
func TestSeedStaysUntilTheLockedTrayLetsGo(t *testing.T) {
	const locked = 3
	p, f, pass := newViewProvider(t, "px-a")
	spec := domainSpec{Name: "px-a", Mark: newMark(testIdentity, "lab", "kvm1", "uid-px-a", "px-a", "ns/p", time.Unix(1_800_000_000, 0)),
		DomainType: "qemu", Machine: "pc", Cores: 1, MemoryMiB: 64, Pool: "pool", MAC: f.domains["px-a"].mac,
		Image: Image{Volume: noOSVolume}, Agent: true, Seed: p.seedVolume("px-a")}
	doc, err := domainXML(spec)
	if err != nil {
		t.Fatal(err)
	}
	f.domains["px-a"].xml = doc
	host := &lockedTray{fakeHost: f, specs: map[string]domainSpec{"px-a": spec}, locked: locked}
	p.drv = host
	ctx := context.Background()
	type seen struct{ Ejects, Deletes int }
	look := func(step string, want seen) {
		t.Helper()
		if got := getState(ctx, p, "px-a"); got != string(provider.StateRunning) {
			t.Fatalf("%s: Get: %s", step, got)
		}
		host.mu.Lock()
		got := seen{host.ejects, host.deletes}
		host.mu.Unlock()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step, diff)
		}
	}
	look("the first Get with an address ejects once; the medium stays, so the seed is kept", seen{1, 0})
	look("a Get before the backoff passed ejects nothing", seen{1, 0})
	for n := 1; n < locked; n++ {
		pass(ejectBackoff(p.poll(), n))
		look(fmt.Sprintf("after backoff %d the eject is tried again; the tray still holds it", n), seen{n + 1, 0})
		look("and not again before the next backoff", seen{n + 1, 0})
	}
	pass(ejectBackoff(p.poll(), locked))
	look("the tray lets go: the drive is empty, the seed is deleted", seen{locked + 1, 1})
	pass(2 * viewPoll)
	look("released: no more ejects or deletions", seen{locked + 1, 1})
	if host.deletedWhileAttached {
		t.Error("the seed volume was deleted while a drive still held it")
	}
}

func TestEjectBackoff(t *testing.T) {
	cases := []struct {
		name, reason string
		poll         time.Duration
		n            int
		want         time.Duration
	}{
		{"first", "one poll interval after the first eject that left the medium", time.Second, 1, time.Second},
		{"doubles", "each further one waits twice as long", time.Second, 4, 8 * time.Second},
		{"capped", "never more than a minute: the seed holds a password", time.Second, 30, time.Minute},
		{"long poll", "a poll interval longer than the cap is the wait", 2 * time.Minute, 5, 2 * time.Minute},
	}
	for _, tc := range cases {
		if got := ejectBackoff(tc.poll, tc.n); got != tc.want {
			t.Errorf("%s: ejectBackoff(%s, %d) = %s, want %s (%s)", tc.name, tc.poll, tc.n, got, tc.want, tc.reason)
		}
	}
}
