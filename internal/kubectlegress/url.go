package kubectlegress

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
)

func (o *options) urlCommand() *cobra.Command {
	var showPassword bool
	cmd := &cobra.Command{
		Use:   "url <proxy|pool>",
		Short: "The ready-to-use URL of a Proxy, or the list of a ProxyPool, with the password hidden unless --show-password",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.clientIn()
			if err != nil {
				return err
			}
			urls, err := urlsOf(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			for _, u := range urls {
				if !showPassword {
					u = redact(u)
				}
				_, _ = fmt.Fprintln(o.streams.Out, u)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&showPassword, "show-password", false, "Print the passwords (they end up in your terminal's scrollback).")
	return cmd
}

// clientIn returns the client and the namespace of -n.
func (o *options) clientIn() (client.Client, string, error) {
	c, err := o.newClient()
	if err != nil {
		return nil, "", err
	}
	ns, err := o.namespace()
	return c, ns, err
}

// urlsOf returns the URL of the Proxy name or the URLs of the pool name:
// a Proxy first, as kubectl would find it.
func urlsOf(ctx context.Context, c client.Client, ns, name string) ([]string, error) {
	var p crawlv1alpha1.Proxy
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)
	switch {
	case err == nil:
		if p.Status.CredentialsSecretName == "" {
			return nil, fmt.Errorf("proxy %s/%s has no credentials Secret yet (phase %s): wait until it is Ready", ns, name, p.Status.Phase)
		}
		s, err := secret(ctx, c, ns, p.Status.CredentialsSecretName)
		if err != nil {
			return nil, err
		}
		u := strings.TrimSpace(string(s.Data["url"]))
		if u == "" {
			return nil, fmt.Errorf("secret %s/%s has no url yet: wait until proxy %s is Ready", ns, s.Name, name)
		}
		return []string{u}, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("getting proxy %s/%s: %w", ns, name, err)
	}
	var pool crawlv1alpha1.ProxyPool
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no Proxy or ProxyPool %s in namespace %s (set -n, or see kubectl egress status -A)", name, ns)
		}
		return nil, fmt.Errorf("getting proxypool %s/%s: %w", ns, name, err)
	}
	listName := pool.Status.ListSecretName
	if listName == "" {
		listName = published.ListName(name)
	}
	s, err := secret(ctx, c, ns, listName)
	if err != nil {
		return nil, err
	}
	var out []string
	for l := range strings.SplitSeq(string(s.Data[published.ListKeyText]), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pool %s/%s has no Serving member yet (kubectl egress status -n %s says why)", ns, name, ns)
	}
	return out, nil
}

func secret(ctx context.Context, c client.Client, ns, name string) (*corev1.Secret, error) {
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("reading secret %s/%s: %w (may you get Secrets in %s?)", ns, name, err, ns)
	}
	return &s, nil
}

// redact hides the password of a proxy URL; a line that does not parse is
// hidden whole, since it may hold one.
func redact(raw string) string {
	u, err := url.Parse(raw)
	// "user:pass@host" parses as scheme "user" with an opaque rest that
	// Redacted leaves alone: only a URL with a host is shown.
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "(a line that is not a URL, hidden)"
	}
	return u.Redacted()
}
