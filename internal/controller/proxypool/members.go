package proxypool

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// members lists the Proxies this pool controls.
func (r *Reconciler) members(ctx context.Context, pool *crawlv1alpha1.ProxyPool) ([]crawlv1alpha1.Proxy, error) {
	var list crawlv1alpha1.ProxyList
	if err := r.Client.List(ctx, &list, client.InNamespace(pool.Namespace), client.MatchingLabels{crawlv1alpha1.LabelPool: pool.Name}); err != nil {
		return nil, fmt.Errorf("listing pool members: %w", err)
	}
	out := list.Items[:0]
	for _, p := range list.Items {
		if metav1.IsControlledBy(&p, pool) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b crawlv1alpha1.Proxy) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// memberNames are the names of the members listed.
func memberNames(proxies []crawlv1alpha1.Proxy) []string {
	names := make([]string, len(proxies))
	for i := range proxies {
		names[i] = proxies[i].Name
	}
	return names
}

// memberOf summarises a member Proxy for the plan.
func memberOf(p *crawlv1alpha1.Proxy) poolMember {
	slot, errSlot := strconv.Atoi(p.Labels[crawlv1alpha1.LabelPoolSlot])
	gen, errGen := strconv.Atoi(p.Labels[crawlv1alpha1.LabelPoolGeneration])
	if errSlot != nil || errGen != nil {
		// Someone edited the labels: a slot outside the pool, so that the
		// member is deleted and the slot filled again.
		slot, gen = -1, 0
	}
	m := poolMember{
		name: p.Name, slot: slot, gen: gen, hash: p.Labels[crawlv1alpha1.LabelTemplateHash],
		created: p.CreationTimestamp.Time, deleting: !p.DeletionTimestamp.IsZero(),
		ready:  apimeta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionReady),
		failed: p.Status.Phase == crawlv1alpha1.ProxyPhaseFailed,
	}
	_, m.rotationRequested = p.Annotations[crawlv1alpha1.AnnotationRotationRequested]
	m.serving = isServing(p)
	if c := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionServing); c != nil && c.Reason == crawlv1alpha1.ReasonProbeFailed {
		m.probeFailed = true
	}
	return m
}

// isServing reports whether a member belongs in the published list.
func isServing(p *crawlv1alpha1.Proxy) bool {
	return p.DeletionTimestamp.IsZero() && p.Status.Phase == crawlv1alpha1.ProxyPhaseReady && p.Status.Address != "" &&
		apimeta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionServing)
}

// newMember builds the Proxy a planned create makes: its slot and
// generation, with the placement and template hash the plan carries.
func (r *Reconciler) newMember(pool *crawlv1alpha1.ProxyPool, c memberCreate) (*crawlv1alpha1.Proxy, error) {
	tpl := pool.Spec.Template
	pl, slot, serial := c.placement.entry, c.slot, c.gen
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   pool.Namespace,
			Name:        memberName(pool.Name, string(pool.UID), serial),
			Labels:      maps.Clone(tpl.Metadata.Labels),
			Annotations: maps.Clone(tpl.Metadata.Annotations),
		},
		Spec: *tpl.Spec.DeepCopy(),
	}
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[crawlv1alpha1.LabelPool] = pool.Name
	p.Labels[crawlv1alpha1.LabelPoolSlot] = strconv.Itoa(slot)
	p.Labels[crawlv1alpha1.LabelPoolGeneration] = strconv.Itoa(serial)
	p.Labels[crawlv1alpha1.LabelTemplateHash] = c.placement.hash
	delete(p.Annotations, crawlv1alpha1.AnnotationRotationRequested)
	p.Spec.Provider, p.Spec.Zone = pl.Provider, pl.Zone
	if err := controllerutil.SetControllerReference(pool, p, r.Client.Scheme()); err != nil {
		return nil, fmt.Errorf("owning member %s: %w", p.Name, err)
	}
	return p, nil
}

// templateHash is a short hash of what a member of placement pl is made
// from; a member with another hash is rotated.
func templateHash(pool *crawlv1alpha1.ProxyPool, pl crawlv1alpha1.PlacementEntry) string {
	spec := pool.Spec.Template.Spec.DeepCopy()
	spec.Provider, spec.Zone = pl.Provider, pl.Zone
	b, _ := json.Marshal(struct { //nolint:errchkjson // plain structs of strings and maps always marshal.
		Meta crawlv1alpha1.ProxyTemplateMetadata
		Spec *crawlv1alpha1.ProxySpec
	}{pool.Spec.Template.Metadata, spec})
	h := fnv.New32a()
	_, _ = h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// poolSelector is status.selector: the members' label selector.
func poolSelector(pool *crawlv1alpha1.ProxyPool) string {
	return labels.SelectorFromSet(labels.Set{crawlv1alpha1.LabelPool: pool.Name}).String()
}
