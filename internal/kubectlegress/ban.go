package kubectlegress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
)

// Bounds of kubectl egress ban add.
const (
	// DefaultBanFor is how long a ban lasts without --for.
	DefaultBanFor = time.Hour
	// MaxBanFor is the longest --for: a ban is a cool-down, not a policy
	// (rotate or remove the member for good).
	MaxBanFor = 30 * 24 * time.Hour
	// maxBans is the API's bound on spec.bans.
	maxBans = 256
)

// BanRow is one ban in force; what ban list -o json|yaml prints.
type BanRow struct {
	Gateway string    `json:"gateway"`
	Pool    string    `json:"pool"`
	Member  string    `json:"member"`
	Host    string    `json:"host"`
	Expires time.Time `json:"expires"`
	Reason  string    `json:"reason,omitempty"`
}

func (o *options) banCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ban",
		Short: "Ban a member of a ProxyGateway from a destination host, lift a ban, or list the bans",
		Long: "A ban keeps one member of a gateway (and so its egress address) away from one destination host until it " +
			"expires: every gateway pod watches the ProxyGateway's spec.bans and sends no request or tunnel to that host " +
			"through the member, as for a ban it saw itself (docs/gateway.md#bans). Expired bans are pruned whenever the " +
			"plugin writes. It needs the ClusterRole egress-proxies-operator-gateway-ban-editor bound in the namespace.",
	}
	cmd.AddCommand(o.banAddCommand(), o.banLiftCommand(), o.banListCommand())
	return cmd
}

func (o *options) banAddCommand() *cobra.Command {
	var banFor time.Duration
	var reason string
	cmd := &cobra.Command{
		Use:   "add <gateway> <member|pool/member> <host>",
		Short: "Ban a member from a destination host for --for (default 1h); again, to change its expiry",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if banFor <= 0 || banFor > MaxBanFor {
				return fmt.Errorf("--for %s: a ban lasts from 1s to %s", banFor, MaxBanFor)
			}
			if len(reason) > 200 || strings.ContainsFunc(reason, func(r rune) bool { return r < ' ' || r == 0x7f }) {
				return errors.New("--reason: at most 200 characters on one line")
			}
			host, err := banHost(args[2])
			if err != nil {
				return err
			}
			c, ns, err := o.clientIn()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			pool, member, err := resolveMember(ctx, c, ns, args[0], args[1])
			if err != nil {
				return err
			}
			expires := metav1.NewTime(time.Now().Add(banFor).UTC().Truncate(time.Second))
			err = editBans(ctx, c, ns, args[0], func(bans []crawlv1alpha1.GatewayBan) ([]crawlv1alpha1.GatewayBan, error) {
				bans = slices.DeleteFunc(bans, func(b crawlv1alpha1.GatewayBan) bool { return b.Pool == pool && b.Member == member && b.Host == host })
				if len(bans) >= maxBans {
					return nil, fmt.Errorf("proxygateway %s/%s holds %d bans in force, the most it may: lift some (kubectl egress ban list %s -n %s)", ns, args[0], len(bans), args[0], ns)
				}
				return append(bans, crawlv1alpha1.GatewayBan{Pool: pool, Member: member, Host: host, Expires: expires, Reason: reason}), nil
			})
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintf(o.streams.Out, "proxygateway %s/%s: member %s/%s banned from %s until %s\n", ns, args[0], pool, member, host, expires.Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().DurationVar(&banFor, "for", DefaultBanFor, "How long the ban lasts (at most 720h).")
	cmd.Flags().StringVar(&reason, "reason", "", "Why, for whoever lists the bans (at most 200 characters).")
	return cmd
}

func (o *options) banLiftCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "lift <gateway> <member|pool/member> <host>",
		Short: "Lift an administrator's ban before it expires",
		Long: "lift removes the ban from spec.bans: every gateway pod sends to the member again as soon as it sees the change. " +
			"A ban a pod learned itself (a destination's 429, a crawler's report) ends on its own cool-down.",
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			host, err := banHost(args[2])
			if err != nil {
				return err
			}
			c, ns, err := o.clientIn()
			if err != nil {
				return err
			}
			pool, member, _ := strings.Cut(args[1], "/")
			if member == "" {
				pool, member = "", pool
			}
			err = editBans(cmd.Context(), c, ns, args[0], func(bans []crawlv1alpha1.GatewayBan) ([]crawlv1alpha1.GatewayBan, error) {
				n := len(bans)
				bans = slices.DeleteFunc(bans, func(b crawlv1alpha1.GatewayBan) bool {
					return (pool == "" || b.Pool == pool) && b.Member == member && b.Host == host
				})
				if len(bans) == n {
					return nil, fmt.Errorf("proxygateway %s/%s has no ban of %s from %s in force (kubectl egress ban list %s -n %s)", ns, args[0], args[1], host, args[0], ns)
				}
				return bans, nil
			})
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintf(o.streams.Out, "proxygateway %s/%s: ban of %s from %s lifted\n", ns, args[0], args[1], host)
			return nil
		},
	}
}

