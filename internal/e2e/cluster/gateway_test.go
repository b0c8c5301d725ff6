package cluster_test

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/kubelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// gatewayFront puts a ProxyGateway in front of the pool of three (#22): the
// operator runs it as its own Deployment (two replicas), and a pod in the
// cluster crawls through its Service with the url of its Secret. Requests
// spread over every member; a session stays on one. Deleted, it leaves
// nothing behind.
func gatewayFront(t *testing.T, c *kubelab.Cluster, cl client.Client, tg target) {
	ctx := t.Context()
	members := poolMembers(t, cl, "crawl-pool")
	gw := &crawlv1alpha1.ProxyGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "front", Namespace: servedNS},
		Spec:       crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"crawl-pool"}},
	}
	if err := cl.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	poll.Until(t, readyTimeout, func() (bool, string) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(gw), gw); err != nil {
			return false, err.Error()
		}
		st := gw.Status
		ready := ""
		for _, cond := range st.Conditions {
			if cond.Type == "Ready" {
				ready = string(cond.Status) + " " + cond.Reason + ": " + cond.Message
			}
		}
		return strings.HasPrefix(ready, "True") && st.ReadyReplicas == 2 && st.Members == int32(len(members)) && st.CredentialsSecretName != "",
			fmt.Sprintf("Ready %s, %d ready replicas, %d members", ready, st.ReadyReplicas, st.Members)
	})
	t.Logf("ProxyGateway front Ready with 2 replicas and %d members in %s at %s", len(members), time.Since(began).Round(time.Millisecond), gw.Status.Endpoint)

	endpoint, err := url.Parse(gw.Status.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: servedNS, Name: strings.SplitN(endpoint.Hostname(), ".", 2)[0]}, svc); err != nil {
		t.Fatalf("the gateway's Service for %s: %v", gw.Status.Endpoint, err)
	}
	hosts := []corev1.HostAlias{{IP: svc.Spec.ClusterIP, Hostnames: []string{endpoint.Hostname()}}}

	// The gateway's NetworkPolicy selects its running pods (the lab's
	// bridge CNI does not enforce policies: what is checked here is that
	// the real API server took it and that it fences the real pods).
	np := &networkingv1.NetworkPolicy{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: servedNS, Name: svc.Name}, np); err != nil {
		t.Fatalf("the gateway's NetworkPolicy: %v", err)
	}
	fenced := &corev1.PodList{}
	if err := cl.List(ctx, fenced, client.InNamespace(servedNS), client.MatchingLabels(np.Spec.PodSelector.MatchLabels)); err != nil {
		t.Fatal(err)
	}
	if len(fenced.Items) < 2 || len(np.Spec.Ingress) != 2 {
		t.Errorf("the gateway's NetworkPolicy selects %d pods with %d ingress rules; want its 2 pods, the proxy and the admin port", len(fenced.Items), len(np.Spec.Ingress))
	}

	// Rotation: every request on a new connection, placed anew.
	const runs = 30
	logs := crawl(t, c, cl, crawlJob{name: "gateway-crawler", secret: gw.Status.CredentialsSecretName, hosts: hosts,
		args: []string{"-url", tg.url, "-n", strconv.Itoa(runs)}})
	seen := egressAddresses(logs)
	total := 0
	for addr, n := range seen {
		total += n
		if !slices.Contains(members, addr) {
			t.Errorf("%d answers came from %s, which is no member of the pool (%v)", n, addr, members)
		}
	}
	if total != runs || len(seen) != len(members) {
		t.Errorf("%d of %d requests through the gateway got 200, from %d of the %d members (%v):\n%s", total, runs, len(seen), len(members), seen, logs)
	}
	t.Logf("through the gateway's Service: %v", seen)

	// A session keeps one member, whichever replica the Service picks.
	const sessionRuns = 10
	logs = crawl(t, c, cl, crawlJob{name: "session-crawler", secret: gw.Status.CredentialsSecretName, hosts: hosts,
		args: []string{"-url", tg.url, "-n", strconv.Itoa(sessionRuns), "-session", "tier1"}})
	if seen := egressAddresses(logs); len(seen) != 1 || seen[firstKey(seen)] != sessionRuns {
		t.Errorf("session tier1 got answers from %v, want all %d from one member:\n%s", seen, sessionRuns, logs)
	}
	if pw := string(secretData(t, cl, gw.Status.CredentialsSecretName)["password"]); pw == "" || strings.Contains(logs, pw) {
		t.Error("the gateway's Secret has no password, or the crawler's log holds it")
	}

	if err := cl.Delete(ctx, gw); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, goneTimeout, func() (bool, string) {
		dep := &appsv1.Deployment{}
		err := cl.Get(ctx, client.ObjectKey{Namespace: servedNS, Name: svc.Name}, dep)
		if !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("the gateway's Deployment: %v", err)
		}
		err = cl.Get(ctx, client.ObjectKeyFromObject(svc), &corev1.Service{})
		return apierrors.IsNotFound(err), fmt.Sprintf("the gateway's Service: %v", err)
	})
}

// poolMembers returns the addresses of the pool's published members.
func poolMembers(t *testing.T, cl client.Client, name string) []string {
	t.Helper()
	p := &crawlv1alpha1.ProxyPool{}
	if err := cl.Get(t.Context(), client.ObjectKey{Namespace: servedNS, Name: name}, p); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Fields(string(secretData(t, cl, p.Status.ListSecretName)["proxies.txt"])) {
		u, err := url.Parse(line)
		if err != nil {
			t.Fatalf("a line of the pool's proxies.txt does not parse: %v", err)
		}
		out = append(out, u.Hostname())
	}
	if len(out) == 0 {
		t.Fatalf("pool %s publishes no member", name)
	}
	return out
}

// secretData is the data of a Secret in the served namespace.
func secretData(t *testing.T, cl client.Client, name string) map[string][]byte {
	t.Helper()
	sec := &corev1.Secret{}
	if err := cl.Get(t.Context(), client.ObjectKey{Namespace: servedNS, Name: name}, sec); err != nil {
		t.Fatalf("Secret %s: %v", name, err)
	}
	return sec.Data
}

// firstKey is any key of m (its only one, where it is called).
func firstKey(m map[string]int) string {
	for k := range m {
		return k
	}
	return ""
}
