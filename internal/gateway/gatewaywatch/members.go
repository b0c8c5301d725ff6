package gatewaywatch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
)

// Bounds of the retries of a Secret read that failed.
const (
	retryFirst = 200 * time.Millisecond
	retryMax   = 30 * time.Second
)

// Watch keeps set equal to the published lists of pools in namespace until
// ctx is done. A pool publishes its list twice, in the Secret <pool>-proxies
// (with credentials) and then in the ConfigMap of the same name (without):
// Watch watches each ConfigMap by name and, whenever it changes, reads the
// Secret by name. So the gateway needs get on those Secrets only and a
// watch on those ConfigMaps only (a Role with resourceNames, which the
// operator can grant without the right to watch Secrets itself), and reads
// no mounted file: a member that starts serving is used as soon as the list
// names it. A list that goes away empties its pool; a Secret that cannot be
// read is retried with backoff; a list that does not parse is logged
// (without its content) and the pool keeps the members it had. A Secret or
// ConfigMap of the list's name that the pool does not control (listRefusal)
// is no list: the pool has no members from it, and it is logged (without
// its content) and counted.
func Watch(ctx context.Context, cs kubernetes.Interface, namespace string, pools []string, set *gateway.Set, m *gateway.Metrics, log logr.Logger) {
	var wg sync.WaitGroup
	for _, pool := range pools {
		// A pool whose list never comes (a name that does not exist) has
		// no member from the start, and its gauge says so.
		m.ExpectPool(pool)
		w := &poolWatch{pool: pool, name: published.ListName(pool), cs: cs, namespace: namespace, set: set, m: m, log: log.WithValues("pool", pool),
			changed: make(chan struct{}, 1)}
		cms := cs.CoreV1().ConfigMaps(namespace)
		signal := func(obj any) {
			if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == w.name {
				w.cm.Store(cm)
				w.signal()
			}
		}
		informer := informerByName(w.name, cs, &corev1.ConfigMap{}, cache.ResourceEventHandlerFuncs{
			AddFunc:    signal,
			UpdateFunc: func(_, obj any) { signal(obj) },
			// The pool is gone (or its list): no members from it,
			// whether or not its Secret went yet.
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == w.name {
					w.cm.Store(nil)
					w.signal()
				}
			},
		}, cms.List, cms.Watch)
		wg.Go(func() { informer.RunWithContext(ctx) })
		wg.Go(func() { w.run(ctx) })
	}
	wg.Wait()
}

// poolWatch reads one pool's Secret whenever its ConfigMap changed.
type poolWatch struct {
	pool, name, namespace string
	cs                    kubernetes.Interface
	set                   *gateway.Set
	m                     *gateway.Metrics
	log                   logr.Logger
	changed               chan struct{} // one pending signal at most
	// cm is the ConfigMap as its last event had it; nil once deleted.
	cm atomic.Pointer[corev1.ConfigMap]
}

func (w *poolWatch) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// run reads the Secret after each signal, retrying a failed read with
// backoff, until ctx is done.
func (w *poolWatch) run(ctx context.Context) {
	delay := time.Duration(0)
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.changed:
		case <-retry:
		}
		retry = nil
		if err := w.read(ctx); err != nil {
			delay = min(max(2*delay, retryFirst), retryMax)
			w.log.Error(err, "reading the published list; retrying", "secret", w.name, "in", delay)
			timer := time.NewTimer(delay)
			retry = timer.C
			context.AfterFunc(ctx, func() { timer.Stop() })
			continue
		}
		delay = 0
	}
}

// read applies the Secret's list to the set.
func (w *poolWatch) read(ctx context.Context) error {
	var s *corev1.Secret
	var err error = apierrors.NewNotFound(corev1.Resource("configmaps"), w.name)
	if cm := w.cm.Load(); cm != nil {
		if why := listRefusal(cm, w.pool); why != "" {
			w.refuse("configmap", why)
			return nil
		}
		s, err = w.cs.CoreV1().Secrets(w.namespace).Get(ctx, w.name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		w.set.SetPool(w.pool, nil, w.m)
		w.log.Info("the published list is gone; no members from this pool", "secret", w.name)
		return nil
	}
	if err != nil {
		return err
	}
	if why := listRefusal(s, w.pool); why != "" {
		w.refuse("secret", why)
		return nil
	}
	list, err := gateway.ParseList(s.Data[published.ListKeyJSON])
	if err != nil {
		w.log.Error(err, "the published list cannot be read; keeping the members known", "secret", w.name)
		return nil
	}
	w.set.SetPool(w.pool, list, w.m)
	w.log.V(1).Info("members updated", "members", len(list))
	return nil
}

// listRefusal says why obj (the Secret or ConfigMap <pool>-proxies) is not
// the list the ProxyPool pool publishes: "labels" without the operator's
// managed-by label and the pool's label, "owner" without a controller
// reference to the ProxyPool pool; "" when it is. Whoever may create a
// ConfigMap and a Secret in the namespace could otherwise send the
// crawlers' traffic to proxies of their choosing under a pool's name. They
// can write these fields too, but an object whose owner does not exist is
// deleted by the garbage collector, and the pool controller takes over
// (rewrites) one that names its ProxyPool (docs/gateway.md, Membership).
func listRefusal(obj metav1.Object, pool string) string {
	l := obj.GetLabels()
	if l[published.LabelManagedBy] != published.ManagedBy || l[crawlv1alpha1.LabelPool] != pool {
		return "labels"
	}
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != "ProxyPool" || ref.Name != pool {
		return "owner"
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != crawlv1alpha1.GroupVersion.Group {
		return "owner"
	}
	return ""
}

// refuse empties the pool: its list's object (kind) is not the pool's.
func (w *poolWatch) refuse(kind, why string) {
	w.set.RefusePool(w.pool, kind+"-"+why, w.m)
	w.log.Info("the published list's "+kind+" is not controlled by the pool; no members from this pool", "name", w.name, "reason", why)
}
