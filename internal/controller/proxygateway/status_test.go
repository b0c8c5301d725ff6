package proxygateway

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

func TestComputeGatewayStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC))
	gw := &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "crawlers", Name: "front", Generation: 3},
		Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"a", "b"}, Port: 8080}}
	ready := func(replicas, ready int32) *appsv1.Deployment {
		return &appsv1.Deployment{Status: appsv1.DeploymentStatus{Replicas: replicas, ReadyReplicas: ready}}
	}
	for _, tc := range []struct {
		name, reason string
		obs          gatewayObservation
		want         string // the Ready condition's status and reason
		wantMsg      string
	}{
		{name: "ready", reason: "a ready pod and members: the gateway serves",
			obs: gatewayObservation{deployment: ready(2, 1), members: 4}, want: "True/GatewayReady",
			wantMsg: "1 of 2 gateway pods ready in front of 4 members."},
		{name: "no members", reason: "ready pods do not matter without members: the gateway answers 503",
			obs: gatewayObservation{deployment: ready(2, 2), missingPools: []string{"b"}}, want: "False/NoMembers",
			wantMsg: "No Serving member in pools a, b; the gateway answers 503 until one serves. ProxyPools not found in namespace crawlers: b."},
		{name: "pods not ready", reason: "members serve, pods still start",
			obs: gatewayObservation{deployment: ready(2, 0), members: 1}, want: "False/GatewayNotReady",
			wantMsg: "1 members serve; no gateway pod is ready yet (see Deployment front-gateway)."},
		{name: "no deployment yet", reason: "nothing observed of the Deployment counts as not ready",
			obs: gatewayObservation{members: 1}, want: "False/GatewayNotReady",
			wantMsg: "1 members serve; no gateway pod is ready yet (see Deployment front-gateway)."},
		{name: "conflict", reason: "a foreign object wins over everything: it blocks the gateway",
			obs: gatewayObservation{deployment: ready(2, 2), members: 3, conflict: "Service front-gateway exists"}, want: "False/GatewayConflict",
			wantMsg: "Service front-gateway exists"},
		{name: "refused", reason: "an object the API refused is said with the API's words, and a missing pool too, rather than an empty status",
			obs: gatewayObservation{members: 0, missingPools: []string{"b"}, refused: "creating the Deployment front-gateway: denied by require-limits"}, want: "False/ApplyFailed",
			wantMsg: "The API server refused an object of the gateway: creating the Deployment front-gateway: denied by require-limits. Change what it names (an admission policy, a quota, the operator's RBAC); the operator tries again. ProxyPools not found in namespace crawlers: b."},
		{name: "no image", reason: "an operator without an image for the pods says so, not the API server's words about an empty field",
			obs: gatewayObservation{members: 2, noImage: true}, want: "False/ApplyFailed",
			wantMsg: "The operator has no image to run the gateway's pods: it was started without --proxy-image (or $OPERATOR_IMAGE, which config/default and the chart set). Every other object of the gateway is made; restart the operator with its image."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := computeGatewayStatus(gw, tc.obs, now)
			if st.Endpoint != "http://front-gateway.crawlers.svc:8080" || st.ObservedGeneration != 3 || st.Members != tc.obs.members {
				t.Errorf("%s: endpoint %q, generation %d, members %d", tc.reason, st.Endpoint, st.ObservedGeneration, st.Members)
			}
			if len(st.Conditions) != 1 {
				t.Fatalf("%s: conditions %v; want Ready only", tc.reason, st.Conditions)
			}
			c := st.Conditions[0]
			if diff := cmp.Diff(tc.want+" "+tc.wantMsg, string(c.Status)+"/"+c.Reason+" "+c.Message); diff != "" {
				t.Errorf("%s: Ready (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// TestGatewayLimitArgs: the failover, limit and ban fields reach the gateway
// subcommand as its flags; a field the API server did not default leaves
// the subcommand's default.
func TestGatewayLimitArgs(t *testing.T) {
	for _, tc := range []struct {
		reason string
		spec   crawlv1alpha1.ProxyGatewaySpec
		want   []string
	}{
		{"the API server's defaults", crawlv1alpha1.ProxyGatewaySpec{MaxConcurrentPerMember: 128, MaxAttempts: 3, EjectAfter: 3, EjectSeconds: 30,
			BanStatuses: []int32{429}, BanSeconds: 300},
			[]string{"--max-per-member=128", "--max-attempts=3", "--eject-after=3", "--eject-for=30s", "--ban-for=300s", "--ban-statuses=429"}},
		{"403 a ban too, a longer ban", crawlv1alpha1.ProxyGatewaySpec{BanStatuses: []int32{429, 403}, BanSeconds: 3600},
			[]string{"--ban-for=3600s", "--ban-statuses=429,403"}},
		{"a rate per member and host, failover off", crawlv1alpha1.ProxyGatewaySpec{MaxConcurrentPerMember: 8, MemberHostRequestsPerMinute: 30, MaxAttempts: 1, EjectAfter: 5, EjectSeconds: 120},
			[]string{"--max-per-member=8", "--member-host-requests-per-minute=30", "--max-attempts=1", "--eject-after=5", "--eject-for=120s"}},
		{"nothing set: the subcommand's defaults", crawlv1alpha1.ProxyGatewaySpec{}, nil},
	} {
		got := gatewayLimitArgs(&crawlv1alpha1.ProxyGateway{Spec: tc.spec})
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
		}
	}
}

// TestGatewayResources (#38 item 2): a gateway pod has a memory limit
// sized from the tables' measured bound unless the ProxyGateway sets its
// own resources, and the Go runtime's soft limit follows the container's
// memory limit (90%), so the gateway collects garbage before the kernel
// kills it; without a memory limit the runtime has none.
func TestGatewayResources(t *testing.T) {
	custom := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
	}
	for _, tc := range []struct {
		reason        string
		resources     *corev1.ResourceRequirements
		wantRequests  string
		wantLimit     string
		wantGOMEMLIMT string
	}{
		{"unset: the measured defaults", nil, "cpu=100m memory=128Mi", "512Mi", "483183819"},
		{"the ProxyGateway's own", &custom, "memory=1Gi", "2Gi", "1932735276"},
		{"requests only: no soft limit", &corev1.ResourceRequirements{Requests: custom.Requests}, "memory=1Gi", "", ""},
	} {
		gw := &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: "gw"},
			Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"crawl"}, Resources: tc.resources}}
		c := gatewayDeployment(gw, "egress-proxies-operator:dev").Spec.Template.Spec.Containers[0]
		var requests []string
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := c.Resources.Requests[name]; ok {
				requests = append(requests, string(name)+"="+q.String())
			}
		}
		limit := ""
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			limit = q.String()
		}
		soft := ""
		for _, e := range c.Env {
			if e.Name == "GOMEMLIMIT" {
				soft = e.Value
			}
		}
		got := []string{strings.Join(requests, " "), limit, soft}
		if diff := cmp.Diff([]string{tc.wantRequests, tc.wantLimit, tc.wantGOMEMLIMT}, got); diff != "" {
			t.Errorf("%s: requests, memory limit, GOMEMLIMIT (-want +got):\n%s", tc.reason, diff)
		}
	}
}

