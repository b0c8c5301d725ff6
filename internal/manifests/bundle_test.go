package manifests

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimachineryruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
)

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := modroot.Find()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// registry is the build's registry of provider types, so that every
// manifest is checked against the types the binary accepts.
func registry() config.Registry { return setup.Types.Registry() }

// renderDocs renders the kustomization in dir (relative to the repository
// root) as `kustomize build` does and returns one YAML document per object.
func renderDocs(t *testing.T, dir string) [][]byte {
	t.Helper()
	return renderDocsIn(t, filesys.MakeFsOnDisk(), filepath.Join(repoRoot(t), dir))
}

// renderDocsIn renders the kustomization at path dir of fsys.
func renderDocsIn(t *testing.T, fsys filesys.FileSystem, dir string) [][]byte {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(fsys, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var docs [][]byte
	for _, r := range resMap.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatalf("kustomize build %s: %s: %v", dir, r.CurId(), err)
		}
		docs = append(docs, y)
	}
	return docs
}

// bundle is a render, decoded by kind.
type bundle struct {
	Namespaces          []*corev1.Namespace
	ServiceAccounts     []*corev1.ServiceAccount
	ConfigMaps          []*corev1.ConfigMap
	Secrets             []*corev1.Secret
	Services            []*corev1.Service
	Deployments         []*appsv1.Deployment
	Roles               []*rbacv1.Role
	ClusterRoles        []*rbacv1.ClusterRole
	RoleBindings        []*rbacv1.RoleBinding
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding
	CRDs                []*apiextensionsv1.CustomResourceDefinition
	Proxies             []*crawlv1alpha1.Proxy
	Pools               []*crawlv1alpha1.ProxyPool
	Policies            []*admissionregistrationv1.ValidatingAdmissionPolicy
	PolicyBindings      []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// decoder decodes strictly (unknown and duplicate fields are errors) into
// the kinds of client-go, apiextensions and crawl.example.com.
func decoder(t *testing.T) apimachineryruntime.Decoder {
	t.Helper()
	s := apimachineryruntime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), apiextensionsv1.AddToScheme(s), crawlv1alpha1.AddToScheme(s)); err != nil {
		t.Fatal(err)
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}

// decode decodes every document into the bundle. A document of a kind that
// no scheme knows, or that the bundle does not sort, is an error: the checks
// below would silently ignore it.
func decode(dec apimachineryruntime.Decoder, docs [][]byte) (*bundle, error) {
	b := &bundle{}
	var errs []error
	for _, doc := range docs {
		obj, gvk, err := dec.Decode(doc, nil, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("decoding %.80q: %w", doc, err))
			continue
		}
		switch o := obj.(type) {
		case *corev1.Namespace:
			b.Namespaces = append(b.Namespaces, o)
		case *corev1.ServiceAccount:
			b.ServiceAccounts = append(b.ServiceAccounts, o)
		case *corev1.ConfigMap:
			b.ConfigMaps = append(b.ConfigMaps, o)
		case *corev1.Secret:
			b.Secrets = append(b.Secrets, o)
		case *corev1.Service:
			b.Services = append(b.Services, o)
		case *appsv1.Deployment:
			b.Deployments = append(b.Deployments, o)
		case *rbacv1.Role:
			b.Roles = append(b.Roles, o)
		case *rbacv1.ClusterRole:
			b.ClusterRoles = append(b.ClusterRoles, o)
		case *rbacv1.RoleBinding:
			b.RoleBindings = append(b.RoleBindings, o)
		case *rbacv1.ClusterRoleBinding:
			b.ClusterRoleBindings = append(b.ClusterRoleBindings, o)
		case *apiextensionsv1.CustomResourceDefinition:
			b.CRDs = append(b.CRDs, o)
		case *crawlv1alpha1.Proxy:
			b.Proxies = append(b.Proxies, o)
		case *crawlv1alpha1.ProxyPool:
			b.Pools = append(b.Pools, o)
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			b.Policies = append(b.Policies, o)
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			b.PolicyBindings = append(b.PolicyBindings, o)
		default:
			errs = append(errs, fmt.Errorf("%s: a kind these tests do not check; add it to bundle and to the checks", gvk))
		}
	}
	return b, errors.Join(errs...)
}

func (b *bundle) hasNamespace(name string) bool {
	return slices.ContainsFunc(b.Namespaces, func(n *corev1.Namespace) bool { return n.Name == name })
}

func (b *bundle) serviceAccount(ns, name string) *corev1.ServiceAccount {
	for _, o := range b.ServiceAccounts {
		if o.Namespace == ns && o.Name == name {
			return o
		}
	}
	return nil
}

func (b *bundle) configMap(ns, name string) *corev1.ConfigMap {
	for _, o := range b.ConfigMaps {
		if o.Namespace == ns && o.Name == name {
			return o
		}
	}
	return nil
}

func (b *bundle) secret(ns, name string) *corev1.Secret {
	for _, o := range b.Secrets {
		if o.Namespace == ns && o.Name == name {
			return o
		}
	}
	return nil
}

func (b *bundle) role(ns, name string) *rbacv1.Role {
	for _, o := range b.Roles {
		if o.Namespace == ns && o.Name == name {
			return o
		}
	}
	return nil
}

func (b *bundle) clusterRole(name string) *rbacv1.ClusterRole {
	for _, o := range b.ClusterRoles {
		if o.Name == name {
			return o
		}
	}
	return nil
}

// rulesOf returns the rules a roleRef names, seen from a binding in ns
// ("" for a ClusterRoleBinding), or nil when it does not exist.
func (b *bundle) rulesOf(ns string, ref rbacv1.RoleRef) []rbacv1.PolicyRule {
	switch ref.Kind {
	case "Role":
		if r := b.role(ns, ref.Name); r != nil {
			return r.Rules
		}
	case "ClusterRole":
		if r := b.clusterRole(ref.Name); r != nil {
			return r.Rules
		}
	}
	return nil
}

// rightsIn returns the rules that apply to the service account ns/name in
// namespace target: those of ClusterRoleBindings and of RoleBindings in
// target.
func (b *bundle) rightsIn(target, saNS, saName string) []rbacv1.PolicyRule {
	isSA := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == saName && s.Namespace == saNS
		})
	}
	var rules []rbacv1.PolicyRule
	for _, crb := range b.ClusterRoleBindings {
		if isSA(crb.Subjects) {
			rules = append(rules, b.rulesOf("", crb.RoleRef)...)
		}
	}
	for _, rb := range b.RoleBindings {
		if rb.Namespace == target && isSA(rb.Subjects) {
			rules = append(rules, b.rulesOf(rb.Namespace, rb.RoleRef)...)
		}
	}
	return rules
}

// allows reports whether rules grant verb on group/resource.
func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if (slices.Contains(r.APIGroups, group) || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*")) &&
			(slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) {
			return true
		}
	}
	return false
}

// allowsURL reports whether rules grant verb on a non-resource URL.
func allowsURL(rules []rbacv1.PolicyRule, url, verb string) bool {
	for _, r := range rules {
		if slices.Contains(r.NonResourceURLs, url) && (slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) {
			return true
		}
	}
	return false
}
