package proxygateway

import (
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller/shared"
)

// The gateway's objects, all named <gateway>-gateway except the credentials
// Secret, labelled with the managed-by label and crawl.example.com/gateway,
// and controlled by the ProxyGateway.
const (
	labelGateway = "crawl.example.com/gateway"
	// labelAppName is the pods' app.kubernetes.io/name.
	labelAppName      = "app.kubernetes.io/name"
	labelAppNameValue = "egress-proxies-gateway"
	// gatewayAdminPort serves /healthz, /readyz and /metrics in the pods.
	gatewayAdminPort = 9090
	// gatewayUID is the pods' user: the image's nonroot user.
	gatewayUID = 65532
)

// gatewayObjectName is the name of a gateway's Deployment, Service,
// PodDisruptionBudget, ServiceAccount, Role and RoleBinding.
func gatewayObjectName(gw string) string { return gw + "-gateway" }

// gatewayCredentialsName is the name of a gateway's credentials Secret.
func gatewayCredentialsName(gw string) string { return gw + "-gateway-credentials" }

// gatewayEndpoint is the gateway's address inside the cluster, without
// credentials; with user and password, the credentials Secret's url.
func gatewayEndpoint(gw *crawlv1alpha1.ProxyGateway, user, password string) string {
	var u *url.Userinfo
	if user != "" {
		u = url.UserPassword(user, password)
	}
	return published.ProxyURL(gatewayObjectName(gw.Name)+"."+gw.Namespace+".svc", gatewayPort(gw), u)
}

func gatewayPort(gw *crawlv1alpha1.ProxyGateway) int32 {
	if gw.Spec.Port == 0 {
		return 3128
	}
	return gw.Spec.Port
}

func gatewayAuthNone(gw *crawlv1alpha1.ProxyGateway) bool {
	return gw.Spec.Auth == crawlv1alpha1.ProxyAuthNone
}

// gatewayLabels are on every object of the gateway.
func gatewayLabels(gw *crawlv1alpha1.ProxyGateway) map[string]string {
	return map[string]string{shared.LabelManagedBy: shared.LabelManagedByValue, labelGateway: gw.Name}
}

// gatewayPodLabels select the gateway's pods.
func gatewayPodLabels(gw *crawlv1alpha1.ProxyGateway) map[string]string {
	return map[string]string{labelAppName: labelAppNameValue, labelGateway: gw.Name}
}

func gatewayMeta(gw *crawlv1alpha1.ProxyGateway, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: gw.Namespace, Name: name, Labels: gatewayLabels(gw)}
}

// gatewayServiceAccount is the pods' identity.
func gatewayServiceAccount(gw *crawlv1alpha1.ProxyGateway) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: gatewayMeta(gw, gatewayObjectName(gw.Name))}
}

// gatewayRole lets the pods watch their pools' published ConfigMaps (no
// credentials) and their own ProxyGateway (its bans), get their
// published Secrets, by name, and record events in the namespace, and
// nothing else:
// not the members' own Secrets, not the gateway's credentials (which reach
// the pods as environment variables). A Role can grant only what the
// operator holds: it may watch ConfigMaps but only get Secrets, so the pods
// read the Secret each time the ConfigMap, written after it, changes.
func gatewayRole(gw *crawlv1alpha1.ProxyGateway) *rbacv1.Role {
	names := make([]string, 0, len(gw.Spec.Pools))
	for _, p := range gw.Spec.Pools {
		names = append(names, published.ListName(p))
	}
	return &rbacv1.Role{ObjectMeta: gatewayMeta(gw, gatewayObjectName(gw.Name)), Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: names, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: names, Verbs: []string{"get"}},
		// Its own ProxyGateway, for the administrator's bans (spec.bans).
		{APIGroups: []string{crawlv1alpha1.GroupVersion.Group}, Resources: []string{"proxygateways"}, ResourceNames: []string{gw.Name}, Verbs: []string{"get", "list", "watch"}},
		// Its events (a member's ejection, which only the replica knows
		// of); patch adds to a series of the same event.
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}}
}

func gatewayRoleBinding(gw *crawlv1alpha1.ProxyGateway) *rbacv1.RoleBinding {
	name := gatewayObjectName(gw.Name)
	return &rbacv1.RoleBinding{ObjectMeta: gatewayMeta(gw, name),
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: gw.Namespace}},
	}
}

