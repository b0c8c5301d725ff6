package libvirt

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// fakeHost is a stateful fake of one libvirt host behind the driver seam:
// its domains (definition, state, run id), what each guest agent answers,
// and a count of the round trips by method. Methods the view tests do not
// reach are left to the embedded nil driver (a call panics: the test
// reached something it did not mean to).
type fakeHost struct {
	driver
	mu      sync.Mutex
	domains map[string]*fakeDomain
	counts  map[string]int
}

type fakeDomain struct {
	xml   string
	uuid  string
	id    int
	state domState
	addr  netip.Addr
	mac   string
}

func (f *fakeHost) count(method string) {
	f.counts[method]++
}

func (f *fakeHost) roundTrips() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.counts {
		out[k] = v
	}
	return out
}

func (f *fakeHost) resetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts = map[string]int{}
}

func (f *fakeHost) listDomains(_ context.Context, _ Host) ([]domainInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("listDomains")
	out := make([]domainInfo, 0, len(f.domains))
	for name, d := range f.domains {
		out = append(out, domainInfo{Name: name, UUID: d.uuid, ID: d.id, State: d.state})
	}
	return out, nil
}

func (f *fakeHost) domainXML(_ context.Context, _ Host, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("domainXML")
	d, ok := f.domains[name]
	if !ok {
		return "", errNoDomain
	}
	return d.xml, nil
}

func (f *fakeHost) agentInterfaces(_ context.Context, _ Host, name string) ([]guestInterface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("agentInterfaces")
	d, ok := f.domains[name]
	if !ok {
		return nil, errNoDomain
	}
	return []guestInterface{{Name: "eth0", MAC: d.mac, Addrs: []netip.Addr{d.addr}}}, nil
}

// shutdownDomain powers the guest off at once, as a guest that answers
// ACPI does.
func (f *fakeHost) shutdownDomain(ctx context.Context, h Host, name string) error {
	return f.stop(ctx, h, name, "shutdownDomain")
}

func (f *fakeHost) destroyDomain(ctx context.Context, h Host, name string) error {
	return f.stop(ctx, h, name, "destroyDomain")
}

func (f *fakeHost) stop(_ context.Context, _ Host, name, method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count(method)
	d, ok := f.domains[name]
	if !ok {
		return errNoDomain
	}
	d.state, d.id = stateShutoff, -1
	return nil
}

// The seed of a running guest is released once (releaseSeed): accepted.
func (f *fakeHost) ejectMedia(context.Context, Host, string, string) error { return nil }
func (f *fakeHost) deleteVolume(context.Context, Host, string, string) error {
	return errNoVolume
}

// setState changes a domain's state behind the provider's back.
func (f *fakeHost) setState(name string, s domState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.domains[name].state = s
}

// viewPoll is the poll interval of the view tests: far longer than a test
// runs, so that only the test's clock ages a listing.
const viewPoll = time.Hour

// newViewProvider builds a kvm2 provider on one host kvm1 whose driver is
// a fakeHost with the given running marked domains, and a clock that pass
// moves.
func newViewProvider(t *testing.T, names ...string) (*Provider, *fakeHost, func(time.Duration)) {
	t.Helper()
	e := &config.Entry{
		Name: "lab", Type: TypeKVM2, Zones: []string{"a"}, Images: []string{noOSImage},
		MachineTypes: map[string]config.MachineType{"small": {Name: "small", Cores: 1, MemoryMiB: 64}},
		Block: &Block{
			Hosts: []Host{{Name: "kvm1", Address: "127.0.0.1", Port: 22, User: "u", Zone: "a"}},
			Pool:  "pool", Images: map[string]Image{noOSImage: {Volume: noOSVolume}},
			Budgets: Budgets{PollInterval: &metav1.Duration{Duration: viewPoll}, Shutdown: &metav1.Duration{Duration: time.Nanosecond}},
		},
	}
	var offset atomic.Int64
	p, err := New(e, provider.Deps{Ownership: testIdentity, Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeHost{domains: map[string]*fakeDomain{}, counts: map[string]int{}}
	for i, name := range names {
		mac := fmt.Sprintf("52:54:00:00:00:%02x", i+1)
		doc, err := domainXML(domainSpec{Name: name, Mark: newMark(testIdentity, "lab", "kvm1", "uid-"+name, name, "ns/p", time.Unix(1_800_000_000, 0)),
			DomainType: "qemu", Machine: "pc", Cores: 1, MemoryMiB: 64, Pool: "pool", MAC: mac, Image: Image{Volume: noOSVolume}, Agent: true})
		if err != nil {
			t.Fatal(err)
		}
		f.domains[name] = &fakeDomain{xml: doc, uuid: fmt.Sprintf("uuid-%d", i), id: i + 1, state: stateRunning,
			addr: netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}), mac: mac}
	}
	p.drv = f
	return p, f, func(d time.Duration) { offset.Add(int64(d)) }
}

