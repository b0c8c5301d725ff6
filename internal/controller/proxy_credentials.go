package controller

import (
	"context"
	"fmt"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller/shared"
)

// labelProxy, on a Proxy's credentials Secret, names the Proxy (beside
// shared.LabelManagedBy).
const labelProxy = "crawl.example.com/proxy"

// credentials are a Proxy's basic-auth username and password. They are never
// logged; the type has no String method on purpose and fields are unexported.
type credentials struct {
	secretName string
	username   string
	password   string
	// secret is the Secret as read (or created) in this reconcile, so that
	// syncCredentialsURL needs no second read.
	secret *corev1.Secret
}

// credentialsSecretName returns the name of a Proxy's credentials Secret.
func credentialsSecretName(proxyName string) string { return proxyName + "-proxy-credentials" }

// ensureCredentials returns the Proxy's credentials, generating the Secret
// that holds them on first use. It returns a non-empty conflict, and no
// credentials, when the Secret exists but cannot be used; it never changes a
// Secret that this Proxy does not control. With auth None it returns nil.
//
// On first use (nothing recorded, no conflict reported) the Secret is
// created without a read before: a read would find nothing for every new
// Proxy, and it was one of a create's dozen requests to the API server. A
// Secret that exists all the same (ours, from a reconcile that crashed
// before its status write, or someone else's) is then read and judged.
func (r *ProxyReconciler) ensureCredentials(ctx context.Context, p *crawlv1alpha1.Proxy) (*credentials, string, error) {
	if !isBasic(p) {
		p.Status.CredentialsSecretName = ""
		return nil, "", nil
	}
	name := credentialsSecretName(p.Name)
	if firstCredentialsUse(p) {
		c, err := r.createCredentialsSecret(ctx, p, name)
		if err == nil {
			p.Status.CredentialsSecretName = name
			return c, "", nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, "", err
		}
	}
	var s corev1.Secret
	err := r.secrets().Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: name}, &s)
	switch {
	case apierrors.IsNotFound(err):
		if p.Status.InstanceID != "" {
			return nil, fmt.Sprintf("The credentials Secret %s was deleted while instance %s uses the credentials it held. "+
				"Recreate the Proxy to get a new instance with new credentials.", name, p.Status.InstanceID), nil
		}
		c, err := r.createCredentialsSecret(ctx, p, name)
		if err != nil {
			if apierrors.IsAlreadyExists(err) {
				if r.ownSecretExists(ctx, p, name) {
					// Ours, created since the read above: read it next time.
					return nil, "", fmt.Errorf("credentials secret %s was created meanwhile", name)
				}
				// The API server says this one is not controlled by this
				// Proxy: someone else's.
				return nil, fmt.Sprintf("Secret %s exists and was not created by the operator; it will not be overwritten. "+
					"Delete or rename it, then set the annotation %s.", name, crawlv1alpha1.AnnotationRetry), nil
			}
			return nil, "", err
		}
		p.Status.CredentialsSecretName = name
		return c, "", nil
	case err != nil:
		return nil, "", fmt.Errorf("reading the credentials secret %s: %w", name, err)
	}
	if !metav1.IsControlledBy(&s, p) {
		return nil, fmt.Sprintf("Secret %s exists and is not owned by this Proxy; the operator will not overwrite it. "+
			"Delete or rename it, then set the annotation %s.", name, crawlv1alpha1.AnnotationRetry), nil
	}
	c := &credentials{secretName: name, username: string(s.Data[published.CredentialsKeyUsername]), password: string(s.Data[published.CredentialsKeyPassword]), secret: &s}
	if c.username == "" || c.password == "" {
		return nil, fmt.Sprintf("Secret %s lacks the %s or %s key. Delete the Secret (and, if the instance exists, recreate the Proxy).",
			name, published.CredentialsKeyUsername, published.CredentialsKeyPassword), nil
	}
	p.Status.CredentialsSecretName = name
	return c, "", nil
}

// firstCredentialsUse reports whether p has never recorded its credentials
// Secret nor been told that it cannot use one: then the Secret is most
// likely missing, and is created without a read first.
func firstCredentialsUse(p *crawlv1alpha1.Proxy) bool {
	if p.Status.CredentialsSecretName != "" || p.Status.InstanceID != "" {
		return false
	}
	c := readyCondition(p)
	return c == nil || c.Reason != crawlv1alpha1.ReasonCredentialsConflict
}

// createCredentialsSecret creates the Secret name, controlled by p, with new
// credentials. The error is the API server's, wrapped (AlreadyExists
// stays recognisable).
func (r *ProxyReconciler) createCredentialsSecret(ctx context.Context, p *crawlv1alpha1.Proxy, name string) (*credentials, error) {
	user, pass := shared.RandomCredentials()
	c := &credentials{secretName: name, username: user, password: pass}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace,
			Labels: map[string]string{shared.LabelManagedBy: shared.LabelManagedByValue, labelProxy: p.Name}},
		Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{published.CredentialsKeyUsername: []byte(c.username), published.CredentialsKeyPassword: []byte(c.password)},
	}
	if err := controllerutil.SetControllerReference(p, s, r.Client.Scheme()); err != nil {
		return nil, fmt.Errorf("owning the credentials secret: %w", err)
	}
	if err := r.Client.Create(ctx, s); err != nil {
		return nil, fmt.Errorf("creating the credentials secret %s: %w", name, err)
	}
	c.secret = s
	return c, nil
}

// secrets is how the reconciler reads Secrets: by name from the API server,
// never through a cache. A cache would need the right to list and watch
// Secrets in every namespace, which is the right to read every Secret of
// the cluster; the operator only ever reads the one it created for a Proxy
// (docs/security.md, RBAC).
func (r *ProxyReconciler) secrets() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// ownSecretExists reads a Secret from the API server and reports whether it
// is controlled by p.
func (r *ProxyReconciler) ownSecretExists(ctx context.Context, p *crawlv1alpha1.Proxy, name string) bool {
	if r.APIReader == nil {
		return false
	}
	var s corev1.Secret
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: name}, &s); err != nil {
		return false
	}
	return metav1.IsControlledBy(&s, p)
}

// syncCredentialsURL writes the ready-to-use URL with credentials into the
// Secret once the address is known. It works on the Secret that
// ensureCredentials read in the same reconcile: a second read would cost a
// round trip to the API server on every look at a Ready proxy.
func (r *ProxyReconciler) syncCredentialsURL(ctx context.Context, p *crawlv1alpha1.Proxy, c *credentials, address string) error {
	want := published.ProxyURL(address, p.Spec.Port, url.UserPassword(c.username, c.password))
	s := c.secret
	if string(s.Data[published.CredentialsKeyURL]) == want {
		return nil
	}
	patch := client.MergeFrom(s.DeepCopy())
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[published.CredentialsKeyURL] = []byte(want)
	if err := r.Client.Patch(ctx, s, patch); err != nil {
		return fmt.Errorf("writing the proxy URL into secret %s: %w", c.secretName, err)
	}
	return nil
}
