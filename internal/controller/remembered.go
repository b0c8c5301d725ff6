package controller

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/egress-proxies/egress-proxies-operator/internal/controller/shared"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// writtenVersions remembers, per Proxy, the resourceVersion that this
// process's last write of it returned. A cached Proxy at that version has
// seen every write of ours, so the live read that guards a create or a
// replacement (isCurrent) can be skipped: it is only needed when the cache
// may lag behind a write of ours, which is what would make the operator
// create a second instance. After a restart nothing is remembered and every
// guard reads live. The zero value is ready; it is safe for concurrent use.
type writtenVersions struct {
	shared.Memo[types.NamespacedName, string]
}

// record notes the version a write of ours returned.
func (w *writtenVersions) record(key types.NamespacedName, resourceVersion string) {
	if resourceVersion != "" {
		w.Store(key, resourceVersion)
	}
}

// seen reports whether resourceVersion is that of our last write of key.
func (w *writtenVersions) seen(key types.NamespacedName, resourceVersion string) bool {
	s, ok := w.Load(key)
	return ok && resourceVersion != "" && s == resourceVersion
}

// ownerChecks remembers, per Proxy being deleted, the recorded instance
// whose owner a Get showed to be that Proxy. A delete of several steps
// (stop, seed, destroy) checks the owner once rather than at every step:
// on a stopped VM that Get is a read of its own (proxmox status/current),
// the largest part of a delete's calls. After a restart the owner is
// checked again. The zero value is ready; it is safe for concurrent use.
type ownerChecks struct {
	shared.Memo[types.UID, provider.ID]
}

// record notes that id belongs to the Proxy uid.
func (o *ownerChecks) record(uid types.UID, id provider.ID) { o.Store(uid, id) }

// seen reports whether id was found to belong to uid.
func (o *ownerChecks) seen(uid types.UID, id provider.ID) bool {
	got, ok := o.Load(uid)
	return ok && got == id
}

// createCredentials holds, per Proxy whose create is in flight, the
// credentials read at the create's first step, so that the later steps
// (each a reconcile that renders the same request) do not read the Secret
// again. They are dropped when Create returns the instance's ID; a Secret
// edited or deleted meanwhile is noticed when the instance runs, as it
// would have been had the change come a moment after the seed was made.
// The UID keeps a Proxy recreated under the same name from another's
// credentials. The zero value is ready; it is safe for concurrent use.
type createCredentials struct {
	shared.Memo[types.NamespacedName, heldCredentials]
}

type heldCredentials struct {
	uid   types.UID
	creds *credentials // nil with auth None
}

// get returns the credentials held for the Proxy key with uid.
func (c *createCredentials) get(key types.NamespacedName, uid types.UID) (*credentials, bool) {
	h, ok := c.Load(key)
	if !ok || h.uid != uid {
		return nil, false
	}
	return h.creds, true
}

// put holds creds for the Proxy key with uid.
func (c *createCredentials) put(key types.NamespacedName, uid types.UID, creds *credentials) {
	c.Store(key, heldCredentials{uid: uid, creds: creds})
}

// readyCredentials holds, per Proxy whose instance runs, the credentials
// last read from its Secret, with the address the Secret's URL was written
// for and when. The looks at a Ready proxy between resyncs use them rather
// than reading the Secret again: with the probe on (the default), a probe
// round is two looks every --probe-interval, and their two reads were most
// of the operator's requests to the API server in a steady state. The
// Secret is read again once per resync interval, after a new generation,
// and when the address changes (the URL in it must follow), so a Secret
// deleted or emptied behind the operator's back is noticed within a resync
// interval rather than a probe interval. After a restart nothing is held.
// The UID keeps a Proxy recreated under the same name from another's
// credentials. The zero value is ready; it is safe for concurrent use.
type readyCredentials struct {
	shared.Memo[types.NamespacedName, readyHeld]
}

type readyHeld struct {
	uid        types.UID
	generation int64
	address    string
	creds      *credentials // nil with auth None
	at         time.Time
}

// get returns the credentials held for the Proxy key with uid at
// generation, whose URL was written for address less than maxAge before
// now.
func (c *readyCredentials) get(key types.NamespacedName, uid types.UID, generation int64, address string, now time.Time, maxAge time.Duration) (*credentials, bool) {
	h, ok := c.Load(key)
	if !ok || h.uid != uid || h.generation != generation || h.address != address || now.Sub(h.at) >= maxAge {
		return nil, false
	}
	return h.creds, true
}

// put holds creds, read at now, for the Proxy key with uid at generation,
// its URL written for address. It holds the credentials, not the Secret
// they were read from: the looks that use them write nothing to it, and a
// decoded Secret (its managed fields and all) is about 2 KiB, 20 MiB of
// the operator's heap at 10 000 Ready proxies.
func (c *readyCredentials) put(key types.NamespacedName, uid types.UID, generation int64, address string, creds *credentials, now time.Time) {
	if creds != nil {
		held := *creds
		held.secret = nil
		creds = &held
	}
	c.Store(key, readyHeld{uid: uid, generation: generation, address: address, creds: creds, at: now})
}

// progressEvery is how often a create's progress alone (progressOnly: the
// Ready message names a new step, nothing else changed) is written to the
// status. A status that says more (phase, reason, instance, address) is
// written at once. A step is thus named within progressEvery plus a poll,
// while a create of a few fast steps costs one status write, not one per
// step.
const progressEvery = 10 * time.Second

// routineProbeEvery is how many probe intervals apart a routine probe
// (routineProbe: it passed as the one before did) is written to the
// status; probeTimes keeps the probe's schedule in between.
const routineProbeEvery = 10

// probeTimes remembers, per Proxy, when this process last took a probe's
// outcome, ahead of the status's lastProbeTime when the write of a routine
// probe was spared. After a restart nothing is remembered and the status's
// time, at most routineProbeEvery probe intervals old, schedules the next
// probe. The zero value is ready; it is safe for concurrent use.
type probeTimes struct {
	shared.Memo[types.NamespacedName, time.Time]
}

// record notes that key's probe outcome was taken at t.
func (p *probeTimes) record(key types.NamespacedName, t time.Time) { p.Store(key, t) }

// statusWrites remembers, per Proxy, when this process last wrote its
// status. After a restart nothing is remembered and the first progress is
// written. The zero value is ready; it is safe for concurrent use.
type statusWrites struct {
	shared.Memo[types.NamespacedName, time.Time]
}

// record notes a status write of key at t.
func (s *statusWrites) record(key types.NamespacedName, t time.Time) { s.Store(key, t) }

// within reports whether this process wrote key's status less than d
// before now.
func (s *statusWrites) within(key types.NamespacedName, now time.Time, d time.Duration) bool {
	t, ok := s.Load(key)
	return ok && now.Sub(t) < d
}
