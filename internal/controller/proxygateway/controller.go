package proxygateway

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller/shared"
)

// Events on gateways.
const (
	eventGatewayReady    = "GatewayReady"
	eventGatewayNoMember = "NoMembers"
	eventGatewayConflict = "GatewayConflict"
	eventGatewayRefused  = "ApplyFailed"
)

// DefaultGatewayResyncInterval is how often a gateway is looked at without
// changes.
const DefaultGatewayResyncInterval = 5 * time.Minute

// Reconciler runs each ProxyGateway as a Deployment of the
// operator's own image (the gateway subcommand), with a Service, a
// PodDisruptionBudget, a ServiceAccount whose Role reads only the pools'
// published Secrets, and the gateway's credentials Secret.
type Reconciler struct {
	// Client reads through the cache (gateways, pools and the gateway's
	// own labelled objects) and writes.
	Client client.Client
	// APIReader reads Secrets, which are not cached.
	APIReader client.Reader
	// Recorder emits events on gateways.
	Recorder events.EventRecorder
	// Image is the operator's own image, which the gateway pods run.
	Image string
	// ResyncInterval: see DefaultGatewayResyncInterval.
	ResyncInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// SkipNameValidation allows several managers with this controller in
	// one process (controller.Options.SkipNameValidation); only tests need
	// it.
	SkipNameValidation bool
}

// +kubebuilder:rbac:groups=crawl.example.com,resources=proxygateways,verbs=get;list;watch,roleName=namespace-role
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxygateways/status,verbs=get;update;patch,roleName=namespace-role
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch,roleName=namespace-role
// +kubebuilder:rbac:groups="",resources=services;serviceaccounts,verbs=get;list;watch;create;update;patch,roleName=namespace-role
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch,roleName=namespace-role
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch,roleName=namespace-role
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch,roleName=namespace-role

// SetupWithManager registers the reconciler: it watches gateways, the
// objects they own (a Deployment's ready replicas change the status), and
// pools (their Serving count is the gateway's members).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.ResyncInterval == 0 {
		r.ResyncInterval = DefaultGatewayResyncInterval
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&crawlv1alpha1.ProxyGateway{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Watches(&crawlv1alpha1.ProxyPool{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysOfPool)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: &r.SkipNameValidation}).
		Named("proxygateway").
		Complete(r)
}

// gatewaysOfPool maps a pool to the gateways in its namespace that name it.
func (r *Reconciler) gatewaysOfPool(ctx context.Context, obj client.Object) []reconcile.Request {
	var list crawlv1alpha1.ProxyGatewayList
	if err := r.Client.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, gw := range list.Items {
		if slices.Contains(gw.Spec.Pools, obj.GetName()) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&gw)})
		}
	}
	return out
}

// Reconcile makes the gateway's objects match its spec and patches its
// status once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var gw crawlv1alpha1.ProxyGateway
	if err := r.Client.Get(ctx, req.NamespacedName, &gw); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !gw.DeletionTimestamp.IsZero() {
		// Its objects go with it, through their owner references.
		return ctrl.Result{}, nil
	}
	var obs gatewayObservation
	err := r.applyAll(ctx, &gw, &obs)
	var conflict *conflictError
	if errors.As(err, &conflict) {
		obs.conflict, err = conflict.Error(), nil
	}
	if errors.Is(err, errNotCached) {
		// Our own object, made moments ago: look again once the cache has
		// it, with no status written from a partial view.
		return ctrl.Result{RequeueAfter: shared.CacheDelay}, nil
	}
	// An object the API server refused (admission, quota, RBAC) is told in
	// status, with the API's words, and tried again with backoff: the
	// status is never left empty while the error goes only to the log.
	var refused apierrors.APIStatus
	if err != nil && (!errors.As(err, &refused) || apierrors.IsConflict(err)) {
		return ctrl.Result{}, err
	}
	applyErr := err
	if applyErr != nil {
		obs.refused = applyErr.Error()
	}
	if err := r.observePools(ctx, &gw, &obs); err != nil {
		return ctrl.Result{}, err
	}
	before := gw.Status.DeepCopy()
	st := computeGatewayStatus(&gw, obs, metav1.NewTime(r.Now()))
	if equality.Semantic.DeepEqual(before, &st) {
		if applyErr != nil {
			return ctrl.Result{}, applyErr
		}
		return ctrl.Result{RequeueAfter: r.ResyncInterval}, nil
	}
	patch := client.MergeFromWithOptions(gw.DeepCopy(), client.MergeFromWithOptimisticLock{})
	gw.Status = st
	if err := r.Client.Status().Patch(ctx, &gw, patch); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		return ctrl.Result{}, fmt.Errorf("patching the gateway status: %w", err)
	}
	r.announce(&gw, before, &st)
	if applyErr != nil {
		return ctrl.Result{}, applyErr
	}
	return ctrl.Result{RequeueAfter: r.ResyncInterval}, nil
}

