package fakeprovider

import (
	"errors"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// TypeName is the provider type tests register the fake under.
const TypeName = "fake"

// Block is the fake type's configuration block.
type Block struct {
	// Nodes, when set, must name one node per zone; it exists so that tests
	// can exercise block validation.
	Nodes map[string]string `json:"nodes,omitempty"`
}

// Validate implements config.Block: every node entry must name a zone.
func (b *Block) Validate(path *field.Path, e *config.Entry) field.ErrorList {
	var errs field.ErrorList
	for zone := range b.Nodes {
		found := false
		for _, z := range e.Zones {
			found = found || z == zone
		}
		if !found {
			errs = append(errs, field.NotSupported(path.Child("nodes").Key(zone), zone, e.Zones))
		}
	}
	return errs
}

// Registry returns a config.Registry with only the fake type.
func Registry() config.Registry {
	return provider.Types{TypeFor(nil)}.Registry()
}

// TypeFor returns the fake provider type whose every entry is served by f,
// for tests that run the operator's setup with the fake registered.
func TypeFor(f *Provider) provider.Type {
	return provider.Type{
		Name: TypeName,
		// As the VM types: what a gateway in these tests sees of a fake
		// member is a VM's.
		Engine:   published.EngineTinyproxy,
		NewBlock: func() config.Block { return &Block{} },
		New: func(*config.Entry, provider.Deps) (provider.Provider, error) {
			if f == nil {
				return nil, errors.New("the fake provider type was registered without a fake")
			}
			return f, nil
		},
	}
}
