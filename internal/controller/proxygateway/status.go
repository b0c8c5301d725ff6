package proxygateway

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// gatewayObservation is what one reconcile saw of a gateway's world.
type gatewayObservation struct {
	// conflict names an object the gateway needs that another owner holds;
	// empty when there is none.
	conflict string
	// noImage: the operator knows no image for the gateway's pods, so it
	// made every object but the Deployment.
	noImage bool
	// refused is the API server's refusal of an object the gateway needs,
	// as the apply step wrapped it; empty when every object was applied.
	refused string
	// deployment is the gateway's Deployment as last read; nil before it
	// exists.
	deployment *appsv1.Deployment
	// members is the number of Serving members of the gateway's pools;
	// missingPools are the pools that do not exist.
	members      int32
	missingPools []string
	// credentialsSecret is the credentials Secret's name ("" with auth
	// None).
	credentialsSecret string
}

// computeGatewayStatus is the gateway's status from what was observed. It
// is pure: the reconciler patches what it returns when it differs.
func computeGatewayStatus(gw *crawlv1alpha1.ProxyGateway, obs gatewayObservation, now metav1.Time) crawlv1alpha1.ProxyGatewayStatus {
	st := crawlv1alpha1.ProxyGatewayStatus{
		Endpoint:              gatewayEndpoint(gw, "", ""),
		CredentialsSecretName: obs.credentialsSecret,
		Members:               obs.members,
		ObservedGeneration:    gw.Generation,
		Conditions:            append([]metav1.Condition(nil), gw.Status.Conditions...),
	}
	if d := obs.deployment; d != nil {
		st.Replicas, st.ReadyReplicas = d.Status.Replicas, d.Status.ReadyReplicas
	}
	cond := metav1.Condition{Type: crawlv1alpha1.ConditionReady, ObservedGeneration: gw.Generation, LastTransitionTime: now}
	switch {
	case obs.conflict != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, crawlv1alpha1.ReasonGatewayConflict, obs.conflict
	case obs.noImage:
		cond.Status, cond.Reason = metav1.ConditionFalse, crawlv1alpha1.ReasonGatewayApplyFailed
		cond.Message = "The operator has no image to run the gateway's pods: it was started without --proxy-image " +
			"(or $OPERATOR_IMAGE, which config/default and the chart set). Every other object of the gateway is made; " +
			"restart the operator with its image."
	case obs.refused != "":
		cond.Status, cond.Reason = metav1.ConditionFalse, crawlv1alpha1.ReasonGatewayApplyFailed
		cond.Message = "The API server refused an object of the gateway: " + obs.refused +
			". Change what it names (an admission policy, a quota, the operator's RBAC); the operator tries again."
		if len(obs.missingPools) > 0 {
			cond.Message += fmt.Sprintf(" ProxyPools not found in namespace %s: %s.", gw.Namespace, strings.Join(obs.missingPools, ", "))
		}
	case obs.members == 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, crawlv1alpha1.ReasonNoMembers
		cond.Message = fmt.Sprintf("No Serving member in pools %s; the gateway answers 503 until one serves.", strings.Join(gw.Spec.Pools, ", "))
		if len(obs.missingPools) > 0 {
			cond.Message += fmt.Sprintf(" ProxyPools not found in namespace %s: %s.", gw.Namespace, strings.Join(obs.missingPools, ", "))
		}
	case st.ReadyReplicas == 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, crawlv1alpha1.ReasonGatewayNotReady
		cond.Message = fmt.Sprintf("%d members serve; no gateway pod is ready yet (see Deployment %s).", obs.members, gatewayObjectName(gw.Name))
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, crawlv1alpha1.ReasonGatewayReady
		cond.Message = fmt.Sprintf("%d of %d gateway pods ready in front of %d members.", st.ReadyReplicas, st.Replicas, obs.members)
	}
	apimeta.SetStatusCondition(&st.Conditions, cond)
	return st
}
