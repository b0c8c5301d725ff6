package fakeprovider

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// DefaultInstallation is the installation the fake of New belongs to.
const DefaultInstallation = "fake"

// entryName is the entry the fake's marks name.
const entryName = "fake"

// Call is one recorded call.
type Call struct {
	Op   provider.Op
	ID   provider.ID
	Name string
}

// instance is an instance as the infrastructure has it, with its mark: the
// installation it names and the signature. The rest of the mark is the
// instance's own ID (its place), name, owner UID and creation time, so that
// a mark copied to another instance names the wrong place.
type instance struct {
	provider.Instance
	installation string
	signature    string
	getCount     int
	// createsLeft counts the Create calls that still answer InProgress;
	// creating says Create has not yet returned the instance's ID.
	createsLeft int
	creating    bool
	// deletesLeft counts the Delete calls that still answer InProgress,
	// from the first Delete of the instance on (deleting).
	deletesLeft int
	deleting    bool
}

// markOf is the mark an instance carries.
func markOf(in *instance) ownership.Mark {
	return ownership.Mark{Installation: in.installation, Entry: entryName, Place: string(in.ID), Name: in.Name,
		OwnerUID: in.OwnerUID, CreatedAt: in.CreatedAt}
}

// Provider is the fake: a view of one installation on an in-memory
// infrastructure. The zero value is not usable: call New.
type Provider struct {
	*world
	// id is the installation whose marks this view signs and trusts.
	id *ownership.Identity
}

// world is the fake's infrastructure and its test controls, shared by the
// views of every installation on it.
type world struct {
	mu        sync.Mutex
	instances map[provider.ID]*instance
	next      int
	addresses byte
	calls     []Call
	failures  map[provider.Op][]error
	now       func() time.Time

	// GetsUntilRunning is how many Get calls an instance answers
	// Provisioning before it runs with an address. Zero runs at the first Get.
	GetsUntilRunning int
	// RecheckAfter is the hint of a Get that answers Provisioning
	// (provider.Instance.RecheckAfter); zero gives none.
	RecheckAfter time.Duration
	// CreatesUntilDone is how many Create calls for a new instance answer
	// InProgress before one returns its ID, as a provider whose create
	// takes several steps (clone, configure, start) does. Zero returns the
	// ID at once.
	CreatesUntilDone int
	// DeletesUntilDone is how many Delete calls of an instance answer
	// InProgress before one removes it, as a provider whose delete takes
	// several steps (stop, remove the seed, destroy) does.
	DeletesUntilDone int
	// creating and maxCreating count the creates in flight (from the call
	// that makes the instance to the call that returns its ID), now and at
	// most.
	creating, maxCreating int
	// Latency is added to every call, honouring the context.
	Latency     time.Duration
	afterCreate func(ctx context.Context, id provider.ID) error
	unreachable bool
	// hung makes every call wait for its context (SetHung).
	hung bool
	// Verdicts are what Check returns; set them before the operator starts,
	// or with SetVerdicts afterwards.
	Verdicts []provider.Verdict
	// capacity, when above zero, is how many instances the fake holds: a
	// Create beyond it fails Permanent, as a full quota would.
	capacity int
}

// SetCapacity limits how many instances the fake holds; zero means no
// limit.
func (f *Provider) SetCapacity(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.capacity = n
}

// SetVerdicts changes what Check returns, safely while the operator runs.
func (f *Provider) SetVerdicts(v []provider.Verdict) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Verdicts = v
}

// New returns an empty fake whose clock is now, for the installation
// DefaultInstallation.
func New(now func() time.Time) *Provider {
	if now == nil {
		now = time.Now
	}
	return &Provider{
		world: &world{instances: map[provider.ID]*instance{}, failures: map[provider.Op][]error{}, now: now},
		id:    ownershiptest.Identity(DefaultInstallation),
	}
}

// ForInstallation returns a view of the same infrastructure (instances,
// failures, calls) for another installation of the operator: it signs its
// own instances with id and trusts only those.
func (f *Provider) ForInstallation(id *ownership.Identity) *Provider {
	return &Provider{world: f.world, id: id}
}

// Identity returns the installation of this view.
func (f *Provider) Identity() *ownership.Identity { return f.id }

// ours reports whether this view's installation made an instance.
func (f *Provider) ours(in *instance) bool { return f.id.Owns(markOf(in), in.signature) }

var _ provider.Provider = (*Provider)(nil)
var _ provider.Checker = (*Provider)(nil)
var _ provider.UnverifiedLister = (*Provider)(nil)

