package manifests

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
)

// defaultChecks are the checks of config/default.
var defaultChecks = []struct {
	name  string
	check func(*bundle) error
}{
	{"namespaces", checkNamespaces},
	{"bindings", checkBindings},
	{"deployment", checkDeployment},
	{"reference names", checkReferenceNames},
	{"metrics", checkMetrics},
	{"provider rights", checkProviderRights},
	{"CRDs", checkCRDs},
	{"ProxyGateway spec policy", checkSpecPolicy},
	{"no cluster-wide Secret reading", checkNoClusterSecretReads},
	{"served namespaces", checkServedNamespaces},
	{"no cluster-wide Secret rights", checkNoClusterSecretRights},
}

func runDefaultChecks(b *bundle) error {
	var errs []error
	for _, c := range defaultChecks {
		if err := c.check(b); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	return errors.Join(errs...)
}

// TestDefault checks config/default, what `make build-installer` renders.
func TestDefault(t *testing.T) {
	dec := decoder(t)
	b, err := decode(dec, renderDocs(t, "config/default"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range defaultChecks {
		t.Run(c.name, func(t *testing.T) {
			if err := c.check(b); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestDefaultChecksFail breaks the render of config/default in one way at a
// time and expects the checks to say so: a check that cannot fail checks
// nothing.
func TestDefaultChecksFail(t *testing.T) {
	dec := decoder(t)
	docs := renderDocs(t, "config/default")
	manager := func(b *bundle) *corev1.Container {
		_, c, err := operator(b)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	podRole := func(b *bundle) *rbacv1.Role {
		for _, r := range b.Roles {
			if r.Namespace == "egress-proxies" {
				return r
			}
		}
		t.Fatal("no Role in egress-proxies")
		return nil
	}
	volume := func(b *bundle, name string) *corev1.Volume {
		vs := b.Deployments[0].Spec.Template.Spec.Volumes
		i := slices.IndexFunc(vs, func(v corev1.Volume) bool { return v.Name == name })
		if i < 0 {
			t.Fatalf("no volume %s", name)
		}
		return &vs[i]
	}
	mount := func(b *bundle, name string) *corev1.VolumeMount {
		c := manager(b)
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == name })
		if i < 0 {
			t.Fatalf("no mount of %s", name)
		}
		return &c.VolumeMounts[i]
	}
	if b, err := decode(dec, docs); err != nil || runDefaultChecks(b) != nil {
		t.Fatal("the unbroken render of config/default fails already (see TestDefault); these cases would prove nothing")
	}
	setArg := func(c *corev1.Container, name, value string) {
		c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--"+name+"=") || a == "--"+name })
		if value != "" {
			c.Args = append(c.Args, "--"+name+"="+value)
		}
	}
	tests := []struct {
		name   string
		reason string
		mutate func(*bundle)
		want   string
	}{
		{
			name:   "pod Role moved into the operator's namespace",
			reason: "kustomize's plain namespace: field would move the generated Role out of egress-proxies, leaving the pods namespace without rights",
			mutate: func(b *bundle) { podRole(b).Namespace = "egress-proxies-system" },
			want:   "may not create pods in namespace egress-proxies",
		},
		{
			name:   "role binding to an unprefixed role",
			reason: "a roleRef that kustomize did not rename points at nothing",
			mutate: func(b *bundle) { b.ClusterRoleBindings[0].RoleRef.Name = "manager-role" },
			want:   "roleRef ClusterRole manager-role is not in the render",
		},
		{
			name:   "spec policy binding unprefixed",
			reason: "a binding whose policyName kustomize did not rename puts no policy in force",
			mutate: func(b *bundle) { b.PolicyBindings[0].Spec.PolicyName = "proxygateway-spec" },
			want:   "no binding denies by policy egress-proxies-operator-proxygateway-spec",
		},
		{
			name:   "ban editor may edit the spec",
			reason: "gateway-ban-editor with edit-spec could change auth, pools and limits",
			mutate: func(b *bundle) {
				for _, r := range b.ClusterRoles {
					if r.Name == "egress-proxies-operator-gateway-ban-editor" {
						r.Rules[0].Verbs = append(r.Rules[0].Verbs, "edit-spec")
					}
				}
			},
			want: "gateway-ban-editor grants edit-spec",
		},
		{
			name:   "binding subject in the wrong namespace",
			reason: "a service account subject without the operator's namespace binds nobody",
			mutate: func(b *bundle) { b.RoleBindings[0].Subjects[0].Namespace = "default" },
			want:   "is not in the render",
		},
		{
			name:   "unprefixed service account",
			reason: "the Deployment would run as a service account that does not exist",
			mutate: func(b *bundle) { b.Deployments[0].Spec.Template.Spec.ServiceAccountName = "controller-manager" },
			want:   "serviceAccountName controller-manager: no such ServiceAccount",
		},
		{
			name:   "ConfigMap name without the prefix",
			reason: "the providers volume must name the rendered ConfigMap",
			mutate: func(b *bundle) {
				b.Deployments[0].Spec.Template.Spec.Volumes[0].ConfigMap.Name = "providers-config"
			},
			want: "ConfigMap providers-config is not in the render and not optional",
		},
		{
			name:   "ConfigMap renamed",
			reason: "the reference name of the providers ConfigMap is egress-proxies-operator-providers-config",
			mutate: func(b *bundle) {
				b.ConfigMaps[0].Name = "egress-proxies-operator-providers"
				b.Deployments[0].Spec.Template.Spec.Volumes[0].ConfigMap.Name = "egress-proxies-operator-providers"
			},
			want: `providers ConfigMap "egress-proxies-operator-providers", want egress-proxies-operator-providers-config`,
		},
		{
			name:   "Deployment prefix",
			reason: "the reference name prefix is egress-proxies-operator-",
			mutate: func(b *bundle) { b.Deployments[0].Name = "egress-proxies-controller-manager" },
			want:   "want egress-proxies-system/egress-proxies-operator-controller-manager",
		},
		{
			name:   "Proxmox Secret renamed",
			reason: "the reference Secret is proxmox-token, which make proxmox-token-secret creates",
			mutate: func(b *bundle) { volume(b, "proxmox-token").Secret.SecretName = "egress-proxies-proxmox" },
			want:   "/etc/proxy-operator/proxmox: want Secret proxmox-token mounted there",
		},
		{
			name:   "Proxmox Secret mounted elsewhere",
			reason: "the providers configuration points tokenFile and caFile at /etc/proxy-operator/proxmox",
			mutate: func(b *bundle) { mount(b, "proxmox-token").MountPath = "/etc/egress-proxies/proxmox" },
			want:   "nothing is mounted at /etc/proxy-operator/proxmox, want Secret proxmox-token",
		},
		{
			name:   "Proxmox Secret writable",
			reason: "credentials are mounted read-only",
			mutate: func(b *bundle) { mount(b, "proxmox-token").ReadOnly = false },
			want:   "Secret proxmox-token is mounted writable at /etc/proxy-operator/proxmox",
		},
		{
			name:   "kvm-ssh Secret missing",
			reason: "the libvirt types read their SSH key from the optional Secret kvm-ssh",
			mutate: func(b *bundle) {
				c := manager(b)
				c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "kvm-ssh" })
			},
			want: "nothing is mounted at /etc/proxy-operator/kvm-ssh, want Secret kvm-ssh",
		},
		{
			name:   "kvm-ssh Secret required",
			reason: "the operator must start without the kvm-ssh Secret",
			mutate: func(b *bundle) { volume(b, "kvm-ssh").Secret.Optional = nil },
			want:   "Secret kvm-ssh is not optional",
		},
		{
			name:   "kvm-ssh Secret in part",
			reason: "the whole Secret is mounted, whatever its key names",
			mutate: func(b *bundle) {
				volume(b, "kvm-ssh").Secret.Items = []corev1.KeyToPath{{Key: "id_ed25519", Path: "id_ed25519"}}
			},
			want: "Secret kvm-ssh is mounted in part",
		},
		{
			name:   "tmp not an emptyDir",
			reason: "the tmp volume is an emptyDir, the only writable path",
			mutate: func(b *bundle) { volume(b, "tmp").EmptyDir = nil },
			want:   "want the emptyDir volume tmp at /tmp",
		},
		{
			name:   "Proxmox Secret required",
			reason: "the operator must start without the Proxmox Secret",
			mutate: func(b *bundle) {
				for _, v := range b.Deployments[0].Spec.Template.Spec.Volumes {
					if v.Secret != nil {
						v.Secret.Optional = nil
					}
				}
			},
			want: "is not in the render and not optional",
		},
		{
			name:   "providers config outside the mount",
			reason: "--providers-config must point into the ConfigMap's mount",
			mutate: func(b *bundle) { setArg(manager(b), "providers-config", "/etc/providers.yaml") },
			want:   "--providers-config /etc/providers.yaml is under no volume mount",
		},
		{
			name:   "providers config under the Secret mount",
			reason: "the deepest mount over the path is what the container reads",
			mutate: func(b *bundle) {
				mount(b, "proxmox-token").MountPath = "/etc/proxy-operator/config/proxmox"
				setArg(manager(b), "providers-config", "/etc/proxy-operator/config/proxmox/providers.yaml")
			},
			want: "which is not a ConfigMap volume",
		},
		{
			name:   "providers file name not a ConfigMap key",
			reason: "the file at the path is a key of the ConfigMap",
			mutate: func(b *bundle) { setArg(manager(b), "providers-config", "/etc/proxy-operator/config/config.yaml") },
			want:   `has no key "config.yaml"`,
		},
		{
			name:   "kubernetes entry in a namespace without the Role",
			reason: "an entry's pods namespace must have the pod Role bound, or every create is Forbidden",
			mutate: func(b *bundle) {
				cm := b.ConfigMaps[0]
				cm.Data["providers.yaml"] = strings.Replace(cm.Data["providers.yaml"], "namespace: egress-proxies", "namespace: crawlers", 1)
			},
			want: "may not create pods in namespace crawlers",
		},
		{
			name:   "providers config invalid",
			reason: "the operator refuses to start with a configuration that config.Parse rejects",
			mutate: func(b *bundle) {
				cm := b.ConfigMaps[0]
				cm.Data["providers.yaml"] = strings.Replace(cm.Data["providers.yaml"], "memoryMiB: 64", "memoryMiB: 1", 1)
			},
			want: "must be between 64 and",
		},
		{
			name:   "writable root filesystem",
			reason: "the root filesystem is read-only",
			mutate: func(b *bundle) { manager(b).SecurityContext.ReadOnlyRootFilesystem = nil },
			want:   "readOnlyRootFilesystem is not true",
		},
		{
			name:   "root user",
			reason: "the operator runs as the distroless nonroot user",
			mutate: func(b *bundle) { b.Deployments[0].Spec.Template.Spec.SecurityContext.RunAsUser = new(int64) },
			want:   "runAsUser: want 65532",
		},
		{
			name:   "privilege escalation",
			reason: "no setuid escalation",
			mutate: func(b *bundle) { manager(b).SecurityContext.AllowPrivilegeEscalation = nil },
			want:   "allowPrivilegeEscalation is not false",
		},
		{
			name:   "capability added",
			reason: "all capabilities are dropped, none added",
			mutate: func(b *bundle) { manager(b).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"} },
			want:   "capabilities: want drop [ALL]",
		},
		{
			name:   "no seccomp profile",
			reason: "the restricted profile needs RuntimeDefault",
			mutate: func(b *bundle) { b.Deployments[0].Spec.Template.Spec.SecurityContext.SeccompProfile = nil },
			want:   "seccompProfile: want RuntimeDefault",
		},
		{
			name:   "no memory limit",
			reason: "requests and limits are set",
			mutate: func(b *bundle) { delete(manager(b).Resources.Limits, corev1.ResourceMemory) },
			want:   "no memory limit",
		},
		{
			name:   "writable mount besides /tmp",
			reason: "only the seed staging directory is writable",
			mutate: func(b *bundle) { manager(b).VolumeMounts[0].ReadOnly = false },
			want:   "mount /etc/proxy-operator/config (volume providers-config) is writable",
		},
		{
			name:   "readiness on the wrong path",
			reason: "the manager serves /readyz",
			mutate: func(b *bundle) { manager(b).ReadinessProbe.HTTPGet.Path = "/ready" },
			want:   "readinessProbe: want GET /readyz",
		},
		{
			name:   "probes on another port than the flag",
			reason: "the probes follow --health-probe-bind-address",
			mutate: func(b *bundle) { setArg(manager(b), "health-probe-bind-address", ":9090") },
			want:   "livenessProbe: want GET /healthz on the --health-probe-bind-address port :9090",
		},
		{
			name:   "no leader election",
			reason: "two replicas during a rollout must not both act",
			mutate: func(b *bundle) { setArg(manager(b), "leader-elect", "") },
			want:   "--leader-elect is not set",
		},
		{
			name:   "OPERATOR_IMAGE out of sync",
			reason: "the proxy pods must run the operator's own image",
			mutate: func(b *bundle) { manager(b).Env[0].Value = "controller:latest" },
			want:   "env OPERATOR_IMAGE: want the container's image",
		},
		{
			name:   "metrics off",
			reason: "config/default serves metrics on :8443",
			mutate: func(b *bundle) { setArg(manager(b), "metrics-bind-address", "") },
			want:   `--metrics-bind-address is "0"`,
		},
		{
			name:   "metrics Service selects nothing",
			reason: "the Service must select the operator's pod labels",
			mutate: func(b *bundle) { b.Services[0].Spec.Selector = map[string]string{"control-plane": "other"} },
			want:   "no Service in egress-proxies-system selects the operator's pods on port 8443",
		},
		{
			name:   "metrics auth role unbound",
			reason: "the metrics filter creates TokenReviews and SubjectAccessReviews",
			mutate: func(b *bundle) {
				b.ClusterRoleBindings = slices.DeleteFunc(b.ClusterRoleBindings, func(c *rbacv1.ClusterRoleBinding) bool {
					return c.RoleRef.Name == "egress-proxies-operator-metrics-auth-role" || c.RoleRef.Name == "egress-proxies-operator-manager-role"
				})
			},
			want: "may not create tokenreviews",
		},
		{
			name:   "ownership key role unbound",
			reason: "the operator reads and creates its ownership key Secret through a Role of its namespace, not the ClusterRole",
			mutate: func(b *bundle) {
				b.RoleBindings = slices.DeleteFunc(b.RoleBindings, func(r *rbacv1.RoleBinding) bool {
					return r.RoleRef.Name == "egress-proxies-operator-ownership-key-role"
				})
			},
			want: "may not get its ownership key Secret",
		},
		{
			name:   "no POD_NAMESPACE",
			reason: "the operator finds its ownership key Secret in its own namespace",
			mutate: func(b *bundle) {
				c := manager(b)
				c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAMESPACE" })
			},
			want: "lacks POD_NAMESPACE",
		},
		{
			name:   "operator namespace missing",
			reason: "every namespaced object's namespace is created by the render",
			mutate: func(b *bundle) {
				b.Namespaces = slices.DeleteFunc(b.Namespaces, func(n *corev1.Namespace) bool { return n.Name == "egress-proxies-system" })
			},
			want: `the render creates no Namespace "egress-proxies-system"`,
		},
		{
			name:   "namespace role bound cluster-wide",
			reason: "the default serves named namespaces; namespace-role bound cluster-wide gives Secret rights in every namespace",
			mutate: func(b *bundle) {
				rb := b.RoleBindings[slices.IndexFunc(b.RoleBindings, func(rb *rbacv1.RoleBinding) bool { return rb.Namespace == "crawlers" })]
				b.ClusterRoleBindings = append(b.ClusterRoleBindings, &rbacv1.ClusterRoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: rb.Name}, RoleRef: rb.RoleRef, Subjects: rb.Subjects})
			},
			want: "may get Secrets in every namespace",
		},
		{
			name:   "Secret rights in the cluster-wide role",
			reason: "a Secret marker without roleName=namespace-role lands in the ClusterRole bound cluster-wide",
			mutate: func(b *bundle) {
				for _, cr := range b.ClusterRoles {
					if cr.Name == "egress-proxies-operator-manager-role" {
						cr.Rules = append(cr.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}})
					}
				}
			},
			want: "may create Secrets in every namespace",
		},
		{
			name:   "served namespace without its binding",
			reason: "a namespace added to --namespaces alone leaves the operator without rights there",
			mutate: func(b *bundle) { setArg(manager(b), "namespaces", "crawlers,team-a") },
			want:   "namespace team-a is served (--namespaces) but has no RoleBinding of namespace-role",
		},
		{
			name:   "binding without the flag",
			reason: "without --namespaces the operator serves every namespace, and the RoleBinding alone does not let it",
			mutate: func(b *bundle) { setArg(manager(b), "namespaces", "") },
			want:   "no ClusterRoleBinding gives it namespace-role",
		},
		{
			name:   "binding in a namespace not served",
			reason: "rights in a namespace the operator does not serve are rights nobody uses",
			mutate: func(b *bundle) { setArg(manager(b), "namespaces", "egress-proxies") },
			want:   "namespace crawlers has a RoleBinding of namespace-role but is not in --namespaces=egress-proxies",
		},
		{
			name:   "CRD missing",
			reason: "the installer installs the API",
			mutate: func(b *bundle) { b.CRDs = b.CRDs[:1] },
			want:   "is not in the render",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := decode(dec, docs)
			if err != nil {
				t.Fatal(err)
			}
			tt.mutate(b)
			err = runDefaultChecks(b)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s (%s):\ngot  %v\nwant an error containing %q", tt.name, tt.reason, err, tt.want)
			}
		})
	}
}

