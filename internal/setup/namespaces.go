package setup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// NamespaceRole is the ClusterRole (config/rbac/role.yaml, generated from
// the markers with roleName=namespace-role) that holds the operator's rights
// in a namespace it serves. config/namespaces binds it with a RoleBinding in
// each served namespace; config/all-namespaces with a ClusterRoleBinding.
const NamespaceRole = "namespace-role"

// ParseNamespaces reads the --namespaces flag: a comma-separated list of
// namespace names, returned sorted and without duplicates. An empty value
// (or only commas and spaces) means every namespace and gives nil.
func ParseNamespaces(s string) ([]string, error) {
	var out []string
	var errs []error
	for n := range strings.SplitSeq(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if msgs := validation.IsDNS1123Label(n); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%q is not a namespace name: %s", n, strings.Join(msgs, "; ")))
			continue
		}
		out = append(out, n)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// namespaceNeeds are the rights CheckNamespaceAccess looks for in each
// served namespace: a sample of namespace-role (the caches' watches, the
// credentials Secret), not all of it.
var namespaceNeeds = []authorizationv1.ResourceAttributes{
	{Group: crawlv1alpha1.GroupVersion.Group, Resource: "proxies", Verb: "watch"},
	{Group: crawlv1alpha1.GroupVersion.Group, Resource: "proxypools", Verb: "watch"},
	{Resource: "configmaps", Verb: "watch"},
	{Resource: "secrets", Verb: "create"},
}

// accessCheckTimeout bounds CheckNamespaceAccess: an API server that does
// not answer stops the start with an error rather than a hang.
const accessCheckTimeout = 30 * time.Second

// CheckNamespaceAccess asks the API server (SelfSubjectAccessReview, which
// every authenticated user may create) whether the operator holds a sample
// of its rights in each of the namespaces it serves, and names what is
// missing where. The binary calls it before New: without those rights the
// manager's caches never sync, and the operator would hang on a forbidden
// watch instead of saying what is missing.
func CheckNamespaceAccess(ctx context.Context, cfg *rest.Config, namespaces []string) error {
	if len(namespaces) == 0 {
		return nil
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("checking the operator's rights: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, accessCheckTimeout)
	defer cancel()
	var errs []error
	for _, ns := range namespaces {
		var missing []string
		for _, need := range namespaceNeeds {
			attrs := need
			attrs.Namespace = ns
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}
			if err := c.Create(ctx, review); err != nil {
				return fmt.Errorf("checking the operator's rights in namespace %s: %w", ns, err)
			}
			if !review.Status.Allowed {
				missing = append(missing, need.Verb+" "+need.Resource)
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("namespace %s: the operator may not %s there; bind the ClusterRole %s (prefixed "+
				"egress-proxies-operator- when installed) to its ServiceAccount with a RoleBinding in %s (config/namespaces), "+
				"or take %s off --namespaces", ns, strings.Join(missing, ", "), NamespaceRole, ns, ns))
		}
	}
	return errors.Join(errs...)
}
