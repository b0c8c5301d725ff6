package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/kubelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// release is the release name docs/helm.md tells users to install, which
// gives the objects config/default's names.
const release = "egress-proxies-operator"

// Why an object may outlive `helm uninstall`: docs/helm.md's "What an
// uninstall keeps", then what Kubernetes itself makes or keeps.
const (
	keepsCRDs       = "the CRDs (helm.sh/resource-policy: keep)"
	keepsKey        = "the ownership key, which the operator made and Helm never owned"
	keepsNamespaces = "the namespaces --create-namespace and the chart's namespaces made (resource-policy: keep)"
	keepsInstances  = "the objects of the kept CRDs the operator made (ProviderHealth)"
	keepsLease      = "the leader-election Lease, which the operator made"
	keepsPerNS      = "Kubernetes' own objects in every namespace (the default ServiceAccount, the root CA ConfigMap)"
	keepsAPIService = "the APIService the API server registers for a served CRD group version"
	keepsNodeLease  = "the kubelet's heartbeat Lease (kube-node-lease), which may appear after the first listing"
	keepsEvents     = "events, which the API server expires (--event-ttl)"
)

// keptNamespaces are the release namespace and the chart's own.
var keptNamespaces = []string{operatorNS, podsNS, servedNS}

// uninstallKeeps are the rules, in the order of keepsCRDs and the rest.
var uninstallKeeps = []keptRule{
	{keepsCRDs, func(o clusterObject) bool {
		return o.Resource == "customresourcedefinitions.apiextensions.k8s.io" && strings.HasSuffix(o.Name, "."+crawlv1alpha1.GroupVersion.Group)
	}},
	{keepsKey, func(o clusterObject) bool {
		return o == clusterObject{Resource: "secrets", Namespace: operatorNS, Name: ownership.DefaultKeySecret}
	}},
	{keepsNamespaces, func(o clusterObject) bool {
		return o.Resource == "namespaces" && slices.Contains(keptNamespaces, o.Name)
	}},
	{keepsInstances, func(o clusterObject) bool {
		return o.Resource == "providerhealths."+crawlv1alpha1.GroupVersion.Group
	}},
	{keepsLease, func(o clusterObject) bool {
		return o == clusterObject{Resource: "leases.coordination.k8s.io", Namespace: operatorNS, Name: setup.LeaderElectionID}
	}},
	{keepsPerNS, func(o clusterObject) bool {
		return slices.Contains(keptNamespaces, o.Namespace) &&
			(o.Resource == "serviceaccounts" && o.Name == "default" || o.Resource == "configmaps" && o.Name == "kube-root-ca.crt")
	}},
	{keepsAPIService, func(o clusterObject) bool {
		return o.Resource == "apiservices.apiregistration.k8s.io" && o.Name == crawlv1alpha1.GroupVersion.Version+"."+crawlv1alpha1.GroupVersion.Group
	}},
	{keepsNodeLease, func(o clusterObject) bool {
		return o.Resource == "leases.coordination.k8s.io" && o.Namespace == "kube-node-lease"
	}},
	{keepsEvents, func(o clusterObject) bool {
		return o.Resource == "events" || o.Resource == "events.events.k8s.io"
	}},
}

