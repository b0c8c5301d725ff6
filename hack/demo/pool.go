package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvelab"
)

// startIPEcho starts a loopback IP-echo service, the probe's check URL: it
// answers with the caller's address, which for a request through a guest is
// the guest's own.
func startIPEcho() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = fmt.Fprintln(w, host) //nolint:gosec // G705: plain text to a local client, not HTML.
	}))
}

// poolDemo shows a ProxyPool: created with two members spread over the
// zones, scaled to four through the scale subresource, its published list,
// a request through a URL taken from the list, and a rotation of the whole
// pool during which the number of Serving members never drops below four.
func poolDemo(ctx context.Context, out io.Writer, k8s client.Client, ns string, zones []string) error {
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(out, "==> "+format+"\n", args...) }
	pool := &crawlv1alpha1.ProxyPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "crawl"},
		Spec: crawlv1alpha1.ProxyPoolSpec{
			Replicas: ptr.To[int32](2),
			Template: crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{
				Provider: pvelab.EntryName, MachineType: pvelab.MachineType, Image: pvelab.Image}},
			Rotation: &crawlv1alpha1.RotationPolicy{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))},
		},
	}
	for _, z := range zones {
		pool.Spec.Placement = append(pool.Spec.Placement, crawlv1alpha1.PlacementEntry{Zone: z})
	}
	if err := k8s.Create(ctx, pool); err != nil {
		return err
	}
	say("applied ProxyPool %s/crawl: 2 members spread over %s, rotation surge first (maxSurge 1, maxUnavailable 0)", ns, strings.Join(zones, ", "))
	if _, err := watchPool(ctx, out, k8s, ns, "crawl", 2, nil); err != nil {
		return err
	}

	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "crawl"}, Spec: autoscalingv1.ScaleSpec{Replicas: 4}}
	if err := k8s.SubResource("scale").Update(ctx, pool, client.WithSubResourceBody(scale)); err != nil {
		return fmt.Errorf("scaling the pool: %w", err)
	}
	say("kubectl scale proxypool/crawl --replicas=4")
	before, err := watchPool(ctx, out, k8s, ns, "crawl", 4, nil)
	if err != nil {
		return err
	}

	var cm corev1.ConfigMap
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: published.ListName("crawl")}, &cm); err != nil {
		return err
	}
	say("the published list, ConfigMap %s (the Secret of the same name has the same with credentials):", cm.Name)
	for _, line := range strings.Fields(cm.Data[published.ListKeyText]) {
		_, _ = fmt.Fprintln(out, "    "+line)
	}
	if err := requestFromList(ctx, out, k8s, ns, "crawl"); err != nil {
		return err
	}

	say("kubectl annotate proxypool/crawl %s=all: every member is replaced, each successor Serving before its predecessor goes", crawlv1alpha1.AnnotationRotate)
	var p crawlv1alpha1.ProxyPool
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pool), &p); err != nil {
		return err
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Annotations = map[string]string{crawlv1alpha1.AnnotationRotate: "all"}
	if err := k8s.Patch(ctx, &p, patch); err != nil {
		return err
	}
	if _, err := watchPool(ctx, out, k8s, ns, "crawl", 4, func(names []string) bool {
		return !slices.ContainsFunc(names, func(n string) bool { return slices.Contains(before, n) })
	}); err != nil {
		return err
	}
	return requestFromList(ctx, out, k8s, ns, "crawl")
}

// watchPool prints the pool whenever its members or counts change, until it
// has want members, all Serving and listed, and done (when set) holds for
// the member names. It fails if the Serving count drops below want once
// reached, which maxUnavailable 0 forbids. It returns the member names.
func watchPool(ctx context.Context, out io.Writer, k8s client.Client, ns, name string, want int, done func([]string) bool) ([]string, error) {
	last, reached, lowest := "", false, want
	var names []string
	err := waitUntil(ctx, 10*time.Minute, func() bool {
		var list crawlv1alpha1.ProxyList
		var pool crawlv1alpha1.ProxyPool
		if k8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{crawlv1alpha1.LabelPool: name}) != nil ||
			k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pool) != nil {
			return false
		}
		names = names[:0]
		var parts []string
		serving := 0
		for _, m := range list.Items {
			state := string(m.Status.Phase)
			if !m.DeletionTimestamp.IsZero() {
				state = "Deleting"
			} else if apimeta.IsStatusConditionTrue(m.Status.Conditions, crawlv1alpha1.ConditionServing) {
				state, serving = "Serving", serving+1
			}
			if m.DeletionTimestamp.IsZero() {
				names = append(names, m.Name)
			}
			parts = append(parts, fmt.Sprintf("%s(%s,%s)", m.Name, m.Status.Zone, state))
		}
		if reached && serving < lowest {
			lowest = serving
		}
		line := fmt.Sprintf("Desired %d Ready %d Serving %d Egress %d | %s", ptr.Deref(pool.Spec.Replicas, 1), pool.Status.Ready,
			pool.Status.Serving, pool.Status.DistinctEgressAddresses, strings.Join(parts, " "))
		if line != last {
			last = line
			_, _ = fmt.Fprintln(out, "    "+line)
		}
		ok := len(list.Items) == want && serving == want && int(pool.Status.Serving) == want
		reached = reached || ok
		return ok && (done == nil || done(names))
	})
	if err != nil {
		return nil, err
	}
	if lowest < want {
		return nil, fmt.Errorf("the serving count dropped to %d, below %d", lowest, want)
	}
	if done != nil {
		_, _ = fmt.Fprintf(out, "    -- rotation done; Serving never below %d\n", want)
	}
	return slices.Clone(names), nil
}

// requestFromList sends a request through the first URL of proxies.txt, as a
// crawler would.
func requestFromList(ctx context.Context, out io.Writer, k8s client.Client, ns, name string) error {
	var s corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: published.ListName(name)}, &s); err != nil {
		return err
	}
	lines := strings.Fields(string(s.Data[published.ListKeyText]))
	if len(lines) == 0 {
		return fmt.Errorf("proxies.txt of %s is empty", s.Name)
	}
	proxyURL, err := url.Parse(lines[0])
	if err != nil {
		return fmt.Errorf("proxies.txt: %w", err)
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "hello from the origin; you came from %s", r.RemoteAddr) //nolint:gosec // G705: plain text to a local client, not HTML.
	}))
	defer origin.Close()
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL)}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, origin.URL, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("request through %s: %w", proxyURL.Redacted(), err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("request through %s: %s", proxyURL.Redacted(), resp.Status)
	}
	_, _ = fmt.Fprintf(out, "==> GET %s through %s, the first line of proxies.txt in Secret %s:\n    %s %q\n",
		origin.URL, "http://"+proxyURL.Host+" (with its credentials)", s.Name, resp.Status, body)
	return nil
}
