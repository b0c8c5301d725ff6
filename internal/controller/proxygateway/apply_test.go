package proxygateway

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller/shared"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

// TestGatewayCreateThatFindsItsNameTaken: the cache has not shown the
// gateway's ServiceAccount, so the reconcile creates it and finds the name
// taken. Only the API server tells whether by the gateway's own object (the
// reconcile before made it; on a loaded machine the next one, woken by
// another object it made, can come before the cache has this one) or by a
// foreign one.
func TestGatewayCreateThatFindsItsNameTaken(t *testing.T) {
	type result struct {
		Requeue time.Duration
		Ready   string // the Ready reason written; "" for none
	}
	for _, tc := range []struct {
		name, reason string
		ours         bool
		want         result
	}{
		{name: "its own object, not cached yet", ours: true,
			reason: "a conflict here would write GatewayConflict and its warning event about the gateway's own object, until something wakes the gateway again",
			want:   result{Requeue: shared.CacheDelay}},
		{name: "a foreign object", ours: false,
			reason: "an object of that name the gateway does not control blocks it, and is never changed",
			want:   result{Requeue: time.Minute, Ready: crawlv1alpha1.ReasonGatewayConflict}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scheme := testenv.Scheme(t)
			gw := &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "crawlers", Name: "front", UID: "gateway-uid"},
				Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"crawl"}}}
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: gw.Namespace, Name: gatewayObjectName(gw.Name)}}
			if tc.ours {
				sa.Labels = gatewayLabels(gw)
				if err := controllerutil.SetControllerReference(gw, sa, scheme); err != nil {
					t.Fatal(err)
				}
			}
			server := crfake.NewClientBuilder().WithScheme(scheme).WithObjects(gw, sa).WithStatusSubresource(gw).Build()
			// The cache, behind the API server: it has not seen the
			// ServiceAccount.
			cache := interceptor.NewClient(server, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, ok := obj.(*corev1.ServiceAccount); ok {
						return apierrors.NewNotFound(schema.GroupResource{Resource: "serviceaccounts"}, key.Name)
					}
					return c.Get(ctx, key, obj, opts...)
				},
			})
			r := &Reconciler{Client: cache, APIReader: server, ResyncInterval: time.Minute, Now: time.Now}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(gw)})
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			var got crawlv1alpha1.ProxyGateway
			if err := server.Get(context.Background(), client.ObjectKeyFromObject(gw), &got); err != nil {
				t.Fatal(err)
			}
			r0 := result{Requeue: res.RequeueAfter}
			if c := apimeta.FindStatusCondition(got.Status.Conditions, crawlv1alpha1.ConditionReady); c != nil {
				r0.Ready = c.Reason
			}
			if diff := cmp.Diff(tc.want, r0); diff != "" {
				t.Errorf("after the create found the name taken (-want +got):\n%s\nwhy: %s", diff, tc.reason)
			}
			var after corev1.ServiceAccount
			if err := server.Get(context.Background(), client.ObjectKeyFromObject(sa), &after); err != nil {
				t.Fatal(err)
			}
			if metav1.IsControlledBy(&after, gw) != tc.ours {
				t.Errorf("the ServiceAccount's controller changed: %+v", after.OwnerReferences)
			}
		})
	}
}
