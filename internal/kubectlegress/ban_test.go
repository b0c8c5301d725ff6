package kubectlegress_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/kubectlegress"
)

// banEditor is a kubeconfig of a user who holds, in ns, only the shipped
// ClusterRole gateway-ban-editor (config/rbac): what the docs tell an
// administrator to bind.
func banEditor(t *testing.T, ns string) string {
	t.Helper()
	path, _ := roleUser(t, ns, "ban-editor", shippedRole(t, "gateway_ban_editor_role.yaml"))
	return path
}

// shippedRole is the ClusterRole of config/rbac/file.
func shippedRole(t *testing.T, file string) rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", file))
	mustDo(t, err)
	var role rbacv1.ClusterRole
	mustDo(t, yaml.Unmarshal(data, &role))
	return role
}

// roleUser makes a user who holds, in ns, only role (renamed for ns); it
// returns the user's kubeconfig and a client as the user.
func roleUser(t *testing.T, ns, name string, role rbacv1.ClusterRole) (string, client.Client) {
	t.Helper()
	ctx := context.Background()
	role.Name = name + "-" + ns
	mustDo(t, env.Client.Create(ctx, &role))
	user := name + "-" + ns
	mustDo(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}))
	u, err := env.Environment.AddUser(envtest.User{Name: user}, nil)
	mustDo(t, err)
	kc, err := u.KubeConfig()
	mustDo(t, err)
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	mustDo(t, os.WriteFile(path, kc, 0o600))
	c, err := client.New(u.Config(), client.Options{Scheme: env.Scheme})
	mustDo(t, err)
	return path, c
}

