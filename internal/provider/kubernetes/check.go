package kubernetes

import (
	"context"
	"fmt"
	"sort"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Reasons of the kubernetes provider's verdicts.
const (
	ReasonNamespaceReady    = "NamespaceReady"
	ReasonNamespaceNotFound = "NamespaceNotFound"
	ReasonForbidden         = "Forbidden"
	ReasonSchedulable       = "Schedulable"
	ReasonNoSchedulableNode = "NoSchedulableNode"
	ReasonAPIError          = "APIError"
)

// Check implements provider.Checker: one verdict for the namespace (it
// exists and the operator may create pods there) and one per zone (at least
// one Ready, schedulable node matches the zone's selector).
func (p *Provider) Check(ctx context.Context) []provider.Verdict {
	out := []provider.Verdict{p.checkNamespace(ctx)}
	zones := append([]string(nil), p.entry.Zones...)
	sort.Strings(zones)
	for _, z := range zones {
		out = append(out, p.checkZone(ctx, z))
	}
	return out
}

func (p *Provider) checkNamespace(ctx context.Context) provider.Verdict {
	start := time.Now()
	v := provider.Verdict{Target: "namespace/" + p.block.Namespace}
	var ns corev1.Namespace
	err := p.api.Get(ctx, client.ObjectKey{Name: p.block.Namespace}, &ns)
	switch {
	case apierrors.IsNotFound(err):
		v.Reason, v.Message = ReasonNamespaceNotFound, fmt.Sprintf("Namespace %s does not exist; create it.", p.block.Namespace)
		return finish(v, start)
	case err != nil:
		v.Reason, v.Message = ReasonAPIError, fmt.Sprintf("Reading namespace %s: %v", p.block.Namespace, err)
		return finish(v, start)
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: p.block.Namespace, Verb: "create", Resource: "pods"},
	}}
	if err := p.c.Create(ctx, review); err != nil {
		v.Reason, v.Message = ReasonAPIError, fmt.Sprintf("Asking whether pods may be created: %v", err)
		return finish(v, start)
	}
	if !review.Status.Allowed {
		v.Reason, v.Message = ReasonForbidden, fmt.Sprintf("The operator may not create pods in namespace %s; grant it the Role in docs/kubernetes.md.", p.block.Namespace)
		return finish(v, start)
	}
	v.Healthy, v.Reason, v.Message = true, ReasonNamespaceReady, fmt.Sprintf("Pods can be created in namespace %s.", p.block.Namespace)
	return finish(v, start)
}

func (p *Provider) checkZone(ctx context.Context, zone string) provider.Verdict {
	start := time.Now()
	v := provider.Verdict{Target: "zone/" + zone}
	selector := p.block.NodeSelector(zone)
	var nodes corev1.NodeList
	if err := p.api.List(ctx, &nodes, client.MatchingLabels(selector)); err != nil {
		v.Reason, v.Message = ReasonAPIError, fmt.Sprintf("Listing nodes of zone %s: %v", zone, err)
		return finish(v, start)
	}
	schedulable := 0
	for i := range nodes.Items {
		if nodeSchedulable(&nodes.Items[i]) {
			schedulable++
		}
	}
	if schedulable == 0 {
		v.Reason = ReasonNoSchedulableNode
		v.Message = fmt.Sprintf("No Ready, schedulable node matches %v (%d nodes match).", selector, len(nodes.Items))
		return finish(v, start)
	}
	v.Healthy, v.Reason = true, ReasonSchedulable
	v.Message = fmt.Sprintf("%d of %d matching nodes are Ready and schedulable.", schedulable, len(nodes.Items))
	return finish(v, start)
}

func finish(v provider.Verdict, start time.Time) provider.Verdict {
	v.Latency = time.Since(start)
	return v
}

func nodeSchedulable(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
