package proxypool

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// markForRotation annotates the members named by the rotate annotation and
// then removes the annotation, so that the request survives a restart
// between the two and is acted on once.
func (r *Reconciler) markForRotation(ctx context.Context, pool *crawlv1alpha1.ProxyPool, proxies []crawlv1alpha1.Proxy, targets map[string]bool, now time.Time) error {
	for i := range proxies {
		p := &proxies[i]
		if !targets[p.Name] || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if _, marked := p.Annotations[crawlv1alpha1.AnnotationRotationRequested]; marked {
			continue
		}
		patch := client.MergeFrom(p.DeepCopy())
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[crawlv1alpha1.AnnotationRotationRequested] = now.UTC().Format(time.RFC3339)
		if err := client.IgnoreNotFound(r.Client.Patch(ctx, p, patch)); err != nil {
			return fmt.Errorf("marking member %s for rotation: %w", p.Name, err)
		}
	}
	r.event(pool, corev1.EventTypeNormal, eventRotationRequested, "Rotate", "Rotating %d member(s) as asked by the %s annotation", len(targets), crawlv1alpha1.AnnotationRotate)
	patch := client.MergeFrom(pool.DeepCopy())
	delete(pool.Annotations, crawlv1alpha1.AnnotationRotate)
	if err := r.Client.Patch(ctx, pool, patch); err != nil {
		return fmt.Errorf("removing the rotate annotation: %w", err)
	}
	return nil
}

// parseRotateAnnotation reads AnnotationRotate: nil without it; every
// member for "all"; otherwise the named members, each of which must exist.
func parseRotateAnnotation(annotations map[string]string, proxies []crawlv1alpha1.Proxy) (map[string]bool, error) {
	v, ok := annotations[crawlv1alpha1.AnnotationRotate]
	if !ok {
		return nil, nil
	}
	existing := map[string]bool{}
	for _, p := range proxies {
		if p.DeletionTimestamp.IsZero() {
			existing[p.Name] = true
		}
	}
	v = strings.TrimSpace(v)
	if v == "all" {
		return existing, nil
	}
	if v == "" {
		return nil, fmt.Errorf("annotation %s is empty: set it to \"all\" or to a comma-separated list of member names", crawlv1alpha1.AnnotationRotate)
	}
	targets := map[string]bool{}
	var bad, unknown []string
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		switch {
		case len(validation.IsDNS1123Subdomain(name)) > 0:
			bad = append(bad, strconv.Quote(name))
		case !existing[name]:
			unknown = append(unknown, name)
		default:
			targets[name] = true
		}
	}
	switch {
	case len(bad) > 0:
		return nil, fmt.Errorf("annotation %s: %s is not a member name; set it to \"all\" or to a comma-separated list of member names", crawlv1alpha1.AnnotationRotate, strings.Join(bad, ", "))
	case len(unknown) > 0:
		return nil, fmt.Errorf("annotation %s names %s, which is not a member of this pool (members: %s)", crawlv1alpha1.AnnotationRotate,
			strings.Join(unknown, ", "), strings.Join(slices.Sorted(maps.Keys(existing)), ", "))
	}
	return targets, nil
}

// rotationBudgets are maxSurge (default 1, rounded up) and maxUnavailable
// (default 0, rounded down) as numbers of members.
func rotationBudgets(pool *crawlv1alpha1.ProxyPool) (int, int) {
	surge, unavailable := intstr.FromInt32(1), intstr.FromInt32(0)
	if rot := pool.Spec.Rotation; rot != nil {
		if rot.MaxSurge != nil {
			surge = *rot.MaxSurge
		}
		if rot.MaxUnavailable != nil {
			unavailable = *rot.MaxUnavailable
		}
	}
	n := int(replicasOf(pool))
	s, errS := intstr.GetScaledValueFromIntOrPercent(&surge, n, true)
	u, errU := intstr.GetScaledValueFromIntOrPercent(&unavailable, n, false)
	if errS != nil {
		s = 1
	}
	if errU != nil {
		u = 0
	}
	if s == 0 && u == 0 {
		// Admission refuses this; a percentage of a small pool can still
		// round to it. One surge member keeps rotations moving.
		s = 1
	}
	return s, u
}
