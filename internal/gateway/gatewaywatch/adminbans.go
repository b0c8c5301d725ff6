package gatewaywatch

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
)

// AdminBansOf reads spec.bans of gw.
func AdminBansOf(gw *crawlv1alpha1.ProxyGateway) []gateway.AdminBan {
	out := make([]gateway.AdminBan, 0, len(gw.Spec.Bans))
	for _, b := range gw.Spec.Bans {
		out = append(out, gateway.AdminBan{Pool: b.Pool, Member: b.Member, Host: b.Host, Expires: b.Expires.Time})
	}
	return out
}

// proxyGateways is the resource WatchAdminBans watches.
var proxyGateways = crawlv1alpha1.GroupVersion.WithResource("proxygateways")

// WatchAdminBans keeps g's administrator's bans equal to spec.bans of the
// ProxyGateway name in namespace until ctx is done. It watches that one
// object by name, so a Role with get, list and watch on it, by name, is
// all it needs. The gateway deleted, or an object that cannot be read,
// leaves no administrator's ban.
func WatchAdminBans(ctx context.Context, dyn dynamic.Interface, namespace, name string, g *gateway.Gateway, log logr.Logger) {
	res := dyn.Resource(proxyGateways).Namespace(namespace)
	apply := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetName() != name {
			return
		}
		var gw crawlv1alpha1.ProxyGateway
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &gw); err != nil {
			// The API server validated it; keep what was known.
			log.Error(err, "the ProxyGateway's bans cannot be read; keeping the bans known")
			return
		}
		g.SetAdminBans(AdminBansOf(&gw))
	}
	informer := informerByName(name, dyn, &unstructured.Unstructured{}, cache.ResourceEventHandlerFuncs{
		AddFunc:    apply,
		UpdateFunc: func(_, obj any) { apply(obj) },
		DeleteFunc: func(any) { g.SetAdminBans(nil) },
	}, res.List, res.Watch)
	informer.RunWithContext(ctx)
}
