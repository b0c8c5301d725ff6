package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway/gatewaywatch"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/logbuf"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// publish writes a pool's list as the pool does: the Secret, then the
// ConfigMap (whose content the gateway does not read).
func publish(t *testing.T, cs *fake.Clientset, pool string, es ...gateway.Entry) {
	t.Helper()
	ctx := context.Background()
	s := listSecret(t, pool, es...)
	if _, err := cs.CoreV1().Secrets("crawlers").Update(ctx, s, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		_, err = cs.CoreV1().Secrets("crawlers").Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: s.ObjectMeta, Data: map[string]string{"proxies.json": strconv.Itoa(len(es))}}
	if _, err := cs.CoreV1().ConfigMaps("crawlers").Update(ctx, cm, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		if _, err := cs.CoreV1().ConfigMaps("crawlers").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
}

func listSecret(t *testing.T, pool string, es ...gateway.Entry) *corev1.Secret {
	t.Helper()
	js, err := json.Marshal(es)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: listMeta(pool), Data: map[string][]byte{published.ListKeyJSON: js}}
}

// listMeta is the metadata the pool controller gives its list's Secret and
// ConfigMap: its labels and a controller reference to the ProxyPool.
func listMeta(pool string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: "crawlers", Name: published.ListName(pool),
		Labels: map[string]string{published.LabelManagedBy: published.ManagedBy, crawlv1alpha1.LabelPool: pool},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: crawlv1alpha1.GroupVersion.String(), Kind: "ProxyPool", Name: pool,
			UID: types.UID("uid-of-" + pool), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}}
}

func names(set *gateway.Set) []string {
	var out []string
	for _, m := range set.Members() {
		out = append(out, m.String())
	}
	return out
}

