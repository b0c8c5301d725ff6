package kubectlegress_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// specPolicy is the shipped admission policy of config/admission and its
// binding.
func specPolicy(t *testing.T) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "admission", "proxygateway_spec_policy.yaml"))
	mustDo(t, err)
	docs := bytes.Split(data, []byte("\n---\n"))
	if len(docs) != 2 {
		t.Fatalf("config/admission/proxygateway_spec_policy.yaml: %d documents; want the policy and its binding", len(docs))
	}
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	mustDo(t, yaml.UnmarshalStrict(docs[0], &policy))
	mustDo(t, yaml.UnmarshalStrict(docs[1], &binding))
	return &policy, &binding
}

// TestSpecPolicyListsEveryField: the policy compares every field of
// ProxyGatewaySpec but bans, so that a field added later is not left to
// the ban editors.
func TestSpecPolicyListsEveryField(t *testing.T) {
	policy, _ := specPolicy(t)
	var onlyBans string
	for _, v := range policy.Spec.Variables {
		if v.Name == "onlyBans" {
			onlyBans = v.Expression
		}
	}
	var missing []string
	st := reflect.TypeFor[crawlv1alpha1.ProxyGatewaySpec]()
	for i := range st.NumField() {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		if name == "bans" {
			continue
		}
		if !strings.Contains(onlyBans, "object.spec.?"+name+" == oldObject.spec.?"+name) {
			missing = append(missing, name)
		}
	}
	if diff := cmp.Diff([]string(nil), missing); diff != "" {
		t.Errorf("fields of ProxyGatewaySpec the policy's onlyBans does not compare (-want +got):\n%s", diff)
	}
}

