package proxypool

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller/shared"
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

// Reconciler keeps each ProxyPool's members, rotates them and
// publishes the list of Serving ones.
type Reconciler struct {
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
	// Engines are the forward proxies the entries' instances run, by entry
	// name (controller.Options.Engines).
	Engines map[string]string
	// Metrics records pool sizes and rotations; nil records nothing.
	Metrics *metrics.Metrics
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// ResyncInterval is how often a pool is looked at when nothing
	// changes; zero means DefaultPoolResyncInterval.
	ResyncInterval time.Duration

	// SkipNameValidation allows several managers with this controller in
	// one process (controller.Options.SkipNameValidation); only tests need
	// it.
	SkipNameValidation bool

	// memory is what this process knows of each pool ahead of its cache
	// and status; a deleted pool's is forgotten.
	memory poolMemory
}

// Rights in the namespaces the operator serves (see controller.ProxyReconciler).
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
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.defaults()
	return ctrl.NewControllerManagedBy(mgr).
		For(&crawlv1alpha1.ProxyPool{}).
		Owns(&crawlv1alpha1.Proxy{}).
		Owns(&corev1.ConfigMap{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: &r.SkipNameValidation}).
		Named("proxypool").
		Complete(r)
}

// defaults fills in the zero options, once, when the reconciler is set up.
func (r *Reconciler) defaults() {
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
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pool crawlv1alpha1.ProxyPool
	if err := r.Client.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
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
	placements, slots := poolSlots(&pool)
	// The entry's egress policy is part of what a member is made from: a
	// member made under an older policy is rotated. (The default policy
	// adds nothing, so that hashes made before it counted stay.)
	for i := range slots {
		if e := r.Config.Entry(slots[i].entry.Provider); e != nil && !e.EgressPolicy.IsZero() {
			h := fnv.New32a()
			_, _ = h.Write(append([]byte(slots[i].hash), shared.PolicyBytes(e.EgressPolicy)...))
			slots[i].hash = hex.EncodeToString(h.Sum(nil))
		}
	}
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
		surge, unavailable := rotationBudgets(&pool)
		var maxAge time.Duration
		if rot := pool.Spec.Rotation; rot != nil && rot.MaxAge != nil {
			maxAge = rot.MaxAge.Duration
		}
		plan = planPool(planInput{slots: slots, members: members, now: now, maxAge: maxAge, maxSurge: surge, maxUnavailable: unavailable,
			nextSerial: r.memory.nextSerial(req.NamespacedName, pool.Status.NextMemberSerial, 0)})
		if r.memory.waitingForCache(req.NamespacedName, memberNames(proxies), now) {
			// Keep the list and status current, change nothing else.
			plan = poolPlan{rotating: plan.rotating, waiting: plan.waiting, recheck: shared.CacheDelay}
		}
		obs.plan = plan
		obs.nextSerial = int64(r.memory.nextSerial(req.NamespacedName, pool.Status.NextMemberSerial, plan.nextSerial))
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
	obs.listed, obs.listName = listed, published.ListName(pool.Name)

	done, err := r.carryOut(ctx, &pool, plan)
	if err != nil {
		return ctrl.Result{}, err
	}
	for reason, n := range done {
		if r.Metrics != nil {
			r.Metrics.PoolRotations.WithLabelValues(pool.Namespace, pool.Name, reason).Add(float64(n))
		}
	}
	obs.rotationsStarted = r.memory.addPending(req.NamespacedName, done)

	pool.Status = computePoolStatus(pool.Status, obs, now)
	r.announce(&pool, before)
	if r.Metrics != nil {
		r.Metrics.PoolMembers.WithLabelValues(pool.Namespace, pool.Name).Set(float64(pool.Status.Replicas))
		r.Metrics.PoolServing.WithLabelValues(pool.Namespace, pool.Name).Set(float64(pool.Status.Serving))
	}
	if !equality.Semantic.DeepEqual(before.Status, pool.Status) {
		if err := r.Client.Status().Patch(ctx, &pool, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: shared.CacheDelay}, nil
			}
			return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("patching pool status: %w", err))
		}
	}
	// The rotations are in status.rotations now.
	r.memory.written(req.NamespacedName)

	after := r.ResyncInterval
	if plan.recheck > 0 {
		after = min(after, plan.recheck)
	}
	if requeueList {
		after = min(after, time.Second)
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// checkSpec resolves every placement against the configuration, so that a
// template naming an unknown provider or zone creates nothing.
func (r *Reconciler) checkSpec(pool *crawlv1alpha1.ProxyPool, placements []crawlv1alpha1.PlacementEntry) error {
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
func (r *Reconciler) carryOut(ctx context.Context, pool *crawlv1alpha1.ProxyPool, plan poolPlan) (map[string]int, error) {
	done := map[string]int{}
	for _, c := range plan.creates {
		pl := c.placement.entry
		p, err := r.newMember(pool, c)
		if err != nil {
			return done, err
		}
		err = r.Client.Create(ctx, p)
		if err == nil || apierrors.IsAlreadyExists(err) {
			r.memory.expectCreated(client.ObjectKeyFromObject(pool), p.Name, r.Now())
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

// announce emits events for transitions of the pool's conditions.
func (r *Reconciler) announce(pool, before *crawlv1alpha1.ProxyPool) {
	was := apimeta.FindStatusCondition(before.Status.Conditions, crawlv1alpha1.ConditionEgressDistinct)
	now := apimeta.FindStatusCondition(pool.Status.Conditions, crawlv1alpha1.ConditionEgressDistinct)
	if now != nil && now.Reason == crawlv1alpha1.ReasonDuplicateEgress && (was == nil || was.Message != now.Message) {
		r.event(pool, corev1.EventTypeWarning, eventDuplicateEgress, "Probe", "%s", now.Message)
	}
}

// forget drops what this process keeps of a deleted pool: its memory and
// its metric series.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.memory.forget(key)
	if r.Metrics == nil {
		return
	}
	r.Metrics.PoolMembers.DeleteLabelValues(key.Namespace, key.Name)
	r.Metrics.PoolServing.DeleteLabelValues(key.Namespace, key.Name)
	r.Metrics.PoolRotations.DeletePartialMatch(map[string]string{"namespace": key.Namespace, "pool": key.Name})
}

// event emits an event on the pool.
func (r *Reconciler) event(pool *crawlv1alpha1.ProxyPool, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(pool, nil, eventType, reason, action, note, args...)
	}
}
