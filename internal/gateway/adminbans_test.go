package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway/gatewaywatch"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

var gatewaysResource = crawlv1alpha1.GroupVersion.WithResource("proxygateways")

// unstructuredGateway is gw as the dynamic client holds it.
func unstructuredGateway(t *testing.T, gw *crawlv1alpha1.ProxyGateway) *unstructured.Unstructured {
	t.Helper()
	gw.APIVersion, gw.Kind = crawlv1alpha1.GroupVersion.String(), "ProxyGateway"
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(gw)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// TestAdministratorBansReachEveryReplica: two gateway replicas watch one
// ProxyGateway; a ban an administrator writes into its spec.bans keeps the
// member away from that host in both (no request, no tunnel, a session on
// it moves for that host only), leaves the member serving other hosts,
// shows in each replica's metrics, and ends in both when it is lifted. An
// expired entry bans nothing.
func TestAdministratorBansReachEveryReplica(t *testing.T) {
	ms := startMembers(t, 3)
	banner := startBanningOrigin(t, "127.0.0.1", http.StatusTooManyRequests) // bans no one by itself
	other := startBanningOrigin(t, "127.0.0.2", http.StatusTooManyRequests)
	target := tcpEcho(t) // on the banned host too
	clk := newClock()

	// The dynamic client's scheme knows no typed object: the pods read
	// the ProxyGateway as unstructured.
	scheme := runtime.NewScheme()
	obj := &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "crawlers", Name: "front"},
		Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"crawl"}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{gatewaysResource: "ProxyGatewayList"})
	if _, err := dyn.Resource(gatewaysResource).Namespace("crawlers").Create(context.Background(), unstructuredGateway(t, obj.DeepCopy()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	update := func(bans ...crawlv1alpha1.GatewayBan) {
		t.Helper()
		next := obj.DeepCopy()
		next.Spec.Bans = bans
		if _, err := dyn.Resource(gatewaysResource).Namespace("crawlers").Update(context.Background(), unstructuredGateway(t, next), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	type replica struct {
		h   *gw
		reg *prometheus.Registry
	}
	var replicas []replica
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	t.Cleanup(func() { cancel(); <-done; <-done })
	for range 2 {
		set := gateway.NewSet()
		set.Update("crawl", entries(ms))
		reg, gm := newMetrics(t)
		h := startGateway(t, gateway.Config{Members: set, Metrics: gm, Now: clk.Now})
		go func() {
			defer func() { done <- struct{}{} }()
			gatewaywatch.WatchAdminBans(ctx, dyn, "crawlers", "front", h.g, logr.Discard())
		}()
		replicas = append(replicas, replica{h, reg})
	}
	active := func(want float64) {
		t.Helper()
		for i, r := range replicas {
			poll.Until(t, wait, func() (bool, string) {
				got := metric(t, r.reg, "egress_proxies_gateway_bans_active", map[string]string{"pool": "crawl"})
				return got == want, fmt.Sprintf("replica %d: %v bans in force; want %v", i, got, want)
			})
		}
	}
	// The session that lands on ms[0] at first, on every replica.
	session := ""
	for i := 0; session == ""; i++ {
		id := fmt.Sprintf("s%d", i)
		if code, body, _, err := get(replicas[0].h.client(t, gwUser+"-session-"+id), other.url, nil); err == nil && code == http.StatusOK && body == ms[0].egress {
			session = id
		}
	}

	update(
		crawlv1alpha1.GatewayBan{Pool: "crawl", Member: ms[0].name, Host: "127.0.0.1", Expires: metav1.NewTime(clk.Now().Add(time.Hour)), Reason: "shop bans it"},
		crawlv1alpha1.GatewayBan{Pool: "crawl", Member: ms[1].name, Host: "127.0.0.1", Expires: metav1.NewTime(clk.Now().Add(-time.Second)), Reason: "expired"},
	)
	active(1)
	before := other.hitsFrom(ms[0].egress)
	for i, r := range replicas {
		c := r.h.client(t, gwUser)
		for range 12 {
			if code, body, _, err := get(c, banner.url, nil); err != nil || code != http.StatusOK {
				t.Errorf("replica %d: a request to the banned host: %d %q %v", i, code, body, err)
			}
			if _, _, _, err := get(c, other.url, nil); err != nil {
				t.Errorf("replica %d: a request to another host: %v", i, err)
			}
		}
		for range 3 {
			if got := tunnelEgress(t, r.h.addr, target, gwUser); got == ms[0].egress {
				t.Errorf("replica %d: a tunnel to the banned host went through the banned member", i)
			}
		}
		s := r.h.client(t, gwUser+"-session-"+session)
		if _, body, _, _ := get(s, banner.url, nil); body == ms[0].egress {
			t.Errorf("replica %d: session %s reached the banned host through the banned member", i, session)
		}
		if _, body, _, _ := get(s, other.url, nil); body != ms[0].egress {
			t.Errorf("replica %d: session %s left its member for another host: %q", i, session, body)
		}
	}
	if got := banner.hitsFrom(ms[0].egress); got != 0 {
		t.Errorf("the banned member sent %d requests to the banned host; want 0", got)
	}
	if got := banner.hitsFrom(ms[1].egress); got == 0 {
		t.Errorf("the member whose ban expired got no request to that host")
	}
	if got := other.hitsFrom(ms[0].egress) - before; got == 0 {
		t.Errorf("the banned member served no other host")
	}
	for i, r := range replicas {
		got := map[string]float64{}
		for _, m := range ms {
			got[m.name] = bansTotal(t, r.reg, m.name, "admin")
		}
		if diff := cmp.Diff(map[string]float64{ms[0].name: 1, ms[1].name: 0, ms[2].name: 0}, got); diff != "" {
			t.Errorf("replica %d: administrator's bans counted (-want +got):\n%s", i, diff)
		}
	}

	// Lifted: every replica sends to the member again.
	update()
	active(0)
	for i, r := range replicas {
		c := r.h.client(t, gwUser)
		for range 6 {
			_, _, _, _ = get(c, banner.url, nil)
		}
		if got := banner.hitsFrom(ms[0].egress); got == 0 {
			t.Errorf("replica %d: after the lift the member still gets no request to the host", i)
		}
	}
}