// gatewayService is the gateway's endpoint.
func gatewayService(gw *crawlv1alpha1.ProxyGateway) *corev1.Service {
	port := gatewayPort(gw)
	return &corev1.Service{ObjectMeta: gatewayMeta(gw, gatewayObjectName(gw.Name)), Spec: corev1.ServiceSpec{
		Type:     corev1.ServiceTypeClusterIP,
		Selector: gatewayPodLabels(gw),
		Ports:    []corev1.ServicePort{{Name: "proxy", Port: port, TargetPort: intstr.FromString("proxy"), Protocol: corev1.ProtocolTCP}},
	}}
}

// gatewayPDB keeps all but one pod up through voluntary disruptions (node
// drains), whatever the number of replicas.
func gatewayPDB(gw *crawlv1alpha1.ProxyGateway) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: gatewayMeta(gw, gatewayObjectName(gw.Name)), Spec: policyv1.PodDisruptionBudgetSpec{
		MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		Selector:       &metav1.LabelSelector{MatchLabels: gatewayPodLabels(gw)},
	}}
}

// gatewayDeployment runs image's gateway subcommand.
func gatewayDeployment(gw *crawlv1alpha1.ProxyGateway, image string) *appsv1.Deployment {
	port := gatewayPort(gw)
	args := []string{"gateway", published.Flag(published.GatewayFlagListen, ":"+strconv.Itoa(int(port))),
		published.Flag(published.GatewayFlagAdminListen, ":"+strconv.Itoa(gatewayAdminPort)),
		published.Flag(published.GatewayFlagPools, strings.Join(gw.Spec.Pools, ",")),
		published.Flag(published.GatewayFlagStrategy, string(gatewayStrategy(gw))), published.Flag(published.GatewayFlagGateway, gw.Name)}
	if len(gw.Spec.AllowedSourceRanges) > 0 {
		args = append(args, published.Flag(published.GatewayFlagAllowedSourceRanges, strings.Join(gw.Spec.AllowedSourceRanges, ",")))
	}
	args = append(args, gatewayLimitArgs(gw)...)
	env := []corev1.EnvVar{{Name: published.EnvPodNamespace, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}
	if !gatewayAuthNone(gw) {
		ref := func(key string) *corev1.EnvVarSource {
			return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: gatewayCredentialsName(gw.Name)}, Key: key}}
		}
		env = append(env, corev1.EnvVar{Name: published.EnvGatewayUsername, ValueFrom: ref(published.CredentialsKeyUsername)},
			corev1.EnvVar{Name: published.EnvGatewayPassword, ValueFrom: ref(published.CredentialsKeyPassword)})
	}
	secCtx := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if port < 1024 {
		secCtx.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"}
	}
	resources := gatewayResources(gw)
	if limit, ok := resources.Limits[corev1.ResourceMemory]; ok && limit.Value() > 0 {
		env = append(env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: strconv.FormatInt(limit.Value()/10*9, 10)})
	}
	admin := intstr.FromString("admin")
	container := corev1.Container{
		Name: "gateway", Image: image, Args: args, Env: env, Resources: resources,
		Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: port, Protocol: corev1.ProtocolTCP},
			{Name: "admin", ContainerPort: gatewayAdminPort, Protocol: corev1.ProtocolTCP}},
		// Ready only with members to send to: a pod without any gets no
		// traffic from the Service.
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: admin}},
			PeriodSeconds: 2, TimeoutSeconds: 2},
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: admin}},
			PeriodSeconds: 10, TimeoutSeconds: 2},
		SecurityContext: secCtx,
	}
	labels := gatewayPodLabels(gw)
	return &appsv1.Deployment{ObjectMeta: gatewayMeta(gw, gatewayObjectName(gw.Name)), Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(ptr.Deref(gw.Spec.Replicas, 2)),
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1))}},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{
				ServiceAccountName: gatewayObjectName(gw.Name),
				// The token is the watch's: the Role above is all it opens.
				AutomountServiceAccountToken:  ptr.To(true),
				EnableServiceLinks:            ptr.To(false),
				TerminationGracePeriodSeconds: ptr.To(int64(30)),
				SecurityContext: &corev1.PodSecurityContext{
					RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(gatewayUID)), RunAsGroup: ptr.To(int64(gatewayUID)),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				Containers: []corev1.Container{container},
			},
		},
	}}
}

// Default resources of a gateway container, sized from measurements
// (docs/gateway.md, "Memory"): every table a client feeds full takes about
// 60 MiB (TestClientFedTablesStayUnderTheirBound), the default cap of 8192
// connections as idle tunnels about 58 MiB (7.3 KiB each, docs/performance.md);
// the rest of the limit is for busy transfers, the runtime and the
// collector's headroom. No CPU limit: a throttled gateway delays every
// crawler's requests, and the request reserves its share.
var (
	gatewayRequestCPU    = resource.MustParse("100m")
	gatewayRequestMemory = resource.MustParse("128Mi")
	gatewayLimitMemory   = resource.MustParse("512Mi")
)

