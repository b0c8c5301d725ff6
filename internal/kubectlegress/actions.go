package kubectlegress

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// annotate merge-patches one annotation onto obj.
func annotate(ctx context.Context, c client.Client, obj client.Object, key, value string) error {
	orig, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("%T is not an object", obj)
	}
	patch := client.MergeFrom(orig)
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[key] = value
	obj.SetAnnotations(ann)
	return c.Patch(ctx, obj, patch)
}

func (o *options) rotateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rotate <pool> [member...]",
		Short: "Replace every member of a ProxyPool, or the members named, surge first",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.clientIn()
			if err != nil {
				return err
			}
			var pool crawlv1alpha1.ProxyPool
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, &pool); err != nil {
				return fmt.Errorf("getting proxypool %s/%s: %w (set -n)", ns, args[0], err)
			}
			value := "all"
			if members := args[1:]; len(members) > 0 {
				for _, m := range members {
					var p crawlv1alpha1.Proxy
					if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: m}, &p); err != nil || p.Labels[crawlv1alpha1.LabelPool] != pool.Name {
						return fmt.Errorf("%s is not a member of pool %s/%s (its members: kubectl get proxies -n %s -l %s=%s)",
							m, ns, pool.Name, ns, crawlv1alpha1.LabelPool, pool.Name)
					}
				}
				value = strings.Join(members, ",")
			}
			if err := annotate(cmd.Context(), c, &pool, crawlv1alpha1.AnnotationRotate, value); err != nil {
				return fmt.Errorf("asking pool %s/%s to rotate: %w", ns, pool.Name, err)
			}
			_, _ = fmt.Fprintf(o.streams.Out, "proxypool %s/%s: rotation of %s requested\n", ns, pool.Name, value)
			return nil
		},
	}
}

func (o *options) retryCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "retry <proxy>",
		Short: "Make the operator try a Failed Proxy again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.clientIn()
			if err != nil {
				return err
			}
			var p crawlv1alpha1.Proxy
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, &p); err != nil {
				return fmt.Errorf("getting proxy %s/%s: %w (set -n)", ns, args[0], err)
			}
			if p.Status.Phase != crawlv1alpha1.ProxyPhaseFailed {
				return fmt.Errorf("proxy %s/%s is %s, not Failed: the operator is still acting on it, nothing to retry", ns, p.Name, p.Status.Phase)
			}
			if err := annotate(cmd.Context(), c, &p, crawlv1alpha1.AnnotationRetry, time.Now().UTC().Format(time.RFC3339)); err != nil {
				return fmt.Errorf("annotating proxy %s/%s: %w", ns, p.Name, err)
			}
			_, _ = fmt.Fprintf(o.streams.Out, "proxy %s/%s: retry requested\n", ns, p.Name)
			return nil
		},
	}
}

// errNotConfirmed is release's refusal without --yes.
var errNotConfirmed = errors.New("not released: run again with --yes once the instance is removed by hand")

func (o *options) releaseCommand() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "release <proxy>",
		Short: "Let a Proxy being deleted go without removing its instance (its provider entry is gone)",
		Long: "release sets crawl.example.com/release-finalizer on a Proxy that is being deleted and whose provider entry " +
			"is no longer configured: the operator then removes its finalizer WITHOUT removing the instance, which may " +
			"stay on the hypervisor with its disks and its seed (which holds the proxy's credentials). Remove the instance " +
			"by hand first. On a Proxy whose entry is configured it does nothing.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.clientIn()
			if err != nil {
				return err
			}
			var p crawlv1alpha1.Proxy
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, &p); err != nil {
				return fmt.Errorf("getting proxy %s/%s: %w (set -n)", ns, args[0], err)
			}
			if p.DeletionTimestamp.IsZero() {
				return fmt.Errorf("proxy %s/%s is not being deleted: delete it first (kubectl delete proxy -n %s %s); release is for a deletion stuck because its provider entry is gone", ns, p.Name, ns, p.Name)
			}
			_, _ = fmt.Fprintf(o.streams.ErrOut, "WARNING: releasing proxy %s/%s leaves its instance %q on provider %s, with its disks and its seed (the proxy's credentials). Remove it by hand.\n",
				ns, p.Name, p.Status.InstanceName, p.Spec.Provider)
			if !yes {
				return errNotConfirmed
			}
			if err := annotate(cmd.Context(), c, &p, crawlv1alpha1.AnnotationReleaseFinalizer, "true"); err != nil {
				return fmt.Errorf("annotating proxy %s/%s: %w", ns, p.Name, err)
			}
			_, _ = fmt.Fprintf(o.streams.Out, "proxy %s/%s: release requested; the operator emits the Warning event ReleasedWithoutCleanup when it lets it go\n", ns, p.Name)
			return nil
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "Confirm that the instance was removed by hand (or may stay).")
	return cmd
}