// getState is a Get's state, or its error's text.
func getState(ctx context.Context, p *Provider, name string) string {
	inst, err := p.Get(ctx, ID("kvm1", name))
	if err != nil {
		return err.Error()
	}
	return string(inst.State)
}

// TestHostListingServesEveryGetWithinThePollInterval: within one poll
// interval, every Get of the domains of a host, concurrent or sequential,
// of different domains or of the same one, is served by one listing of the
// host; the definition and the address are read once per domain.
func TestHostListingServesEveryGetWithinThePollInterval(t *testing.T) {
	names := []string{"px-a", "px-b", "px-c"}
	p, f, pass := newViewProvider(t, names...)
	ctx := context.Background()
	for _, n := range names { // definitions and addresses read once
		if got := getState(ctx, p, n); got != string(provider.StateRunning) {
			t.Fatalf("first Get of %s: %s", n, got)
		}
	}
	for _, tc := range []struct {
		name, reason string
		concurrent   bool
		rounds       int
	}{
		{"sequential, each once", "the first Get lists the host, the others find the listing kept", false, 1},
		{"sequential, each five times", "a Get of a domain already judged from the listing is served by it too", false, 5},
		{"concurrent, each four times", "Gets that overlap share the listing in flight, the later ones find it kept", true, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pass(2 * viewPoll)
			f.resetCalls()
			var wg sync.WaitGroup
			var mu sync.Mutex
			got := map[string]int{}
			for range tc.rounds {
				for _, n := range names {
					get := func() {
						s := getState(ctx, p, n)
						mu.Lock()
						got[s]++
						mu.Unlock()
					}
					if tc.concurrent {
						wg.Go(get)
					} else {
						get()
					}
				}
			}
			wg.Wait()
			if diff := cmp.Diff(map[string]int{string(provider.StateRunning): tc.rounds * len(names)}, got); diff != "" {
				t.Errorf("states of the Gets (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]int{"listDomains": 1}, f.roundTrips()); diff != "" {
				t.Errorf("round trips of %d Gets in one poll interval (-want +got) (%s):\n%s", tc.rounds*len(names), tc.reason, diff)
			}
		})
	}
}

// TestHostListingNoticesAChangeWithinOnePollInterval: a domain shut off or
// paused behind the operator's back is Stopped at every Get from one poll
// interval after the change on (the listing kept from before still serves
// the sooner ones); and after the operator's own write (Delete shutting
// the domain down) the next Get does not use the listing from before it.
func TestHostListingNoticesAChangeWithinOnePollInterval(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, reason string
		change       func(p *Provider, f *fakeHost)
		soon         string // a Get within the poll interval after the change
	}{
		{"shut off behind the operator's back", "the kept listing serves until it is a poll interval old",
			func(_ *Provider, f *fakeHost) { f.setState("px-a", stateShutoff) }, string(provider.StateRunning)},
		{"paused behind the operator's back", "the kept listing serves until it is a poll interval old",
			func(_ *Provider, f *fakeHost) { f.setState("px-a", statePaused) }, string(provider.StateRunning)},
		{"shut down by the operator's Delete", "the operator's own write drops the kept listing: the next Get lists anew",
			func(p *Provider, _ *fakeHost) {
				if err := p.Delete(ctx, ID("kvm1", "px-a")); !provider.IsInProgress(err) {
					t.Fatalf("Delete = %v, want InProgress after the shutdown", err)
				}
			}, string(provider.StateStopped)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, f, pass := newViewProvider(t, "px-a")
			if got := getState(ctx, p, "px-a"); got != string(provider.StateRunning) {
				t.Fatalf("Get before the change: %s", got)
			}
			tc.change(p, f)
			changedAt := p.now()
			pass(viewPoll / 2)
			if got := getState(ctx, p, "px-a"); got != tc.soon {
				t.Errorf("within the poll interval: %s, want %s (%s)", got, tc.soon, tc.reason)
			}
			pass(changedAt.Add(viewPoll).Sub(p.now()))
			if got := getState(ctx, p, "px-a"); got != string(provider.StateStopped) {
				t.Errorf("one poll interval after the change: %s, want Stopped", got)
			}
		})
	}
}