// announce emits an event when the Ready condition changed reason.
func (r *Reconciler) announce(gw *crawlv1alpha1.ProxyGateway, before, after *crawlv1alpha1.ProxyGatewayStatus) {
	if r.Recorder == nil {
		return
	}
	was := apimeta.FindStatusCondition(before.Conditions, crawlv1alpha1.ConditionReady)
	now := apimeta.FindStatusCondition(after.Conditions, crawlv1alpha1.ConditionReady)
	if now == nil || (was != nil && was.Reason == now.Reason) {
		return
	}
	switch now.Reason {
	case crawlv1alpha1.ReasonGatewayReady:
		r.Recorder.Eventf(gw, nil, corev1.EventTypeNormal, eventGatewayReady, "Serve", "%s", now.Message)
	case crawlv1alpha1.ReasonNoMembers:
		r.Recorder.Eventf(gw, nil, corev1.EventTypeWarning, eventGatewayNoMember, "Serve", "%s", now.Message)
	case crawlv1alpha1.ReasonGatewayConflict:
		r.Recorder.Eventf(gw, nil, corev1.EventTypeWarning, eventGatewayConflict, "Apply", "%s", now.Message)
	case crawlv1alpha1.ReasonGatewayApplyFailed:
		r.Recorder.Eventf(gw, nil, corev1.EventTypeWarning, eventGatewayRefused, "Apply", "%s", now.Message)
	}
}

// observePools counts the Serving members of the gateway's pools.
func (r *Reconciler) observePools(ctx context.Context, gw *crawlv1alpha1.ProxyGateway, obs *gatewayObservation) error {
	for _, name := range gw.Spec.Pools {
		var pool crawlv1alpha1.ProxyPool
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: name}, &pool)
		switch {
		case apierrors.IsNotFound(err):
			obs.missingPools = append(obs.missingPools, name)
		case err != nil:
			return fmt.Errorf("reading pool %s: %w", name, err)
		default:
			obs.members += pool.Status.Serving
		}
	}
	return nil
}

// conflictError is an object the gateway needs that it does not control.
type conflictError struct{ kind, name string }

func (e *conflictError) Error() string {
	return fmt.Sprintf("%s %s exists and is not controlled by this gateway; the operator never changes it. Delete or rename it.", e.kind, e.name)
}

// errNotCached: a create found the name taken by an object this gateway
// controls that the cache has not shown yet (the reconcile before made it).
var errNotCached = errors.New("the gateway's own object is not in the cache yet")

