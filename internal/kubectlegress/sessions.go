package kubectlegress

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
)

// SessionRow is one session's place, or, without session ids, one member a
// session may land on; what -o json|yaml prints.
type SessionRow struct {
	Session  string `json:"session,omitempty"`
	Pool     string `json:"pool"`
	Member   string `json:"member"`
	EgressIP string `json:"egressIP,omitempty"`
	Zone     string `json:"zone,omitempty"`
	Provider string `json:"provider,omitempty"`
}

func (o *options) sessionsCommand() *cobra.Command {
	var sesstime time.Duration
	cmd := &cobra.Command{
		Use:   "sessions <gateway> [session-id...]",
		Short: "Where a ProxyGateway places sessions: the member (and egress address) of each session id, or the members sessions land on",
		Long: "A gateway places a session by rendezvous hashing over its pools' Serving members, the same on every replica " +
			"and with no state, so the plugin computes it from the members the gateway reads (the pools' published ConfigMaps, " +
			"without credentials). A member a gateway pod ejected or that a destination banned is each pod's own view: " +
			"the plugin does not see it, and such a session is elsewhere for that while (docs/gateway.md).",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.tableOrStructured(); err != nil {
				return err
			}
			c, ns, err := o.clientIn()
			if err != nil {
				return err
			}
			rows, err := sessionRows(cmd.Context(), c, ns, args[0], args[1:], sesstime, time.Now())
			if err != nil {
				return err
			}
			if done, err := encode(o.streams.Out, rows, o.output); done {
				return err
			}
			tw := tabwriter.NewWriter(o.streams.Out, 0, 4, 2, ' ', 0)
			_, _ = fmt.Fprintln(tw, "SESSION\tMEMBER\tEGRESS\tZONE\tPROVIDER")
			for _, r := range rows {
				_, _ = fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%s\n", orDash(r.Session), r.Pool, r.Member, orDash(r.EgressIP), orDash(r.Zone), orDash(r.Provider))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml.")
	cmd.Flags().DurationVar(&sesstime, "sesstime", 0, "The sessions' sesstime (as in <user>-session-<id>-sesstime-<minutes>): their place now, in the current window.")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// sessionRows reads gateway's members and places each session id on them;
// without ids, it lists the members.
func sessionRows(ctx context.Context, c client.Client, ns, gateway string, ids []string, sesstime time.Duration, now time.Time) ([]SessionRow, error) {
	var gw crawlv1alpha1.ProxyGateway
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: gateway}, &gw); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no ProxyGateway %s in namespace %s (set -n, or kubectl get proxygateways -A)", gateway, ns)
		}
		return nil, fmt.Errorf("getting proxygateway %s/%s: %w", ns, gateway, err)
	}
	var members []SessionRow
	for _, pool := range gw.Spec.Pools {
		var cm corev1.ConfigMap
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: published.ListName(pool)}, &cm)
		if apierrors.IsNotFound(err) {
			continue // the gateway takes no member from it either
		}
		if err != nil {
			return nil, fmt.Errorf("reading configmap %s/%s: %w (may you get ConfigMaps in %s?)", ns, published.ListName(pool), err, ns)
		}
		var entries []published.ListEntry
		if err := json.Unmarshal([]byte(cm.Data[published.ListKeyJSON]), &entries); err != nil {
			return nil, fmt.Errorf("configmap %s/%s: %s is not a JSON list of members", ns, cm.Name, published.ListKeyJSON)
		}
		for _, e := range entries {
			members = append(members, SessionRow{Pool: pool, Member: e.Name, EgressIP: e.EgressIP, Zone: e.Zone, Provider: e.Provider})
		}
	}
	if len(members) == 0 {
		return nil, fmt.Errorf("proxygateway %s/%s has no member: its pools %s list no Serving member (kubectl egress status -n %s)",
			ns, gateway, strings.Join(gw.Spec.Pools, ", "), ns)
	}
	slices.SortFunc(members, func(a, b SessionRow) int { return strings.Compare(a.Pool+"/"+a.Member, b.Pool+"/"+b.Member) })
	if len(ids) == 0 {
		return members, nil
	}
	out := make([]SessionRow, 0, len(ids))
	for _, id := range ids {
		if !published.ValidSessionID(id) {
			return nil, fmt.Errorf("%q is not a session id: 1 to %d letters, digits or underscores, as the gateway takes them", id, published.MaxSessionID)
		}
		i := published.Place(published.SessionKey(id, sesstime, now), len(members), func(i int) uint64 {
			return published.MemberKey(members[i].Pool, members[i].Member)
		})
		row := members[i]
		row.Session = id
		out = append(out, row)
	}
	return out, nil
}
