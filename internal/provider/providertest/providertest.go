package providertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// Foreign is a kind of instance the operator did not make.
type Foreign string

// The kinds of foreign instances the suite asks for.
const (
	// Unmarked carries no mark at all: someone else's instance.
	Unmarked Foreign = "unmarked"
	// Forged carries part of the mark, or a mark that is not the
	// operator's (another entry's, a broken one), as far as the provider's
	// mark format can express it. It must be treated as foreign.
	Forged Foreign = "forged"
	// Unsigned carries a complete mark in the operator's format (and its
	// tag, where the type has one), naming this installation and the
	// instance itself, without a signature: what a hypervisor user who can
	// edit descriptions, metadata or labels writes by hand.
	Unsigned Foreign = "unsigned"
	// BadSignature is Unsigned with a signature made with another key
	// under this installation's ID.
	BadSignature Foreign = "bad-signature"
	// Sibling is an instance another entry of this installation made at
	// the same place (entries may share a host or a cluster), signed with
	// this installation's key for SiblingEntry: foreign to the entry under
	// test, and no sign of a lost key. A harness that can add it lists
	// SiblingEntry in its providers' entries (provider.Deps.Entries).
	Sibling Foreign = "sibling"
)

// SiblingEntry is the name of the other entry a Sibling instance is signed
// for.
const SiblingEntry = "contract-sibling"

// Harness is one provider type's world for the suite: a provider entry and
// the infrastructure behind it, fresh for each subtest (cleaned up with t).
type Harness interface {
	// Provider returns a new Provider on the harness's entry, sharing no
	// memory with earlier ones: a new Provider is what an operator restart
	// looks like. A provider that is its own infrastructure (the fake)
	// returns the same one.
	Provider(t *testing.T) provider.Provider
	// Request returns a valid Request for an owner UID and an instance name
	// (a DNS label); its credentials and user-data hold the Secrets.
	Request(t *testing.T, ownerUID, name string) provider.Request
	// Secrets are texts that must never appear in an error: the API token,
	// the proxy password in the user-data.
	Secrets() []string
	// MissingID is a well-formed ID that names no instance.
	MissingID() provider.ID
	// Interrupt starts a Create of req on a Provider of its own and cuts it
	// off at interruption point n (from 1), as an operator crash would:
	// after n calls of a non-blocking Create, when the n-th write reaches the
	// infrastructure, by cancelling a context... It reports false when the
	// create finishes before point n: the suite has then tried every point.
	Interrupt(t *testing.T, req provider.Request, n int) bool
	// SetOutage makes every call to the infrastructure fail as an outage
	// would (on), or heals it (off).
	SetOutage(t *testing.T, on bool)
	// AddForeign creates an instance of the kind named name, as someone else
	// would, and returns its ID; ok is false when the provider's mark
	// format cannot express the kind.
	AddForeign(t *testing.T, kind Foreign, name string) (id provider.ID, ok bool)
	// Snapshot describes the instance id as the infrastructure has it
	// (including a version that any write changes), or "" when it is gone:
	// two equal snapshots mean it was not touched.
	Snapshot(t *testing.T, id provider.ID) string
	// CopyMark makes a foreign instance that carries the whole mark of the
	// operator's instance from (signature and tag included), copied as a
	// hypervisor user who can read one and write another would: with
	// from's name where the infrastructure allows two instances of one
	// name, else another. It returns the copy's ID.
	CopyMark(t *testing.T, from provider.ID) provider.ID
	// OtherInstallation returns a Provider on the same entry and
	// infrastructure built for another installation of the operator (its
	// own ID and key): a staging operator next to production.
	OtherInstallation(t *testing.T) provider.Provider
}

// timeout bounds every wait of the suite on a quiet machine; the waits,
// and each subtest's context (twice as long), follow the machine's pace
// (poll.Paced), so that a loaded CI machine gets proportionally longer ones.
const timeout = 60 * time.Second