// unverified reports whether an instance's mark names this view's
// installation, is signed, and does not verify: made with another key.
func (f *Provider) unverified(in *instance) bool {
	return in.installation == f.id.Installation() && in.signature != "" && !f.ours(in)
}

// SetAfterCreate installs a hook that runs after Create stored a new instance
// (or found the one it stored before) and before it returns; a non-nil error is returned instead of the ID. Tests
// use it to stand for a crash after the infrastructure did the work and
// before the operator heard of it. Nil removes the hook.
func (f *Provider) SetAfterCreate(hook func(ctx context.Context, id provider.ID) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.afterCreate = hook
}

// FailNext makes the next n calls of op return err (after recording them).
func (f *Provider) FailNext(op provider.Op, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.failures[op] = append(f.failures[op], err)
	}
}

// Calls returns a copy of the recorded calls, in order.
func (f *Provider) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// CallCount returns how many calls of op were made.
func (f *Provider) CallCount(op provider.Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.Op == op {
			n++
		}
	}
	return n
}

// Instances returns every instance, ours and foreign, sorted by ID.
func (f *Provider) Instances() []provider.Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]provider.Instance, 0, len(f.instances))
	for _, in := range f.instances {
		out = append(out, in.Instance)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// SetState changes an instance's state, as the infrastructure would.
func (f *Provider) SetState(id provider.ID, s provider.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if in, ok := f.instances[id]; ok {
		in.State = s
		if s != provider.StateRunning {
			in.Address = netip.Addr{}
		}
	}
}

// Vanish removes an instance behind the operator's back.
func (f *Provider) Vanish(id provider.ID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removeLocked(id)
}

// removeLocked removes an instance; a create in flight ends with it.
func (f *Provider) removeLocked(id provider.ID) {
	if in, ok := f.instances[id]; ok && in.creating {
		f.creating--
	}
	delete(f.instances, id)
}

// AddInstance adds an instance directly. marked says whether it carries the
// mark of this view's installation, validly signed; an unmarked one stands
// for a VM someone else made.
func (f *Provider) AddInstance(in provider.Instance, marked bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := &instance{Instance: in}
	if marked {
		n.installation = f.id.Installation()
		n.signature = f.id.Sign(markOf(n))
	}
	f.instances[in.ID] = n
}

// AddMarkedInstance adds an instance that carries a mark naming
// installation, with the given signature, as a forger (or another
// installation) would write it.
func (f *Provider) AddMarkedInstance(in provider.Instance, installation, signature string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.instances[in.ID] = &instance{Instance: in, installation: installation, signature: signature}
}

// MarkOf returns the installation and signature of an instance's mark, for
// tests that copy it; ok is false when there is no such instance.
func (f *Provider) MarkOf(id provider.ID) (installation, signature string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, ok := f.instances[id]
	if !ok {
		return "", "", false
	}
	return in.installation, in.signature, true
}

// SetUnreachable makes every call fail Transient, as an outage of the
// infrastructure would, until it is called with false.
func (f *Provider) SetUnreachable(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreachable = down
}

// SetHung makes every call (recorded as usual) wait until its context is
// done and fail Transient then, as a hypervisor that stopped answering while
// its connection stays up would, until it is called with false. Calls
// waiting already stay until their context ends.
func (f *Provider) SetHung(hung bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hung = hung
}

// begin records a call, waits the latency and returns an injected error.
func (f *Provider) begin(ctx context.Context, c Call) error {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	var injected error
	if q := f.failures[c.Op]; len(q) > 0 {
		injected, f.failures[c.Op] = q[0], q[1:]
	}
	latency, down, hung := f.Latency, f.unreachable, f.hung
	f.mu.Unlock()
	if hung {
		<-ctx.Done()
		return provider.NewTransient(ctx.Err())
	}
	if down && injected == nil {
		injected = provider.NewTransient(errors.New("the fake infrastructure does not answer"))
	}
	if latency > 0 {
		t := time.NewTimer(latency)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return provider.NewTransient(ctx.Err())
		case <-t.C:
		}
	}
	if err := ctx.Err(); err != nil {
		return provider.NewTransient(err)
	}
	return injected
}

