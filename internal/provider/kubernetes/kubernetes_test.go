package kubernetes_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

// envtest has no kubelet, scheduler or garbage collector: the tests write
// pod status themselves, as the issue asks, and check that the provider
// removes what it made without relying on owner references.
var (
	// testOwnership is the installation identity of every provider and
	// operator these tests build.
	testOwnership = ownershiptest.Identity("kubernetes-tests")
	env           *testenv.Env
	k8s           client.Client
	scheme        *runtime.Scheme
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) {
		env = e
		if e != nil {
			k8s, scheme = e.Client, e.Scheme
		}
	}))
}

func needEnvtest(t *testing.T) {
	t.Helper()
	testenv.Need(t, env)
}

// newNamespace creates a namespace with a random name.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	needEnvtest(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// podNamespace creates a namespace for an entry's pods and gives the
// operator the rights an install gives it in the entry's namespace: the
// generated Role of config/rbac/role.yaml that the markers put in
// egress-proxies, applied here instead.
func podNamespace(t *testing.T) string {
	t.Helper()
	ns := newNamespace(t, "pods-")
	if _, err := env.AsOperator(context.Background(), testenv.RBAC{RoleNamespaces: map[string][]string{"egress-proxies": {ns}}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// servedNamespace creates a namespace for Proxies (and their credentials
// Secrets), served by the operator as config/namespaces serves one: the
// ClusterRole namespace-role bound there.
func servedNamespace(t *testing.T) string {
	t.Helper()
	ns := newNamespace(t, "team-")
	if _, err := env.AsOperator(context.Background(), testenv.RBAC{Namespaces: []string{ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// asOperator returns the rest.Config of the operator's ServiceAccount, with
// the rights the namespaces made by podNamespace and servedNamespace (and
// the cluster-wide role) give it: every provider and operator of these tests
// runs with it, so a rule the provider needs and the markers lack fails a
// test here.
func asOperator(t *testing.T) *rest.Config {
	t.Helper()
	cfg, err := env.AsOperator(context.Background(), testenv.RBAC{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// operatorClient is a direct (uncached) client as the operator.
func operatorClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(asOperator(t), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// entry returns a parsed kubernetes entry whose pods run in podNS.
func entry(t *testing.T, podNS string, block string) *config.Entry {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
providers:
  - name: cluster
    type: kubernetes
    zones: [zone-a, zone-b]
    machineTypes: {tiny: {cores: 1, memoryMiB: 64}}
    images: [default]
    kubernetes:
      namespace: %s
%s`, podNS, block)), provider.Types{kubernetes.Type}.Registry())
	if err != nil {
		t.Fatal(err)
	}
	return &cfg.Providers[0]
}

// newProvider builds the provider with a direct client (no cache), so that
// provider-level tests see their own writes at once, as the operator's
// ServiceAccount.
func newProvider(t *testing.T, e *config.Entry) *kubernetes.Provider {
	t.Helper()
	c := operatorClient(t)
	p, err := kubernetes.New(e, provider.Deps{Ownership: testOwnership, Client: c, APIReader: c, OwnImage: "registry.example/egress-proxies-operator:test"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// credentialsSecret creates a Proxy's credentials Secret in proxyNS.
func credentialsSecret(t *testing.T, proxyNS string) *provider.SecretRef {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: proxyNS, Name: "web-proxy-credentials",
			Labels: map[string]string{"app.kubernetes.io/managed-by": "egress-proxies-operator"}},
		Data: map[string][]byte{"username": []byte("u1"), "password": []byte("sentinel-password")},
	}
	if err := k8s.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return &provider.SecretRef{Namespace: proxyNS, Name: s.Name, UsernameKey: "username", PasswordKey: "password"}
}

func request(proxyNS string, creds *provider.SecretRef) provider.Request {
	return provider.Request{
		OwnerUID: "0b6a4d2e-1111-2222-3333-444455556666", Owner: provider.ObjectRef{Namespace: proxyNS, Name: "web"},
		Name: proxyNS + "-web-0b6a4d2e", Zone: "zone-a", MachineType: "tiny", Image: "default",
		Proxy: provider.ProxySettings{Port: 3128, Credentials: creds,
			AllowedSourceRanges: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}},
	}
}

// markRunning plays the kubelet: the pod runs, is ready and has an IP.
func markRunning(t *testing.T, ns, name, podIP, hostIP string) {
	t.Helper()
	var pod corev1.Pod
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP, pod.Status.HostIP = podIP, hostIP
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := k8s.Status().Update(context.Background(), &pod); err != nil {
		t.Fatal(err)
	}
}

// TestCreateBuildsAHardenedPod checks the pod's shape; idempotency, resuming
// and ownership are the contract suite's (TestContract).
func TestCreateBuildsAHardenedPod(t *testing.T) {
	ctx := context.Background()
	podNS, proxyNS := podNamespace(t), servedNamespace(t)
	p := newProvider(t, entry(t, podNS, ""))
	req := request(proxyNS, credentialsSecret(t, proxyNS))

	id, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(podNS)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("pods = %d, want 1", len(pods.Items))
	}
	pod := pods.Items[0]
	c := pod.Spec.Containers[0]
	if diff := cmp.Diff([]string{"proxy", "--listen=:3128", "--admin-listen=0", "--allowed-source-ranges=203.0.113.0/24",
		"--credentials-dir=/etc/egress-proxy/credentials"}, c.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"topology.kubernetes.io/zone": "zone-a"}, pod.Spec.NodeSelector); diff != "" {
		t.Errorf("node selector (-want +got):\n%s", diff)
	}
	sc := c.SecurityContext
	if sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !*sc.RunAsNonRoot ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
		pod.Spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		*pod.Spec.AutomountServiceAccountToken {
		t.Errorf("pod is not hardened: %+v / %+v", sc, pod.Spec.SecurityContext)
	}
	if got := c.Resources.Limits.Memory().String(); got != "64Mi" {
		t.Errorf("memory limit = %s, want the catalogue's 64Mi", got)
	}
	if c.Image != "registry.example/egress-proxies-operator:test" {
		t.Errorf("image = %q, want the operator's own", c.Image)
	}

	// The credentials are copied next to the pod, owned by it.
	var s corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: podNS, Name: pod.Name + "-credentials"}, &s); err != nil {
		t.Fatal(err)
	}
	if string(s.Data["password"]) != "sentinel-password" || !metav1.IsControlledBy(&s, &pod) {
		t.Errorf("copied secret wrong: owned %v", s.OwnerReferences)
	}

	// Get follows the pod's life.
	in, err := p.Get(ctx, id)
	if err != nil || in.State != provider.StateProvisioning || in.OwnerUID != req.OwnerUID || in.CreatedAt.IsZero() {
		t.Fatalf("Get before running = %+v, %v", in, err)
	}
	markRunning(t, podNS, pod.Name, "198.51.100.17", "203.0.113.9")
	in, err = p.Get(ctx, id)
	if err != nil || in.State != provider.StateRunning || in.Address.String() != "198.51.100.17" {
		t.Fatalf("Get after running = %+v, %v; want Running at the pod IP", in, err)
	}
}

// A Proxy's author must not take a node's privileged port (22, 53, 80) with
// hostNetwork unless the entry's administrator allows it (#12 item 11).
func TestPrivilegedHostPortsNeedTheEntrysConsent(t *testing.T) {
	ctx := context.Background()
	podNS, proxyNS := podNamespace(t), servedNamespace(t)
	req := request(proxyNS, nil)
	req.Proxy.Port = 53

	p := newProvider(t, entry(t, podNS, "      hostNetwork: true\n"))
	_, err := p.Create(ctx, req)
	if !provider.IsPermanent(err) || !strings.Contains(provider.ActionOf(err), "allowPrivilegedHostPorts") {
		t.Fatalf("Create on host port 53 = %v, want Permanent naming allowPrivilegedHostPorts", err)
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(podNS)); err != nil || len(pods.Items) != 0 {
		t.Fatalf("pods after the refusal: %d, %v; want none", len(pods.Items), err)
	}

	allowed := newProvider(t, entry(t, podNS, "      hostNetwork: true\n      allowPrivilegedHostPorts: true\n"))
	if _, err := allowed.Create(ctx, req); err != nil {
		t.Fatalf("Create with the entry's consent: %v", err)
	}
	var pod corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: podNS, Name: req.Name}, &pod); err != nil {
		t.Fatal(err)
	}
	if got := pod.Spec.Containers[0].Ports[0].HostPort; got != 53 {
		t.Errorf("hostPort = %d, want 53", got)
	}
}

// laggingCache stands for an informer cache that has not seen a new pod yet.
type laggingCache struct{ client.Client }

func (l laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, isPod := obj.(*corev1.Pod); isPod {
		return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
	}
	return l.Client.Get(ctx, key, obj, opts...)
}

// A cache that lags behind must never make Get say NotFound for a pod that
// exists: the operator would replace it and run two (#12 item 11).
func TestGetConfirmsNotFoundWithALiveRead(t *testing.T) {
	ctx := context.Background()
	podNS, proxyNS := podNamespace(t), servedNamespace(t)
	e := entry(t, podNS, "")
	req := request(proxyNS, nil)
	id, err := newProvider(t, e).Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	c := operatorClient(t)
	lagging, err := kubernetes.New(e, provider.Deps{Ownership: testOwnership, Client: laggingCache{c}, APIReader: c, OwnImage: "x"})
	if err != nil {
		t.Fatal(err)
	}
	in, err := lagging.Get(ctx, id)
	if err != nil || in.ID != id {
		t.Fatalf("Get through a lagging cache = %+v, %v; want the pod, confirmed on the API server", in, err)
	}
	if _, err := lagging.Get(ctx, kubernetes.ID(podNS, "never-made")); !provider.IsNotFound(err) {
		t.Errorf("Get of a pod that does not exist = %v, want NotFound", err)
	}
}

func TestHostNetworkUsesTheNodeAddressAndAHostPort(t *testing.T) {
	ctx := context.Background()
	podNS, proxyNS := podNamespace(t), servedNamespace(t)
	p := newProvider(t, entry(t, podNS, "      hostNetwork: true\n"))
	req := request(proxyNS, nil)
	id, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: podNS, Name: req.Name}, &pod); err != nil {
		t.Fatal(err)
	}
	if !pod.Spec.HostNetwork || pod.Spec.Containers[0].Ports[0].HostPort != 3128 {
		t.Errorf("hostNetwork %v, hostPort %d; want true and 3128 so the scheduler spreads equal ports",
			pod.Spec.HostNetwork, pod.Spec.Containers[0].Ports[0].HostPort)
	}
	markRunning(t, podNS, req.Name, "203.0.113.9", "203.0.113.9")
	in, err := p.Get(ctx, id)
	if err != nil || in.Address.String() != "203.0.113.9" {
		t.Errorf("Get = %+v, %v; want the node's address", in, err)
	}
}

func TestPodStatesMapToInstanceStates(t *testing.T) {
	ctx := context.Background()
	podNS, proxyNS := podNamespace(t), servedNamespace(t)
	p := newProvider(t, entry(t, podNS, ""))
	for _, tc := range []struct {
		name   string
		reason string
		status corev1.PodStatus
		want   provider.State
	}{
		{"pending", "not scheduled or pulling", corev1.PodStatus{Phase: corev1.PodPending}, provider.StateProvisioning},
		{"running-unready", "the proxy does not accept connections yet", corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.51.100.1"}, provider.StateProvisioning},
		{"failed", "it will not run again: replace it", corev1.PodStatus{Phase: corev1.PodFailed}, provider.StateStopped},
		{"succeeded", "the proxy exited: replace it", corev1.PodStatus{Phase: corev1.PodSucceeded}, provider.StateStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := request(proxyNS, nil)
			req.OwnerUID, req.Name = "uid-"+tc.name, "state-"+tc.name
			id, err := p.Create(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			var pod corev1.Pod
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: podNS, Name: req.Name}, &pod); err != nil {
				t.Fatal(err)
			}
			pod.Status = tc.status
			if err := k8s.Status().Update(ctx, &pod); err != nil {
				t.Fatal(err)
			}
			in, err := p.Get(ctx, id)
			if err != nil || in.State != tc.want {
				t.Errorf("%s: Get = %v, %v; want %s", tc.reason, in.State, err, tc.want)
			}
		})
	}
}

// TestForeignPodsAreNeverTouched checks what is particular to pods: the
// message of a Create over a foreign pod, and Delete outside the entry's
// namespace. The contract suite covers Get, Delete and ListByTag of foreign
// pods.
func TestForeignPodsAreNeverTouched(t *testing.T) {
	ctx := context.Background()
	podNS, proxyNS := podNamespace(t), servedNamespace(t)
	p := newProvider(t, entry(t, podNS, ""))
	req := request(proxyNS, nil)
	foreign := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: req.Name, Labels: map[string]string{"app": "theirs"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "theirs"}}},
	}
	if err := k8s.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(ctx, req); !provider.IsPermanent(err) || !strings.Contains(err.Error(), "not managed by the operator") {
		t.Errorf("Create over a foreign pod = %v, want a Permanent error that says it is not ours", err)
	}
	if err := p.Delete(ctx, kubernetes.ID("kube-system", "anything")); !provider.IsPermanent(err) {
		t.Errorf("Delete outside the namespace = %v, want Permanent", err)
	}
	var still corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(foreign), &still); err != nil || still.DeletionTimestamp != nil {
		t.Errorf("the foreign pod was touched: %v %v", err, still.DeletionTimestamp)
	}
}

// TestDeleteRemovesPodAndSecret checks that the copied credentials go with
// the pod, without relying on owner references (envtest has no garbage
// collector).
func TestDeleteRemovesPodAndSecret(t *testing.T) {
	ctx := context.Background()
	podNS, proxyNS := podNamespace(t), servedNamespace(t)
	p := newProvider(t, entry(t, podNS, ""))
	req := request(proxyNS, credentialsSecret(t, proxyNS))
	id, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{&corev1.Pod{}, &corev1.Secret{}} {
		name := req.Name
		if _, ok := o.(*corev1.Secret); ok {
			name += "-credentials"
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: podNS, Name: name}, o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s still exists (%v)", o, name, err)
		}
	}
}

func TestCheckReportsNamespaceRightsAndZones(t *testing.T) {
	ctx := context.Background()
	podNS := podNamespace(t)
	zone := "zone-" + podNS
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + podNS, Labels: map[string]string{"topology.kubernetes.io/zone": zone}}}
	if err := k8s.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, node) })
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
providers:
  - name: cluster
    type: kubernetes
    zones: [%s, empty-zone]
    machineTypes: {tiny: {cores: 1, memoryMiB: 64}}
    images: [default]
    kubernetes: {namespace: %s}
`, zone, podNS)), provider.Types{kubernetes.Type}.Registry())
	if err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, &cfg.Providers[0])
	reasons := func(p *kubernetes.Provider) map[string]string {
		out := map[string]string{}
		for _, v := range p.Check(ctx) {
			out[v.Target] = v.Reason
		}
		return out
	}
	// The node is not Ready yet: no zone can serve.
	want := map[string]string{"namespace/" + podNS: "NamespaceReady", "zone/" + zone: "NoSchedulableNode", "zone/empty-zone": "NoSchedulableNode"}
	if diff := cmp.Diff(want, reasons(p)); diff != "" {
		t.Errorf("before the node is ready (-want +got):\n%s", diff)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if err := k8s.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	want["zone/"+zone] = "Schedulable"
	if diff := cmp.Diff(want, reasons(p)); diff != "" {
		t.Errorf("after the node is ready (-want +got):\n%s", diff)
	}

	// A missing namespace, and a user without rights.
	missing := newProvider(t, entry(t, "no-such-namespace", ""))
	if got := missing.Check(ctx)[0].Reason; got != "NamespaceNotFound" {
		t.Errorf("missing namespace: reason %s", got)
	}
	user, err := env.Environment.AddUser(envtest.User{Name: "powerless"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	weak, err := client.New(user.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	forbidden, err := kubernetes.New(&cfg.Providers[0], provider.Deps{Ownership: testOwnership, Client: weak, APIReader: operatorClient(t), OwnImage: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if v := forbidden.Check(ctx)[0]; v.Reason != "Forbidden" || v.Healthy {
		t.Errorf("without rights: %+v, want Forbidden", v)
	}
}

// TestProxyLifecycleOnAKubernetesEntry runs the operator with this provider
// through the operator's setup, as the binary wires it (registry, pod cache,
// instrumentation).
func TestProxyLifecycleOnAKubernetesEntry(t *testing.T) {
	ctx := context.Background()
	podNS, proxyNS := podNamespace(t), servedNamespace(t)
	e := entry(t, podNS, "")
	cfg := &config.Config{Providers: []config.Entry{*e}}
	op, err := setup.New(setup.Options{
		RestConfig: asOperator(t),
		Config:     cfg,
		OwnImage:   "img",
		Ownership:  testOwnership,
		Namespaces: []string{proxyNS},
		Manager:    ctrl.Options{Scheme: scheme},
		Controller: controller.Options{
			PollInterval: 50 * time.Millisecond, ResyncInterval: 200 * time.Millisecond,
			HealthInterval: time.Hour, GCInterval: time.Hour, SkipNameValidation: true,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mgr := op.Manager
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mgr.Start(mctx)
	}()
	t.Cleanup(func() { cancel(); <-done })

	proxy := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: proxyNS, Name: "web"},
		Spec:       crawlv1alpha1.ProxySpec{Provider: "cluster", Zone: "zone-b", MachineType: "tiny", Image: "default"},
	}
	if err := k8s.Create(ctx, proxy); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	eventually(t, func() (bool, string) {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(podNS)); err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprintf("%d pods", len(pods.Items))
		}
		pod = pods.Items[0]
		return true, ""
	})
	markRunning(t, podNS, pod.Name, "198.51.100.29", "203.0.113.20")
	eventually(t, func() (bool, string) {
		_ = k8s.Get(ctx, client.ObjectKeyFromObject(proxy), proxy)
		return proxy.Status.Phase == crawlv1alpha1.ProxyPhaseReady && proxy.Status.Address == "198.51.100.29",
			fmt.Sprintf("phase %s address %q conditions %+v", proxy.Status.Phase, proxy.Status.Address, proxy.Status.Conditions)
	})
	if proxy.Status.InstanceID != podNS+"/"+pod.Name || proxy.Status.URL != "http://198.51.100.29:3128" {
		t.Errorf("status = %+v", proxy.Status)
	}
	// The pod got the Proxy's generated credentials.
	var copied, original corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: podNS, Name: pod.Name + "-credentials"}, &copied); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: proxyNS, Name: proxy.Status.CredentialsSecretName}, &original); err != nil {
		t.Fatal(err)
	}
	if string(copied.Data["password"]) != string(original.Data["password"]) {
		t.Error("the pod's credentials differ from the Proxy's")
	}

	// An orphaned pod of ours (its Proxy long gone) is collected; the live
	// one is not.
	orphanReq := request(proxyNS, nil)
	orphanReq.OwnerUID, orphanReq.Name = "uid-of-a-deleted-proxy", "orphan"
	orphanProv := newProvider(t, e)
	if _, err := orphanProv.Create(ctx, orphanReq); err != nil {
		t.Fatal(err)
	}
	gc := &controller.GarbageCollector{Reader: operatorClient(t), Providers: map[string]provider.Provider{"cluster": orphanProv},
		GracePeriod: time.Minute, Now: func() time.Time { return time.Now().Add(time.Hour) }}
	if n, err := gc.RunOnce(ctx); err != nil || n != 1 {
		t.Errorf("GC deleted %d (%v), want 1: the orphan", n, err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(&pod), &corev1.Pod{}); err != nil {
		t.Errorf("GC touched the live Proxy's pod: %v", err)
	}

	// Deleting the Proxy removes its pod and the copied Secret.
	if err := k8s.Delete(ctx, proxy); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(proxy), &crawlv1alpha1.Proxy{})
		return apierrors.IsNotFound(err), "proxy still exists"
	})
	for _, o := range []client.Object{&corev1.Pod{}, &corev1.Secret{}} {
		name := pod.Name
		if _, ok := o.(*corev1.Secret); ok {
			name += "-credentials"
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: podNS, Name: name}, o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s left behind (%v)", o, name, err)
		}
	}
}

// eventually polls cond until it holds or 20s pass.
func eventually(t *testing.T, cond func() (bool, string)) {
	t.Helper()
	poll.Until(t, 20*time.Second, cond)
}