// Run runs the contract suite; newHarness is called once per subtest.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	for _, c := range []struct {
		name string
		run  func(t *testing.T, s *suite)
	}{
		{"CreateTwiceGivesOneInstance", createTwice},
		{"CreateResumesAfterAnInterruptionAtEveryPoint", crashResume},
		{"GetAndDeleteOfAMissingInstance", missing},
		{"DeleteIsIdempotentAndFinal", deletion},
		{"ListByTagListsOursOnly", listing},
		{"ForeignInstancesAreNeverTouched", ownership},
		{"ACopiedMarkIsForeign", copiedMark},
		{"AnotherInstallationsInstancesAreNeverTouched", otherInstallation},
		{"AnOutageIsNeverNotFoundNorDone", outage},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &suite{h: newHarness(t)}
			ctx, cancel := poll.PacedContext(context.Background(), 2*timeout)
			t.Cleanup(cancel)
			s.ctx = ctx
			c.run(t, s)
			s.checkSecrets(t)
		})
	}
}

// suite is one subtest's state: the harness and every error seen, for the
// secret hygiene check at the end.
type suite struct {
	h   Harness
	ctx context.Context

	mu   sync.Mutex
	errs []error
}

func (s *suite) seen(err error) error {
	if err != nil {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	}
	return err
}

// checkSecrets fails when any error the provider returned holds a secret,
// in any of its printed forms.
func (s *suite) checkSecrets(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, err := range s.errs {
		text := fmt.Sprintf("%s %v %+v %#v", err.Error(), err, err, err)
		for _, secret := range s.h.Secrets() {
			if secret != "" && strings.Contains(text, secret) {
				t.Errorf("an error holds a secret: %q", err.Error())
			}
		}
	}
}

// create calls Create until it returns an ID; every error before must be
// InProgress (or Transient: the infrastructure may be slow to settle).
func (s *suite) create(t *testing.T, p provider.Provider, req provider.Request) provider.ID {
	t.Helper()
	var id provider.ID
	poll.UntilPaced(t, timeout, func() (bool, string) {
		got, err := p.Create(s.ctx, req)
		if s.seen(err) != nil {
			if !provider.IsInProgress(err) && !provider.IsTransient(err) {
				t.Fatalf("Create %s: %v (class %s), want an ID, InProgress or Transient", req.Name, err, provider.ClassOf(err))
			}
			return false, err.Error()
		}
		id = got
		return true, ""
	})
	if id == "" {
		t.Fatalf("Create %s returned an empty ID and no error", req.Name)
	}
	return id
}

// remove calls Delete until it returns nil; every error before must be
// InProgress or Transient.
func (s *suite) remove(t *testing.T, p provider.Provider, id provider.ID) {
	t.Helper()
	poll.UntilPaced(t, timeout, func() (bool, string) {
		err := s.seen(p.Delete(s.ctx, id))
		if err != nil && !provider.IsInProgress(err) && !provider.IsTransient(err) {
			t.Fatalf("Delete %s: %v (class %s), want nil, InProgress or Transient", id, err, provider.ClassOf(err))
		}
		return err == nil, fmt.Sprint(err)
	})
}

// ours returns the listed instances of an owner and name.
func (s *suite) ours(t *testing.T, p provider.Provider, req provider.Request) []provider.Instance {
	t.Helper()
	var list []provider.Instance
	poll.UntilPaced(t, timeout, func() (bool, string) {
		var err error
		list, err = p.ListByTag(s.ctx)
		if s.seen(err) != nil && !provider.IsTransient(err) {
			t.Fatalf("ListByTag: %v, want a list or Transient", err)
		}
		return err == nil, fmt.Sprint(err)
	})
	var out []provider.Instance
	for _, in := range list {
		if in.OwnerUID == req.OwnerUID && in.Name == req.Name {
			out = append(out, in)
		}
	}
	return out
}

// checkInstance checks what Get says of an instance Create returned.
func (s *suite) checkInstance(t *testing.T, p provider.Provider, id provider.ID, req provider.Request) {
	t.Helper()
	var in provider.Instance
	poll.UntilPaced(t, timeout, func() (bool, string) {
		var err error
		in, err = p.Get(s.ctx, id)
		if s.seen(err) != nil && !provider.IsTransient(err) {
			t.Fatalf("Get %s after Create: %v, want the instance", id, err)
		}
		return err == nil, fmt.Sprint(err)
	})
	if in.ID != id || in.OwnerUID != req.OwnerUID || in.Name != req.Name || in.CreatedAt.IsZero() {
		t.Errorf("Get %s = %+v, want its ID, the request's owner UID and name, and the creation time from the mark", id, in)
	}
	if in.State == provider.StateRunning && in.Address.IsValid() {
		return
	}
	if in.State != provider.StateProvisioning && in.State != provider.StateRunning {
		t.Errorf("Get %s: state %q right after Create, want Provisioning or Running", id, in.State)
	}
}

