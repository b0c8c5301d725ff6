package manifests

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
)

// checkNamespaces: every namespaced object names a namespace that the render
// creates; cluster-scoped objects name none.
func checkNamespaces(b *bundle) error {
	var errs []error
	type obj struct {
		kind, ns, name string
		namespaced     bool
	}
	var objs []obj
	for _, o := range b.Namespaces {
		objs = append(objs, obj{"Namespace", o.Namespace, o.Name, false})
	}
	for _, o := range b.ClusterRoles {
		objs = append(objs, obj{"ClusterRole", o.Namespace, o.Name, false})
	}
	for _, o := range b.ClusterRoleBindings {
		objs = append(objs, obj{"ClusterRoleBinding", o.Namespace, o.Name, false})
	}
	for _, o := range b.CRDs {
		objs = append(objs, obj{"CustomResourceDefinition", o.Namespace, o.Name, false})
	}
	for _, o := range b.ServiceAccounts {
		objs = append(objs, obj{"ServiceAccount", o.Namespace, o.Name, true})
	}
	for _, o := range b.ConfigMaps {
		objs = append(objs, obj{"ConfigMap", o.Namespace, o.Name, true})
	}
	for _, o := range b.Secrets {
		objs = append(objs, obj{"Secret", o.Namespace, o.Name, true})
	}
	for _, o := range b.Services {
		objs = append(objs, obj{"Service", o.Namespace, o.Name, true})
	}
	for _, o := range b.Deployments {
		objs = append(objs, obj{"Deployment", o.Namespace, o.Name, true})
	}
	for _, o := range b.Roles {
		objs = append(objs, obj{"Role", o.Namespace, o.Name, true})
	}
	for _, o := range b.RoleBindings {
		objs = append(objs, obj{"RoleBinding", o.Namespace, o.Name, true})
	}
	for _, o := range objs {
		switch {
		case !o.namespaced && o.ns != "":
			errs = append(errs, fmt.Errorf("%s %s is cluster-scoped but has namespace %q", o.kind, o.name, o.ns))
		case o.namespaced && o.ns == "":
			errs = append(errs, fmt.Errorf("%s %s has no namespace", o.kind, o.name))
		case o.namespaced && !b.hasNamespace(o.ns):
			errs = append(errs, fmt.Errorf("%s %s/%s: the render creates no Namespace %q", o.kind, o.ns, o.name, o.ns))
		}
	}
	return errors.Join(errs...)
}

// checkBindings: every binding's role and service accounts exist, in the
// namespaces the binding says.
func checkBindings(b *bundle) error {
	var errs []error
	subjects := func(what string, subs []rbacv1.Subject) {
		for _, s := range subs {
			if s.Kind == rbacv1.ServiceAccountKind && b.serviceAccount(s.Namespace, s.Name) == nil {
				errs = append(errs, fmt.Errorf("%s: subject ServiceAccount %s/%s is not in the render", what, s.Namespace, s.Name))
			}
		}
	}
	for _, rb := range b.RoleBindings {
		what := fmt.Sprintf("RoleBinding %s/%s", rb.Namespace, rb.Name)
		switch {
		case rb.RoleRef.Kind == "Role" && b.role(rb.Namespace, rb.RoleRef.Name) == nil:
			errs = append(errs, fmt.Errorf("%s: roleRef Role %s/%s is not in the render", what, rb.Namespace, rb.RoleRef.Name))
		case rb.RoleRef.Kind == "ClusterRole" && b.clusterRole(rb.RoleRef.Name) == nil:
			errs = append(errs, fmt.Errorf("%s: roleRef ClusterRole %s is not in the render", what, rb.RoleRef.Name))
		}
		subjects(what, rb.Subjects)
	}
	for _, crb := range b.ClusterRoleBindings {
		what := "ClusterRoleBinding " + crb.Name
		if crb.RoleRef.Kind != "ClusterRole" || b.clusterRole(crb.RoleRef.Name) == nil {
			errs = append(errs, fmt.Errorf("%s: roleRef %s %s is not in the render", what, crb.RoleRef.Kind, crb.RoleRef.Name))
		}
		subjects(what, crb.Subjects)
	}
	return errors.Join(errs...)
}

