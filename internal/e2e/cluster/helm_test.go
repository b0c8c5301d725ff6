package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/kubelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// release is the release name docs/helm.md tells users to install, which
// gives the objects config/default's names.
const release = "egress-proxies-operator"

// helm runs the Helm of tools/go.mod (the one `make helm-lint` runs)
// against the cluster.
func helm(ctx context.Context, c *kubelab.Cluster, args ...string) (string, error) {
	root, err := kubelab.RepoRoot()
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
	root, err := kubelab.RepoRoot()
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
	})
}
