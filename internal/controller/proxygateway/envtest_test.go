package proxygateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway/gatewaywatch"
)

const gatewayImage = "registry.example/egress-proxies-operator:test"

func gatewayReady(t *testing.T, ns, name string) *metav1.Condition {
	t.Helper()
	var gw crawlv1alpha1.ProxyGateway
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &gw); err != nil {
		return nil
	}
	return apimeta.FindStatusCondition(gw.Status.Conditions, crawlv1alpha1.ConditionReady)
}

func waitGatewayReason(t *testing.T, ns, name, reason string) {
	t.Helper()
	eventually(t, 60*time.Second, func() (bool, string) {
		c := gatewayReady(t, ns, name)
		if c == nil {
			return false, "no Ready condition yet"
		}
		return c.Reason == reason, "Ready is " + c.Reason + ": " + c.Message
	})
}

// TestGatewayRunsInFrontOfAPool: the operator, with the shipped RBAC,
// makes a gateway's Deployment (the operator's image, gateway subcommand),
// Service, PodDisruptionBudget, ServiceAccount, Role, RoleBinding and
// credentials Secret with a ready url; Ready follows members and ready
// pods; the gateway pod's identity can watch the pool's published list (a
// real gatewaywatch.Watch sees the members the pool publishes) and read no other
// Secret; the gateway's password is in no status, event or log line.
func TestGatewayRunsInFrontOfAPool(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, operatorOptions{namespace: ns, opts: controller.Options{GatewayImage: gatewayImage}})
	ctx := context.Background()

	gw := &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "front"},
		Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"crawl"}}}
	if err := k8s.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	waitGatewayReason(t, ns, "front", crawlv1alpha1.ReasonNoMembers)

	name := "front-gateway"
	var dep appsv1.Deployment
	eventually(t, 30*time.Second, func() (bool, string) {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &dep) == nil, "the Deployment"
	})
	if got := ptr.Deref(dep.Spec.Replicas, 0); got != 2 {
		t.Errorf("replicas %d; want the default 2", got)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != gatewayImage || c.Args[0] != "gateway" || !slices.Contains(c.Args, "--pools=crawl") || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("container: image %q args %q readiness %v", c.Image, c.Args, c.ReadinessProbe)
	}
	// The API server's defaults of the limits reach the pods as flags.
	for _, flag := range []string{"--max-per-member=128", "--max-attempts=3", "--eject-after=3", "--eject-for=30s", "--ban-statuses=429", "--ban-for=300s"} {
		if !slices.Contains(c.Args, flag) {
			t.Errorf("container args %q; want %s", c.Args, flag)
		}
	}
	if dep.Spec.Template.Spec.ServiceAccountName != name {
		t.Errorf("pods run as %q; want %s", dep.Spec.Template.Spec.ServiceAccountName, name)
	}
	for _, obj := range []client.Object{&corev1.Service{}, &policyv1.PodDisruptionBudget{}, &corev1.ServiceAccount{}, &rbacv1.RoleBinding{}} {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			t.Errorf("%T %s: %v", obj, name, err)
		}
	}
	// The pods are fenced (#38 item 4), and the fence follows the spec.
	var np networkingv1.NetworkPolicy
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &np); err != nil {
		t.Fatalf("the gateway's NetworkPolicy: %v", err)
	}
	if len(np.Spec.Ingress) != 2 || np.Spec.Ingress[0].Ports[0].Port.IntValue() != 3128 || np.Spec.Ingress[1].Ports[0].Port.IntValue() != 9090 ||
		!metav1.IsControlledBy(&np, gw) {
		t.Errorf("the gateway's NetworkPolicy: %+v; want the proxy and admin ports, controlled by the gateway", np)
	}
	every := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(gw), gw); err != nil {
		t.Fatal(err)
	}
	gw.Spec.NetworkPolicy = &crawlv1alpha1.GatewayNetworkPolicy{Clients: []networkingv1.NetworkPolicyPeer{every}}
	if err := k8s.Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &np); err != nil {
			return false, err.Error()
		}
		return apiEqual(np.Spec.Ingress[0].From, []networkingv1.NetworkPolicyPeer{every}), fmt.Sprintf("clients %+v; want every namespace", np.Spec.Ingress[0].From)
	})
	var role rbacv1.Role
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &role); err != nil {
		t.Fatal(err)
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"crawl-proxies"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"crawl-proxies"}, Verbs: []string{"get"}},
		{APIGroups: []string{"crawl.example.com"}, Resources: []string{"proxygateways"}, ResourceNames: []string{"front"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if !slices.Contains(c.Args, "--gateway=front") {
		t.Errorf("container args %q; want --gateway=front (the administrator's bans)", c.Args)
	}
	if !apiEqual(role.Rules, want) {
		t.Errorf("the gateway's Role: %+v; want %+v", role.Rules, want)
	}
	var creds corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "front-gateway-credentials"}, &creds); err != nil {
		t.Fatal(err)
	}
	user, pass := string(creds.Data["username"]), string(creds.Data["password"])
	if wantURL := "http://" + user + ":" + pass + "@front-gateway." + ns + ".svc:3128"; string(creds.Data["url"]) != wantURL || len(pass) != 32 {
		t.Errorf("credentials url %q; want %q", creds.Data["url"], wantURL)
	}

	// A pool with two Serving members: the gateway has members, but no
	// pod is ready (envtest runs no kubelet).
	pool := &crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "crawl"},
		Spec: crawlv1alpha1.ProxyPoolSpec{Replicas: ptr.To[int32](2), Template: crawlv1alpha1.ProxyTemplate{Spec: newProxy(ns, "x").Spec}}}
	if err := k8s.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	waitGatewayReason(t, ns, "front", crawlv1alpha1.ReasonGatewayNotReady)

	// The gateway pod's identity watches the published list as the pod
	// would, and sees both members.
	podCfg := rest.CopyConfig(restConfig)
	podCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + name}
	cs, err := kubernetes.NewForConfig(podCfg)
	if err != nil {
		t.Fatal(err)
	}
	set := gateway.NewSet()
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		gatewaywatch.Watch(wctx, cs, ns, []string{"crawl"}, set, nil, logr.Discard())
	}()
	t.Cleanup(func() { stop(); <-done })
	eventually(t, 30*time.Second, func() (bool, string) { return set.Len() == 2, "the pod's watch sees 2 members" })
	var members crawlv1alpha1.ProxyList
	if err := k8s.List(ctx, &members, client.InNamespace(ns)); err != nil || len(members.Items) == 0 {
		t.Fatalf("members: %v", err)
	}
	for _, secret := range []string{members.Items[0].Status.CredentialsSecretName, "front-gateway-credentials"} {
		if _, err := cs.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the gateway pod reads Secret %s: %v; want Forbidden", secret, err)
		}
	}
	if _, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the gateway pod lists Secrets: %v; want Forbidden", err)
	}
	// It records its ejections as events in its namespace, and nowhere
	// else.
	for _, tc := range []struct {
		ns     string
		refuse bool
	}{{ns: ns}, {ns: "default", refuse: true}} {
		e := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: tc.ns, GenerateName: "front-"}, EventTime: metav1.NowMicro(),
			ReportingController: "egress-proxies-gateway", ReportingInstance: "egress-proxies-gateway-front-0", Action: "Eject", Reason: "MemberEjected",
			Type: corev1.EventTypeWarning, Note: "test", Regarding: corev1.ObjectReference{APIVersion: "crawl.example.com/v1alpha1", Kind: "Proxy", Namespace: tc.ns, Name: "crawl-0"}}
		_, err := cs.EventsV1().Events(tc.ns).Create(ctx, e, metav1.CreateOptions{})
		if refused := apierrors.IsForbidden(err); refused != tc.refuse || (err != nil && !refused) {
			t.Errorf("the gateway pod records an event in namespace %s: %v; want refused: %t", tc.ns, err, tc.refuse)
		}
	}
	watchAdminBansAsThePod(t, podCfg, ns, set)

	// A pod becomes ready: the gateway is Ready.
	dep.Status = appsv1.DeploymentStatus{Replicas: 2, ReadyReplicas: 1, AvailableReplicas: 1, UpdatedReplicas: 2}
	if err := k8s.Status().Update(ctx, &dep); err != nil {
		t.Fatal(err)
	}
	waitGatewayReason(t, ns, "front", crawlv1alpha1.ReasonGatewayReady)
	// Events are sent by the recorder's own goroutine, after the status.
	eventually(t, 30*time.Second, func() (bool, string) {
		es := eventsFor(t, ns, "front")
		return slices.ContainsFunc(es, func(e string) bool { return strings.Contains(e, "GatewayReady") }), fmt.Sprintf("a GatewayReady event among %v", es)
	})

	// A gateway whose Service name someone else holds is refused, and the
	// foreign Service is left as it was.
	foreign := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-gateway"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := k8s.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"},
		Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"crawl"}}}); err != nil {
		t.Fatal(err)
	}
	waitGatewayReason(t, ns, "other", crawlv1alpha1.ReasonGatewayConflict)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(foreign), foreign); err != nil || len(foreign.OwnerReferences) != 0 || foreign.Spec.Ports[0].Port != 80 {
		t.Errorf("the foreign Service was changed: %+v %v", foreign, err)
	}

	var st crawlv1alpha1.ProxyGateway
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "front"}, &st); err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"status": toJSON(st.Status), "events": strings.Join(eventsFor(t, ns, "front"), "\n"), "logs": op.Logs.String()} {
		if strings.Contains(text, pass) {
			t.Errorf("the gateway's password is in its %s", what)
		}
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func apiEqual(a, b any) bool { return equality.Semantic.DeepEqual(a, b) }

// TestAPIServerValidatesGatewayBans: ban statuses are a destination's 4xx
// or 5xx answers, never a member's failures (407, 502, 503), and a short
// list; the API server says which.
func TestAPIServerValidatesGatewayBans(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	for _, tc := range []struct {
		reason   string
		statuses []int32
		seconds  int32
		admin    []crawlv1alpha1.GatewayBan
		want     string // "" for accepted
	}{
		{"429 and 403, the documented choice", []int32{429, 403}, 600, nil, ""},
		{"a member's 502 is failover's, not a ban", []int32{429, 502}, 0, nil, "407, 502 and 503 are a member's failures"},
		{"a member's 407 neither", []int32{407}, 0, nil, "407, 502 and 503 are a member's failures"},
		{"not an error answer", []int32{200}, 0, nil, "should be greater than or equal to 400"},
		{"a ban longer than a day", nil, 86401, nil, "spec.banSeconds"},
		{"an administrator's ban", nil, 0, []crawlv1alpha1.GatewayBan{adminBan("crawl-0", "shop.example.com"), adminBan("crawl-0", "2001:db8::1")}, ""},
		{"a host with a port", nil, 0, []crawlv1alpha1.GatewayBan{adminBan("crawl-0", "shop.example.com:443")}, "spec.bans[0].host"},
		{"a host in upper case (the gateway compares lower case)", nil, 0, []crawlv1alpha1.GatewayBan{adminBan("crawl-0", "Shop.example.com")}, "spec.bans[0].host"},
		{"a host with a header's line break", nil, 0, []crawlv1alpha1.GatewayBan{adminBan("crawl-0", "a\r\nb")}, "spec.bans[0].host"},
		{"a member that is not a name", nil, 0, []crawlv1alpha1.GatewayBan{adminBan("crawl/0", "shop.example.com")}, "spec.bans[0].member"},
		{"the same pair twice", nil, 0, []crawlv1alpha1.GatewayBan{adminBan("crawl-0", "a.example"), adminBan("crawl-0", "a.example")}, "Duplicate value"},
		{"more than 256 bans", nil, 0, manyBans(257), "spec.bans: Too many"},
	} {
		gw := &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "bans-"},
			Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"crawl"}, BanStatuses: tc.statuses, BanSeconds: tc.seconds, Bans: tc.admin}}
		err := k8s.Create(ctx, gw)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v; want it accepted", tc.reason, err)
		case tc.want != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want Invalid saying %q", tc.reason, err, tc.want)
		}
	}
}

