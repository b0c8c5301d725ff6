package controller

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
)

// DefaultPoolResyncInterval is how often a pool is looked at without a
// change of its members.
const DefaultPoolResyncInterval = time.Minute

// Event reasons on ProxyPools.
const (
	eventMemberCreated        = "MemberCreated"
	eventMemberDeleted        = "MemberDeleted"
	eventPoolInvalidSpec      = "InvalidSpec"
	eventInvalidRotation      = "InvalidRotationRequest"
	eventRotationRequested    = "RotationRequested"
	eventDuplicateEgress      = "DuplicateEgress"
	eventPublishedListUpdated = "PublishedListUpdated"
)

// ProxyPoolReconciler keeps each ProxyPool's members, rotates them and
// publishes the list of Serving ones.
type ProxyPoolReconciler struct {
	// Client reads and writes Kubernetes objects (the manager's client).
	Client client.Client
	// APIReader reads Secrets (the members' credentials, the pool's list)
	// by name from the API server: the operator has no right to cache
	// Secrets (docs/security.md, RBAC). Nil reads them through Client.
	APIReader client.Reader
	// Recorder emits events on pools.
	Recorder events.EventRecorder
	// Config is the providers configuration; templates are checked
	// against it before anything is created.
	Config *config.Config
	// Metrics records pool sizes and rotations; nil records nothing.
	Metrics *metrics.Metrics
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// ResyncInterval is how often a pool is looked at when nothing
	// changes; zero means DefaultPoolResyncInterval.
	ResyncInterval time.Duration

	skipNameValidation bool

	mu sync.Mutex
	// pending are rotations started and not yet written to a pool's
	// status.rotations (its status patch conflicted), by pool.
	pending map[types.NamespacedName]int64
	// serials are the pools' next member serials as this process knows
	// them, ahead of a status write that has not landed.
	serials map[types.NamespacedName]int
	// expected are the members this process created and its cache has not
	// shown yet, by pool, with the time after which to stop waiting.
	expected map[types.NamespacedName]map[string]time.Time
}

// expectationMaxWait is how long a pool waits for its cache to show a member
// it created before it plans without it.
const expectationMaxWait = 30 * time.Second

// waitingForCache reports whether members this process created are not yet
// in the cache's list: planning from such a list would create them again.
func (r *ProxyPoolReconciler) waitingForCache(key types.NamespacedName, proxies []crawlv1alpha1.Proxy, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	exp := r.expected[key]
	for _, p := range proxies {
		delete(exp, p.Name)
	}
	for name, deadline := range exp {
		if now.After(deadline) {
			delete(exp, name)
		}
	}
	return len(exp) > 0
}

// expectCreated records a member created by this process.
func (r *ProxyPoolReconciler) expectCreated(key types.NamespacedName, name string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.expected == nil {
		r.expected = map[types.NamespacedName]map[string]time.Time{}
	}
	if r.expected[key] == nil {
		r.expected[key] = map[string]time.Time{}
	}
	r.expected[key][name] = now.Add(expectationMaxWait)
}

// nextSerial returns the pool's next member serial: the status's, or this
// process's when it is ahead.
func (r *ProxyPoolReconciler) nextSerial(key types.NamespacedName, status int64, used int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.serials == nil {
		r.serials = map[types.NamespacedName]int{}
	}
	r.serials[key] = max(r.serials[key], int(status), used)
	return r.serials[key]
}

// pendingRotations adds the rotations just started to the pool's pending
// count and returns the count.
func (r *ProxyPoolReconciler) pendingRotations(key types.NamespacedName, done map[string]int) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[types.NamespacedName]int64{}
	}
	for _, n := range done {
		r.pending[key] += int64(n)
	}
	return r.pending[key]
}

// Rights in the namespaces the operator serves (see ProxyReconciler).
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxypools,verbs=get;list;watch;update;patch,roleName=namespace-role
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxypools/status,verbs=get;update;patch,roleName=namespace-role
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxypools/finalizers,verbs=update,roleName=namespace-role
// +kubebuilder:rbac:groups=crawl.example.com,resources=proxies,verbs=create;delete,roleName=namespace-role
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch,roleName=namespace-role

