package proxygateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
)

// TestRefusedDeploymentShowsInStatus (#38 item 6): a ValidatingAdmissionPolicy
// that refuses the gateway's Deployment, on a gateway whose pool does not
// exist, gives Ready=False, reason ApplyFailed, with the API's own message
// and the missing pool: never an empty status. Once the policy goes, the
// gateway goes on to NoMembers.
func TestRefusedDeploymentShowsInStatus(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	const says = "gateway pods need the platform team's approval in this namespace"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "refuse-gateways-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: says}},
		}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}}}
	if err := k8s.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), policy) })
	if err := k8s.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), binding) })

	// The API server loads a policy on its own time: wait until it refuses
	// a Deployment (a dry run) before the operator makes one.
	probe := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "probe"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "probe"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: gatewayImage}}}}}}
	eventually(t, 60*time.Second, func() (bool, string) {
		err := k8s.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), says), fmt.Sprintf("the policy is not in force yet: %v", err)
	})

	startOperator(t, operatorOptions{namespace: ns, opts: controller.Options{GatewayImage: gatewayImage}})
	gw := &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "front"},
		Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"absent"}}}
	if err := k8s.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	waitGatewayReason(t, ns, "front", crawlv1alpha1.ReasonGatewayApplyFailed)
	c := gatewayReady(t, ns, "front")
	for _, want := range []string{"creating the Deployment front-gateway", says, "ProxyPools not found in namespace " + ns + ": absent."} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Ready message %q; want it to say %q", c.Message, want)
		}
	}

	if err := k8s.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() (bool, string) {
		c := gatewayReady(t, ns, "front")
		if c == nil {
			return false, "no Ready condition"
		}
		return c.Reason == crawlv1alpha1.ReasonNoMembers, "Ready is " + c.Reason + ": " + c.Message
	})
}

// TestGatewayWithoutImageSaysSo (#38 item 6, the demo's case): an operator
// started without an image for the gateway's pods makes every other object
// and says in status what is missing and what to do, rather than leaving
// the status empty or quoting the API server on an empty image field.
func TestGatewayWithoutImageSaysSo(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, operatorOptions{namespace: ns})
	ctx := context.Background()
	if err := k8s.Create(ctx, &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "front"},
		Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{"crawl"}}}); err != nil {
		t.Fatal(err)
	}
	waitGatewayReason(t, ns, "front", crawlv1alpha1.ReasonGatewayApplyFailed)
	if c := gatewayReady(t, ns, "front"); !strings.Contains(c.Message, "--proxy-image") {
		t.Errorf("Ready says %q; want it to name --proxy-image", c.Message)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "front-gateway"}, &corev1.Service{}); err != nil {
		t.Errorf("the gateway's Service: %v", err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "front-gateway"}, &appsv1.Deployment{}); err == nil {
		t.Error("a Deployment was made without an image")
	}
}