// createTwice: the same Request yields the same instance, from the same
// Provider and from a restarted one.
func createTwice(t *testing.T, s *suite) {
	req := s.h.Request(t, "uid-twice", "contract-twice")
	p := s.h.Provider(t)
	id := s.create(t, p, req)
	if again := s.create(t, p, req); again != id {
		t.Errorf("second Create = %q, want the first's ID %q", again, id)
	}
	if again := s.create(t, s.h.Provider(t), req); again != id {
		t.Errorf("Create after a restart = %q, want the first's ID %q", again, id)
	}
	if got := s.ours(t, p, req); len(got) != 1 || got[0].ID != id {
		t.Errorf("instances of the request = %+v, want exactly %s", got, id)
	}
	s.checkInstance(t, p, id, req)
}

// crashResume interrupts a Create at every point the harness offers and
// resumes it with a restarted Provider: one instance each time.
func crashResume(t *testing.T, s *suite) {
	const maxPoints = 40
	points := 0
	for n := 1; n <= maxPoints; n++ {
		req := s.h.Request(t, fmt.Sprintf("uid-crash-%d", n), fmt.Sprintf("contract-crash-%d", n))
		if !s.h.Interrupt(t, req, n) {
			break
		}
		points++
		p := s.h.Provider(t)
		id := s.create(t, p, req)
		if got := s.ours(t, p, req); len(got) != 1 || got[0].ID != id {
			t.Fatalf("interrupted at point %d, resumed: instances %+v, want exactly %s", n, got, id)
		}
		s.checkInstance(t, p, id, req)
	}
	if points == 0 {
		t.Fatal("the harness offers no interruption point: the suite cannot check crash-resume")
	}
	if points == maxPoints {
		t.Fatalf("the harness still interrupts at point %d: its Create never finishes", maxPoints)
	}
	t.Logf("resumed after an interruption at each of %d points", points)
}

// missing: Get of an instance that does not exist is NotFound (certain);
// Delete of it succeeds.
func missing(t *testing.T, s *suite) {
	p := s.h.Provider(t)
	id := s.h.MissingID()
	if _, err := p.Get(s.ctx, id); !provider.IsNotFound(s.seen(err)) {
		t.Errorf("Get of a missing instance = %v, want NotFound", err)
	}
	if err := s.seen(p.Delete(s.ctx, id)); err != nil {
		t.Errorf("Delete of a missing instance = %v, want nil", err)
	}
}

// deletion: Delete finishes, then the instance is NotFound, unlisted, and
// a second Delete succeeds, also from a restarted Provider.
func deletion(t *testing.T, s *suite) {
	req := s.h.Request(t, "uid-delete", "contract-delete")
	p := s.h.Provider(t)
	id := s.create(t, p, req)
	s.remove(t, p, id)
	if _, err := p.Get(s.ctx, id); !provider.IsNotFound(s.seen(err)) {
		t.Errorf("Get after Delete = %v, want NotFound", err)
	}
	if got := s.ours(t, p, req); len(got) != 0 {
		t.Errorf("listed after Delete: %+v", got)
	}
	if err := s.seen(p.Delete(s.ctx, id)); err != nil {
		t.Errorf("second Delete = %v, want nil", err)
	}
	if err := s.seen(s.h.Provider(t).Delete(s.ctx, id)); err != nil {
		t.Errorf("Delete after a restart = %v, want nil", err)
	}
	if snap := s.h.Snapshot(t, id); snap != "" {
		t.Errorf("the infrastructure still has %s: %s", id, snap)
	}
}

// listing: ListByTag reports every instance of the entry with its mark.
func listing(t *testing.T, s *suite) {
	p := s.h.Provider(t)
	a, b := s.h.Request(t, "uid-list-a", "contract-list-a"), s.h.Request(t, "uid-list-b", "contract-list-b")
	ida, idb := s.create(t, p, a), s.create(t, p, b)
	for _, c := range []struct {
		req provider.Request
		id  provider.ID
	}{{a, ida}, {b, idb}} {
		got := s.ours(t, s.h.Provider(t), c.req)
		if len(got) != 1 || got[0].ID != c.id || got[0].CreatedAt.IsZero() {
			t.Errorf("listed for %s: %+v, want %s with its creation time", c.req.Name, got, c.id)
		}
	}
}

