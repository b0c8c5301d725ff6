package setup

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
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

// controllersOwn is what the controllers cache whatever the entries: the
// ConfigMaps they publish and a gateway's objects, each by the managed-by
// label, in every namespace.
func controllersOwn(more map[string][]string) map[string][]string {
	out := map[string][]string{"ConfigMap": {}, "Deployment": {}, "NetworkPolicy": {}, "PodDisruptionBudget": {}, "Role": {},
		"RoleBinding": {}, "Service": {}, "ServiceAccount": {}}
	maps.Copy(out, more)
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
				"(a cluster-wide Secret cache needs the right to read every Secret: #12 item 10), only their own objects",
			entries: []config.Entry{pveEntry}, types: Types,
			want: controllersOwn(nil),
		},
		{
			name: "kubernetes entries", reason: "pods and their Secrets are cached in the namespaces of the kubernetes entries only",
			entries: []config.Entry{k8sEntry("a", "pods-a"), pveEntry, k8sEntry("b", "pods-b")}, types: Types,
			want: controllersOwn(map[string][]string{"Secret": {"pods-a", "pods-b"}, "Pod": {"pods-a", "pods-b"}}),
		},
		{
			name: "type without entries", reason: "a registered type with no entry asks for nothing",
			entries: []config.Entry{pveEntry}, types: provider.Types{proxmox.Type, podsAgain},
			want: controllersOwn(nil),
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

// The cache keeps no managedFields: at 10 000 Proxies they were most of the
// operator's heap, and nothing reads them.
func TestCacheOptionsStripManagedFields(t *testing.T) {
	got, err := cacheOptions(&config.Config{Providers: []config.Entry{
		{Name: "a", Type: kubernetes.TypeName, Block: &kubernetes.Block{Namespace: "pods-a"}}}}, Types, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.DefaultTransform == nil {
		t.Fatal("no default transform: cached objects keep their managedFields")
	}
	in := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	out, err := got.DefaultTransform(in)
	if err != nil {
		t.Fatal(err)
	}
	if pod, ok := out.(*corev1.Pod); !ok || pod.ManagedFields != nil {
		t.Errorf("the transform returned %#v, want the pod without managedFields", out)
	}
	for obj, by := range got.ByObject {
		if by.Transform != nil {
			t.Errorf("%T has a transform of its own, which replaces the default one", obj)
		}
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
// name twice, each name the key of its own block, and each naming the
// engine its instances run, which the pools publish for the gateways (a
// new type that forgets it gets no kept member connections, and this says
// so here rather than in a slower gateway).
func TestTypesAreValid(t *testing.T) {
	if err := Types.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, ty := range Types {
		if ty.NewBlock() == nil {
			t.Errorf("type %s: NewBlock returned nil", ty.Name)
		}
		if ty.Engine != published.EngineForwardProxy && ty.Engine != published.EngineTinyproxy {
			t.Errorf("type %s: engine %q is none of the published engines", ty.Name, ty.Engine)
		}
	}
}

// An entry whose type the build does not know is refused before anything is
// built (config.Parse refuses it first in the binary; tests that build
// configurations by hand meet this check).
func TestNewRefusesAnUnregisteredType(t *testing.T) {
	_, err := New(Options{
		Config:    &config.Config{Providers: []config.Entry{{Name: "x", Type: "nosuch"}}},
		Types:     provider.Types{proxmox.Type},
		Ownership: ownershiptest.Identity("setup-test"),
	})
	if err == nil || !strings.Contains(err.Error(), `type "nosuch" is not registered`) {
		t.Fatalf("got %v, want an unregistered type error", err)
	}
}

// An operator without an installation identity is refused: its providers
// could neither sign their marks nor tell their instances from another
// installation's.
func TestNewRefusesNoOwnership(t *testing.T) {
	_, err := New(Options{Config: &config.Config{}})
	if err == nil || !strings.Contains(err.Error(), "no ownership identity") {
		t.Fatalf("got %v, want a missing identity error", err)
	}
}

func TestParseNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name, reason, in string
		want             []string
		wantErr          string
	}{
		{name: "empty", reason: "no list serves every namespace", in: "", want: nil},
		{name: "only separators", reason: "a stray comma is not a namespace", in: " , ,", want: nil},
		{name: "one", reason: "the default install serves one namespace", in: "crawlers", want: []string{"crawlers"}},
		{name: "sorted and unique", reason: "the cache's namespace map and the log line are stable", in: "team-b, team-a,team-b",
			want: []string{"team-a", "team-b"}},
		{name: "not a label", reason: "a typo must stop the operator, not serve nothing", in: "crawlers,Team_A",
			wantErr: `"Team_A" is not a namespace name`},
		{name: "wildcard", reason: "every namespace is the empty value, not a pattern", in: "*", wantErr: `"*" is not a namespace name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNamespaces(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s: got error %v, want %q", tc.reason, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}