// operator returns the one Deployment and its container named manager.
func operator(b *bundle) (*appsv1.Deployment, *corev1.Container, error) {
	if len(b.Deployments) != 1 {
		return nil, nil, fmt.Errorf("want one Deployment, the render has %d", len(b.Deployments))
	}
	d := b.Deployments[0]
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == "manager" {
			return d, c, nil
		}
	}
	return nil, nil, fmt.Errorf("Deployment %s has no container manager", d.Name)
}

// flagValue returns the value of --name=value in args, or def.
func flagValue(args []string, name, def string) string {
	v := def
	for _, a := range args {
		if after, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			v = after
		}
	}
	return v
}

// providersConfig returns the file --providers-config points at, read from
// the ConfigMap volume mounted over it.
func providersConfig(b *bundle) ([]byte, error) {
	d, c, err := operator(b)
	if err != nil {
		return nil, err
	}
	path := flagValue(c.Args, "providers-config", "/etc/proxy-operator/config/providers.yaml")
	// The deepest mount that holds the path is the one the container sees.
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") && (mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		return nil, fmt.Errorf("--providers-config %s is under no volume mount", path)
	}
	var cmName string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	if cmName == "" {
		return nil, fmt.Errorf("--providers-config %s is under mount %s, which is not a ConfigMap volume", path, mount.MountPath)
	}
	if mount.SubPath != "" {
		return nil, fmt.Errorf("--providers-config %s: mount %s uses subPath, which these tests do not follow", path, mount.MountPath)
	}
	cm := b.configMap(d.Namespace, cmName)
	if cm == nil {
		return nil, fmt.Errorf("--providers-config %s: ConfigMap %s/%s is not in the render", path, d.Namespace, cmName)
	}
	key := strings.TrimPrefix(path, strings.TrimSuffix(mount.MountPath, "/")+"/")
	data, ok := cm.Data[key]
	if !ok {
		return nil, fmt.Errorf("--providers-config %s: ConfigMap %s has no key %q", path, cm.Name, key)
	}
	return []byte(data), nil
}

// Reference names of the deployment (docs/configuration.md): what a team
// coming from the reference system already types in its commands and files.
const (
	operatorNamespace  = "egress-proxies-system"
	deploymentName     = "egress-proxies-operator-controller-manager"
	providersConfigMap = "egress-proxies-operator-providers-config"
	proxmoxSecret      = "proxmox-token"
	proxmoxMount       = "/etc/proxy-operator/proxmox"
	kvmSSHSecret       = "kvm-ssh"
	kvmSSHMount        = "/etc/proxy-operator/kvm-ssh"
	tmpMount           = "/tmp"
)