// ownership: foreign instances are not found, not listed, not deleted (a
// Delete of one succeeds and leaves it alone), not adopted and not changed,
// even when one carries a request's name.
func ownership(t *testing.T, s *suite) {
	p := s.h.Provider(t)
	kinds := 0
	for _, kind := range []Foreign{Unmarked, Forged, Unsigned, BadSignature, Sibling} {
		name := "contract-" + string(kind)
		id, ok := s.h.AddForeign(t, kind, name)
		if !ok {
			t.Logf("the provider's mark cannot express a %s instance", kind)
			continue
		}
		kinds++
		before := s.h.Snapshot(t, id)
		if before == "" {
			t.Fatalf("AddForeign(%s) returned %s, which the infrastructure does not have", kind, id)
		}
		if _, err := p.Get(s.ctx, id); !provider.IsNotFound(s.seen(err)) {
			t.Errorf("Get of the %s instance = %v, want NotFound", kind, err)
		}
		// The ID names an instance that is not the operator's (the Proxy's
		// own is gone and another took its place): Delete leaves it alone
		// and succeeds, so that the Proxy's finalizer goes.
		if err := s.seen(p.Delete(s.ctx, id)); err != nil {
			t.Errorf("Delete of the %s instance = %v, want success, leaving it alone", kind, err)
		}
		list, err := p.ListByTag(s.ctx)
		if s.seen(err) != nil {
			t.Fatal(err)
		}
		for _, in := range list {
			if in.ID == id {
				t.Errorf("ListByTag lists the %s instance %s", kind, id)
			}
		}
		// Only a signature that fails under this installation's ID is the
		// sign of a lost key; the rest are foreign and hold up nothing, a
		// sibling entry's instance included (#21 item 4: two entries on one
		// host must not hold each other's creates).
		if _, lists := provider.AsUnverifiedLister(p); lists {
			if got, want := reportsUnverified(p, id), kind == BadSignature; got != want {
				t.Errorf("Unverified reports the %s instance: %v, want %v", kind, got, want)
			}
		}
		// A Proxy whose instance name the foreign instance carries: Create
		// must refuse or build another, never adopt it.
		req := s.h.Request(t, "uid-"+string(kind), name)
		got, err := p.Create(s.ctx, req)
		if s.seen(err) == nil && got == id {
			t.Errorf("Create adopted the %s instance %s", kind, id)
		}
		if err != nil && !provider.IsPermanent(err) && !provider.IsInProgress(err) && !provider.IsTransient(err) {
			t.Errorf("Create next to a %s instance of its name = %v, want an ID, Permanent, InProgress or Transient", kind, err)
		}
		if after := s.h.Snapshot(t, id); after != before {
			t.Errorf("the %s instance was touched:\nbefore %s\nafter  %s", kind, before, after)
		}
	}
	if kinds == 0 {
		t.Fatal("the harness can add no foreign instance: the suite cannot check ownership")
	}
}

// reportsUnverified says whether p, when it is a provider.UnverifiedLister,
// reports id after its latest listing; false for a provider that reports
// none.
func reportsUnverified(p provider.Provider, id provider.ID) bool {
	l, ok := provider.AsUnverifiedLister(p)
	if !ok {
		return false
	}
	for _, in := range l.Unverified() {
		if in.ID == id {
			return true
		}
	}
	return false
}

