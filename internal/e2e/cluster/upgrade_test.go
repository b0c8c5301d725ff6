package cluster_test

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/kubelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
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

// TestUpgradeFromThePreviousCommit installs the previous commit's build
// with its own `make image` and `make deploy`, creates a Proxy, then
// deploys this commit the same way: the Proxy keeps its instance and its
// pod, and still serves; a new Proxy serves too.
func TestUpgradeFromThePreviousCommit(t *testing.T) {
	// The tier's clusters run side by side, each in a slot of its own
	// (kubelab): most of each test is waiting on its cluster.
	t.Parallel()
	root, err := modroot.Find()
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
	if err := kubelab.MakeIn(ctx, prev, "image", "IMG="+previousImage, "IMAGE_TAR="+prevTar); err != nil {
		t.Fatal(err)
	}
	t.Logf("the previous commit's make image: %s", time.Since(began).Round(time.Millisecond))
	c := tierCluster(t, prevTar)
	cl := newClient(t, c)
	tg := startTarget(t, c)
	cfg := fmt.Sprintf(providersYAML, c.HostIP)
	kubectl := []string{"KUBECTL=" + filepath.Join(c.Bin, "kubectl"), "KUBECONFIG=" + c.Kubeconfig}
	// The previous tree is a throwaway copy: its providers.yaml is edited
	// in place, which works whether or not its Makefile knows CONFIG_DIR.
	if err := os.WriteFile(filepath.Join(prev, "config", "manager", "providers.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := kubelab.MakeIn(ctx, prev, "deploy", append([]string{"IMG=" + previousImage}, kubectl...)...); err != nil {
		t.Fatal(err)
	}
	rolledOut(t, c)
	old := serves(t, cl, proxy("before-upgrade", "cluster", 3128), tg)
	before := onlyProxyPod(t, cl, old)

	// This commit, installed over it the same way, from a copy of config/.
	if err := kubelab.Make(ctx, "deploy", append([]string{"CONFIG_DIR=" + editedConfig(t, cfg),
		"INSTALLER=" + filepath.Join(t.TempDir(), "install.yaml")}, kubectl...)...); err != nil {
		t.Fatal(err)
	}
	rolledOut(t, c)
	for _, p := range operatorPods(t, cl) {
		if img := p.Spec.Containers[0].Image; !strings.HasSuffix(img, "egress-proxies-operator:dev") {
			t.Fatalf("operator pod %s runs %s after the upgrade, want this commit's egress-proxies-operator:dev", p.Name, img)
		}
	}
	serves(t, cl, proxy("after-upgrade", "cluster", 3128), tg)
	keptAcrossUpgrade(t, cl, old, before, 2)
}