// applyAll creates or updates the gateway's objects, in the order the pods
// need them.
func (r *Reconciler) applyAll(ctx context.Context, gw *crawlv1alpha1.ProxyGateway, obs *gatewayObservation) error {
	if !gatewayAuthNone(gw) {
		name, err := r.ensureGatewayCredentials(ctx, gw)
		if err != nil {
			return err
		}
		obs.credentialsSecret = name
	}
	sa, role, rb := gatewayServiceAccount(gw), gatewayRole(gw), gatewayRoleBinding(gw)
	svc, pdb, np, dep := gatewayService(gw), gatewayPDB(gw), gatewayNetworkPolicy(gw), gatewayDeployment(gw, r.Image)
	steps := []struct {
		kind    string
		obj     client.Object
		desired client.Object
		mutate  func() bool // copies the desired content into obj; reports a change
	}{
		{"ServiceAccount", &corev1.ServiceAccount{}, sa, func() bool { return false }},
		{"Role", &rbacv1.Role{}, role, nil},
		{"RoleBinding", &rbacv1.RoleBinding{}, rb, nil},
		{"Service", &corev1.Service{}, svc, nil},
		{"PodDisruptionBudget", &policyv1.PodDisruptionBudget{}, pdb, nil},
		// Before the pods, so that they never run unfenced.
		{"NetworkPolicy", &networkingv1.NetworkPolicy{}, np, nil},
		{"Deployment", &appsv1.Deployment{}, dep, nil},
	}
	for _, s := range steps {
		if s.desired == dep && r.Image == "" {
			// A Deployment without an image would be refused by the API
			// server in words that do not say what to do.
			obs.noImage = true
			continue
		}
		s.obj.SetNamespace(gw.Namespace)
		s.obj.SetName(s.desired.GetName())
		mutate := s.mutate
		if mutate == nil {
			mutate = func() bool { return copyGatewaySpec(s.obj, s.desired) }
		}
		if err := r.apply(ctx, gw, s.kind, s.obj, mutate); err != nil {
			return err
		}
		if d, ok := s.obj.(*appsv1.Deployment); ok {
			obs.deployment = d
		}
	}
	return nil
}

// copyGatewaySpec sets what the gateway decides of existing from desired,
// and reports whether that changed anything. Fields the API server fills in
// (a Service's cluster IP, a pod template's defaults) are left alone.
func copyGatewaySpec(existing, desired client.Object) bool {
	switch e := existing.(type) {
	case *rbacv1.Role:
		d, _ := desired.(*rbacv1.Role)
		if equality.Semantic.DeepEqual(e.Rules, d.Rules) {
			return false
		}
		e.Rules = d.Rules
	case *rbacv1.RoleBinding:
		d, _ := desired.(*rbacv1.RoleBinding)
		if equality.Semantic.DeepEqual(e.Subjects, d.Subjects) && e.RoleRef == d.RoleRef {
			return false
		}
		e.Subjects, e.RoleRef = d.Subjects, d.RoleRef
	case *corev1.Service:
		d, _ := desired.(*corev1.Service)
		if equality.Semantic.DeepDerivative(d.Spec, e.Spec) {
			return false
		}
		e.Spec.Type, e.Spec.Selector, e.Spec.Ports = d.Spec.Type, d.Spec.Selector, d.Spec.Ports
	case *policyv1.PodDisruptionBudget:
		d, _ := desired.(*policyv1.PodDisruptionBudget)
		if equality.Semantic.DeepDerivative(d.Spec, e.Spec) {
			return false
		}
		e.Spec = d.Spec
	case *networkingv1.NetworkPolicy:
		d, _ := desired.(*networkingv1.NetworkPolicy)
		if equality.Semantic.DeepDerivative(d.Spec, e.Spec) {
			return false
		}
		e.Spec = d.Spec
	case *appsv1.Deployment:
		d, _ := desired.(*appsv1.Deployment)
		if equality.Semantic.DeepDerivative(d.Spec, e.Spec) {
			return false
		}
		e.Spec.Replicas, e.Spec.Selector, e.Spec.Strategy, e.Spec.Template = d.Spec.Replicas, d.Spec.Selector, d.Spec.Strategy, d.Spec.Template
	}
	return true
}