// SetupWithManager registers the reconciler: it watches pools, their
// members (status changes included: a member that starts or stops serving
// changes the list) and the list ConfigMaps it owns. It does not watch its
// list Secrets (that would take the right to list and watch every Secret):
// an edited or deleted one is rewritten at the pool's next resync.
func (r *ProxyPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.defaults()
	return ctrl.NewControllerManagedBy(mgr).
		For(&crawlv1alpha1.ProxyPool{}).
		Owns(&crawlv1alpha1.Proxy{}).
		Owns(&corev1.ConfigMap{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: &r.skipNameValidation}).
		Named("proxypool").
		Complete(r)
}

// defaults fills in the zero options, once, when the reconciler is set up.
func (r *ProxyPoolReconciler) defaults() {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.ResyncInterval == 0 {
		r.ResyncInterval = DefaultPoolResyncInterval
	}
}

// Reconcile moves one pool one step: it marks members for a requested
// rotation, publishes the list, creates and deletes members as planned, and
// patches the status once.
func (r *ProxyPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pool crawlv1alpha1.ProxyPool
	if err := r.Client.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetMetrics(req.Namespace, req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting proxy pool: %w", err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		// The members, Secret and ConfigMap go with the pool through their
		// owner references.
		return ctrl.Result{}, nil
	}
	before := pool.DeepCopy()
	now := r.Now()

	proxies, err := r.members(ctx, &pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	obs := poolObservation{generation: pool.Generation, desired: replicasOf(&pool), selector: poolSelector(&pool)}
	placements, weights := resolvedPlacements(&pool)
	obs.specErr = r.checkSpec(&pool, placements)

	targets, annErr := parseRotateAnnotation(pool.Annotations, proxies)
	obs.annotationErr = annErr
	if annErr != nil {
		if c := apimeta.FindStatusCondition(pool.Status.Conditions, crawlv1alpha1.ConditionRotating); c == nil || c.Reason != crawlv1alpha1.ReasonInvalidRotationRequest {
			r.event(&pool, corev1.EventTypeWarning, eventInvalidRotation, "Rotate", "%v", annErr)
		}
	}
	if targets != nil && obs.specErr == nil {
		if err := r.markForRotation(ctx, &pool, proxies, targets, now); err != nil {
			return ctrl.Result{}, err
		}
		// Our own annotation patch moved the resourceVersion; the status
		// patch below must not conflict with it.
		before.ResourceVersion = pool.ResourceVersion
	}

	members := make([]poolMember, 0, len(proxies))
	for i := range proxies {
		members = append(members, memberOf(&proxies[i]))
	}
	obs.members = members

	var plan poolPlan
	if obs.specErr == nil {
		slots := make([]slotPlacement, 0, obs.desired)
		for _, idx := range spreadSlots(weights, int(obs.desired)) {
			pl := placements[idx]
			slots = append(slots, slotPlacement{provider: pl.Provider, zone: pl.Zone, hash: r.templateHash(&pool, pl)})
		}
		surge, unavailable := rotationBudgets(&pool)
		var maxAge time.Duration
		if rot := pool.Spec.Rotation; rot != nil && rot.MaxAge != nil {
			maxAge = rot.MaxAge.Duration
		}
		plan = planPool(planInput{slots: slots, members: members, now: now, maxAge: maxAge, maxSurge: surge, maxUnavailable: unavailable,
			nextSerial: r.nextSerial(req.NamespacedName, pool.Status.NextMemberSerial, 0)})
		if r.waitingForCache(req.NamespacedName, proxies, now) {
			// Keep the list and status current, change nothing else.
			plan = poolPlan{rotating: plan.rotating, waiting: plan.waiting, recheck: cacheDelay}
		}
		obs.plan = plan
		obs.nextSerial = int64(r.nextSerial(req.NamespacedName, pool.Status.NextMemberSerial, plan.nextSerial))
	} else if c := apimeta.FindStatusCondition(pool.Status.Conditions, crawlv1alpha1.ConditionReady); c == nil || c.Reason != crawlv1alpha1.ReasonPoolInvalidSpec {
		r.event(&pool, corev1.EventTypeWarning, eventPoolInvalidSpec, "Resolve", "%v", obs.specErr)
	}

	// The list goes first: a member about to be deleted leaves it before
	// its instance goes away.
	leaving := map[string]bool{}
	for _, d := range plan.deletes {
		leaving[d.name] = true
	}
	listed, requeueList, err := r.publish(ctx, &pool, proxies, leaving)
	if err != nil {
		return ctrl.Result{}, err
	}
	obs.listed = listed

	done, err := r.carryOut(ctx, &pool, placements, plan)
	if err != nil {
		return ctrl.Result{}, err
	}
	for reason, n := range done {
		if r.Metrics != nil {
			r.Metrics.PoolRotations.WithLabelValues(pool.Namespace, pool.Name, reason).Add(float64(n))
		}
	}
	obs.rotationsStarted = r.pendingRotations(req.NamespacedName, done)

	pool.Status = computePoolStatus(pool.Status, obs, now)
	r.announce(&pool, before)
	if r.Metrics != nil {
		r.Metrics.PoolMembers.WithLabelValues(pool.Namespace, pool.Name).Set(float64(pool.Status.Replicas))
		r.Metrics.PoolServing.WithLabelValues(pool.Namespace, pool.Name).Set(float64(pool.Status.Serving))
	}
	if !equality.Semantic.DeepEqual(before.Status, pool.Status) {
		if err := r.Client.Status().Patch(ctx, &pool, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: cacheDelay}, nil
			}
			return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("patching pool status: %w", err))
		}
	}
	// The rotations are in status.rotations now.
	r.mu.Lock()
	delete(r.pending, req.NamespacedName)
	r.mu.Unlock()

	after := r.ResyncInterval
	if plan.recheck > 0 {
		after = min(after, plan.recheck)
	}
	if requeueList {
		after = min(after, time.Second)
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// members lists the Proxies this pool controls.
func (r *ProxyPoolReconciler) members(ctx context.Context, pool *crawlv1alpha1.ProxyPool) ([]crawlv1alpha1.Proxy, error) {
	var list crawlv1alpha1.ProxyList
	if err := r.Client.List(ctx, &list, client.InNamespace(pool.Namespace), client.MatchingLabels{crawlv1alpha1.LabelPool: pool.Name}); err != nil {
		return nil, fmt.Errorf("listing pool members: %w", err)
	}
	out := list.Items[:0]
	for _, p := range list.Items {
		if metav1.IsControlledBy(&p, pool) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b crawlv1alpha1.Proxy) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// checkSpec resolves every placement against the configuration, so that a
// template naming an unknown provider or zone creates nothing.
func (r *ProxyPoolReconciler) checkSpec(pool *crawlv1alpha1.ProxyPool, placements []crawlv1alpha1.PlacementEntry) error {
	tpl := pool.Spec.Template.Spec
	var errs []error
	for i, pl := range placements {
		pld, err := r.Config.Resolve(pl.Provider, pl.Zone, tpl.MachineType, tpl.Image)
		if err == nil {
			err = pld.Entry.CheckExtraUserData(tpl.ExtraUserData)
		}
		if err != nil {
			where := "template"
			if len(pool.Spec.Placement) > 0 {
				where = fmt.Sprintf("placement[%d]", i)
			}
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
	}
	return errors.Join(errs...)
}

// carryOut creates and deletes members as planned. Creating a member that
// exists already is not an error: its name is deterministic.
func (r *ProxyPoolReconciler) carryOut(ctx context.Context, pool *crawlv1alpha1.ProxyPool, placements []crawlv1alpha1.PlacementEntry, plan poolPlan) (map[string]int, error) {
	done := map[string]int{}
	_, weights := resolvedPlacements(pool)
	spread := spreadSlots(weights, int(replicasOf(pool)))
	for _, c := range plan.creates {
		pl := placements[spread[c.slot]]
		p, err := r.newMember(pool, pl, c.slot, c.gen)
		if err != nil {
			return done, err
		}
		err = r.Client.Create(ctx, p)
		if err == nil || apierrors.IsAlreadyExists(err) {
			r.expectCreated(client.ObjectKeyFromObject(pool), p.Name, r.Now())
		}
		if err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return done, fmt.Errorf("creating pool member %s: %w", p.Name, err)
		}
		if c.reason != "" {
			done[c.reason]++
		}
		why := "to fill slot " + strconv.Itoa(c.slot)
		if c.reason != "" {
			why = "to rotate slot " + strconv.Itoa(c.slot) + " (" + c.reason + ")"
		}
		ctrl.LoggerFrom(ctx).Info("pool member created", "member", p.Name, "slot", c.slot, "reason", c.reason)
		r.event(pool, corev1.EventTypeNormal, eventMemberCreated, "Scale", "Created member %s on %s/%s %s", p.Name, pl.Provider, pl.Zone, why)
	}
	for _, d := range plan.deletes {
		p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: pool.Namespace, Name: d.name}}
		err := r.Client.Delete(ctx, p)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return done, fmt.Errorf("deleting pool member %s: %w", d.name, err)
		case d.reason != deletionScaleDown && d.reason != deletionReplaced:
			done[d.reason]++
		}
		ctrl.LoggerFrom(ctx).Info("pool member deleted", "member", d.name, "reason", d.reason)
		r.event(pool, corev1.EventTypeNormal, eventMemberDeleted, "Scale", "Deleted member %s (%s)", d.name, d.reason)
	}
	return done, nil
}