// leftAlone checks that p neither finds, lists nor deletes the instance
// id, which is not p's, and that Create of req (whose name it may carry)
// neither adopts nor touches it. what names the instance in messages.
func (s *suite) leftAlone(t *testing.T, p provider.Provider, id provider.ID, req provider.Request, what string) {
	t.Helper()
	before := s.h.Snapshot(t, id)
	if before == "" {
		t.Fatalf("%s %s is not on the infrastructure", what, id)
	}
	if _, err := p.Get(s.ctx, id); !provider.IsNotFound(s.seen(err)) {
		t.Errorf("Get of %s = %v, want NotFound", what, err)
	}
	list, err := p.ListByTag(s.ctx)
	if s.seen(err) != nil {
		t.Fatal(err)
	}
	for _, in := range list {
		if in.ID == id {
			t.Errorf("ListByTag lists %s %s: garbage collection would delete it", what, id)
		}
	}
	// Delete may take steps (InProgress) for what is left of the
	// caller's own instance, such as a seed; it must end in success.
	s.remove(t, p, id)
	got, err := p.Create(s.ctx, req)
	if s.seen(err) == nil && got == id {
		t.Errorf("Create of %s adopted %s %s", req.Name, what, id)
	}
	if err != nil && !provider.IsPermanent(err) && !provider.IsInProgress(err) && !provider.IsTransient(err) {
		t.Errorf("Create next to %s = %v, want an ID, Permanent, InProgress or Transient", what, err)
	}
	if after := s.h.Snapshot(t, id); after != before {
		t.Errorf("%s was touched:\nbefore %s\nafter  %s", what, before, after)
	}
}

// copiedMark: the whole mark of one of the operator's instances, signature
// and tag included, copied onto another instance, does not make that one
// the operator's; and the original stays the operator's.
func copiedMark(t *testing.T, s *suite) {
	p := s.h.Provider(t)
	req := s.h.Request(t, "uid-copied", "contract-copied")
	src := s.create(t, p, req)
	cp := s.h.CopyMark(t, src)
	s.leftAlone(t, p, cp, req, "the instance with a copied mark")
	if got := s.ours(t, p, req); len(got) != 1 || got[0].ID != src {
		t.Errorf("instances of the request next to a copy of its mark = %+v, want exactly %s", got, src)
	}
	if again := s.create(t, s.h.Provider(t), req); again != src {
		t.Errorf("Create next to a copy of its mark = %s, want the original %s", again, src)
	}
}

// otherInstallation: two installations of the operator on one entry never
// list, adopt or delete each other's instances, whose marks are valid, but
// another installation's.
func otherInstallation(t *testing.T, s *suite) {
	p, q := s.h.Provider(t), s.h.OtherInstallation(t)
	theirs := s.h.Request(t, "uid-theirs", "contract-theirs")
	tid := s.create(t, q, theirs)
	s.leftAlone(t, p, tid, theirs, "the other installation's instance")
	if reportsUnverified(p, tid) {
		t.Errorf("Unverified reports the other installation's instance %s: another installation must never hold up this one", tid)
	}
	if got := s.ours(t, q, theirs); len(got) != 1 || got[0].ID != tid {
		t.Errorf("the other installation lists %+v, want its own %s", got, tid)
	}
	mine := s.h.Request(t, "uid-mine", "contract-mine")
	mid := s.create(t, p, mine)
	s.leftAlone(t, q, mid, mine, "this installation's instance, seen by the other,")
	if got := s.ours(t, p, mine); len(got) != 1 || got[0].ID != mid {
		t.Errorf("this installation lists %+v, want its own %s", got, mid)
	}
}

// outage: while the infrastructure does not answer, nothing is NotFound and
// nothing is done; afterwards the instance is still there.
func outage(t *testing.T, s *suite) {
	req := s.h.Request(t, "uid-outage", "contract-outage")
	id := s.create(t, s.h.Provider(t), req)
	s.h.SetOutage(t, true)
	p := s.h.Provider(t)
	if _, err := p.Get(s.ctx, id); provider.IsNotFound(s.seen(err)) {
		t.Errorf("Get during an outage = %v: NotFound must be certain", err)
	}
	if err := s.seen(p.Delete(s.ctx, id)); err == nil || provider.IsNotFound(err) {
		t.Errorf("Delete during an outage = %v, want an error that is not NotFound", err)
	}
	if _, err := p.ListByTag(s.ctx); s.seen(err) == nil {
		t.Error("ListByTag during an outage succeeded: garbage collection would act on an empty list")
	}
	other := s.h.Request(t, "uid-outage-2", "contract-outage-2")
	if _, err := p.Create(s.ctx, other); s.seen(err) == nil || provider.IsNotFound(err) {
		t.Errorf("Create during an outage = %v, want an error that is not NotFound", err)
	}
	s.h.SetOutage(t, false)
	s.checkInstance(t, s.h.Provider(t), id, req)
}
