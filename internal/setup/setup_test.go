package setup

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
)

// kinds summarises cache options as "kind: namespaces" lines, for cmp.
func kinds(o cache.Options) map[string][]string {
	out := map[string][]string{}
	for obj, by := range o.ByObject {
		ns := slices.Sorted(maps.Keys(by.Namespaces))
		if ns == nil {
			ns = []string{}
		}
		out[reflect.TypeOf(obj).Elem().Name()] = ns
	}
	return out
}

func TestCacheOptions(t *testing.T) {
	k8sEntry := func(name, ns string) config.Entry {
		return config.Entry{Name: name, Type: kubernetes.TypeName, Block: &kubernetes.Block{Namespace: ns}}
	}
	pveEntry := config.Entry{Name: "lab", Type: proxmox.TypeName, Block: &proxmox.Block{}}
	podsAgain := provider.Type{Name: "pods-again", NewBlock: proxmox.Type.NewBlock, New: proxmox.Type.New,
		Cache: func([]*config.Entry) map[client.Object]cache.ByObject {
			return map[client.Object]cache.ByObject{&corev1.Pod{}: {}}
		}}
	for _, tc := range []struct {
		name       string
		reason     string
		entries    []config.Entry
		types      provider.Types
		namespaces []string
		want       map[string][]string
		wantErr    string
	}{
		{
			name: "proxmox only", reason: "a type without cache needs adds nothing; the controllers cache no Secret " +
				"(a cluster-wide Secret cache needs the right to read every Secret: #12 item 10), only their ConfigMaps",
			entries: []config.Entry{pveEntry}, types: Types,
			want: map[string][]string{"ConfigMap": {}},
		},
		{
			name: "kubernetes entries", reason: "pods and their Secrets are cached in the namespaces of the kubernetes entries only",
			entries: []config.Entry{k8sEntry("a", "pods-a"), pveEntry, k8sEntry("b", "pods-b")}, types: Types,
			want: map[string][]string{"ConfigMap": {}, "Secret": {"pods-a", "pods-b"}, "Pod": {"pods-a", "pods-b"}},
		},
		{
			name: "type without entries", reason: "a registered type with no entry asks for nothing",
			entries: []config.Entry{pveEntry}, types: provider.Types{proxmox.Type, podsAgain},
			want: map[string][]string{"ConfigMap": {}},
		},
		{
			name: "two types want pods", reason: "merging two types' pod selectors would hide one from the other",
			entries: []config.Entry{k8sEntry("a", "pods-a"), {Name: "x", Type: "pods-again"}},
			types:   provider.Types{kubernetes.Type, podsAgain},
			wantErr: `provider type "pods-again" asks to cache *v1.Pod`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cacheOptions(&config.Config{Providers: tc.entries}, tc.types, tc.namespaces)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s: got error %v, want %q", tc.reason, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, kinds(got)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestCacheOptionsConfineToNamespaces(t *testing.T) {
	got, err := cacheOptions(&config.Config{}, Types, []string{"team-a", "team-b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.DefaultNamespaces["team-a"]; !ok || len(got.DefaultNamespaces) != 2 {
		t.Errorf("default namespaces %v, want team-a and team-b", got.DefaultNamespaces)
	}
}

// TestTypesAreValid guards the registration list: every type complete, no
// name twice, and each name the key of its own block.
func TestTypesAreValid(t *testing.T) {
	if err := Types.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, ty := range Types {
		if ty.NewBlock() == nil {
			t.Errorf("type %s: NewBlock returned nil", ty.Name)
		}
	}
}

// An entry whose type the build does not know is refused before anything is
// built (config.Parse refuses it first in the binary; tests that build
// configurations by hand meet this check).
func TestNewRefusesAnUnregisteredType(t *testing.T) {
	_, err := New(Options{
		Config: &config.Config{Providers: []config.Entry{{Name: "x", Type: "nosuch"}}},
		Types:  provider.Types{proxmox.Type},
	})
	if err == nil || !strings.Contains(err.Error(), `type "nosuch" is not registered`) {
		t.Fatalf("got %v, want an unregistered type error", err)
	}
}