// newMember builds the Proxy of a slot and generation.
func (r *ProxyPoolReconciler) newMember(pool *crawlv1alpha1.ProxyPool, pl crawlv1alpha1.PlacementEntry, slot, serial int) (*crawlv1alpha1.Proxy, error) {
	tpl := pool.Spec.Template
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   pool.Namespace,
			Name:        memberName(pool.Name, string(pool.UID), serial),
			Labels:      maps.Clone(tpl.Metadata.Labels),
			Annotations: maps.Clone(tpl.Metadata.Annotations),
		},
		Spec: *tpl.Spec.DeepCopy(),
	}
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[crawlv1alpha1.LabelPool] = pool.Name
	p.Labels[crawlv1alpha1.LabelPoolSlot] = strconv.Itoa(slot)
	p.Labels[crawlv1alpha1.LabelPoolGeneration] = strconv.Itoa(serial)
	p.Labels[crawlv1alpha1.LabelTemplateHash] = r.templateHash(pool, pl)
	delete(p.Annotations, crawlv1alpha1.AnnotationRotationRequested)
	p.Spec.Provider, p.Spec.Zone = pl.Provider, pl.Zone
	if err := controllerutil.SetControllerReference(pool, p, r.Client.Scheme()); err != nil {
		return nil, fmt.Errorf("owning member %s: %w", p.Name, err)
	}
	return p, nil
}