// adminBan is an administrator's ban of member of pool crawl from host, for
// an hour.
func adminBan(member, host string) crawlv1alpha1.GatewayBan {
	return crawlv1alpha1.GatewayBan{Pool: "crawl", Member: member, Host: host, Expires: metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))}
}

// manyBans is n bans of distinct hosts.
func manyBans(n int) []crawlv1alpha1.GatewayBan {
	out := make([]crawlv1alpha1.GatewayBan, n)
	for i := range out {
		out[i] = adminBan("crawl-0", fmt.Sprintf("h%d.example", i))
	}
	return out
}

// watchAdminBansAsThePod: the gateway pod's identity watches its own
// ProxyGateway's spec.bans (a real gatewaywatch.WatchAdminBans) and sees an
// administrator's ban come and go, in its bans gauge; it cannot read
// another ProxyGateway.
func watchAdminBansAsThePod(t *testing.T, podCfg *rest.Config, ns string, set *gateway.Set) {
	t.Helper()
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(podCfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	gm, err := gateway.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{Members: set, Metrics: gm})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); gatewaywatch.WatchAdminBans(wctx, dyn, ns, "front", g, logr.Discard()) }()
	t.Cleanup(func() { stop(); <-done })
	active := func(want float64) {
		t.Helper()
		eventually(t, 30*time.Second, func() (bool, string) {
			got := gaugeValue(t, reg, "egress_proxies_gateway_bans_active")
			return got == want, fmt.Sprintf("%v bans in force in the pod; want %v", got, want)
		})
	}
	setBans := func(bans ...crawlv1alpha1.GatewayBan) {
		t.Helper()
		var gw crawlv1alpha1.ProxyGateway
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "front"}, &gw); err != nil {
			t.Fatal(err)
		}
		orig := gw.DeepCopy()
		gw.Spec.Bans = bans
		if err := k8s.Patch(ctx, &gw, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	member := set.Members()[0]
	setBans(crawlv1alpha1.GatewayBan{Pool: member.Pool, Member: member.Name, Host: "shop.example.com", Expires: metav1.NewTime(time.Now().Add(time.Hour))})
	active(1)
	setBans()
	active(0)
	if _, err := dyn.Resource(crawlv1alpha1.GroupVersion.WithResource("proxygateways")).Namespace(ns).Get(ctx, "other", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the gateway pod reads another ProxyGateway: %v; want Forbidden", err)
	}
}

// gaugeValue sums the samples of a gauge in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
