package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
)

func fakeReader(t *testing.T, objs ...client.Object) client.Reader {
	t.Helper()
	s := runtime.NewScheme()
	if err := crawlv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

func health(name, typ string, status metav1.ConditionStatus) *crawlv1alpha1.ProviderHealth {
	h := &crawlv1alpha1.ProviderHealth{ObjectMeta: metav1.ObjectMeta{Name: name}}
	h.Status.Type = typ
	if status != "" {
		h.Status.Conditions = []metav1.Condition{{Type: crawlv1alpha1.ConditionHealthy, Status: status, Reason: "Test"}}
	}
	return h
}

// TestObjectsCollector: the pools' desired members and the entries' health,
// as the alerts on pools below target and entries that cannot serve read
// them.
func TestObjectsCollector(t *testing.T) {
	three := int32(3)
	reader := fakeReader(t,
		&crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Namespace: "crawlers", Name: "sized"}, Spec: crawlv1alpha1.ProxyPoolSpec{Replicas: &three}},
		// No replicas: the CRD's default, 1.
		&crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "defaulted"}},
		health("lab", "proxmox", metav1.ConditionTrue),
		health("down", "kvm2", metav1.ConditionFalse),
		// Unknown (no health check) and not checked yet: no series, so
		// that neither reads as healthy or unhealthy.
		health("unchecked", "kubernetes", metav1.ConditionUnknown),
		health("new", "proxmox", ""),
	)
	want := `
# HELP egress_proxies_pool_desired_members Members each ProxyPool asks for (spec.replicas), by namespace and pool.
# TYPE egress_proxies_pool_desired_members gauge
egress_proxies_pool_desired_members{namespace="crawlers",pool="sized"} 3
egress_proxies_pool_desired_members{namespace="team-a",pool="defaulted"} 1
# HELP egress_proxies_provider_healthy 1 when the provider entry can serve (ProviderHealth Healthy=True), 0 when it cannot (False); absent while unknown (a type without a health check, or before the first check). By provider entry and type.
# TYPE egress_proxies_provider_healthy gauge
egress_proxies_provider_healthy{provider="down",type="kvm2"} 0
egress_proxies_provider_healthy{provider="lab",type="proxmox"} 1
`
	if err := testutil.CollectAndCompare(&metrics.ObjectsCollector{Reader: reader}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestProxiesCollectorEgressAddresses: distinct egress addresses per entry,
// as the dashboard's fleet row shows them; Proxies without one do not count.
func TestProxiesCollectorEgressAddresses(t *testing.T) {
	proxy := func(name, provider, egress string) *crawlv1alpha1.Proxy {
		p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: "crawlers", Name: name}}
		p.Spec.Provider = provider
		p.Status.Phase = crawlv1alpha1.ProxyPhaseReady
		p.Status.EgressIP = egress
		return p
	}
	reader := fakeReader(t,
		proxy("a", "lab", "198.51.100.1"),
		// The same address behind two proxies (one NAT) counts once.
		proxy("b", "lab", "198.51.100.1"),
		proxy("c", "lab", "198.51.100.2"),
		proxy("d", "cluster", ""),
	)
	want := `
# HELP egress_proxies_egress_addresses Distinct egress addresses (status.egressIP, as the probes' check URL saw them) among the Proxies of each provider entry.
# TYPE egress_proxies_egress_addresses gauge
egress_proxies_egress_addresses{provider="lab"} 2
`
	if err := testutil.CollectAndCompare(&metrics.ProxiesCollector{Reader: reader}, strings.NewReader(want), "egress_proxies_egress_addresses"); err != nil {
		t.Error(err)
	}
}
