package cluster_test

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/kubelab"
)

// previousImage is the tag of the previous commit's image; the current
// one is the Makefile's default IMG, egress-proxies-operator:dev.
const previousImage = "egress-proxies-operator:prev"

// previousTree extracts the parent commit of HEAD into a directory, or says
// why there is none to compare with (no git, no parent, a shallow clone, a
// commit from before `make image` and `make deploy`).
func previousTree(t *testing.T, root string) (dir, why string) {
	t.Helper()
	ctx := t.Context()
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", "--quiet", "HEAD~1").Output(); err != nil || len(out) == 0 {
		return "", "the checkout has no previous commit (no git, the first commit, or a shallow clone)"
	}
	dir = t.TempDir()
	cmd := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", "HEAD~1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := untar(out, dir); err != nil {
		t.Fatalf("extracting HEAD~1: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("git archive HEAD~1: %v", err)
	}
	mk, err := os.ReadFile(filepath.Join(dir, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"\nimage:", "\ndeploy:"} {
		if !strings.Contains(string(mk), target) {
			return "", "the previous commit has no make" + strings.TrimSuffix(target, ":") + " target to install it with"
		}
	}
	return dir, ""
}

// untar writes the regular files and directories of a tar stream under dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return fmt.Errorf("%q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// makeIn runs make in dir, a tree that may not be this checkout.
func makeIn(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", "-C", dir}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("make %s in %s: %w:\n%s", strings.Join(args, " "), dir, err, out)
	}
	return nil
}

// TestUpgradeFromThePreviousCommit installs the previous commit's build
// with its own `make image` and `make deploy`, creates a Proxy, then
// deploys this commit the same way: the Proxy keeps its instance and its
// pod, and still serves; a new Proxy serves too.
func TestUpgradeFromThePreviousCommit(t *testing.T) {
	root, err := kubelab.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The tier's checks first, so that a plain go test skips before any
	// build.
	tierOn(t)
	prev, why := previousTree(t, root)
	if why != "" {
		t.Skip("no previous build to upgrade from: " + why)
	}
	ctx := t.Context()
	began := time.Now()
	prevTar := filepath.Join(t.TempDir(), "prev.tar")
	if err := makeIn(ctx, prev, "image", "IMG="+previousImage, "IMAGE_TAR="+prevTar); err != nil {
		t.Fatal(err)
	}
	t.Logf("the previous commit's make image: %s", time.Since(began).Round(time.Millisecond))
	c := tierCluster(t, prevTar)
	cl := newClient(t, c)
	tg := startTarget(t, c)
	cfg := fmt.Sprintf(providersYAML, c.HostIP)
	deploy := func(tree, image string) {
		t.Helper()
		// The previous tree is a throwaway copy: its providers.yaml is
		// edited in place, which works whether or not its Makefile knows
		// CONFIG_DIR.
		if err := os.WriteFile(filepath.Join(tree, "config", "manager", "providers.yaml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := makeIn(ctx, tree, "deploy", "IMG="+image, "KUBECTL="+filepath.Join(c.Bin, "kubectl"), "KUBECONFIG="+c.Kubeconfig); err != nil {
			t.Fatal(err)
		}
		if out, err := c.Kubectl(ctx, "", "-n", operatorNS, "rollout", "status", "deployment/"+deployment, "--timeout="+deployTimeout.String()); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	deploy(prev, previousImage)
	old := serves(t, cl, proxy("before-upgrade", "cluster", 3128), tg)
	podUID := func() types.UID {
		pods := &corev1.PodList{}
		if err := cl.List(ctx, pods, client.InNamespace(podsNS)); err != nil || len(pods.Items) != 1 {
			t.Fatalf("want the one pod of Proxy %s: %d pods, %v", old.Name, len(pods.Items), err)
		}
		return pods.Items[0].UID
	}
	before := podUID()

	// This commit, installed over it the same way, from a copy of config/.
	cur := t.TempDir()
	if err := os.CopyFS(filepath.Join(cur, "config"), os.DirFS(filepath.Join(root, "config"))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cur, "config", "manager", "providers.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := kubelab.Make(ctx, "deploy", "CONFIG_DIR="+filepath.Join(cur, "config"), "INSTALLER="+filepath.Join(cur, "install.yaml"),
		"KUBECTL="+filepath.Join(c.Bin, "kubectl"), "KUBECONFIG="+c.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(ctx, "", "-n", operatorNS, "rollout", "status", "deployment/"+deployment, "--timeout="+deployTimeout.String()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, p := range operatorPods(t, cl) {
		if img := p.Spec.Containers[0].Image; !strings.HasSuffix(img, "egress-proxies-operator:dev") {
			t.Fatalf("operator pod %s runs %s after the upgrade, want this commit's egress-proxies-operator:dev", p.Name, img)
		}
	}
	serves(t, cl, proxy("after-upgrade", "cluster", 3128), tg)
	got := &crawlv1alpha1.Proxy{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(old), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.InstanceID != old.Status.InstanceID || got.Status.Phase != crawlv1alpha1.ProxyPhaseReady {
		t.Errorf("after the upgrade Proxy %s is %s on instance %q; want Ready on %q, not re-created", old.Name, got.Status.Phase, got.Status.InstanceID, old.Status.InstanceID)
	}
	pods := &corev1.PodList{}
	if err := cl.List(ctx, pods, client.InNamespace(podsNS)); err != nil {
		t.Fatal(err)
	}
	kept := false
	for _, p := range pods.Items {
		kept = kept || p.UID == before
	}
	if !kept || len(pods.Items) != 2 {
		t.Errorf("after the upgrade: %d proxy pods, Proxy %s's pod kept: %v; want 2 and kept", len(pods.Items), old.Name, kept)
	}
}