// checkReferenceNames: the prefixed names, the providers ConfigMap behind
// --providers-config, the two optional credential Secrets mounted read-only
// where the providers configuration points, and the tmp emptyDir.
func checkReferenceNames(b *bundle) error {
	d, c, err := operator(b)
	if err != nil {
		return err
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if d.Namespace != operatorNamespace || d.Name != deploymentName {
		fail("Deployment %s/%s, want %s/%s", d.Namespace, d.Name, operatorNamespace, deploymentName)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	mountOf := func(path string) (corev1.VolumeMount, corev1.Volume, bool) {
		for _, m := range c.VolumeMounts {
			if m.MountPath == path {
				return m, volumes[m.Name], true
			}
		}
		return corev1.VolumeMount{}, corev1.Volume{}, false
	}
	cmName := ""
	for _, v := range volumes {
		if v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	if cmName != providersConfigMap || b.configMap(d.Namespace, providersConfigMap) == nil {
		fail("providers ConfigMap %q, want %s rendered in %s", cmName, providersConfigMap, d.Namespace)
	}
	for _, want := range []struct{ secret, path string }{{proxmoxSecret, proxmoxMount}, {kvmSSHSecret, kvmSSHMount}} {
		m, v, ok := mountOf(want.path)
		switch {
		case !ok:
			fail("nothing is mounted at %s, want Secret %s", want.path, want.secret)
		case v.Secret == nil || v.Secret.SecretName != want.secret:
			fail("%s: want Secret %s mounted there", want.path, want.secret)
		case v.Secret.Optional == nil || !*v.Secret.Optional:
			fail("Secret %s is not optional: the operator would not start without it", want.secret)
		case !m.ReadOnly:
			fail("Secret %s is mounted writable at %s", want.secret, want.path)
		case len(v.Secret.Items) > 0 || m.SubPath != "":
			fail("Secret %s is mounted in part: mount all of its keys", want.secret)
		}
	}
	if m, v, ok := mountOf(tmpMount); !ok || v.EmptyDir == nil || m.Name != "tmp" {
		fail("want the emptyDir volume tmp at %s", tmpMount)
	}
	return errors.Join(errs...)
}

// checkDeployment: the Deployment's references resolve, and it runs as the
// security settings say.
func checkDeployment(b *bundle) error {
	d, c, err := operator(b)
	if err != nil {
		return err
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	pod := &d.Spec.Template.Spec

	// Names across the prefix.
	if b.serviceAccount(d.Namespace, pod.ServiceAccountName) == nil {
		fail("serviceAccountName %s: no such ServiceAccount in %s", pod.ServiceAccountName, d.Namespace)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
		switch {
		case v.ConfigMap != nil && b.configMap(d.Namespace, v.ConfigMap.Name) == nil &&
			(v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional):
			fail("volume %s: ConfigMap %s is not in the render and not optional", v.Name, v.ConfigMap.Name)
		case v.Secret != nil && b.secret(d.Namespace, v.Secret.SecretName) == nil &&
			(v.Secret.Optional == nil || !*v.Secret.Optional):
			fail("volume %s: Secret %s is not in the render and not optional (the operator would not start without it)", v.Name, v.Secret.SecretName)
		}
	}
	if _, err := providersConfig(b); err != nil {
		errs = append(errs, err)
	}
	// Writable: only an emptyDir at /tmp.
	for _, m := range c.VolumeMounts {
		if m.ReadOnly {
			continue
		}
		if m.MountPath != "/tmp" || volumes[m.Name].EmptyDir == nil {
			fail("mount %s (volume %s) is writable: only the emptyDir at /tmp may be", m.MountPath, m.Name)
		}
	}

	// Security.
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	if !isTrue(csc.RunAsNonRoot) && !isTrue(psc.RunAsNonRoot) {
		fail("runAsNonRoot is not set")
	}
	uid := psc.RunAsUser
	if csc.RunAsUser != nil {
		uid = csc.RunAsUser
	}
	if uid == nil || *uid != 65532 {
		fail("runAsUser: want 65532 (distroless nonroot), got %v", deref(uid))
	}
	seccomp := psc.SeccompProfile
	if csc.SeccompProfile != nil {
		seccomp = csc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		fail("seccompProfile: want RuntimeDefault")
	}
	if !isTrue(csc.ReadOnlyRootFilesystem) {
		fail("readOnlyRootFilesystem is not true")
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		fail("allowPrivilegeEscalation is not false")
	}
	if isTrue(csc.Privileged) {
		fail("the container is privileged")
	}
	if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") || len(csc.Capabilities.Add) > 0 {
		fail("capabilities: want drop [ALL] and nothing added")
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		fail("the pod shares a host namespace")
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			fail("no %s request", r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			fail("no %s limit", r)
		}
	}

	// Flags and probes.
	if !slices.Contains(c.Args, "--leader-elect") && !slices.Contains(c.Args, "--leader-elect=true") {
		fail("--leader-elect is not set")
	}
	probeAddr := flagValue(c.Args, "health-probe-bind-address", ":8081")
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"livenessProbe", c.LivenessProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path ||
			":"+p.probe.HTTPGet.Port.String() != probeAddr {
			fail("%s: want GET %s on the --health-probe-bind-address port %s", p.what, p.path, probeAddr)
		}
	}
	// The image: set by kustomize, and the same one in OPERATOR_IMAGE.
	if c.Image == "" || strings.HasPrefix(c.Image, "controller:") {
		fail("image %q: the images: entry of config/manager was not applied", c.Image)
	}
	env := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "OPERATOR_IMAGE" })
	if env < 0 || c.Env[env].Value != c.Image {
		fail("env OPERATOR_IMAGE: want the container's image %q (the proxy pods run it)", c.Image)
	}
	return errors.Join(errs...)
}

func isTrue(p *bool) bool { return p != nil && *p }