// TestWatchFollowsThePublishedLists: the set follows each pool's Secret as
// it is created, changed and deleted; another Secret in the namespace and a
// list that does not parse change nothing.
func TestWatchFollowsThePublishedLists(t *testing.T) {
	cs := fake.NewClientset()
	set := gateway.NewSet()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		gatewaywatch.Watch(ctx, cs, "crawlers", []string{"a", "b"}, set, nil, logr.Discard())
	}()
	t.Cleanup(func() { cancel(); <-done })
	secrets := cs.CoreV1().Secrets("crawlers")
	e := func(name string) gateway.Entry { return gateway.Entry{Name: name, URL: "http://u:p@127.0.0.1:3128"} }
	expect := func(what string, want ...string) {
		t.Helper()
		poll.Until(t, wait, func() (bool, string) {
			return slices.Equal(names(set), want), what + ": members " + jsonOf(names(set))
		})
	}
	publish(t, cs, "a", e("a-1"), e("a-2"))
	publish(t, cs, "b", e("b-1"))
	expect("both lists", "a/a-1", "a/a-2", "b/b-1")
	publish(t, cs, "a", e("a-2"), e("a-3"))
	expect("a changed", "a/a-2", "a/a-3", "b/b-1")
	bad := listSecret(t, "b")
	bad.Data[published.ListKeyJSON] = []byte("not json")
	if _, err := secrets.Update(ctx, bad, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("crawlers").Update(ctx, &corev1.ConfigMap{ObjectMeta: bad.ObjectMeta, Data: map[string]string{"x": "1"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	publish(t, cs, "c", e("c-1"))
	if err := cs.CoreV1().ConfigMaps("crawlers").Delete(ctx, published.ListName("a"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := secrets.Delete(ctx, published.ListName("a"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("a deleted, b unreadable, c not a pool of the gateway", "b/b-1")
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestWatchFollowsOnlyThePoolsOwnList: a Secret or ConfigMap of the list's
// name that the ProxyPool does not control (forged by whoever may create
// one in the namespace) gives the pool no members, is counted by reason and
// logged without its content; the pool's own list is then followed, and a
// forgery that replaces it empties the pool again.
func TestWatchFollowsOnlyThePoolsOwnList(t *testing.T) {
	other := func(m *metav1.ObjectMeta) { m.OwnerReferences[0].Name = "b" }
	for _, c := range []struct {
		name, why string
		secret    bool // the forgery is the Secret; otherwise the ConfigMap
		forge     func(*metav1.ObjectMeta)
		reason    string
	}{
		{"secret without owner", "anyone's Secret, labelled as the pool's", true, func(m *metav1.ObjectMeta) { m.OwnerReferences = nil }, "secret-owner"},
		{"secret owned by a Deployment", "a controller of another kind", true, func(m *metav1.ObjectMeta) {
			m.OwnerReferences[0].APIVersion, m.OwnerReferences[0].Kind = "apps/v1", "Deployment"
		}, "secret-owner"},
		{"secret owned by another group's ProxyPool", "the kind alone is not enough", true, func(m *metav1.ObjectMeta) {
			m.OwnerReferences[0].APIVersion = "crawl.example.net/v1alpha1"
		}, "secret-owner"},
		{"secret owned by another pool", "the owner's name must be the pool", true, other, "secret-owner"},
		{"secret owned but not controlled", "an owner reference that is not the controller", true, func(m *metav1.ObjectMeta) {
			m.OwnerReferences[0].Controller = nil
		}, "secret-owner"},
		{"secret without the managed-by label", "labels first", true, func(m *metav1.ObjectMeta) { delete(m.Labels, published.LabelManagedBy) }, "secret-labels"},
		{"secret of another pool's label", "the pool label must be the pool", true, func(m *metav1.ObjectMeta) { m.Labels[crawlv1alpha1.LabelPool] = "b" }, "secret-labels"},
		{"configmap without owner", "the ConfigMap is checked too", false, func(m *metav1.ObjectMeta) { m.OwnerReferences = nil }, "configmap-owner"},
		{"configmap without labels", "the ConfigMap's labels too", false, func(m *metav1.ObjectMeta) { m.Labels = nil }, "configmap-labels"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs := fake.NewClientset()
			reg, gm := newMetrics(t)
			logs := &logbuf.Buffer{}
			set := gateway.NewSet()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				gatewaywatch.Watch(ctx, cs, "crawlers", []string{"a"}, set, gm, logs.Logger(1))
			}()
			t.Cleanup(func() { cancel(); <-done })
			forged := gateway.Entry{Name: "a-evil", URL: "http://u:forged-password-0xf00d@192.0.2.66:3128"}
			write := func(forge bool, es ...gateway.Entry) {
				t.Helper()
				s := listSecret(t, "a", es...)
				cm := &corev1.ConfigMap{ObjectMeta: listMeta("a"), Data: map[string]string{"proxies.json": strconv.Itoa(len(es))}}
				if forge && c.secret {
					c.forge(&s.ObjectMeta)
				} else if forge {
					c.forge(&cm.ObjectMeta)
				}
				if _, err := cs.CoreV1().Secrets("crawlers").Update(ctx, s, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
					_, err = cs.CoreV1().Secrets("crawlers").Create(ctx, s, metav1.CreateOptions{})
					if err != nil {
						t.Fatal(err)
					}
				}
				if _, err := cs.CoreV1().ConfigMaps("crawlers").Update(ctx, cm, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
					if _, err := cs.CoreV1().ConfigMaps("crawlers").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			expect := func(what string, refused float64, want ...string) {
				t.Helper()
				poll.Until(t, wait, func() (bool, string) {
					n := metric(t, reg, "egress_proxies_gateway_lists_refused_total", map[string]string{"pool": "a", "reason": c.reason})
					return slices.Equal(names(set), want) && n == refused, fmt.Sprintf("%s: %s: members %s, refused %v (want %v)\nlogs:\n%s",
						c.why, what, jsonOf(names(set)), n, refused, logs)
				})
			}
			write(true, forged)
			expect("the forgery", 1)
			write(false, gateway.Entry{Name: "a-1", URL: "http://u:p@127.0.0.1:3128"})
			expect("the pool's own list", 1, "a/a-1")
			write(true, forged)
			expect("a forgery in its place", 2)
			if got := logs.String(); strings.Contains(got, "192.0.2.66") || strings.Contains(got, "forged-password") || !strings.Contains(got, "not controlled by the pool") {
				t.Errorf("%s: want the refusal logged without the list's content:\n%s", c.why, got)
			}
		})
	}
}