// markForRotation annotates the members named by the rotate annotation and
// then removes the annotation, so that the request survives a restart
// between the two and is acted on once.
func (r *ProxyPoolReconciler) markForRotation(ctx context.Context, pool *crawlv1alpha1.ProxyPool, proxies []crawlv1alpha1.Proxy, targets map[string]bool, now time.Time) error {
	for i := range proxies {
		p := &proxies[i]
		if !targets[p.Name] || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if _, marked := p.Annotations[crawlv1alpha1.AnnotationRotationRequested]; marked {
			continue
		}
		patch := client.MergeFrom(p.DeepCopy())
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[crawlv1alpha1.AnnotationRotationRequested] = now.UTC().Format(time.RFC3339)
		if err := client.IgnoreNotFound(r.Client.Patch(ctx, p, patch)); err != nil {
			return fmt.Errorf("marking member %s for rotation: %w", p.Name, err)
		}
	}
	r.event(pool, corev1.EventTypeNormal, eventRotationRequested, "Rotate", "Rotating %d member(s) as asked by the %s annotation", len(targets), crawlv1alpha1.AnnotationRotate)
	patch := client.MergeFrom(pool.DeepCopy())
	delete(pool.Annotations, crawlv1alpha1.AnnotationRotate)
	if err := r.Client.Patch(ctx, pool, patch); err != nil {
		return fmt.Errorf("removing the rotate annotation: %w", err)
	}
	return nil
}

