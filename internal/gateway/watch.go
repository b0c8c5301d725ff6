package gateway

import (
	"context"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Watch keeps set equal to the published lists of pools (the Secrets
// <pool>-proxies in namespace) until ctx is done. It watches each Secret by
// name, so the gateway needs get, list and watch on those Secrets only (a
// Role with resourceNames), and reads no mounted file: a member that starts
// serving is used as soon as the pool's list names it. A Secret that goes
// away empties its pool; one whose list does not parse is logged (without
// its content) and the pool keeps the members it had.
func Watch(ctx context.Context, cs kubernetes.Interface, namespace string, pools []string, set *Set, m *Metrics, log logr.Logger) {
	var wg sync.WaitGroup
	for _, pool := range pools {
		name := ListName(pool)
		selector := fields.OneTermEqualSelector("metadata.name", name).String()
		secrets := cs.CoreV1().Secrets(namespace)
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = selector
				return secrets.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = selector
				return secrets.Watch(ctx, o)
			},
		}
		apply := func(obj any) {
			s, ok := obj.(*corev1.Secret)
			if !ok || s.Name != name {
				return
			}
			list, err := ParseList(s.Data[ListKeyJSON])
			if err != nil {
				log.Error(err, "the published list cannot be read; keeping the members known", "pool", pool, "secret", name)
				return
			}
			set.Update(pool, list)
			m.setMembers(pool, len(list))
			log.V(1).Info("members updated", "pool", pool, "members", len(list))
		}
		_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
			// The client says whether it streams lists (a fake does not).
			ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, cs),
			ObjectType:    &corev1.Secret{},
			Handler: cache.ResourceEventHandlerFuncs{
				AddFunc:    apply,
				UpdateFunc: func(_, obj any) { apply(obj) },
				DeleteFunc: func(obj any) {
					if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
						obj = d.Obj
					}
					if s, ok := obj.(*corev1.Secret); ok && s.Name == name {
						set.Update(pool, nil)
						m.setMembers(pool, 0)
						log.Info("the published list is gone; no members from this pool", "pool", pool, "secret", name)
					}
				},
			},
		})
		wg.Go(func() { informer.RunWithContext(ctx) })
	}
	wg.Wait()
}

// setMembers records the number of members of pool; m may be nil.
func (m *Metrics) setMembers(pool string, n int) {
	if m != nil {
		m.members.WithLabelValues(pool).Set(float64(n))
	}
}
