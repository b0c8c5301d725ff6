package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/probe"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvelab"
)

// ipEcho is a loopback IP-echo service: it answers with the caller's
// address, which for a request through a guest is the guest's own.
func ipEcho(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = fmt.Fprintln(w, host)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestPoolOnProxmox: a pool of five on the simulated cluster goes Serving
// through the real probe (407 for a wrong password, 403 for the metadata
// address the guests' egress policy denies, the egress address from the
// check URL), which records each guest's own egress address; a
// request through every URL of proxies.txt succeeds; a guest whose proxy
// stops answering (its VM still running) is replaced.
func TestPoolOnProxmox(t *testing.T) {
	ns := newNamespace(t)
	echo := ipEcho(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	lab, err := pvelab.Start(ctx, pvelab.Options{Nodes: 2, Speed: 200, Guests: true,
		Zones: map[string][]string{"rack-a": {"pve1"}, "rack-b": {"pve2"}}, PollInterval: 20 * time.Millisecond,
		Dir: t.TempDir(), ProbeCheckURL: echo.URL + "/ip", ProbeDeniedURL: probe.DefaultDeniedURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	stop, err := lab.StartOperator(ctx, pvelab.OperatorOptions{
		RestConfig: env.Config, ServiceAccount: env, Scheme: env.Scheme, Namespace: ns,
		Controller: controller.Options{
			PollInterval: 50 * time.Millisecond, ResyncInterval: 200 * time.Millisecond,
			HealthInterval: 200 * time.Millisecond, GCInterval: time.Hour,
			Prober: &probe.HTTP{Timeout: 2 * time.Second}, ProbeInterval: 200 * time.Millisecond, ProbeFailureThreshold: 2,
			PoolResyncInterval: 500 * time.Millisecond,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })

	pool := &crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "crawl"},
		Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas: ptr.To[int32](5),
			Template: crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{
				Provider: pvelab.EntryName, MachineType: pvelab.MachineType, Image: pvelab.Image}},
			Placement: []crawlv1alpha1.PlacementEntry{{Zone: "rack-a"}, {Zone: "rack-b"}},
		},
	}
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	members := waitServing(t, ns, "crawl", 5, nil)
	for _, m := range members {
		if m.Status.EgressIP != m.Status.Address {
			t.Errorf("member %s: egress address %q, want its own address %s (what the echo service saw)", m.Name, m.Status.EgressIP, m.Status.Address)
		}
	}
	// The pool's status follows the published list in the same reconcile.
	poll.Until(t, 10*time.Second, func() (bool, string) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return false, err.Error()
		}
		return pool.Status.DistinctEgressAddresses == 5, fmt.Sprintf("distinct egress addresses = %d, want 5", pool.Status.DistinctEgressAddresses)
	})

	// Every URL of proxies.txt carries working credentials.
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, "origin") }))
	defer origin.Close()
	lines := proxiesTxt(t, ns, "crawl")
	if len(lines) != 5 {
		t.Fatalf("proxies.txt has %d lines, want 5", len(lines))
	}
	for _, line := range lines {
		u, err := url.Parse(line)
		if err != nil {
			t.Fatalf("a line of proxies.txt does not parse as a URL: %v", err)
		}
		if code := get(t, u, origin.URL); code != http.StatusOK {
			t.Errorf("through %s: status %d, want 200", u.Redacted(), code)
		}
	}

	// A guest whose proxy stops answering is replaced.
	victim := members[2]
	vmid := 0
	for _, vm := range lab.Clones() {
		if vm.Name == victim.Status.InstanceName {
			vmid = vm.VMID
		}
	}
	if vmid == 0 {
		t.Fatalf("no VM named %s", victim.Status.InstanceName)
	}
	lab.StopGuestProxy(vmid)
	waitServing(t, ns, "crawl", 5, func(ms []crawlv1alpha1.Proxy) bool {
		return !slices.ContainsFunc(ms, func(p crawlv1alpha1.Proxy) bool { return p.Name == victim.Name })
	})
	poll.Until(t, 30*time.Second, func() (bool, string) {
		for _, vm := range lab.Clones() {
			if vm.VMID == vmid {
				return false, fmt.Sprintf("the VM %d of the replaced member is still there", vmid)
			}
		}
		return true, ""
	})
}

// waitServing waits until the pool has want members, all Serving, the
// published list is exactly them, and extra (when set) holds.
func waitServing(t *testing.T, ns, name string, want int, extra func([]crawlv1alpha1.Proxy) bool) []crawlv1alpha1.Proxy {
	t.Helper()
	var members []crawlv1alpha1.Proxy
	poll.Until(t, 120*time.Second, func() (bool, string) {
		var list crawlv1alpha1.ProxyList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{crawlv1alpha1.LabelPool: name}); err != nil {
			return false, err.Error()
		}
		members = list.Items
		var serving, states []string
		for _, p := range members {
			c := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionServing)
			if c != nil && c.Status == metav1.ConditionTrue && p.DeletionTimestamp.IsZero() {
				serving = append(serving, p.Status.URL)
			}
			if c != nil {
				states = append(states, p.Name+":"+string(p.Status.Phase)+"/"+c.Reason)
			}
		}
		slices.Sort(serving)
		var listed []string
		var cm corev1.ConfigMap
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: published.ListName(name)}, &cm); err == nil {
			listed = strings.Fields(cm.Data[published.ListKeyText])
			slices.Sort(listed)
		}
		ok := len(members) == want && len(serving) == want && slices.Equal(serving, listed) && (extra == nil || extra(members))
		return ok, fmt.Sprintf("members %v, listed %v", states, listed)
	})
	return members
}

// proxiesTxt reads proxies.txt from the pool's Secret.
func proxiesTxt(t *testing.T, ns, name string) []string {
	t.Helper()
	var s corev1.Secret
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: published.ListName(name)}, &s); err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(s.Data[published.ListKeyText]))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			out = append(out, line)
		}
	}
	return out
}