// TestBan: kubectl egress ban add, lift and list, run as a user with only
// the shipped ban-editor role, write and read the ProxyGateway's spec.bans
// (what every gateway pod watches): a ban of a member of the gateway's
// pools from a host, normalised as the gateway compares hosts, again to
// change its expiry, lifted, expired ones pruned on the next write; and
// clear refusals of what would not work.
func TestBan(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	c := env.Client
	mustDo(t, c.Create(ctx, &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "front"},
		Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"crawl"}}}))
	// A member of another pool, and an expired ban to prune.
	mustDo(t, c.Create(ctx, &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "other-0",
		Labels: map[string]string{crawlv1alpha1.LabelPool: "other"}}, Spec: w.proxy(ctx, t, "crawl-0").Spec}))
	var gw crawlv1alpha1.ProxyGateway
	mustDo(t, c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "front"}, &gw))
	gw.Spec.Bans = []crawlv1alpha1.GatewayBan{{Pool: "crawl", Member: "crawl-0", Host: "old.example", Expires: metav1.NewTime(time.Now().Add(-time.Minute))}}
	mustDo(t, c.Update(ctx, &gw))
	w.kubeconfig = banEditor(t, w.ns)

	type ban struct{ Pool, Member, Host, Reason string }
	bans := func() []ban {
		var gw crawlv1alpha1.ProxyGateway
		mustDo(t, c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "front"}, &gw))
		out := []ban{}
		for _, b := range gw.Spec.Bans {
			out = append(out, ban{b.Pool, b.Member, b.Host, b.Reason})
		}
		return out
	}
	shop := ban{"crawl", "crawl-0", "shop.example.com", "429s all day"}
	for _, tc := range []struct {
		reason string
		args   []string
		code   int
		text   string // in standard output, or in the error when code is 1
		want   []ban  // spec.bans after it
	}{
		{"a ban, its host normalised (case, port), the expired ban pruned", []string{"add", "front", "crawl-0", "Shop.Example.com:443", "--reason", "429s all day"}, 0,
			"member crawl/crawl-0 banned from shop.example.com until", []ban{shop}},
		{"pool/member, and an IPv6 host", []string{"add", "front", "crawl/crawl-0", "[2001:DB8::1]:443", "--for", "10m"}, 0,
			"banned from 2001:db8::1", []ban{shop, {"crawl", "crawl-0", "2001:db8::1", ""}}},
		{"the same pair again changes its expiry, not the count", []string{"add", "front", "crawl-0", "2001:db8::1", "--for", "2h"}, 0,
			"banned from 2001:db8::1", []ban{shop, {"crawl", "crawl-0", "2001:db8::1", ""}}},
		{"a member of another pool", []string{"add", "front", "other-0", "shop.example.com"}, 1,
			"other-0 is not a member of proxygateway " + w.ns + "/front (its pools: crawl", []ban{shop, {"crawl", "crawl-0", "2001:db8::1", ""}}},
		{"a Proxy that does not exist", []string{"add", "front", "nobody", "shop.example.com"}, 1, "nobody is not a member", nil},
		{"the wrong pool for the member", []string{"add", "front", "other/crawl-0", "shop.example.com"}, 1, "other/crawl-0 is not a member", nil},
		{"no such gateway", []string{"add", "back", "crawl-0", "shop.example.com"}, 1, "no ProxyGateway back in namespace " + w.ns, nil},
		{"not a host", []string{"add", "front", "crawl-0", "shop example"}, 1, `"shop example" is not a destination host`, nil},
		{"a ban longer than 30 days", []string{"add", "front", "crawl-0", "a.example", "--for", "721h"}, 1, "a ban lasts from 1s to 720h0m0s", nil},
		{"a reason with a line break", []string{"add", "front", "crawl-0", "a.example", "--reason", "a\nb"}, 1, "--reason: at most 200 characters on one line", nil},
		{"lift", []string{"lift", "front", "crawl-0", "2001:db8::1"}, 0, "ban of crawl-0 from 2001:db8::1 lifted", []ban{shop}},
		{"lift what is not banned", []string{"lift", "front", "crawl-0", "2001:db8::1"}, 1, "has no ban of crawl-0 from 2001:db8::1 in force", []ban{shop}},
		{"list", []string{"list", "front"}, 0, "front    crawl/crawl-0  shop.example.com  ", []ban{shop}},
	} {
		code, out, errOut := w.run(ctx, append([]string{"ban"}, append(tc.args, "-n", w.ns)...)...)
		text := out
		if tc.code != 0 {
			text = errOut
		}
		if code != tc.code || !strings.Contains(text, tc.text) {
			t.Errorf("%s: exit %d, out %q, err %q; want exit %d with %q", tc.reason, code, out, errOut, tc.code, tc.text)
		}
		if tc.want != nil {
			if diff := cmp.Diff(tc.want, bans(), cmpopts.SortSlices(func(a, b ban) bool { return a.Host < b.Host })); diff != "" {
				t.Errorf("%s: spec.bans (-want +got):\n%s", tc.reason, diff)
			}
		}
	}

	code, out, errOut := w.run(ctx, "ban", "list", "-n", w.ns, "-o", "json")
	var rows []kubectlegress.BanRow
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
		t.Fatalf("ban list -o json: exit %d, out %q, err %q", code, out, errOut)
	}
	want := []kubectlegress.BanRow{{Gateway: "front", Pool: "crawl", Member: "crawl-0", Host: "shop.example.com", Reason: "429s all day"}}
	if diff := cmp.Diff(want, rows, cmpopts.IgnoreFields(kubectlegress.BanRow{}, "Expires")); diff != "" {
		t.Errorf("ban list -o json (-want +got):\n%s", diff)
	}
	if len(rows) != 1 {
		return
	}
	if left := time.Until(rows[0].Expires); left <= 50*time.Minute || left > time.Hour {
		t.Errorf("the ban expires in %s; want the default hour", left)
	}
	// The role grants nothing else: not the pools, not the Secrets.
	code, _, errOut = w.run(ctx, "rotate", "crawl", "-n", w.ns)
	if code != 1 || !strings.Contains(errOut, "forbidden") {
		t.Errorf("rotate as the ban editor: exit %d, err %q; want forbidden", code, errOut)
	}
}
