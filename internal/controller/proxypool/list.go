package proxypool

import (
	"bytes"
	"context"
	"fmt"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller/shared"
)

// listedMember is a member in the published list.
type listedMember struct {
	name, egressIP string
}

// publish writes the Serving members (those not leaving) to the pool's
// Secret and ConfigMap. Each is written with one update of its whole data,
// so a reader sees the old list or the new one, never half of each; a
// mounted Secret is swapped atomically by the kubelet. It returns the
// members listed, and whether a member's credentials were not yet readable
// (the caller looks again soon).
func (r *Reconciler) publish(ctx context.Context, pool *crawlv1alpha1.ProxyPool, proxies []crawlv1alpha1.Proxy, leaving map[string]bool) ([]listedMember, bool, error) {
	var withCreds, without []published.ListEntry
	var listed []listedMember
	retry := false
	for i := range proxies {
		p := &proxies[i]
		if !isServing(p) || leaving[p.Name] {
			continue
		}
		var user *url.Userinfo
		if p.Status.CredentialsSecretName != "" {
			var s corev1.Secret
			err := r.secrets().Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Status.CredentialsSecretName}, &s)
			if err != nil || len(s.Data[published.CredentialsKeyUsername]) == 0 || len(s.Data[published.CredentialsKeyPassword]) == 0 {
				// Leave it out rather than publish a URL that would be
				// refused with 407.
				retry = true
				continue
			}
			user = url.UserPassword(string(s.Data[published.CredentialsKeyUsername]), string(s.Data[published.CredentialsKeyPassword]))
		}
		e := published.ListEntry{Name: p.Name, URL: published.ProxyURL(p.Status.Address, p.Spec.Port, user), Provider: p.Spec.Provider, Zone: p.Status.Zone, EgressIP: p.Status.EgressIP, Created: p.CreationTimestamp.UTC(), Engine: r.Engines[p.Spec.Provider]}
		withCreds = append(withCreds, e)
		e.URL = published.ProxyURL(p.Status.Address, p.Spec.Port, nil)
		without = append(without, e)
		listed = append(listed, listedMember{name: p.Name, egressIP: p.Status.EgressIP})
	}
	txt, js := published.RenderList(withCreds)
	changedSecret, err := r.writeListObject(ctx, pool, &corev1.Secret{Type: corev1.SecretTypeOpaque}, txt, js)
	if err != nil {
		return nil, false, err
	}
	txt, js = published.RenderList(without)
	changedCM, err := r.writeListObject(ctx, pool, &corev1.ConfigMap{}, txt, js)
	if err != nil {
		return nil, false, err
	}
	if changedSecret || changedCM {
		r.event(pool, corev1.EventTypeNormal, eventPublishedListUpdated, "Publish", "The published list has %d proxies", len(listed))
	}
	return listed, retry, nil
}

// secrets is how the pool reconciler reads Secrets: by name from the API
// server, never through a cache (as the Proxy reconciler does, controller.ProxyReconciler).
func (r *Reconciler) secrets() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// writeListObject creates or updates the pool's Secret or ConfigMap with the
// two keys. It reports whether it wrote anything. An object of that name
// that the pool does not control is never changed.
func (r *Reconciler) writeListObject(ctx context.Context, pool *crawlv1alpha1.ProxyPool, obj client.Object, txt, js []byte) (bool, error) {
	key := types.NamespacedName{Namespace: pool.Namespace, Name: published.ListName(pool.Name)}
	kind := "ConfigMap"
	var reader client.Reader = r.Client
	if _, ok := obj.(*corev1.Secret); ok {
		kind, reader = "Secret", r.secrets()
	}
	err := reader.Get(ctx, key, obj)
	switch {
	case apierrors.IsNotFound(err):
		obj.SetNamespace(key.Namespace)
		obj.SetName(key.Name)
		obj.SetLabels(map[string]string{shared.LabelManagedBy: shared.LabelManagedByValue, crawlv1alpha1.LabelPool: pool.Name})
		setListData(obj, txt, js)
		if err := controllerutil.SetControllerReference(pool, obj, r.Client.Scheme()); err != nil {
			return false, fmt.Errorf("owning the list %s: %w", kind, err)
		}
		if err := r.Client.Create(ctx, obj); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return false, fmt.Errorf("the list %s %s exists and is not managed by this pool (the operator never changes it; delete or rename it)", kind, key.Name)
			}
			return false, fmt.Errorf("creating the list %s: %w", kind, err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading the list %s: %w", kind, err)
	}
	if !metav1.IsControlledBy(obj, pool) {
		return false, fmt.Errorf("the list %s %s exists and is not controlled by this pool (the operator never changes it; delete or rename it)", kind, key.Name)
	}
	if listDataEqual(obj, txt, js) {
		return false, nil
	}
	setListData(obj, txt, js)
	// Update, not patch: the whole data in one write, guarded by the
	// resourceVersion we read.
	if err := r.Client.Update(ctx, obj); err != nil {
		return false, fmt.Errorf("updating the list %s: %w", kind, err)
	}
	return true, nil
}

func setListData(obj client.Object, txt, js []byte) {
	switch o := obj.(type) {
	case *corev1.Secret:
		o.Data = map[string][]byte{published.ListKeyText: txt, published.ListKeyJSON: js}
		o.StringData = nil
	case *corev1.ConfigMap:
		o.Data = map[string]string{published.ListKeyText: string(txt), published.ListKeyJSON: string(js)}
	}
}

func listDataEqual(obj client.Object, txt, js []byte) bool {
	switch o := obj.(type) {
	case *corev1.Secret:
		return len(o.Data) == 2 && bytes.Equal(o.Data[published.ListKeyText], txt) && bytes.Equal(o.Data[published.ListKeyJSON], js)
	case *corev1.ConfigMap:
		return len(o.Data) == 2 && o.Data[published.ListKeyText] == string(txt) && o.Data[published.ListKeyJSON] == string(js)
	}
	return false
}