// gatewayResources are the ProxyGateway's resources, or the defaults.
func gatewayResources(gw *crawlv1alpha1.ProxyGateway) corev1.ResourceRequirements {
	if gw.Spec.Resources != nil {
		return *gw.Spec.Resources.DeepCopy()
	}
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: gatewayRequestCPU, corev1.ResourceMemory: gatewayRequestMemory},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: gatewayLimitMemory},
	}
}

// gatewayLimitArgs are the failover, limit and ban flags of the gateway
// subcommand; a field left zero (an object the API server did not default,
// in tests) leaves the subcommand's default.
func gatewayLimitArgs(gw *crawlv1alpha1.ProxyGateway) []string {
	var args []string
	for _, f := range []struct {
		flag  string
		value int32
		unit  string
	}{
		{published.GatewayFlagMaxPerMember, gw.Spec.MaxConcurrentPerMember, ""},
		{published.GatewayFlagHostPerMinute, gw.Spec.MemberHostRequestsPerMinute, ""},
		{published.GatewayFlagMaxAttempts, gw.Spec.MaxAttempts, ""},
		{published.GatewayFlagEjectAfter, gw.Spec.EjectAfter, ""},
		{published.GatewayFlagEjectFor, gw.Spec.EjectSeconds, "s"},
		{published.GatewayFlagBanFor, gw.Spec.BanSeconds, "s"},
	} {
		if f.value > 0 {
			args = append(args, published.FlagInt(f.flag, int(f.value), f.unit))
		}
	}
	if len(gw.Spec.BanStatuses) > 0 {
		codes := make([]string, 0, len(gw.Spec.BanStatuses))
		for _, c := range gw.Spec.BanStatuses {
			codes = append(codes, strconv.Itoa(int(c)))
		}
		args = append(args, published.Flag(published.GatewayFlagBanStatuses, strings.Join(codes, ",")))
	}
	return args
}

func gatewayStrategy(gw *crawlv1alpha1.ProxyGateway) crawlv1alpha1.GatewayStrategy {
	if gw.Spec.Strategy == "" {
		return crawlv1alpha1.GatewayRoundRobin
	}
	return gw.Spec.Strategy
}

// gatewayMetricsNamespace is the namespace whose pods may scrape a
// gateway's admin port when its spec names no metrics peers: where
// kube-prometheus and most monitoring stacks run.
const gatewayMetricsNamespace = "monitoring"

// gatewayNetworkPolicy admits the proxy port from the gateway's clients and
// the admin port from its scrapers, and nothing else (#38 item 4): no pod
// of another namespace can flood or scrape a gateway it was not given.
// Egress stays open: the members are wherever the pools put them.
func gatewayNetworkPolicy(gw *crawlv1alpha1.ProxyGateway) *networkingv1.NetworkPolicy {
	var np crawlv1alpha1.GatewayNetworkPolicy
	if gw.Spec.NetworkPolicy != nil {
		np = *gw.Spec.NetworkPolicy
	}
	clients := slices.Clone(np.Clients)
	if len(clients) == 0 {
		// An empty namespaceSelector would mean every namespace: the
		// gateway's own is a podSelector alone.
		clients = []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}
	}
	for _, r := range gw.Spec.AllowedSourceRanges {
		clients = append(clients, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: r}})
	}
	metrics := np.Metrics
	if len(metrics) == 0 {
		metrics = []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{corev1.LabelMetadataName: gatewayMetricsNamespace}}}}
	}
	tcp := corev1.ProtocolTCP
	port := func(p intstr.IntOrString) []networkingv1.NetworkPolicyPort {
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}
	}
	return &networkingv1.NetworkPolicy{ObjectMeta: gatewayMeta(gw, gatewayObjectName(gw.Name)), Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: gatewayPodLabels(gw)},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{
			{Ports: port(intstr.FromInt32(gatewayPort(gw))), From: clients},
			{Ports: port(intstr.FromInt32(gatewayAdminPort)), From: metrics},
		},
	}}
}

// CachedObjects are the kinds of the gateway's objects that the reconciler
// reads through the cache; the manager caches them only when the operator
// made them (controller.CacheOptions).
func CachedObjects() []client.Object {
	return []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{},
		&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &networkingv1.NetworkPolicy{}}
}