// parseRotateAnnotation reads AnnotationRotate: nil without it; every
// member for "all"; otherwise the named members, each of which must exist.
func parseRotateAnnotation(annotations map[string]string, proxies []crawlv1alpha1.Proxy) (map[string]bool, error) {
	v, ok := annotations[crawlv1alpha1.AnnotationRotate]
	if !ok {
		return nil, nil
	}
	existing := map[string]bool{}
	for _, p := range proxies {
		if p.DeletionTimestamp.IsZero() {
			existing[p.Name] = true
		}
	}
	v = strings.TrimSpace(v)
	if v == "all" {
		return existing, nil
	}
	if v == "" {
		return nil, fmt.Errorf("annotation %s is empty: set it to \"all\" or to a comma-separated list of member names", crawlv1alpha1.AnnotationRotate)
	}
	targets := map[string]bool{}
	var bad, unknown []string
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		switch {
		case len(validation.IsDNS1123Subdomain(name)) > 0:
			bad = append(bad, strconv.Quote(name))
		case !existing[name]:
			unknown = append(unknown, name)
		default:
			targets[name] = true
		}
	}
	switch {
	case len(bad) > 0:
		return nil, fmt.Errorf("annotation %s: %s is not a member name; set it to \"all\" or to a comma-separated list of member names", crawlv1alpha1.AnnotationRotate, strings.Join(bad, ", "))
	case len(unknown) > 0:
		return nil, fmt.Errorf("annotation %s names %s, which is not a member of this pool (members: %s)", crawlv1alpha1.AnnotationRotate,
			strings.Join(unknown, ", "), strings.Join(slices.Sorted(maps.Keys(existing)), ", "))
	}
	return targets, nil
}

// memberOf summarises a member Proxy for the plan.
func memberOf(p *crawlv1alpha1.Proxy) poolMember {
	slot, errSlot := strconv.Atoi(p.Labels[crawlv1alpha1.LabelPoolSlot])
	gen, errGen := strconv.Atoi(p.Labels[crawlv1alpha1.LabelPoolGeneration])
	if errSlot != nil || errGen != nil {
		// Someone edited the labels: a slot outside the pool, so that the
		// member is deleted and the slot filled again.
		slot, gen = -1, 0
	}
	m := poolMember{
		name: p.Name, slot: slot, gen: gen, hash: p.Labels[crawlv1alpha1.LabelTemplateHash],
		created: p.CreationTimestamp.Time, deleting: !p.DeletionTimestamp.IsZero(),
		ready:  apimeta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionReady),
		failed: p.Status.Phase == crawlv1alpha1.ProxyPhaseFailed,
	}
	_, m.rotationRequested = p.Annotations[crawlv1alpha1.AnnotationRotationRequested]
	m.serving = isServing(p)
	if c := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionServing); c != nil && c.Reason == crawlv1alpha1.ReasonProbeFailed {
		m.probeFailed = true
	}
	return m
}

// isServing reports whether a member belongs in the published list.
func isServing(p *crawlv1alpha1.Proxy) bool {
	return p.DeletionTimestamp.IsZero() && p.Status.Phase == crawlv1alpha1.ProxyPhaseReady && p.Status.Address != "" &&
		apimeta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionServing)
}