// TestBanEditorChangesOnlyBans (#38 item 5): with the shipped admission
// policy in force, a user holding only gateway-ban-editor may change a
// ProxyGateway's spec.bans (through the plugin too) and its metadata, and
// is refused any other change of the spec with a message that names the
// role it needs; a user holding proxygateway-editor may change both.
func TestBanEditorChangesOnlyBans(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	c := env.Client
	policy, binding := specPolicy(t)
	// The shipped binding applies everywhere; here, to the test's
	// namespace alone, which other tests share the API server with.
	policy.Name += "-" + w.ns
	binding.Name, binding.Spec.PolicyName = policy.Name, policy.Name
	binding.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"kubernetes.io/metadata.name": w.ns}}}
	mustDo(t, c.Create(ctx, policy))
	t.Cleanup(func() { _ = c.Delete(context.Background(), policy) })
	mustDo(t, c.Create(ctx, binding))
	t.Cleanup(func() { _ = c.Delete(context.Background(), binding) })
	mustDo(t, c.Create(ctx, &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "front"},
		Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"crawl"}, AllowedSourceRanges: []string{"10.0.0.0/8"}}}))
	banKubeconfig, banEd := roleUser(t, w.ns, "ban-editor", shippedRole(t, "gateway_ban_editor_role.yaml"))
	_, editor := roleUser(t, w.ns, "gateway-editor", shippedRole(t, "proxygateway_editor_role.yaml"))

	const needs = "needs the verb edit-spec on proxygateways.crawl.example.com, which the ClusterRole egress-proxies-operator-proxygateway-editor grants"
	patch := func(as client.Client, dryRun bool, change func(*crawlv1alpha1.ProxyGateway)) error {
		var gw crawlv1alpha1.ProxyGateway
		mustDo(t, c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "front"}, &gw))
		orig := gw.DeepCopy()
		change(&gw)
		var opts []client.PatchOption
		if dryRun {
			opts = append(opts, client.DryRunAll)
		}
		return as.Patch(ctx, &gw, client.MergeFrom(orig), opts...)
	}
	// spec.auth alone: the gateway has its source ranges already.
	openAuth := func(gw *crawlv1alpha1.ProxyGateway) { gw.Spec.Auth = crawlv1alpha1.ProxyAuthNone }
	// The API server loads a policy on its own time: wait until it refuses
	// the ban editor (a dry run).
	poll.Until(t, 60*time.Second, func() (bool, string) {
		err := patch(banEd, true, func(gw *crawlv1alpha1.ProxyGateway) { gw.Spec.Pools = append(gw.Spec.Pools, "probe") })
		return err != nil && strings.Contains(err.Error(), needs), fmt.Sprintf("the policy is not in force yet: %v", err)
	})

	ban := func(host string) func(*crawlv1alpha1.ProxyGateway) {
		return func(gw *crawlv1alpha1.ProxyGateway) {
			gw.Spec.Bans = append(gw.Spec.Bans, crawlv1alpha1.GatewayBan{Pool: "crawl", Member: "crawl-0", Host: host,
				Expires: metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))})
		}
	}
	for _, tc := range []struct {
		reason  string
		as      client.Client
		change  func(*crawlv1alpha1.ProxyGateway)
		refused bool
	}{
		{"the ban editor adds a ban", banEd, ban("a.example"), false},
		{"the ban editor removes it", banEd, func(gw *crawlv1alpha1.ProxyGateway) { gw.Spec.Bans = nil }, false},
		{"the ban editor labels the gateway: metadata is not the spec", banEd, func(gw *crawlv1alpha1.ProxyGateway) {
			gw.Labels = map[string]string{"team": "crawl"}
		}, false},
		{"the ban editor opens the gateway (auth None)", banEd, openAuth, true},
		{"the ban editor adds a pool", banEd, func(gw *crawlv1alpha1.ProxyGateway) { gw.Spec.Pools = append(gw.Spec.Pools, "other") }, true},
		{"the ban editor sets resources, a field the gateway did not have", banEd, func(gw *crawlv1alpha1.ProxyGateway) {
			gw.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		}, true},
		{"the ban editor changes a limit along with a ban", banEd, func(gw *crawlv1alpha1.ProxyGateway) {
			ban("b.example")(gw)
			gw.Spec.MaxAttempts = 1
		}, true},
		{"the editor opens the gateway and adds a ban", editor, func(gw *crawlv1alpha1.ProxyGateway) {
			openAuth(gw)
			ban("c.example")(gw)
		}, false},
		{"the editor adds a pool and sets resources", editor, func(gw *crawlv1alpha1.ProxyGateway) {
			gw.Spec.Pools = append(gw.Spec.Pools, "other")
			gw.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}}
		}, false},
	} {
		var before crawlv1alpha1.ProxyGateway
		mustDo(t, c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "front"}, &before))
		err := patch(tc.as, false, tc.change)
		switch {
		case tc.refused && (err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), needs)):
			t.Errorf("%s: %v; want Forbidden saying it %s", tc.reason, err, needs)
		case !tc.refused && err != nil:
			t.Errorf("%s: %v; want it done", tc.reason, err)
		}
		var after crawlv1alpha1.ProxyGateway
		mustDo(t, c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "front"}, &after))
		if changed := !reflect.DeepEqual(before.Spec, after.Spec) || !reflect.DeepEqual(before.Labels, after.Labels); changed == tc.refused {
			t.Errorf("%s: the gateway changed: %t; want %t", tc.reason, changed, !tc.refused)
		}
	}
	var gw crawlv1alpha1.ProxyGateway
	mustDo(t, c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "front"}, &gw))
	if gw.Spec.Auth != crawlv1alpha1.ProxyAuthNone || len(gw.Spec.Pools) != 2 {
		t.Errorf("auth %q, pools %q after the editor's changes; want None and two pools", gw.Spec.Auth, gw.Spec.Pools)
	}

	// The plugin, as the ban editor, writes bans under the policy; as a
	// user who may read gateways but not patch them, it names the role.
	w.kubeconfig = banKubeconfig
	if code, out, errOut := w.run(ctx, "ban", "add", "front", "crawl-0", "shop.example.com", "-n", w.ns); code != 0 {
		t.Errorf("kubectl egress ban add as the ban editor: exit %d, out %q, err %q", code, out, errOut)
	}
	reader := shippedRole(t, "gateway_ban_editor_role.yaml")
	reader.Rules[0].Verbs = []string{"get", "list", "watch"}
	w.kubeconfig, _ = roleUser(t, w.ns, "gateway-reader", reader)
	code, _, errOut := w.run(ctx, "ban", "add", "front", "crawl-0", "shop.example.com", "-n", w.ns)
	if want := "may you patch proxygateways? bind the ClusterRole egress-proxies-operator-gateway-ban-editor"; code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("kubectl egress ban add without patch: exit %d, err %q; want %q", code, errOut, want)
	}
}
