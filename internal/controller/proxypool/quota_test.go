package proxypool_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// TestResourceQuotaOnProxiesHolds is docs/security.md's quota guidance
// checked: an object-count quota on Proxies bounds a team's Proxies, the
// members its pools make included, whoever creates them.
func TestResourceQuotaOnProxiesHolds(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	const limit = 3
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxies"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			"count/proxies.crawl.example.com":    resource.MustParse(strconv.Itoa(limit)),
			"count/proxypools.crawl.example.com": resource.MustParse("1"),
		}},
	}
	if err := k8s.Create(ctx, q); err != nil {
		t.Fatal(err)
	}
	// envtest runs no quota controller: the status it would write (nothing
	// used yet) is written here, after which the API server's admission
	// counts every create against it.
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{
		"count/proxies.crawl.example.com": resource.MustParse("0"), "count/proxypools.crawl.example.com": resource.MustParse("0"),
	}}
	if err := k8s.Status().Update(ctx, q); err != nil {
		t.Fatal(err)
	}
	startPoolOperator(t, ns)

	for i := range 2 {
		if err := k8s.Create(ctx, newProxy(ns, fmt.Sprintf("lone-%d", i))); err != nil {
			t.Fatalf("Proxy %d of %d: %v", i+1, limit, err)
		}
	}
	// The pool asks for more members than the quota leaves.
	pool := newPool(ns, "crowd", 3)
	if err := k8s.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, newPool(ns, "second", 1)); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
		t.Errorf("a second pool past count/proxypools=1: error %v, want Forbidden exceeded quota", err)
	}
	count := func() int {
		var list crawlv1alpha1.ProxyList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	eventually(t, 20*time.Second, func() (bool, string) {
		return count() == limit, fmt.Sprintf("%d Proxies, want the pool to have made the one the quota leaves", count())
	})
	consistently(t, 2*time.Second, func() (bool, string) {
		return count() == limit, fmt.Sprintf("%d Proxies: the quota of %d did not hold against the operator's creates", count(), limit)
	})
	err := k8s.Create(ctx, newProxy(ns, "one-too-many"))
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
		t.Errorf("a Proxy past the quota: error %v, want Forbidden exceeded quota", err)
	}
}