// templateHash is a short hash of what a member of placement pl is made
// from; a member with another hash is rotated. The entry's egress policy is
// part of it: a member made under an older policy is rotated too. (The
// default policy adds nothing, so that hashes made before it counted stay.)
func (r *ProxyPoolReconciler) templateHash(pool *crawlv1alpha1.ProxyPool, pl crawlv1alpha1.PlacementEntry) string {
	spec := pool.Spec.Template.Spec.DeepCopy()
	spec.Provider, spec.Zone = pl.Provider, pl.Zone
	var egress *config.EgressPolicy
	if e := r.Config.Entry(pl.Provider); e != nil && !e.EgressPolicy.IsZero() {
		egress = &e.EgressPolicy
	}
	b, _ := json.Marshal(struct { //nolint:errchkjson // plain structs of strings and maps always marshal.
		Meta   crawlv1alpha1.ProxyTemplateMetadata
		Spec   *crawlv1alpha1.ProxySpec
		Egress *config.EgressPolicy `json:",omitempty"`
	}{pool.Spec.Template.Metadata, spec, egress})
	h := fnv.New32a()
	_, _ = h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// replicasOf is spec.replicas with its default.
func replicasOf(pool *crawlv1alpha1.ProxyPool) int32 {
	if pool.Spec.Replicas == nil {
		return 1
	}
	return *pool.Spec.Replicas
}

// rotationBudgets are maxSurge (default 1, rounded up) and maxUnavailable
// (default 0, rounded down) as numbers of members.
func rotationBudgets(pool *crawlv1alpha1.ProxyPool) (int, int) {
	surge, unavailable := intstr.FromInt32(1), intstr.FromInt32(0)
	if rot := pool.Spec.Rotation; rot != nil {
		if rot.MaxSurge != nil {
			surge = *rot.MaxSurge
		}
		if rot.MaxUnavailable != nil {
			unavailable = *rot.MaxUnavailable
		}
	}
	n := int(replicasOf(pool))
	s, errS := intstr.GetScaledValueFromIntOrPercent(&surge, n, true)
	u, errU := intstr.GetScaledValueFromIntOrPercent(&unavailable, n, false)
	if errS != nil {
		s = 1
	}
	if errU != nil {
		u = 0
	}
	if s == 0 && u == 0 {
		// Admission refuses this; a percentage of a small pool can still
		// round to it. One surge member keeps rotations moving.
		s = 1
	}
	return s, u
}

// poolSelector is status.selector: the members' label selector.
func poolSelector(pool *crawlv1alpha1.ProxyPool) string {
	return labels.SelectorFromSet(labels.Set{crawlv1alpha1.LabelPool: pool.Name}).String()
}

// announce emits events for transitions of the pool's conditions.
func (r *ProxyPoolReconciler) announce(pool, before *crawlv1alpha1.ProxyPool) {
	was := apimeta.FindStatusCondition(before.Status.Conditions, crawlv1alpha1.ConditionEgressDistinct)
	now := apimeta.FindStatusCondition(pool.Status.Conditions, crawlv1alpha1.ConditionEgressDistinct)
	if now != nil && now.Reason == crawlv1alpha1.ReasonDuplicateEgress && (was == nil || was.Message != now.Message) {
		r.event(pool, corev1.EventTypeWarning, eventDuplicateEgress, "Probe", "%s", now.Message)
	}
}

// forgetMetrics drops a deleted pool's series.
func (r *ProxyPoolReconciler) forgetMetrics(namespace, name string) {
	if r.Metrics == nil {
		return
	}
	r.Metrics.PoolMembers.DeleteLabelValues(namespace, name)
	r.Metrics.PoolServing.DeleteLabelValues(namespace, name)
	r.Metrics.PoolRotations.DeletePartialMatch(map[string]string{"namespace": namespace, "pool": name})
}

// event emits an event on the pool.
func (r *ProxyPoolReconciler) event(pool *crawlv1alpha1.ProxyPool, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(pool, nil, eventType, reason, action, note, args...)
	}
}