// TestGatewayNetworkPolicy: who reaches a gateway's ports (#38 item 4),
// each ingress rule written as "port <- peers".
func TestGatewayNetworkPolicy(t *testing.T) {
	crawlers := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "crawl"}}}
	prom := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "observability"}}}
	for _, tc := range []struct {
		reason string
		spec   crawlv1alpha1.ProxyGatewaySpec
		want   []string
	}{{
		reason: "unset: the gateway's own namespace for clients, the monitoring namespace for the admin port",
		spec:   crawlv1alpha1.ProxyGatewaySpec{},
		want:   []string{"3128 <- pods{}", "9090 <- ns{kubernetes.io/metadata.name=monitoring}"},
	}, {
		reason: "allowedSourceRanges are admitted too, as ipBlocks",
		spec:   crawlv1alpha1.ProxyGatewaySpec{AllowedSourceRanges: []string{"198.51.100.0/24"}, Port: 8080},
		want:   []string{"8080 <- pods{} ip{198.51.100.0/24}", "9090 <- ns{kubernetes.io/metadata.name=monitoring}"},
	}, {
		reason: "named clients and scrapers replace the defaults",
		spec: crawlv1alpha1.ProxyGatewaySpec{NetworkPolicy: &crawlv1alpha1.GatewayNetworkPolicy{
			Clients: []networkingv1.NetworkPolicyPeer{crawlers}, Metrics: []networkingv1.NetworkPolicyPeer{prom}}},
		want: []string{"3128 <- ns{team=crawl}", "9090 <- ns{kubernetes.io/metadata.name=observability}"},
	}} {
		tc.spec.Pools = []string{"crawl"}
		gw := &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: "gw"}, Spec: tc.spec}
		np := gatewayNetworkPolicy(gw)
		var got []string
		for _, rule := range np.Spec.Ingress {
			peers := []string{}
			for _, p := range rule.From {
				switch {
				case p.IPBlock != nil:
					peers = append(peers, "ip{"+p.IPBlock.CIDR+"}")
				case p.NamespaceSelector != nil:
					peers = append(peers, "ns{"+metav1.FormatLabelSelector(p.NamespaceSelector)+"}")
				case p.PodSelector != nil:
					peers = append(peers, "pods{"+strings.TrimPrefix(metav1.FormatLabelSelector(p.PodSelector), "<none>")+"}")
				}
			}
			got = append(got, rule.Ports[0].Port.String()+" <- "+strings.Join(peers, " "))
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: ingress (-want +got):\n%s", tc.reason, diff)
		}
		if diff := cmp.Diff(gatewayPodLabels(gw), np.Spec.PodSelector.MatchLabels); diff != "" {
			t.Errorf("%s: the policy selects (-want +got):\n%s", tc.reason, diff)
		}
		if diff := cmp.Diff([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes); diff != "" {
			t.Errorf("%s: policy types (-want +got):\n%s", tc.reason, diff)
		}
	}
}
