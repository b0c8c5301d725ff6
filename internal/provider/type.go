package provider

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
)

// Type describes one provider type, such as proxmox or kubernetes. Each
// provider package exports its Type (as a package variable named Type) and
// the operator's setup lists them, one line per type, in internal/setup; that
// list is the only place that knows which types the binary supports.
type Type struct {
	// Name is the value of an entry's `type:` and the key of its block
	// (`proxmox:`). It must be a DNS label.
	Name string
	// NewBlock returns a pointer to a zero block, into which an entry's block
	// is decoded strictly; the block validates itself against its entry.
	NewBlock func() config.Block
	// New builds the provider of one entry of this type, whose Block is the
	// one NewBlock returned. It must not contact the infrastructure: an
	// unreachable provider shows in ProviderHealth, it does not stop the
	// operator.
	New func(e *config.Entry, d Deps) (Provider, error)
	// Engine is the forward proxy this type's instances run, as a pool's
	// published list names it (published.EngineForwardProxy or
	// published.EngineTinyproxy). A gateway keeps connections alive only
	// to members that run EngineForwardProxy; empty means not known, which
	// a gateway treats as tinyproxy.
	Engine string
	// Cache, when set, says which objects the manager's cache must hold for
	// the entries of this type (all of them, in file order), for example the
	// pods a kubernetes entry runs, confined to its namespaces. The setup
	// merges every type's answer into the cache options; two types may not
	// ask for the same kind of object. Nil means the type needs nothing
	// cached.
	Cache func(entries []*config.Entry) map[client.Object]cache.ByObject
}

// Deps are what a provider constructor may use, given by the operator's
// setup. It is the one dependency struct of every type: a constructor takes
// the entry and Deps, never a copy of them of its own.
type Deps struct {
	// Client is the manager's client: reads from its cache, writes to the
	// API server.
	Client client.Client
	// APIReader reads from the API server, past the cache.
	APIReader client.Reader
	// OwnImage is the operator's own container image (--proxy-image), which
	// can also run the forward proxy; empty when unknown.
	OwnImage string
	// Log is the provider's logger for what happens outside a call (calls
	// log through the logger of their context).
	Log logr.Logger
	// Ownership is the installation's identity: every instance the
	// provider creates carries a mark signed with it, and only instances
	// whose mark it verifies are the provider's (listed, adopted, changed
	// or deleted). Never nil in a running operator.
	Ownership *ownership.Identity
	// Entries are the names of every entry of the providers configuration.
	// Entries may share a host or a cluster: an instance signed for
	// another of them is that entry's, not a sign of a lost key.
	Entries []string
	// Now is the clock; nil means time.Now. Tests set it to move a
	// provider's time without waiting.
	Now func() time.Time
}

// Clock returns Now, or time.Now when it is nil.
func (d Deps) Clock() func() time.Time {
	if d.Now == nil {
		return time.Now
	}
	return d.Now
}

// BlockOf checks what the constructor of a type that signs its instances
// needs, an entry with a *B block and an ownership identity, and returns the
// block. kind names the type in errors ("proxmox provider").
func BlockOf[B any, PB interface {
	*B
	config.Block
}](kind string, e *config.Entry, d Deps) (PB, error) {
	if e == nil {
		return nil, errors.New(kind + ": no entry")
	}
	b, ok := e.Block.(PB)
	if !ok || b == nil {
		return nil, fmt.Errorf("%s %q: block is %T, want %T", kind, e.Name, e.Block, b)
	}
	if d.Ownership == nil {
		return nil, fmt.Errorf("%s %q: no ownership identity to sign and verify marks with", kind, e.Name)
	}
	return b, nil
}

// Types is a list of provider types.
type Types []Type

// Lookup returns the type with the given name.
func (ts Types) Lookup(name string) (Type, bool) {
	for _, t := range ts {
		if t.Name == name {
			return t, true
		}
	}
	return Type{}, false
}

// Registry returns the config.Registry of the types, for config.Parse and
// config.Load.
func (ts Types) Registry() config.Registry {
	r := make(config.Registry, len(ts))
	for _, t := range ts {
		r[t.Name] = t.NewBlock
	}
	return r
}

// Validate reports a type without a name, block or constructor, and a name
// registered twice: mistakes of the registration list, caught at start.
func (ts Types) Validate() error {
	seen := map[string]bool{}
	for i, t := range ts {
		switch {
		case t.Name == "":
			return fmt.Errorf("provider type %d has no name", i)
		case t.NewBlock == nil || t.New == nil:
			return fmt.Errorf("provider type %q needs NewBlock and New", t.Name)
		case seen[t.Name]:
			return fmt.Errorf("provider type %q is registered twice", t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}
