package controller

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// reconcileDelete removes every instance of a Proxy that is being deleted,
// then releases the finalizer. Failures of any class are retried with
// backoff and stay visible in the status and in events.
func (r *ProxyReconciler) reconcileDelete(ctx context.Context, p *crawlv1alpha1.Proxy) (observation, error) {
	obs := observation{deleting: true}
	if !controllerutil.ContainsFinalizer(p, Finalizer) {
		return obs, nil
	}
	prov, ok := r.Providers[p.Spec.Provider]
	if !ok {
		if p.Status.InstanceID == "" {
			// The entry is not configured and no instance was ever
			// recorded: there is nothing we could remove.
			return obs, r.releaseFinalizer(ctx, p)
		}
		if _, release := p.Annotations[crawlv1alpha1.AnnotationReleaseFinalizer]; release {
			r.event(p, corev1.EventTypeWarning, eventReleasedWithoutCleanup, "Delete",
				"Released the finalizer as asked by the %s annotation without removing instance %s: provider entry %q is no longer "+
					"configured, so the instance, its disks and its seed (which holds the proxy credentials) may be left on the "+
					"hypervisor; remove them by hand", crawlv1alpha1.AnnotationReleaseFinalizer, p.Status.InstanceID, p.Spec.Provider)
			ctrl.LoggerFrom(ctx).Info("finalizer released by annotation; the instance may be left", "instanceID", p.Status.InstanceID, "provider", p.Spec.Provider)
			return obs, r.releaseFinalizer(ctx, p)
		}
		obs.providerErr = fmt.Errorf("provider entry %q is not configured, so instance %s cannot be removed; "+
			"restore the entry in the providers configuration, or remove the instance by hand and set the annotation %s",
			p.Spec.Provider, p.Status.InstanceID, crawlv1alpha1.AnnotationReleaseFinalizer)
		return obs, nil
	}

	ids, err := r.instancesOf(ctx, p, prov)
	if err != nil {
		obs.providerErr = err
		r.event(p, corev1.EventTypeWarning, eventDeleteFailed, "Delete", "%v", err)
		return obs, nil
	}
	for _, id := range ids {
		if err := prov.Delete(ctx, id); err != nil {
			obs.providerErr = err
			if !provider.IsInProgress(err) {
				r.event(p, corev1.EventTypeWarning, eventDeleteFailed, "Delete", "%v", err)
			}
			return obs, nil
		}
		ctrl.LoggerFrom(ctx).Info("instance deleted", "instanceID", id)
		r.event(p, corev1.EventTypeNormal, eventDeleted, "Delete", "Deleted instance %s", id)
	}
	return obs, r.releaseFinalizer(ctx, p)
}

// instancesOf returns the instances to remove: the recorded one, and, when
// none is recorded, any the provider lists for this Proxy's UID (the create
// may have reached the provider without its ID reaching the status).
func (r *ProxyReconciler) instancesOf(ctx context.Context, p *crawlv1alpha1.Proxy, prov provider.Provider) ([]provider.ID, error) {
	if p.Status.InstanceID != "" {
		id := provider.ID(p.Status.InstanceID)
		if r.ownerChecked.seen(p.UID, id) {
			// Checked at an earlier step of this delete: the provider's
			// Delete keeps to the instance the ID names, whose owner does
			// not change.
			return []provider.ID{id}, nil
		}
		// A recorded ID may name another Proxy's instance (a status edited by
		// hand or copied from another object): never delete that one. Any
		// other answer goes on to Delete, which is idempotent, leaves
		// unmarked instances alone and cleans up what a gone instance left.
		inst, err := prov.Get(ctx, id)
		switch {
		case err == nil && inst.OwnerUID != "" && inst.OwnerUID != string(p.UID):
			r.event(p, corev1.EventTypeWarning, eventForeignInstance, "Delete",
				"Recorded instance %s belongs to another Proxy (owner UID %s): left alone, and this Proxy's own instance counts as gone",
				id, inst.OwnerUID)
			return nil, nil
		case err == nil && inst.OwnerUID == string(p.UID):
			r.ownerChecked.record(p.UID, id)
		}
		return []provider.ID{id}, nil
	}
	all, err := prov.ListByTag(ctx)
	if err != nil {
		return nil, err
	}
	var ids []provider.ID
	for _, in := range all {
		if in.OwnerUID == string(p.UID) {
			ids = append(ids, in.ID)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

func (r *ProxyReconciler) releaseFinalizer(ctx context.Context, p *crawlv1alpha1.Proxy) error {
	r.ownerChecked.Forget(p.UID)
	patch := client.MergeFrom(p.DeepCopy())
	controllerutil.RemoveFinalizer(p, Finalizer)
	if err := client.IgnoreNotFound(r.Client.Patch(ctx, p, patch)); err != nil {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	return nil
}