// helm runs the Helm of tools/go.mod (the one `make helm-lint` runs)
// against the cluster.
func helm(ctx context.Context, c *kubelab.Cluster, args ...string) (string, error) {
	root, err := modroot.Find()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "-modfile=" + filepath.Join(root, "tools", "go.mod"), "helm",
		"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w:\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// TestHelmInstall installs the chart as docs/helm.md says, proves a Proxy
// serves, upgrades the release with a changed value (the operator rolls,
// the Proxy's pod stays), and uninstalls it: the operator goes, the CRDs
// and the ownership key stay, as "What an uninstall keeps" promises.
func TestHelmInstall(t *testing.T) {
	// The tier's clusters run side by side, each in a slot of its own
	// (kubelab): most of each test is waiting on its cluster.
	t.Parallel()
	c := tierCluster(t)
	ctx := t.Context()
	root, err := modroot.Find()
	if err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(root, "charts", "egress-proxies-operator")
	values := filepath.Join(t.TempDir(), "values.yaml")
	// The same providers configuration as the kustomize install, inline.
	cfg := fmt.Sprintf(providersYAML, c.HostIP)
	if err := os.WriteFile(values, []byte("providers:\n  config: |\n    "+strings.ReplaceAll(strings.TrimSpace(cfg), "\n", "\n    ")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// What the cluster holds before the chart: what an uninstall leaves is
	// what is new since, whatever its kind.
	beforeInstall, err := allObjects(ctx, c.Config)
	if err != nil {
		t.Fatal(err)
	}
	install := []string{"--namespace", operatorNS, "--set", "image.repository=egress-proxies-operator", "--set", "image.tag=dev",
		"-f", values, "--wait", "--timeout", deployTimeout.String()}
	if out, err := helm(ctx, c, append([]string{"install", release, chart, "--create-namespace"}, install...)...); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("helm install:\n%s", out)
	}
	cl := newClient(t, c)
	tg := startTarget(t, c)
	p := serves(t, cl, proxy("helm-web", "cluster", 3128), tg)
	before := onlyProxyPod(t, cl, p)
	operatorBefore := operatorPods(t, cl)

	t.Run("upgrade", func(t *testing.T) {
		ctx := t.Context()
		// A changed flag rolls the operator; the fleet must not notice.
		if _, err := helm(ctx, c, append([]string{"upgrade", release, chart, "--set", "controller.resyncInterval=4m"}, install...)...); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, deployTimeout, func() (bool, string) {
			now := operatorPods(t, cl)
			if len(now) != 1 || len(operatorBefore) != 1 || now[0].UID == operatorBefore[0].UID {
				return false, fmt.Sprintf("%d operator pods, the first still the one before the upgrade", len(now))
			}
			return strings.Contains(strings.Join(now[0].Spec.Containers[0].Args, " "), "--resync-interval=4m"), "the new pod lacks --resync-interval=4m"
		})
		serves(t, cl, proxy("helm-after-upgrade", "cluster", 3128), tg)
		keptAcrossUpgrade(t, cl, p, before, 2)
	})

	t.Run("uninstall", func(t *testing.T) {
		ctx := t.Context()
		// The Proxies go while the operator runs, as docs/helm.md asks.
		if err := cl.DeleteAllOf(ctx, &crawlv1alpha1.Proxy{}, client.InNamespace(servedNS)); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, goneTimeout, func() (bool, string) {
			pods := &corev1.PodList{}
			if err := cl.List(ctx, pods, client.InNamespace(podsNS)); err != nil {
				return false, err.Error()
			}
			return len(pods.Items) == 0, fmt.Sprintf("%d proxy pods left", len(pods.Items))
		})
		if _, err := helm(ctx, c, "uninstall", release, "--namespace", operatorNS, "--wait", "--timeout", goneTimeout.String()); err != nil {
			t.Fatal(err)
		}
		err := cl.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: deployment}, &appsv1.Deployment{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("the operator's Deployment after uninstall: %v, want NotFound", err)
		}
		for _, crd := range []string{"proxies", "proxypools", "providerhealths", "proxygateways"} {
			if err := cl.Get(ctx, client.ObjectKey{Name: crd + ".crawl.example.com"}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
				t.Errorf("CRD %s after uninstall: %v; the chart keeps CRDs by default", crd, err)
			}
		}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: ownership.DefaultKeySecret}, &corev1.Secret{}); err != nil {
			t.Errorf("the ownership key after uninstall: %v; it must stay, or a reinstall re-creates the fleet", err)
		}
		// Nothing else stays: every object the install made, or the operator
		// made while it ran, is gone, or docs/helm.md says it stays. Owned
		// objects (ReplicaSets, EndpointSlices, the pods) go a little after
		// their owners, so the comparison is polled.
		var kept map[string][]string
		poll.Until(t, goneTimeout, func() (bool, string) {
			after, err := allObjects(ctx, c.Config)
			if err != nil {
				return false, err.Error()
			}
			var left []string
			left, kept = leftovers(beforeInstall, after, uninstallKeeps)
			return len(left) == 0, fmt.Sprintf("left after uninstall, and not in docs/helm.md's \"What an uninstall keeps\": %v", left)
		})
		for why, objs := range kept {
			if len(objs) > 10 {
				t.Logf("kept after uninstall, %s: %d objects", why, len(objs))
			} else {
				t.Logf("kept after uninstall, %s: %v", why, objs)
			}
		}
		if len(kept[keepsCRDs]) != 4 {
			t.Errorf("CRDs kept: %v, want the 4 of crawl.example.com", kept[keepsCRDs])
		}
	})
}
