package kubectlegress

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// Report is what status shows, and what -o json|yaml prints.
type Report struct {
	Providers []ProviderRow `json:"providers"`
	Pools     []PoolRow     `json:"pools"`
	Proxies   []ProxyRow    `json:"proxies"`
}

// ProviderRow is one ProviderHealth.
type ProviderRow struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Healthy string `json:"healthy"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// PoolRow is one ProxyPool.
type PoolRow struct {
	Namespace         string `json:"namespace"`
	Name              string `json:"name"`
	Desired           int32  `json:"desired"`
	Members           int32  `json:"members"`
	Ready             int32  `json:"ready"`
	Serving           int32  `json:"serving"`
	DistinctAddresses int32  `json:"distinctEgressAddresses"`
}

// ProxyRow is one Proxy; Reason and Message are its Ready condition's.
type ProxyRow struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Phase     string `json:"phase"`
	Provider  string `json:"provider"`
	Zone      string `json:"zone,omitempty"`
	Ready     bool   `json:"ready"`
	Serving   bool   `json:"serving"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
	Address   string `json:"address,omitempty"`
	EgressIP  string `json:"egressIP,omitempty"`
}

func (o *options) statusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Provider health, pools and Proxies at a glance, with the reasons of what is not ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch o.output {
			case "", "wide", "json", "yaml":
			default:
				return fmt.Errorf("unknown output format %q: use -o json, -o yaml or -o wide", o.output)
			}
			c, err := o.newClient()
			if err != nil {
				return err
			}
			var opts []client.ListOption
			if !o.allNamespaces {
				ns, err := o.namespace()
				if err != nil {
					return err
				}
				opts = append(opts, client.InNamespace(ns))
			}
			r, err := buildReport(cmd.Context(), c, opts...)
			if err != nil {
				return err
			}
			return printReport(o.streams.Out, r, o.output)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json, yaml or wide.")
	return cmd
}

// buildReport lists what status shows.
func buildReport(ctx context.Context, c client.Client, opts ...client.ListOption) (*Report, error) {
	r := &Report{Providers: []ProviderRow{}, Pools: []PoolRow{}, Proxies: []ProxyRow{}}
	var health crawlv1alpha1.ProviderHealthList
	if err := c.List(ctx, &health); err != nil {
		return nil, listError("providerhealths", err)
	}
	for _, h := range health.Items {
		row := ProviderRow{Name: h.Name, Type: h.Status.Type, Healthy: string(metav1.ConditionUnknown)}
		if cond := apimeta.FindStatusCondition(h.Status.Conditions, crawlv1alpha1.ConditionHealthy); cond != nil {
			row.Healthy, row.Reason, row.Message = string(cond.Status), cond.Reason, cond.Message
		}
		r.Providers = append(r.Providers, row)
	}
	var pools crawlv1alpha1.ProxyPoolList
	if err := c.List(ctx, &pools, opts...); err != nil {
		return nil, listError("proxypools", err)
	}
	for _, p := range pools.Items {
		r.Pools = append(r.Pools, PoolRow{Namespace: p.Namespace, Name: p.Name, Desired: p.Status.Desired, Members: p.Status.Replicas,
			Ready: p.Status.Ready, Serving: p.Status.Serving, DistinctAddresses: p.Status.DistinctEgressAddresses})
	}
	var proxies crawlv1alpha1.ProxyList
	if err := c.List(ctx, &proxies, opts...); err != nil {
		return nil, listError("proxies", err)
	}
	for _, p := range proxies.Items {
		row := ProxyRow{Namespace: p.Namespace, Name: p.Name, Phase: string(p.Status.Phase), Provider: p.Spec.Provider, Zone: p.Spec.Zone,
			Address: p.Status.Address, EgressIP: p.Status.EgressIP}
		if row.Phase == "" {
			row.Phase = string(crawlv1alpha1.ProxyPhasePending)
		}
		if cond := apimeta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionReady); cond != nil {
			row.Ready, row.Reason, row.Message = cond.Status == metav1.ConditionTrue, cond.Reason, cond.Message
		}
		row.Serving = apimeta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionServing)
		r.Proxies = append(r.Proxies, row)
	}
	sort.Slice(r.Pools, func(i, j int) bool {
		return r.Pools[i].Namespace+"/"+r.Pools[i].Name < r.Pools[j].Namespace+"/"+r.Pools[j].Name
	})
	sort.Slice(r.Proxies, func(i, j int) bool {
		return r.Proxies[i].Namespace+"/"+r.Proxies[i].Name < r.Proxies[j].Namespace+"/"+r.Proxies[j].Name
	})
	return r, nil
}

func listError(what string, err error) error {
	return fmt.Errorf("listing %s: %w (is egress-proxies-operator installed, and may you list %s?)", what, err, what)
}

// encode writes v as -o json or -o yaml asks; false for another output.
func encode(w io.Writer, v any, output string) (bool, error) {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return true, enc.Encode(v)
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = w.Write(data)
		return true, err
	}
	return false, nil
}

func printReport(w io.Writer, r *Report, output string) error {
	if done, err := encode(w, r, output); done {
		return err
	}
	wide := output == "wide"
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "PROVIDER\tTYPE\tHEALTHY\tREASON")
	for _, p := range r.Providers {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, p.Type, p.Healthy, p.Reason)
	}
	_, _ = fmt.Fprintln(tw)
	_, _ = fmt.Fprintln(tw, "POOL\tDESIRED\tMEMBERS\tREADY\tSERVING\tADDRESSES")
	for _, p := range r.Pools {
		_, _ = fmt.Fprintf(tw, "%s/%s\t%d\t%d\t%d\t%d\t%d\n", p.Namespace, p.Name, p.Desired, p.Members, p.Ready, p.Serving, p.DistinctAddresses)
	}
	_, _ = fmt.Fprintln(tw)
	if wide {
		_, _ = fmt.Fprintln(tw, "PROXY\tPHASE\tPROVIDER\tZONE\tSERVING\tREASON\tADDRESS\tEGRESS")
	} else {
		_, _ = fmt.Fprintln(tw, "PROXY\tPHASE\tPROVIDER\tZONE\tSERVING\tREASON")
	}
	for _, p := range r.Proxies {
		_, _ = fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%t\t%s", p.Namespace, p.Name, p.Phase, p.Provider, p.Zone, p.Serving, p.Reason)
		if wide {
			_, _ = fmt.Fprintf(tw, "\t%s\t%s", p.Address, p.EgressIP)
		}
		_, _ = fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// What is not ready, and why: the messages say what to do.
	var notReady []string
	for _, p := range r.Providers {
		if p.Healthy == string(metav1.ConditionFalse) {
			notReady = append(notReady, fmt.Sprintf("provider %s: %s: %s", p.Name, p.Reason, p.Message))
		}
	}
	for _, p := range r.Proxies {
		if !p.Ready && p.Message != "" {
			notReady = append(notReady, fmt.Sprintf("proxy %s/%s: %s: %s", p.Namespace, p.Name, p.Reason, p.Message))
		}
	}
	if len(notReady) > 0 {
		_, _ = fmt.Fprintln(w, "\nNot ready:")
		for _, l := range notReady {
			_, _ = fmt.Fprintln(w, "  "+l)
		}
	}
	return nil
}