// apply creates obj (named already) with mutate's content, or updates the
// existing one when mutate changes it. An object of that name that the
// gateway does not control is a *conflictError: it is never changed. The
// cache holds only labelled objects, so a foreign one is found when the
// create says it exists; so is one of ours that the cache has not seen yet
// (made by the reconcile just before, which the next one, woken by another
// of the objects it made, may follow closely on a loaded machine): the API
// server tells which (takenBy).
func (r *Reconciler) apply(ctx context.Context, gw *crawlv1alpha1.ProxyGateway, kind string, obj client.Object, mutate func() bool) error {
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	switch {
	case apierrors.IsNotFound(err):
		mutate()
		obj.SetLabels(gatewayLabels(gw))
		if err := controllerutil.SetControllerReference(gw, obj, r.Client.Scheme()); err != nil {
			return fmt.Errorf("owning the %s: %w", kind, err)
		}
		if err := r.Client.Create(ctx, obj); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return r.takenBy(ctx, gw, kind, obj)
			}
			return fmt.Errorf("creating the %s %s: %w", kind, obj.GetName(), err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading the %s %s: %w", kind, obj.GetName(), err)
	}
	if !metav1.IsControlledBy(obj, gw) {
		return &conflictError{kind: kind, name: obj.GetName()}
	}
	if !mutate() {
		return nil
	}
	if err := r.Client.Update(ctx, obj); err != nil {
		return fmt.Errorf("updating the %s %s: %w", kind, obj.GetName(), err)
	}
	return nil
}

// takenBy reads from the API server the object whose name a create of obj
// found taken: errNotCached when the gateway controls it, else a
// *conflictError. It reads into an empty object of obj's type, so that
// nothing of what the create set (the owner reference) survives a field the
// stored object lacks.
func (r *Reconciler) takenBy(ctx context.Context, gw *crawlv1alpha1.ProxyGateway, kind string, obj client.Object) error {
	live, ok := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
	if !ok || r.APIReader == nil {
		return &conflictError{kind: kind, name: obj.GetName()}
	}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		return fmt.Errorf("reading the %s %s, whose name is taken: %w", kind, obj.GetName(), err)
	}
	if !metav1.IsControlledBy(live, gw) {
		return &conflictError{kind: kind, name: obj.GetName()}
	}
	return errNotCached
}

// ensureGatewayCredentials creates the gateway's credentials Secret once
// (username, password and a ready-to-use url) and keeps its url current.
// It returns the Secret's name.
func (r *Reconciler) ensureGatewayCredentials(ctx context.Context, gw *crawlv1alpha1.ProxyGateway) (string, error) {
	name := gatewayCredentialsName(gw.Name)
	var s corev1.Secret
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: name}, &s)
	switch {
	case apierrors.IsNotFound(err):
		user, pass := shared.RandomCredentials()
		s = corev1.Secret{ObjectMeta: gatewayMeta(gw, name), Type: corev1.SecretTypeBasicAuth, Data: map[string][]byte{
			published.CredentialsKeyUsername: []byte(user), published.CredentialsKeyPassword: []byte(pass), published.CredentialsKeyURL: []byte(gatewayEndpoint(gw, user, pass)),
		}}
		if err := controllerutil.SetControllerReference(gw, &s, r.Client.Scheme()); err != nil {
			return "", fmt.Errorf("owning the credentials secret: %w", err)
		}
		if err := r.Client.Create(ctx, &s); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return "", &conflictError{kind: "Secret", name: name}
			}
			return "", fmt.Errorf("creating the credentials secret %s: %w", name, err)
		}
		return name, nil
	case err != nil:
		return "", fmt.Errorf("reading the credentials secret %s: %w", name, err)
	}
	if !metav1.IsControlledBy(&s, gw) {
		return "", &conflictError{kind: "Secret", name: name}
	}
	user, pass := string(s.Data[published.CredentialsKeyUsername]), string(s.Data[published.CredentialsKeyPassword])
	if user == "" || pass == "" {
		return "", &conflictError{kind: "Secret", name: name + " (without username or password)"}
	}
	if want := gatewayEndpoint(gw, user, pass); string(s.Data[published.CredentialsKeyURL]) != want {
		s.Data[published.CredentialsKeyURL] = []byte(want)
		if err := r.Client.Update(ctx, &s); err != nil {
			return "", fmt.Errorf("updating the credentials secret %s: %w", name, err)
		}
	}
	return name, nil
}
