package kubernetes_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/kubernetes"
)

// TestForgedCredentialsSecretIsNeverUsedNorDeleted: a Secret at the name
// of a pod's credentials, with the operator's labels (this installation's
// included) but no valid signature, as anyone who may create Secrets in the
// namespace could write it, is neither mounted as the proxy's credentials
// nor deleted with the instance.
func TestForgedCredentialsSecretIsNeverUsedNorDeleted(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	podNS, proxyNS := podNamespace(t), servedNamespace(t)
	e := entry(t, podNS, "")
	p := newProvider(t, e)
	req := request(proxyNS, credentialsSecret(t, proxyNS))
	forged := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: req.Name + "-credentials", Labels: map[string]string{
			kubernetes.LabelManagedBy: kubernetes.LabelManagedByValue, kubernetes.LabelProvider: e.Name,
			kubernetes.LabelInstallation: testOwnership.Installation(), kubernetes.LabelOwnerUID: req.OwnerUID,
		}},
		Data: map[string][]byte{"username": []byte("forger"), "password": []byte("forger's password")},
	}
	if err := k8s.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	version := forged.ResourceVersion
	if _, err := p.Create(ctx, req); !provider.IsPermanent(err) {
		t.Errorf("Create next to a forged credentials Secret = %v, want Permanent (the pod would use the forger's credentials)", err)
	}
	if err := p.Delete(ctx, kubernetes.ID(podNS, req.Name)); err != nil {
		t.Fatal(err)
	}
	var still corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(forged), &still); err != nil || still.ResourceVersion != version {
		t.Errorf("the forged Secret was deleted or changed: %v", err)
	}
}
