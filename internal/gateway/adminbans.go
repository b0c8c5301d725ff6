package gateway

import (
	"context"
	"strings"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
)

// Administrator's bans: an administrator (or a crawler team) bans a member
// from a destination host with kubectl egress ban, which writes the ban,
// with its expiry, into the ProxyGateway's spec.bans. Every gateway pod
// watches its ProxyGateway by name (WatchAdminBans) and honours the bans
// there as it honours those it learned (bans.go): the member gets no
// request or tunnel to that host until the ban expires, a session on it
// moves for that host only. The API server is the only state the replicas
// share: each pod holds the list the object had at its last event, replaced
// whole, so a lifted ban ends in every pod as soon as it sees the change.
// The API bounds the list (256 entries, validated names and hosts).

// causeAdmin is the cause label of an administrator's ban.
const causeAdmin = "admin"

// AdminBan is one entry of a ProxyGateway's spec.bans.
type AdminBan struct {
	// Pool and Member name the member (pool/name, as its pool lists it).
	Pool, Member string
	// Host is the destination host, lower case, without a port.
	Host string
	// Expires is when the ban ends.
	Expires time.Time
}

// adminEntry is an administrator's ban with its host, for the log: the
// administrator's, not a client's, so it is kept.
type adminEntry struct {
	ban
	host string
}

// SetAdminBans replaces the administrator's bans this gateway honours with
// bans (nil: none). A ban it did not hold before is counted
// (egress_proxies_gateway_bans_total, cause admin) and logged; an expired
// one is kept out.
func (g *Gateway) SetAdminBans(bans []AdminBan) {
	now := g.now()
	next := make(map[banKey]adminEntry, len(bans))
	hosts := map[hostKey]int{}
	for _, b := range bans {
		host := strings.ToLower(strings.TrimSuffix(b.Host, "."))
		if !now.Before(b.Expires) || host == "" {
			continue
		}
		k := banKey{published.MemberKey(b.Pool, b.Member), keyOf(host)}
		if _, dup := next[k]; !dup {
			hosts[k.host]++
		}
		next[k] = adminEntry{ban: ban{until: b.Expires, pool: b.Pool, name: b.Member}, host: host}
	}
	t := g.bans
	t.mu.Lock()
	prev := t.admin
	t.admin, t.adminHosts = next, hosts
	t.mu.Unlock()
	for k, b := range next {
		if old, ok := prev[k]; ok && old.until.Equal(b.until) {
			continue
		}
		if g.metrics != nil {
			g.metrics.bans.WithLabelValues(b.pool, b.name, causeAdmin).Inc()
		}
		g.log.Info("administrator's ban", "member", b.pool+"/"+b.name, "host", b.host, "until", b.until.UTC().Format(time.RFC3339))
	}
	for k, b := range prev {
		if _, ok := next[k]; !ok && now.Before(b.until) {
			g.log.Info("administrator's ban lifted", "member", b.pool+"/"+b.name, "host", b.host)
		}
	}
}

// AdminBansOf reads spec.bans of gw.
func AdminBansOf(gw *crawlv1alpha1.ProxyGateway) []AdminBan {
	out := make([]AdminBan, 0, len(gw.Spec.Bans))
	for _, b := range gw.Spec.Bans {
		out = append(out, AdminBan{Pool: b.Pool, Member: b.Member, Host: b.Host, Expires: b.Expires.Time})
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
func WatchAdminBans(ctx context.Context, dyn dynamic.Interface, namespace, name string, g *Gateway, log logr.Logger) {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	res := dyn.Resource(proxyGateways).Namespace(namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return res.Watch(ctx, o)
		},
	}
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
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		// The client says whether it streams lists (a fake does not).
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, dyn),
		ObjectType:    &unstructured.Unstructured{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    apply,
			UpdateFunc: func(_, obj any) { apply(obj) },
			DeleteFunc: func(any) { g.SetAdminBans(nil) },
		},
	})
	informer.RunWithContext(ctx)
}
