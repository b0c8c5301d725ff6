package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/kubelab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// kubectlEgress runs the kubectl plugin as docs/kubectl-plugin.md says
// (#24): the binary of cmd/kubectl-egress on the PATH, called as `kubectl
// egress` with the cluster's kubeconfig, against the fleet the tier made.
func kubectlEgress(t *testing.T, c *kubelab.Cluster, cl client.Client, tg target) {
	ctx := t.Context()
	root, err := modroot.Find()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "kubectl-egress"), "./cmd/kubectl-egress")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kubectl-egress: %v\n%s", err, out)
	}
	egress := func(t *testing.T, args ...string) (string, int) {
		t.Helper()
		// kubectl refuses its own flags before a plugin's name: they
		// follow it, and the plugin reads them.
		cmd := exec.CommandContext(t.Context(), filepath.Join(c.Bin, "kubectl"), append(append([]string{"egress"}, args...), "--kubeconfig", c.Kubeconfig)...)
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return out.String(), 0
		case errors.As(err, &exit):
			return out.String(), exit.ExitCode()
		default:
			t.Fatalf("kubectl egress %s: %v", strings.Join(args, " "), err)
			return "", 0
		}
	}
	pool := &crawlv1alpha1.ProxyPool{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: servedNS, Name: "crawl-pool"}, pool); err != nil {
		t.Fatal(err)
	}
	published := strings.Fields(string(secretData(t, cl, pool.Status.ListSecretName)["proxies.txt"]))

	t.Run("status", func(t *testing.T) {
		out, code := egress(t, "status", "-n", servedNS)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		// The entries of the providers configuration, and the pool.
		for _, want := range []string{"cluster", "cluster-host", "lab", "crawl-pool"} {
			if !strings.Contains(out, want) {
				t.Errorf("status names no %q:\n%s", want, out)
			}
		}
		out, code = egress(t, "status", "-A", "-o", "json")
		if code != 0 || !json.Valid([]byte(out)) {
			t.Errorf("status -A -o json: exit %d, valid JSON %t:\n%s", code, json.Valid([]byte(out)), out)
		}
	})
	t.Run("url", func(t *testing.T) {
		ctx := t.Context()
		out, code := egress(t, "url", "crawl-pool", "-n", servedNS)
		lines := strings.Fields(out)
		if code != 0 || len(lines) != len(published) {
			t.Fatalf("url crawl-pool: exit %d, %d lines, want %d:\n%s", code, len(lines), len(published), out)
		}
		for _, line := range published {
			u, err := url.Parse(line)
			if err != nil {
				t.Fatal(err)
			}
			if pw, _ := u.User.Password(); pw == "" || strings.Contains(out, pw) {
				t.Errorf("url without --show-password shows a member's password, or the list has none")
			}
		}
		out, code = egress(t, "url", "crawl-pool", "-n", servedNS, "--show-password")
		shown := strings.Fields(out)
		slices.Sort(shown)
		want := slices.Clone(published)
		slices.Sort(want)
		if code != 0 || !slices.Equal(shown, want) {
			t.Fatalf("url --show-password: exit %d, %q; want the published list %q", code, shown, want)
		}
		// The URL it gives works as it is.
		u, err := url.Parse(shown[0])
		if err != nil {
			t.Fatal(err)
		}
		if code, err := get(ctx, u, tg.url); err != nil || code != 200 {
			t.Errorf("a request through the URL kubectl egress url gave: %d, %v", code, err)
		}
		if out, code := egress(t, "url", "no-such-pool", "-n", servedNS); code != 1 || !strings.HasPrefix(out, "error: ") {
			t.Errorf("url of a missing object: exit %d, want 1 with an error line:\n%s", code, out)
		}
	})
	t.Run("retry refused on a Proxy that is not Failed", func(t *testing.T) {
		member := mustPoolProxies(t, cl)[0]
		if out, code := egress(t, "retry", member, "-n", servedNS); code != 1 || !strings.Contains(out, "error: ") {
			t.Errorf("retry %s (Ready): exit %d, want 1 with an error:\n%s", member, code, out)
		}
	})
	t.Run("rotate one member", func(t *testing.T) {
		ctx := t.Context()
		before := mustPoolProxies(t, cl)
		victim := before[0]
		if out, code := egress(t, "rotate", "crawl-pool", victim, "-n", servedNS); code != 0 {
			t.Fatalf("rotate: exit %d:\n%s", code, out)
		}
		began := time.Now()
		poll.Until(t, readyTimeout, func() (bool, string) {
			now, err := poolProxies(ctx, cl)
			if err != nil {
				return false, err.Error()
			}
			p := &crawlv1alpha1.ProxyPool{}
			if err := cl.Get(ctx, client.ObjectKey{Namespace: servedNS, Name: "crawl-pool"}, p); err != nil {
				return false, err.Error()
			}
			return !slices.Contains(now, victim) && len(now) == len(before) && p.Status.Ready == int32(len(before)),
				fmt.Sprintf("members %v, %d ready", now, p.Status.Ready)
		})
		t.Logf("member %s replaced in %s", victim, time.Since(began).Round(time.Millisecond))
	})
}

// poolProxies are the names of crawl-pool's members that are not being
// deleted, sorted.
func poolProxies(ctx context.Context, cl client.Client) ([]string, error) {
	list := &crawlv1alpha1.ProxyList{}
	if err := cl.List(ctx, list, client.InNamespace(servedNS), client.MatchingLabels{crawlv1alpha1.LabelPool: "crawl-pool"}); err != nil {
		return nil, err
	}
	var out []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// mustPoolProxies is poolProxies for a test that needs at least one.
func mustPoolProxies(t *testing.T, cl client.Client) []string {
	t.Helper()
	out, err := poolProxies(t.Context(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("crawl-pool has no member")
	}
	return out
}
