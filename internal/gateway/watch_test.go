package gateway_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
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
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "crawlers", Name: published.ListName(pool)},
		Data: map[string][]byte{published.ListKeyJSON: js}}
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
		gateway.Watch(ctx, cs, "crawlers", []string{"a", "b"}, set, nil, logr.Discard())
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