// TestAllNamespaces renders config/default with config/all-namespaces in
// place of config/namespaces, as docs/security.md tells an administrator who
// wants Proxies in every namespace: the operator then has no --namespaces
// and namespace-role is bound cluster-wide, and every other check of the
// default holds, except the one this choice gives up.
func TestAllNamespaces(t *testing.T) {
	fsys := swappedConfigTree(t, "- ../namespaces\n", "- ../all-namespaces\n")
	b, err := decode(decoder(t), renderDocsIn(t, fsys, "/config/default"))
	if err != nil {
		t.Fatal(err)
	}
	_, c, err := operator(b)
	if err != nil {
		t.Fatal(err)
	}
	if v := flagValue(c.Args, "namespaces", ""); v != "" {
		t.Errorf("--namespaces=%s: every namespace is the flag's absence", v)
	}
	if slices.ContainsFunc(b.RoleBindings, func(rb *rbacv1.RoleBinding) bool { return rb.Namespace == "crawlers" }) {
		t.Error("the RoleBinding in crawlers is still rendered")
	}
	for _, c := range defaultChecks {
		t.Run(c.name, func(t *testing.T) {
			err := c.check(b)
			if c.name == "no cluster-wide Secret rights" {
				if err == nil {
					t.Error("namespace-role bound cluster-wide, yet no cluster-wide Secret right was found")
				}
				return
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
}

// swappedConfigTree copies config/ into memory with old replaced by repl in
// config/default/kustomization.yaml, which must hold old.
func swappedConfigTree(t *testing.T, old, repl string) filesys.FileSystem {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	root := filepath.Join(repoRoot(t), "config")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if rel == filepath.Join("default", "kustomization.yaml") {
			swapped := strings.Replace(string(data), old, repl, 1)
			if swapped == string(data) {
				t.Fatalf("config/default/kustomization.yaml does not hold %q", old)
			}
			data = []byte(swapped)
		}
		return fsys.WriteFile(filepath.Join(string(filepath.Separator), "config", rel), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

// TestDecodeRejects: a document is decoded strictly into a known kind.
func TestDecodeRejects(t *testing.T) {
	dec := decoder(t)
	tests := []struct {
		name   string
		reason string
		doc    string
		want   string
	}{
		{
			name:   "misspelt field",
			reason: "a typo in a manifest is silently dropped by the API server; strict decoding catches it",
			doc:    "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n  namespace: b\nautomountServiceAccountTokens: false\n",
			want:   "unknown field",
		},
		{
			name:   "unknown kind",
			reason: "every document is of a kind a scheme knows",
			doc:    "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: a\n",
			want:   "no kind",
		},
		{
			name:   "known kind the checks ignore",
			reason: "a kind the cross-reference checks do not look at must be added to them",
			doc:    "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: a\n",
			want:   "a kind these tests do not check",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decode(dec, [][]byte{[]byte(tt.doc)})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s (%s): got %v, want an error containing %q", tt.name, tt.reason, err, tt.want)
			}
		})
	}
}

// pendingSamples are sample Proxies not yet listed in
// config/samples/kustomization.yaml, with the reason. Their provider must be
// absent from the sample providers configuration: once it is there, the
// sample belongs in the kustomization.
var pendingSamples = map[string]string{}

func loadSamplesConfig(t *testing.T, path string) *config.Config {
	t.Helper()
	cfg, err := config.Load(filepath.Join(repoRoot(t), path), registry())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// checkSamples resolves every Proxy against the sample providers
// configuration; one whose entry is of type kubernetes also against the
// installed operator's, so that `kubectl apply -k config/samples` works on a
// fresh install.
func checkSamples(proxies []*crawlv1alpha1.Proxy, samples, installed *config.Config) error {
	var errs []error
	if len(proxies) == 0 {
		errs = append(errs, errors.New("config/samples renders no Proxy"))
	}
	for _, p := range proxies {
		s := p.Spec
		pl, err := samples.Resolve(s.Provider, s.Zone, s.MachineType, s.Image)
		if err != nil {
			errs = append(errs, fmt.Errorf("Proxy %s against config/samples/providers.yaml: %w", p.Name, err))
			continue
		}
		if pl.Entry.Type == kubernetes.TypeName {
			if _, err := installed.Resolve(s.Provider, s.Zone, s.MachineType, s.Image); err != nil {
				errs = append(errs, fmt.Errorf("Proxy %s against config/manager/providers.yaml: %w", p.Name, err))
			}
		}
		if s.Auth == crawlv1alpha1.ProxyAuthNone && len(s.AllowedSourceRanges) == 0 {
			errs = append(errs, fmt.Errorf("Proxy %s: auth None needs allowedSourceRanges (the CRD rejects it)", p.Name))
		}
	}
	return errors.Join(errs...)
}

// TestSamples checks config/samples against itself and the operator's
// configuration.
func TestSamples(t *testing.T) {
	dec := decoder(t)
	b, err := decode(dec, renderDocs(t, "config/samples"))
	if err != nil {
		t.Fatal(err)
	}
	samples := loadSamplesConfig(t, "config/samples/providers.yaml")
	installed := loadSamplesConfig(t, "config/manager/providers.yaml")

	t.Run("only Proxies", func(t *testing.T) {
		other := len(b.Namespaces) + len(b.ServiceAccounts) + len(b.ConfigMaps) + len(b.Secrets) + len(b.Services) +
			len(b.Deployments) + len(b.Roles) + len(b.ClusterRoles) + len(b.RoleBindings) + len(b.ClusterRoleBindings) + len(b.CRDs)
		if other > 0 {
			t.Errorf("config/samples renders %d objects that are not Proxies", other)
		}
	})
	t.Run("resolve", func(t *testing.T) {
		if err := checkSamples(b.Proxies, samples, installed); err != nil {
			t.Error(err)
		}
		// A pool's members are Proxies of each placement: they must resolve
		// as a sample Proxy would.
		if err := checkSamples(poolMembers(b.Pools), samples, installed); err != nil {
			t.Error(err)
		}
	})
	t.Run("every type has an entry", func(t *testing.T) {
		types := map[string]bool{}
		for _, e := range samples.Providers {
			types[e.Type] = true
		}
		for _, typ := range registry().Types() {
			if !types[typ] {
				t.Errorf("config/samples/providers.yaml has no entry of type %s", typ)
			}
		}
	})
	t.Run("proxmox entries read the proxmox-token Secret", func(t *testing.T) {
		// The Secret's keys are token and ca.pem (make proxmox-token-secret).
		for _, e := range samples.Providers {
			pb, ok := e.Block.(*proxmox.Block)
			if !ok {
				continue
			}
			if pb.TokenFile != proxmoxMount+"/token" || pb.CAFile != proxmoxMount+"/ca.pem" {
				t.Errorf("entry %s: tokenFile %s, caFile %s; want %s/token and %s/ca.pem", e.Name, pb.TokenFile, pb.CAFile, proxmoxMount, proxmoxMount)
			}
		}
	})
	t.Run("every sample file is rendered or pending", func(t *testing.T) {
		files, err := filepath.Glob(filepath.Join(repoRoot(t), "config", "samples", "crawl_*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		rendered := map[string]bool{}
		for _, p := range b.Proxies {
			rendered[p.Name] = true
		}
		for _, p := range b.Pools {
			rendered[p.Name] = true
		}
		sort.Strings(files)
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			pb, err := decode(dec, [][]byte{data})
			if err != nil {
				t.Errorf("%s: %v", filepath.Base(f), err)
				continue
			}
			if len(pb.Pools) == 1 && len(pb.Proxies) == 0 {
				if !rendered[pb.Pools[0].Name] {
					t.Errorf("%s is not listed in config/samples/kustomization.yaml", filepath.Base(f))
				}
				continue
			}
			if len(pb.Proxies) != 1 {
				t.Errorf("%s: want one Proxy or one ProxyPool", filepath.Base(f))
				continue
			}
			p := pb.Proxies[0]
			reason, pending := pendingSamples[filepath.Base(f)]
			switch {
			case pending && rendered[p.Name]:
				t.Errorf("%s is listed in config/samples/kustomization.yaml: remove it from pendingSamples", filepath.Base(f))
			case pending && samples.Entry(p.Spec.Provider) != nil:
				t.Errorf("%s is pending (%s), but its provider %s is configured: list it in config/samples/kustomization.yaml and remove it from pendingSamples",
					filepath.Base(f), reason, p.Spec.Provider)
			case !pending && !rendered[p.Name]:
				t.Errorf("%s is not listed in config/samples/kustomization.yaml", filepath.Base(f))
			}
		}
	})
}

// poolMembers returns, for each pool, one Proxy per placement entry, as the
// pool would make them.
func poolMembers(pools []*crawlv1alpha1.ProxyPool) []*crawlv1alpha1.Proxy {
	var out []*crawlv1alpha1.Proxy
	for _, pool := range pools {
		placements := pool.Spec.Placement
		if len(placements) == 0 {
			placements = []crawlv1alpha1.PlacementEntry{{}}
		}
		for i, pl := range placements {
			p := &crawlv1alpha1.Proxy{Spec: *pool.Spec.Template.Spec.DeepCopy()}
			p.Name = fmt.Sprintf("%s-placement-%d", pool.Name, i)
			if pl.Provider != "" {
				p.Spec.Provider = pl.Provider
			}
			if pl.Zone != "" {
				p.Spec.Zone = pl.Zone
			}
			out = append(out, p)
		}
	}
	return out
}

// TestSamplesChecksFail breaks a sample Proxy in one way at a time.
func TestSamplesChecksFail(t *testing.T) {
	dec := decoder(t)
	docs := renderDocs(t, "config/samples")
	samples := loadSamplesConfig(t, "config/samples/providers.yaml")
	installed := loadSamplesConfig(t, "config/manager/providers.yaml")
	if b, err := decode(dec, docs); err != nil || checkSamples(b.Proxies, samples, installed) != nil {
		t.Fatal("the unbroken samples fail already (see TestSamples); these cases would prove nothing")
	}
	tests := []struct {
		name   string
		reason string
		mutate func(*crawlv1alpha1.ProxySpec)
		want   string
	}{
		{"unknown provider", "spec.provider names a configured entry", func(s *crawlv1alpha1.ProxySpec) { s.Provider = "nowhere" }, `no provider entry named "nowhere"`},
		{"unknown zone", "spec.zone is a zone of the entry", func(s *crawlv1alpha1.ProxySpec) { s.Zone = "mars" }, `has no zone "mars"`},
		{"unknown machine type", "spec.machineType is in the entry's catalogue", func(s *crawlv1alpha1.ProxySpec) { s.MachineType = "huge" }, `has no machine type "huge"`},
		{"unknown image", "spec.image is in the entry's catalogue", func(s *crawlv1alpha1.ProxySpec) { s.Image = "windows" }, `has no image "windows"`},
		{"auth None without ranges", "the CRD rejects an open proxy", func(s *crawlv1alpha1.ProxySpec) { s.Auth = crawlv1alpha1.ProxyAuthNone }, "auth None needs allowedSourceRanges"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := decode(dec, docs)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Proxies) == 0 {
				t.Fatal("config/samples renders no Proxy")
			}
			tt.mutate(&b.Proxies[0].Spec)
			err = checkSamples(b.Proxies, samples, installed)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s (%s): got %v, want an error containing %q", tt.name, tt.reason, err, tt.want)
			}
		})
	}
	t.Run("installed config lacks the sample's entry", func(t *testing.T) {
		// Reason: `kubectl apply -k config/samples` must work on a fresh install.
		b, err := decode(dec, docs)
		if err != nil {
			t.Fatal(err)
		}
		other, err := config.Parse([]byte(`providers:
- name: elsewhere
  type: kubernetes
  zones: [default]
  machineTypes: {tiny: {cores: 1, memoryMiB: 64}}
  images: [default]
  kubernetes: {namespace: egress-proxies}
`), registry())
		if err != nil {
			t.Fatal(err)
		}
		err = checkSamples(b.Proxies, samples, other)
		if err == nil || !strings.Contains(err.Error(), "against config/manager/providers.yaml") {
			t.Errorf("got %v, want an error about config/manager/providers.yaml", err)
		}
	})
}
