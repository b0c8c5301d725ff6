package kubernetes

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Type registers the kubernetes provider type with the operator's setup.
var Type = provider.Type{
	Name:     TypeName,
	Engine:   published.EngineForwardProxy,
	NewBlock: func() config.Block { return &Block{} },
	New: func(e *config.Entry, d provider.Deps) (provider.Provider, error) {
		return New(e, d)
	},
	Cache: cacheNeeds,
}

// cacheNeeds caches the operator's pods, and only in the entries'
// namespaces: there the operator has rights on pods (a namespaced Role), and
// a cluster-wide pod cache would hold every pod of the cluster in memory.
// The provider reads its pods through the manager's client, hence the cache.
func cacheNeeds(entries []*config.Entry) map[client.Object]cache.ByObject {
	namespaces := map[string]cache.Config{}
	for _, e := range entries {
		if b, ok := e.Block.(*Block); ok {
			namespaces[b.Namespace] = cache.Config{}
		}
	}
	if len(namespaces) == 0 {
		return nil
	}
	managed := labels.SelectorFromSet(labels.Set{LabelManagedBy: LabelManagedByValue})
	// The pods' credentials Secrets are read through the cache too, and
	// only in the same namespaces, where the Role allows it.
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:    {Label: managed, Namespaces: namespaces},
		&corev1.Secret{}: {Label: managed, Namespaces: namespaces},
	}
}
