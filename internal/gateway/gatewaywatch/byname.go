package gatewaywatch

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// informerByName returns an informer of the one object name that list and
// watchFn (a resource's List and Watch in a namespace) can see, with h
// told of its changes. Watching by name is what lets a Role with
// resourceNames grant the watch, and the informer holds that object only.
// client is the client list and watchFn come from: it says whether it
// streams lists (a fake does not).
func informerByName[L runtime.Object](name string, client any, obj runtime.Object, h cache.ResourceEventHandler,
	list func(context.Context, metav1.ListOptions) (L, error), watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
) cache.Controller {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return watchFn(ctx, o)
		},
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, client),
		ObjectType:    obj,
		Handler:       h,
	})
	return informer
}