func deref(p *int64) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// checkMetrics: metrics are served on :8443 behind authentication and
// authorization, a Service reaches them, and the RBAC for both exists.
func checkMetrics(b *bundle) error {
	d, c, err := operator(b)
	if err != nil {
		return err
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if addr := flagValue(c.Args, "metrics-bind-address", "0"); addr != ":8443" {
		fail("--metrics-bind-address is %q, want :8443", addr)
	}
	if flagValue(c.Args, "metrics-secure", "true") != "true" {
		fail("--metrics-secure is off")
	}
	port := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == 8443 })
	if port < 0 {
		fail("the container declares no port 8443")
	}
	served := false
	for _, s := range b.Services {
		if s.Namespace != d.Namespace || len(s.Spec.Selector) == 0 {
			continue
		}
		selects := true
		for k, v := range s.Spec.Selector {
			selects = selects && d.Spec.Template.Labels[k] == v
		}
		for _, p := range s.Spec.Ports {
			target := p.TargetPort.IntValue() == 8443 || (port >= 0 && p.TargetPort.String() == c.Ports[port].Name && c.Ports[port].Name != "")
			served = served || (selects && target)
		}
	}
	if !served {
		fail("no Service in %s selects the operator's pods on port 8443", d.Namespace)
	}
	rules := b.rightsIn(d.Namespace, d.Namespace, d.Spec.Template.Spec.ServiceAccountName)
	if !allows(rules, "authentication.k8s.io", "tokenreviews", "create") ||
		!allows(rules, "authorization.k8s.io", "subjectaccessreviews", "create") {
		fail("the operator may not create tokenreviews and subjectaccessreviews, which the metrics filter needs")
	}
	reader := slices.ContainsFunc(b.ClusterRoles, func(r *rbacv1.ClusterRole) bool { return allowsURL(r.Rules, "/metrics", "get") })
	if !reader {
		fail("no ClusterRole grants get on /metrics, to bind to scrapers")
	}
	return errors.Join(errs...)
}

// checkProviderRights: the providers configuration the Deployment reads
// parses, and every namespace a kubernetes entry runs pods in exists and
// grants the operator the pods and Secrets rights of its Role.
func checkProviderRights(b *bundle) error {
	d, _, err := operator(b)
	if err != nil {
		return err
	}
	data, err := providersConfig(b)
	if err != nil {
		return err
	}
	cfg, err := config.Parse(data, registry())
	if err != nil {
		return fmt.Errorf("the ConfigMap's providers configuration: %w", err)
	}
	var errs []error
	sa := d.Spec.Template.Spec.ServiceAccountName
	for _, e := range cfg.Providers {
		kb, ok := e.Block.(*kubernetes.Block)
		if !ok {
			continue
		}
		if !b.hasNamespace(kb.Namespace) {
			errs = append(errs, fmt.Errorf("entry %s: the render creates no Namespace %s for its pods", e.Name, kb.Namespace))
		}
		rules := b.rightsIn(kb.Namespace, d.Namespace, sa)
		for _, res := range []string{"pods", "secrets"} {
			for _, verb := range []string{"get", "list", "watch", "create", "delete"} {
				if !allows(rules, "", res, verb) {
					errs = append(errs, fmt.Errorf("entry %s: ServiceAccount %s/%s may not %s %s in namespace %s", e.Name, d.Namespace, sa, verb, res, kb.Namespace))
				}
			}
		}
	}
	// Leader election: leases in the operator's own namespace.
	if !allows(b.rightsIn(d.Namespace, d.Namespace, sa), "coordination.k8s.io", "leases", "update") {
		errs = append(errs, fmt.Errorf("ServiceAccount %s/%s may not update leases in %s (--leader-elect)", d.Namespace, sa, d.Namespace))
	}
	// The ownership key Secret: get (of that name) and create in the
	// operator's own namespace, from a Role there, so that the right stays
	// when cluster-wide Secret rights go (docs/security.md).
	var own []rbacv1.PolicyRule
	for _, rb := range b.RoleBindings {
		if rb.Namespace == d.Namespace && rb.RoleRef.Kind == "Role" && slices.ContainsFunc(rb.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == d.Namespace
		}) {
			own = append(own, b.rulesOf(rb.Namespace, rb.RoleRef)...)
		}
	}
	for _, verb := range []string{"get", "create"} {
		if !allows(own, "", "secrets", verb) {
			errs = append(errs, fmt.Errorf("ServiceAccount %s/%s may not %s its ownership key Secret through a Role in %s", d.Namespace, sa, verb, d.Namespace))
		}
	}
	for _, verb := range []string{"list", "watch"} {
		if allows(own, "", "secrets", verb) {
			errs = append(errs, fmt.Errorf("ServiceAccount %s/%s may %s Secrets in %s: the ownership key needs get by name only", d.Namespace, sa, verb, d.Namespace))
		}
	}
	if !slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
	}) {
		errs = append(errs, errors.New("the operator's container lacks POD_NAMESPACE from the downward API: it would not find its ownership key Secret"))
	}
	return errors.Join(errs...)
}

