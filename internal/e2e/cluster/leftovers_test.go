package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// clusterObject names one object of a cluster: its resource (with group),
// namespace and name.
type clusterObject struct {
	Resource  string
	Namespace string
	Name      string
}

func (o clusterObject) String() string {
	if o.Namespace == "" {
		return o.Resource + " " + o.Name
	}
	return o.Resource + " " + o.Namespace + "/" + o.Name
}

// allObjects lists every object of every resource the API server can list,
// by metadata only: what an uninstall leaves is found by comparing two of
// these, whatever kind it is of, not by looking where one expects it.
func allObjects(ctx context.Context, cfg *rest.Config) (map[clusterObject]metav1.ObjectMeta, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	// Preferred versions only: an object served at two versions is one object.
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		return nil, fmt.Errorf("discovering the served resources: %w", err)
	}
	out := map[clusterObject]metav1.ObjectMeta{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, fmt.Errorf("group version %q: %w", l.GroupVersion, err)
		}
		for _, r := range l.APIResources {
			// Subresources (pods/log) and verbs-only resources (tokenreviews)
			// hold no objects to list.
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			gvr := gv.WithResource(r.Name)
			objs, err := mc.Resource(gvr).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", gvr, err)
			}
			name := gvr.GroupResource().String()
			for _, o := range objs.Items {
				out[clusterObject{Resource: name, Namespace: o.Namespace, Name: o.Name}] = o.ObjectMeta
			}
		}
	}
	return out, nil
}

// keptRule says why an object may outlive an uninstall: docs/helm.md's
// "What an uninstall keeps", or Kubernetes' own doing.
type keptRule struct {
	why   string
	match func(o clusterObject) bool
}

// leftovers are the objects of after that were not in before and that no
// rule explains, each with the rule that let the others stay.
func leftovers(before, after map[clusterObject]metav1.ObjectMeta, rules []keptRule) (unexplained []string, kept map[string][]string) {
	kept = map[string][]string{}
	for o := range after {
		if _, ok := before[o]; ok {
			continue
		}
		explained := false
		for _, r := range rules {
			if r.match(o) {
				kept[r.why] = append(kept[r.why], o.String())
				explained = true
				break
			}
		}
		if !explained {
			unexplained = append(unexplained, o.String())
		}
	}
	slices.Sort(unexplained)
	for _, v := range kept {
		slices.Sort(v)
	}
	return unexplained, kept
}
