package kubectlegress

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// options are the flags every command shares.
type options struct {
	flags         *genericclioptions.ConfigFlags
	allNamespaces bool
	output        string
	streams       genericclioptions.IOStreams
	// newClient builds the client; tests replace it to reach envtest.
	newClient func() (client.Client, error)
}

// NewCommand returns the root command `kubectl egress`.
func NewCommand(streams genericclioptions.IOStreams) *cobra.Command {
	o := &options{flags: genericclioptions.NewConfigFlags(true), streams: streams}
	o.newClient = o.defaultClient
	root := &cobra.Command{
		Use:   "kubectl-egress",
		Short: "Look at and act on the egress proxies of egress-proxies-operator",
		Long: "kubectl egress shows Proxies, ProxyPools and ProviderHealths at a glance and acts on them " +
			"through the annotations the operator reads (docs/kubectl-plugin.md).",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.flags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "Look in every namespace (status, ban list).")
	root.AddCommand(o.statusCommand(), o.urlCommand(), o.rotateCommand(), o.retryCommand(), o.releaseCommand(), o.sessionsCommand(), o.banCommand())
	return root
}

// Run runs the plugin with args and returns its exit code: 0, or 1 after
// printing the error. ctx bounds every call to the API server.
func Run(ctx context.Context, args []string, streams genericclioptions.IOStreams) int {
	// The commands read ctx back from cmd.Context(), which ExecuteContext sets.
	return run(ctx, NewCommand(streams), args, streams.ErrOut) //nolint:contextcheck // cobra hands ctx to RunE through cmd.Context()
}

func run(ctx context.Context, cmd *cobra.Command, args []string, errOut io.Writer) int {
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		_, _ = fmt.Fprintf(errOut, "error: %v\n", err)
		return 1
	}
	return 0
}

func (o *options) defaultClient() (client.Client, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster to talk to: %w (set --kubeconfig or --context)", err)
	}
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := crawlv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: s})
}

// namespace is -n, else the kubeconfig context's, else default.
func (o *options) namespace() (string, error) {
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the namespace from the kubeconfig: %w (set -n)", err)
	}
	return ns, nil
}

// tableOrStructured refuses an -o other than json and yaml, for the
// commands that print a table by default and have no wide form.
func (o *options) tableOrStructured() error {
	if o.output != "" && o.output != "json" && o.output != "yaml" {
		return fmt.Errorf("unknown output format %q: use -o json or -o yaml", o.output)
	}
	return nil
}