// checkNoClusterSecretReads: the operator's ServiceAccount may not list or
// watch Secrets through a ClusterRoleBinding. Either right is the right to
// read every Secret of the cluster (RBAC cannot filter by label); the
// operator reads only the credentials Secrets it created, by name
// (docs/security.md, RBAC; #12 item 10).
func checkNoClusterSecretReads(b *bundle) error {
	d, _, err := operator(b)
	if err != nil {
		return err
	}
	sa := d.Spec.Template.Spec.ServiceAccountName
	var cluster []rbacv1.PolicyRule
	for _, crb := range b.ClusterRoleBindings {
		if slices.ContainsFunc(crb.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == d.Namespace
		}) {
			cluster = append(cluster, b.rulesOf("", crb.RoleRef)...)
		}
	}
	var errs []error
	for _, verb := range []string{"list", "watch"} {
		if allows(cluster, "", "secrets", verb) {
			errs = append(errs, fmt.Errorf("ServiceAccount %s/%s may %s Secrets in every namespace", d.Namespace, sa, verb))
		}
	}
	return errors.Join(errs...)
}

// checkNoClusterSecretRights: in the default install nothing bound
// cluster-wide grants any verb on Secrets. Every right on Secrets is held in
// a namespace: those the operator serves (namespace-role), the kubernetes
// provider's pods namespace, the operator's own (docs/security.md, RBAC;
// #12 item 10). get, create, update or patch in every namespace would each
// be the right to read any Secret whose name is known (a patch answers
// with the whole object).
func checkNoClusterSecretRights(b *bundle) error {
	d, _, err := operator(b)
	if err != nil {
		return err
	}
	sa := d.Spec.Template.Spec.ServiceAccountName
	var errs []error
	for _, crb := range b.ClusterRoleBindings {
		if !slices.ContainsFunc(crb.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == d.Namespace
		}) {
			continue
		}
		rules := b.rulesOf("", crb.RoleRef)
		for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
			if allows(rules, "", "secrets", verb) {
				errs = append(errs, fmt.Errorf("ServiceAccount %s/%s may %s Secrets in every namespace (ClusterRoleBinding %s, %s %s)",
					d.Namespace, sa, verb, crb.Name, crb.RoleRef.Kind, crb.RoleRef.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// checkServedNamespaces: the namespaces in the operator's --namespaces flag
// and the namespaces where namespace-role is bound to it are the same. A
// served namespace without the binding stops the operator at start (and
// would otherwise never sync its caches); a binding without the flag is a
// right nobody uses. Without --namespaces the operator serves every
// namespace and needs namespace-role bound cluster-wide
// (config/all-namespaces).
func checkServedNamespaces(b *bundle) error {
	d, c, err := operator(b)
	if err != nil {
		return err
	}
	served, err := setup.ParseNamespaces(flagValue(c.Args, "namespaces", ""))
	if err != nil {
		return fmt.Errorf("--namespaces: %w", err)
	}
	sa := d.Spec.Template.Spec.ServiceAccountName
	isOperator := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == d.Namespace
		})
	}
	isNamespaceRole := func(ref rbacv1.RoleRef) bool {
		return ref.Kind == "ClusterRole" && strings.HasSuffix(ref.Name, setup.NamespaceRole)
	}
	var clusterWide []string
	for _, crb := range b.ClusterRoleBindings {
		if isOperator(crb.Subjects) && isNamespaceRole(crb.RoleRef) {
			clusterWide = append(clusterWide, crb.Name)
		}
	}
	bound := map[string]bool{}
	for _, rb := range b.RoleBindings {
		if isOperator(rb.Subjects) && isNamespaceRole(rb.RoleRef) {
			bound[rb.Namespace] = true
		}
	}
	var errs []error
	if len(served) == 0 {
		if len(clusterWide) == 0 {
			errs = append(errs, fmt.Errorf("no --namespaces: the operator serves every namespace, but no ClusterRoleBinding gives it %s", setup.NamespaceRole))
		}
		return errors.Join(errs...)
	}
	if len(clusterWide) > 0 {
		errs = append(errs, fmt.Errorf("--namespaces=%s, yet ClusterRoleBinding %s binds %s in every namespace",
			strings.Join(served, ","), strings.Join(clusterWide, ", "), setup.NamespaceRole))
	}
	for _, ns := range served {
		if !bound[ns] {
			errs = append(errs, fmt.Errorf("namespace %s is served (--namespaces) but has no RoleBinding of %s", ns, setup.NamespaceRole))
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(bound)) {
		if !slices.Contains(served, ns) {
			errs = append(errs, fmt.Errorf("namespace %s has a RoleBinding of %s but is not in --namespaces=%s", ns, setup.NamespaceRole, strings.Join(served, ",")))
		}
	}
	return errors.Join(errs...)
}

// checkCRDs: the render installs the API's CRDs.
func checkCRDs(b *bundle) error {
	var errs []error
	for _, want := range []string{"proxies.crawl.example.com", "providerhealths.crawl.example.com"} {
		if !slices.ContainsFunc(b.CRDs, func(c *apiextensionsv1.CustomResourceDefinition) bool { return c.Name == want }) {
			errs = append(errs, fmt.Errorf("CRD %s is not in the render", want))
		}
	}
	return errors.Join(errs...)
}

// checkSpecPolicy: the admission policy that keeps gateway-ban-editor to
// spec.bans is bound (its binding names it, and denies) and matches updates
// of ProxyGateways; the verb it asks for is granted by proxygateway-editor
// and not by gateway-ban-editor.
func checkSpecPolicy(b *bundle) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	const name = "egress-proxies-operator-proxygateway-spec"
	i := slices.IndexFunc(b.Policies, func(p *admissionregistrationv1.ValidatingAdmissionPolicy) bool { return p.Name == name })
	if i < 0 {
		return fmt.Errorf("ValidatingAdmissionPolicy %s is not in the render", name)
	}
	p := b.Policies[i]
	if m := p.Spec.MatchConstraints; m == nil || !slices.ContainsFunc(m.ResourceRules, func(r admissionregistrationv1.NamedRuleWithOperations) bool {
		return slices.Contains(r.APIGroups, crawlv1alpha1.GroupVersion.Group) && slices.Contains(r.Resources, "proxygateways") &&
			slices.Contains(r.Operations, admissionregistrationv1.Update)
	}) {
		fail("policy %s does not match updates of proxygateways", name)
	}
	if !slices.ContainsFunc(b.PolicyBindings, func(pb *admissionregistrationv1.ValidatingAdmissionPolicyBinding) bool {
		return pb.Spec.PolicyName == name && slices.Contains(pb.Spec.ValidationActions, admissionregistrationv1.Deny)
	}) {
		fail("no binding denies by policy %s", name)
	}
	grants := func(role string) bool {
		for _, r := range b.ClusterRoles {
			if r.Name == role {
				return slices.ContainsFunc(r.Rules, func(rule rbacv1.PolicyRule) bool {
					return slices.Contains(rule.Resources, "proxygateways") && slices.Contains(rule.Verbs, "edit-spec")
				})
			}
		}
		fail("ClusterRole %s is not in the render", role)
		return false
	}
	if !grants("egress-proxies-operator-proxygateway-editor") {
		fail("ClusterRole egress-proxies-operator-proxygateway-editor does not grant edit-spec on proxygateways")
	}
	if grants("egress-proxies-operator-gateway-ban-editor") {
		fail("ClusterRole egress-proxies-operator-gateway-ban-editor grants edit-spec: it may change the whole spec")
	}
	return errors.Join(errs...)
}