// Create implements provider.Provider.
func (f *Provider) Create(ctx context.Context, req provider.Request) (provider.ID, error) {
	if err := f.begin(ctx, Call{Op: provider.OpCreate, Name: req.Name}); err != nil {
		return "", err
	}
	if req.OwnerUID == "" || req.Name == "" {
		return "", provider.NewPermanent(errors.New("request without owner UID or name"), "report a bug")
	}
	f.mu.Lock()
	var id provider.ID
	for existing, in := range f.instances {
		if f.ours(in) && in.OwnerUID == req.OwnerUID && in.Name == req.Name {
			id = existing
		}
	}
	if id == "" && f.capacity > 0 && len(f.instances) >= f.capacity {
		f.mu.Unlock()
		return "", provider.NewPermanent(fmt.Errorf("quota exceeded: %d instances, the limit is %d", len(f.instances), f.capacity),
			"raise the quota or lower the number of proxies")
	}
	if id == "" {
		f.next++
		id = provider.ID(fmt.Sprintf("fake/%d", 100+f.next))
		n := &instance{installation: f.id.Installation(), Instance: provider.Instance{
			ID: id, Name: req.Name, OwnerUID: req.OwnerUID, State: provider.StateProvisioning,
			Node: "node-" + req.Zone, CreatedAt: f.now(),
		}}
		n.signature = f.id.Sign(markOf(n))
		n.createsLeft, n.creating = f.CreatesUntilDone, true
		f.instances[id] = n
		f.creating++
		f.maxCreating = max(f.maxCreating, f.creating)
	}
	if in := f.instances[id]; in.createsLeft > 0 {
		in.createsLeft--
		f.mu.Unlock()
		// Each step names itself, as the real providers' steps do.
		return "", provider.NewInProgress(fmt.Sprintf("creating the instance, step %d of %d", f.CreatesUntilDone-in.createsLeft, f.CreatesUntilDone), 0)
	} else if in.creating {
		in.creating = false
		f.creating--
	}
	hook := f.afterCreate
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, id); err != nil {
			return "", err
		}
	}
	return id, nil
}

// MaxCreatesInFlight returns the most creates that were in flight at once:
// made but their ID not yet returned by Create.
func (f *Provider) MaxCreatesInFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxCreating
}

// Get implements provider.Provider.
func (f *Provider) Get(ctx context.Context, id provider.ID) (provider.Instance, error) {
	if err := f.begin(ctx, Call{Op: provider.OpGet, ID: id}); err != nil {
		return provider.Instance{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	in, ok := f.instances[id]
	if !ok || !f.ours(in) {
		return provider.Instance{}, provider.NewNotFound(fmt.Errorf("no instance %s", id))
	}
	if in.State == provider.StateProvisioning {
		in.getCount++
		if in.getCount > f.GetsUntilRunning {
			in.State = provider.StateRunning
		}
	}
	if in.State == provider.StateRunning && !in.Address.IsValid() {
		// 198.51.100.0/24 is TEST-NET-2: documentation only, never dialled.
		// Each instance gets its own, as each VM would.
		f.addresses = f.addresses%250 + 1
		in.Address = netip.AddrFrom4([4]byte{198, 51, 100, f.addresses})
	}
	out := in.Instance
	if out.State == provider.StateProvisioning {
		out.RecheckAfter = f.RecheckAfter
	}
	return out, nil
}

// Delete implements provider.Provider.
func (f *Provider) Delete(ctx context.Context, id provider.ID) error {
	if err := f.begin(ctx, Call{Op: provider.OpDelete, ID: id}); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	in, ok := f.instances[id]
	if !ok {
		return nil
	}
	if !f.ours(in) {
		// Not ours: left alone, and the caller's instance counts as gone.
		return nil
	}
	if !in.deleting {
		in.deleting, in.deletesLeft = true, f.DeletesUntilDone
	}
	if in.deletesLeft > 0 {
		in.deletesLeft--
		return provider.NewInProgress("deleting the instance", 0)
	}
	f.removeLocked(id)
	return nil
}

// ListByTag implements provider.Provider.
func (f *Provider) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	if err := f.begin(ctx, Call{Op: provider.OpListByTag}); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []provider.Instance
	for _, in := range f.instances {
		if f.ours(in) {
			out = append(out, in.Instance)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Unverified implements provider.UnverifiedLister, from the instances as
// they are now (the fake's listing is the infrastructure itself); it is not
// a call and records none.
func (f *Provider) Unverified() []provider.Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []provider.Instance
	for _, in := range f.instances {
		if f.unverified(in) {
			out = append(out, provider.Instance{ID: in.ID, Name: in.Name, Node: in.Node})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Check implements provider.Checker.
func (f *Provider) Check(ctx context.Context) []provider.Verdict {
	_ = f.begin(ctx, Call{Op: provider.OpCheck})
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]provider.Verdict(nil), f.Verdicts...)
}
