package provider

import (
	"context"
	"net/netip"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// ID identifies an instance within one provider entry. Its format belongs to
// the provider (Proxmox VE uses "node/vmid"); the operator stores it in
// Proxy.status.instanceID and hands it back verbatim.
type ID string

// State is the lifecycle state of an instance as the operator sees it.
type State string

const (
	// StateProvisioning means the instance exists and is being created, configured
	// or is booting; it has no usable address yet.
	StateProvisioning State = "Provisioning"
	// StateRunning means the instance runs. Address is set once it is known; a
	// Running instance without an address is still waited for.
	StateRunning State = "Running"
	// StateStopped means the instance exists but does not run and will not run
	// again by itself (stopped, paused, crashed). The operator replaces it.
	StateStopped State = "Stopped"
)

// Instance is what a provider reports of one instance it created.
type Instance struct {
	// ID is the provider's identifier of the instance.
	ID ID
	// Name is the name the operator asked for in Request.Name.
	Name string
	// OwnerUID is the UID of the Proxy the instance was created for, read
	// back from the mark the provider stored on the instance.
	OwnerUID string
	// State is the instance's lifecycle state.
	State State
	// Address is the address the proxy listens on; valid only when State is
	// StateRunning and the address is known.
	Address netip.Addr
	// Node is the hypervisor node, host or Kubernetes node that runs it.
	Node string
	// CreatedAt is when the instance was created, read back from the
	// instance's mark (not from the operator's memory), so that garbage
	// collection can apply a grace period after a restart.
	CreatedAt time.Time
	// RecheckAfter is, for an instance that is not running with an address
	// yet, when the provider expects a look to find it further: its guest
	// agent is due to answer, say. The operator looks then, or at its poll
	// interval if that comes sooner; a hint never delays a look. Zero
	// leaves the next look to the poll interval. Only Get sets it.
	RecheckAfter time.Duration
}

// Request is everything a provider needs to create one instance. It is built
// by the operator from a Proxy and the entry's configuration; the same Proxy
// always yields the same Request (Name included), which is what makes Create
// idempotent across crashes and retries.
type Request struct {
	// OwnerUID is the UID of the Proxy. Providers store it on the instance
	// (tag, label, metadata) and report it in Instance.OwnerUID: it is the
	// mark that says the instance is ours and whose it is.
	OwnerUID string
	// Owner names the Proxy, for descriptions that help a human on the
	// hypervisor side; it is never used to find instances.
	Owner ObjectRef
	// Name is the deterministic instance name: a DNS label of at most 63
	// characters, unique per Proxy and per replacement.
	Name string
	// Zone, MachineType and Image are names from the entry's catalogues,
	// already checked to exist in them.
	Zone        string
	MachineType string
	Image       string
	// UserData is the rendered cloud-init user-data for VM providers. It
	// holds the proxy credentials: never log it, put it in an error, a span
	// or a status.
	UserData Sensitive
	// Proxy is the proxy configuration itself, for providers that run the
	// proxy directly instead of booting a VM with UserData.
	Proxy ProxySettings
}

// ObjectRef names a namespaced Kubernetes object.
type ObjectRef struct {
	Namespace string
	Name      string
}

// String returns namespace/name.
func (r ObjectRef) String() string { return r.Namespace + "/" + r.Name }

// ProxySettings is how the proxy must be configured.
type ProxySettings struct {
	// Port is the TCP port the proxy listens on.
	Port int32
	// Credentials names the Secret holding the username and password, or is
	// nil when the proxy serves without authentication.
	Credentials *SecretRef
	// AllowedSourceRanges are the client networks allowed to use the proxy;
	// empty means any source (only with Credentials set).
	AllowedSourceRanges []netip.Prefix
	// Egress is the entry's destination policy, which the proxy enforces
	// on the addresses it connects to; its zero value is the safe default.
	Egress egress.Policy
}

// SecretRef names the keys of a Secret that hold the proxy credentials.
type SecretRef struct {
	Namespace   string
	Name        string
	UsernameKey string
	PasswordKey string
}

// Verdict is the outcome of one health check of one target (node or host).
type Verdict struct {
	// Target is the node or host checked.
	Target string
	// Healthy is true when the target can serve.
	Healthy bool
	// Reason is a CamelCase word for the outcome, such as Reachable,
	// Unreachable or Unauthorized.
	Reason string
	// Message says what is wrong and what to do. It must not hold secrets.
	Message string
	// Latency is how long the check took.
	Latency time.Duration
}

// Provider runs proxy instances on one configured provider entry.
//
// Every method is safe for concurrent use by many goroutines, honours its
// context (returns promptly with the context's error once it is done) and
// returns errors built with this package's constructors: Transient, Permanent,
// NotFound or InProgress (see errors.go). An error of no class is treated as
// Transient. The operator wraps every provider in one decorator that adds the
// entry name, the operation and the instance ID to each error, so providers
// need not.
//
// No type of a provider's SDK or API crosses this interface, and nothing
// secret (API tokens, Request.UserData, proxy passwords) may appear in an
// error message: errors end up in logs, events and the Proxy status.
type Provider interface {
	// Create creates the instance described by req, or finds the one it
	// created before for the same req, and returns its ID.
	//
	// Create is idempotent: called again with the same Request after any
	// crash, retry or timeout (of the operator, the provider or the network),
	// at any point of a previous call, it converges on the same single
	// instance and returns the same ID. Providers achieve this by marking the
	// instance with req.OwnerUID and req.Name before or as it is created, and
	// by looking for that mark first.
	//
	// Create must never adopt, change or destroy an instance that does not
	// carry the operator's mark.
	//
	// Create never returns NotFound: an instance destroyed behind its back
	// while it was being made is a Transient error, and the next call makes
	// another.
	//
	// Create should not block for the whole boot of the instance. It returns
	// the ID as soon as the instance exists and is on its way to running; Get
	// then reports StateProvisioning until it runs. When the provider has to
	// wait between steps that must all happen before the instance can be
	// handed over (a clone task, a disk resize), it returns an InProgress
	// error instead of waiting, and the operator calls Create again with the
	// same Request after the suggested delay: the provider resumes where it
	// stopped, from what it can observe on the infrastructure.
	Create(ctx context.Context, req Request) (ID, error)

	// Get reports the instance with the given ID. It returns a NotFound error
	// when the instance does not exist (any more), and a Transient error when
	// it cannot tell (for example the node that runs it is unreachable): an
	// instance that merely cannot be seen must never be reported as gone,
	// since the operator would replace it and duplicate it.
	//
	// Get must be cheap: the operator calls it for every Proxy on every
	// resync. Providers may serve it from a listing shared by all instances of
	// the entry and refreshed at most once per poll interval.
	Get(ctx context.Context, id ID) (Instance, error)

	// Delete removes the instance and every trace of it (disks, seeds,
	// addresses), stopping it first if needed. Deleting an instance that does
	// not exist succeeds. Delete may return InProgress while removal
	// continues; the operator calls it again until it returns nil.
	//
	// Delete never stops, changes or removes an instance that does not
	// carry the operator's mark. When the ID now names such an instance (the
	// Proxy's own is gone and something else took its place: a foreign VM
	// at the same VMID, a pod someone else created under the same name),
	// the Proxy's instance counts as gone: Delete leaves the other one
	// alone, removes what is left of the Proxy's own (seeds, credentials)
	// and succeeds. An ID the provider cannot have made is refused with a
	// Permanent error.
	Delete(ctx context.Context, id ID) error

	// ListByTag lists every instance this operator created on the entry, in
	// any state, with OwnerUID and CreatedAt read from the instance's mark.
	// It is used by garbage collection and by deletion, to find instances
	// whose ID was never recorded. It never lists an instance without the
	// operator's mark.
	ListByTag(ctx context.Context) ([]Instance, error)
}

// Sweeper is implemented by providers whose instances leave things behind
// that are not instances themselves and that ListByTag cannot show (the
// Proxmox provider's seed ISOs, which hold proxy credentials). Garbage
// collection calls Sweep on every pass.
type Sweeper interface {
	// Sweep removes what the provider left behind and no instance needs
	// any more, and returns how many things it removed or started to
	// remove. It never touches anything that does not carry the operator's
	// name (or signature), nor anything young enough to belong to a create
	// in progress. It honours its context.
	Sweep(ctx context.Context) (int, error)
}

// Checker is implemented by providers that can check their own health. The
// operator calls Check on an interval and writes the verdicts into the
// entry's ProviderHealth object.
type Checker interface {
	// Check returns one verdict per target (node or host) of the entry. It
	// does not return an error: a failure to check a target is that target's
	// verdict. It honours its context.
	Check(ctx context.Context) []Verdict
}

// UnverifiedLister is implemented by providers that can tell, from what
// their ListByTag reads anyway, the instances whose mark names this
// installation and carries a signature that does not verify under the
// current key. All of an entry's instances being such is the sign of a lost
// or replaced ownership key: the operator then stops creating on the entry
// instead of building a second fleet beside the first (docs/security.md).
type UnverifiedLister interface {
	// Unverified returns those instances as the latest ListByTag saw them,
	// with ID, Name (as the mark says: unverified, for a person to find
	// them) and Node; nil before the first listing. It makes no call to the
	// infrastructure. An unsigned mark and another installation's mark are
	// not in it: those instances are foreign, and foreign instances never
	// hold up anything.
	Unverified() []Instance
}

// Optional is implemented by decorators of a Provider (the operator's
// internal/provider/instrumented): one decorator type carries the methods of
// every optional interface, so that a new optional interface adds a method,
// not a doubling of wrapper types, and Supports says which of them the
// provider beneath it really implements. Callers therefore never ask by a
// type assertion, which would see the decorator's methods, but through
// AsChecker, AsSweeper and AsUnverifiedLister.
type Optional interface {
	// Supports reports whether the operation op of an optional interface
	// (OpCheck, OpSweep, OpUnverified) is implemented by the decorated provider.
	Supports(op Op) bool
}

// AsChecker returns p as a Checker when it can check its health, through
// any decorator.
func AsChecker(p Provider) (Checker, bool) { return as[Checker](p, OpCheck) }

// AsUnverifiedLister returns p as an UnverifiedLister when it reports
// unverified instances, through any decorator.
func AsUnverifiedLister(p Provider) (UnverifiedLister, bool) {
	return as[UnverifiedLister](p, OpUnverified)
}

// AsSweeper returns p as a Sweeper when it leaves things to sweep, through
// any decorator.
func AsSweeper(p Provider) (Sweeper, bool) { return as[Sweeper](p, OpSweep) }

// as is the one capability check behind the As* accessors.
func as[T any](p Provider, op Op) (T, bool) {
	var none T
	if o, ok := p.(Optional); ok && !o.Supports(op) {
		return none, false
	}
	t, ok := p.(T)
	return t, ok
}