func (o *options) banListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list [gateway]",
		Short: "The administrator's bans in force, of one ProxyGateway or of every one in the namespace (-A: in every namespace)",
		Long: "list shows the bans of spec.bans that have not expired. Bans each gateway pod learned itself are its own " +
			"state: see egress_proxies_gateway_bans_active and the pods' logs.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.tableOrStructured(); err != nil {
				return err
			}
			c, ns, err := o.clientIn()
			if err != nil {
				return err
			}
			var gws []crawlv1alpha1.ProxyGateway
			switch {
			case len(args) == 1:
				var gw crawlv1alpha1.ProxyGateway
				if err := getGateway(cmd.Context(), c, ns, args[0], &gw); err != nil {
					return err
				}
				gws = append(gws, gw)
			default:
				var list crawlv1alpha1.ProxyGatewayList
				opts := []client.ListOption{}
				if !o.allNamespaces {
					opts = append(opts, client.InNamespace(ns))
				}
				if err := c.List(cmd.Context(), &list, opts...); err != nil {
					return fmt.Errorf("listing proxygateways: %w", err)
				}
				gws = list.Items
			}
			rows := banRows(gws, time.Now())
			if done, err := encode(o.streams.Out, rows, o.output); done {
				return err
			}
			if len(rows) == 0 {
				_, _ = fmt.Fprintln(o.streams.ErrOut, "No bans in force.")
				return nil
			}
			tw := tabwriter.NewWriter(o.streams.Out, 0, 4, 2, ' ', 0)
			_, _ = fmt.Fprintln(tw, "GATEWAY\tMEMBER\tHOST\tEXPIRES\tREASON")
			now := time.Now()
			for _, r := range rows {
				_, _ = fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s (in %s)\t%s\n", r.Gateway, r.Pool, r.Member, r.Host,
					r.Expires.Format(time.RFC3339), r.Expires.Sub(now).Round(time.Second), orDash(r.Reason))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml.")
	return cmd
}

// banRows are the bans of gws in force at now, sorted by gateway, member
// and host; gateways of other namespaces are named namespace/name.
func banRows(gws []crawlv1alpha1.ProxyGateway, now time.Time) []BanRow {
	out := []BanRow{}
	namespaces := map[string]bool{}
	for _, gw := range gws {
		namespaces[gw.Namespace] = true
	}
	for _, gw := range gws {
		name := gw.Name
		if len(namespaces) > 1 {
			name = gw.Namespace + "/" + gw.Name
		}
		for _, b := range gw.Spec.Bans {
			if now.Before(b.Expires.Time) {
				out = append(out, BanRow{Gateway: name, Pool: b.Pool, Member: b.Member, Host: b.Host, Expires: b.Expires.UTC(), Reason: b.Reason})
			}
		}
	}
	slices.SortFunc(out, func(a, b BanRow) int {
		return strings.Compare(a.Gateway+" "+a.Pool+"/"+a.Member+" "+a.Host, b.Gateway+" "+b.Pool+"/"+b.Member+" "+b.Host)
	})
	return out
}

// banHost is a destination host as the gateway compares it: lower case,
// without a port, a trailing dot or an IPv6 address's brackets.
func banHost(s string) (string, error) {
	h := strings.ToLower(strings.TrimSpace(s))
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), ".")
	if h == "" || len(h) > 253 || strings.ContainsFunc(h, func(r rune) bool {
		return r != '.' && r != '-' && r != ':' && (r < '0' || r > '9') && (r < 'a' || r > 'z')
	}) || (strings.Contains(h, ":") && net.ParseIP(h) == nil) {
		return "", fmt.Errorf("%q is not a destination host: a name (shop.example.com) or an address, at most 253 characters", s)
	}
	return h, nil
}

func getGateway(ctx context.Context, c client.Client, ns, name string, gw *crawlv1alpha1.ProxyGateway) error {
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, gw); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("no ProxyGateway %s in namespace %s (set -n, or kubectl get proxygateways -A)", name, ns)
		}
		return fmt.Errorf("getting proxygateway %s/%s: %w", ns, name, err)
	}
	return nil
}

// resolveMember checks that member (name or pool/name) is a Proxy of one
// of gateway's pools and returns its pool and name.
func resolveMember(ctx context.Context, c client.Client, ns, gateway, member string) (string, string, error) {
	var gw crawlv1alpha1.ProxyGateway
	if err := getGateway(ctx, c, ns, gateway, &gw); err != nil {
		return "", "", err
	}
	pool, name, hasPool := strings.Cut(member, "/")
	if !hasPool {
		name = pool
	}
	var p crawlv1alpha1.Proxy
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", "", fmt.Errorf("getting proxy %s/%s: %w", ns, name, err)
	}
	got := p.Labels[crawlv1alpha1.LabelPool]
	if err != nil || !slices.Contains(gw.Spec.Pools, got) || (hasPool && got != pool) {
		return "", "", fmt.Errorf("%s is not a member of proxygateway %s/%s (its pools: %s; their members: kubectl get proxies -n %s -l '%s in (%s)')",
			member, ns, gateway, strings.Join(gw.Spec.Pools, ", "), ns, crawlv1alpha1.LabelPool, strings.Join(gw.Spec.Pools, ","))
	}
	return got, name, nil
}

// editBans applies edit to the bans in force of gateway (expired ones
// pruned) and patches the result, with optimistic locking: a concurrent
// writer's ban is never lost, the edit is applied again on a conflict.
func editBans(ctx context.Context, c client.Client, ns, gateway string, edit func([]crawlv1alpha1.GatewayBan) ([]crawlv1alpha1.GatewayBan, error)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var gw crawlv1alpha1.ProxyGateway
		if err := getGateway(ctx, c, ns, gateway, &gw); err != nil {
			return err
		}
		orig := gw.DeepCopy()
		now := time.Now()
		bans := slices.DeleteFunc(slices.Clone(gw.Spec.Bans), func(b crawlv1alpha1.GatewayBan) bool { return !now.Before(b.Expires.Time) })
		bans, err := edit(bans)
		if err != nil {
			return err
		}
		gw.Spec.Bans = bans
		if err := c.Patch(ctx, &gw, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			// RBAC's refusal gets the role to bind; the admission
			// policy's (config/admission) says itself what it needs.
			hint := ""
			if apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
				hint = " (may you patch proxygateways? bind the ClusterRole egress-proxies-operator-gateway-ban-editor in the namespace)"
			}
			return fmt.Errorf("writing the bans of proxygateway %s/%s: %w%s", ns, gateway, err, hint)
		}
		return nil
	})
}
