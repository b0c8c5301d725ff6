// Command egress-proxies-operator runs the operator: it reconciles Proxy
// objects with instances on the configured providers, collects orphaned
// instances and reports provider health. Its `proxy` subcommand runs the
// product's forward proxy, for the kubernetes provider's pods.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/probe"
	"github.com/egress-proxies/egress-proxies-operator/internal/proxycmd"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
	"github.com/egress-proxies/egress-proxies-operator/internal/tracing"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

type flags struct {
	providersConfig       string
	metricsAddr           string
	metricsSecure         bool
	probeAddr             string
	leaderElect           bool
	leaderElectionNS      string
	pollInterval          time.Duration
	resyncInterval        time.Duration
	healthInterval        time.Duration
	gcInterval            time.Duration
	gcGracePeriod         time.Duration
	workers               int
	probe                 bool
	probeInterval         time.Duration
	probeTimeout          time.Duration
	probeFailureThreshold int
	enableHTTP2           bool
	checkConfigAndExit    bool
	proxyImage            string
	operatorNamespace     string
	installationID        string
	namespaces            string
}

func main() {
	// `egress-proxies-operator proxy ...` runs the forward proxy itself, as
	// the kubernetes provider's pods do: the image that runs the operator
	// runs the proxies too.
	if len(os.Args) > 1 && os.Args[1] == "proxy" {
		ctrl.SetLogger(zap.New())
		err := proxycmd.Run(ctrl.SetupSignalHandler(), os.Args[2:], proxycmd.Env{Getenv: os.Getenv, Log: ctrl.Log.WithName("proxy")})
		switch {
		case errors.Is(err, flag.ErrHelp):
			return
		case err != nil:
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	// `egress-proxies-operator gateway ...` runs a pool gateway, as the
	// Deployments of ProxyGateways do.
	if len(os.Args) > 1 && os.Args[1] == "gateway" {
		ctrl.SetLogger(zap.New())
		err := runGateway(ctrl.SetupSignalHandler(), os.Args[2:], os.Getenv, ctrl.Log.WithName("gateway"))
		switch {
		case errors.Is(err, flag.ErrHelp):
			return
		case err != nil:
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	var f flags
	fs := flag.CommandLine
	fs.StringVar(&f.providersConfig, "providers-config", "/etc/proxy-operator/config/providers.yaml", "Path of the providers configuration (YAML).")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", "0", "Address of the metrics endpoint, for example :8443 (secure) or :8080; 0 disables it.")
	fs.BoolVar(&f.metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS with Kubernetes authentication and authorization.")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address of the liveness and readiness probes.")
	fs.BoolVar(&f.leaderElect, "leader-elect", false, "Elect a leader, so that only one replica acts.")
	fs.StringVar(&f.leaderElectionNS, "leader-election-namespace", "", "Namespace of the leader election lease (default: the pod's).")
	fs.DurationVar(&f.pollInterval, "poll-interval", controller.DefaultPollInterval, "How often a Proxy that is not Ready is looked at (a provider may look sooner when it knows the instance is due).")
	fs.DurationVar(&f.resyncInterval, "resync-interval", controller.DefaultResyncInterval, "How often a Ready Proxy's instance is looked at.")
	fs.DurationVar(&f.healthInterval, "health-interval", controller.DefaultHealthInterval, "How often providers are checked for ProviderHealth.")
	fs.DurationVar(&f.gcInterval, "gc-interval", controller.DefaultGCInterval, "How often orphaned instances are looked for.")
	fs.DurationVar(&f.gcGracePeriod, "gc-grace-period", controller.DefaultGCGracePeriod, "Minimum age of an orphaned instance before it is deleted.")
	fs.IntVar(&f.workers, "max-concurrent-reconciles", 4, "Proxies reconciled in parallel.")
	fs.BoolVar(&f.probe, "probe", true, "Probe Ready proxies through the proxy (the Serving condition); off, Serving follows Ready.")
	fs.DurationVar(&f.probeInterval, "probe-interval", controller.DefaultProbeInterval, "How often a Ready proxy is probed through the proxy.")
	fs.DurationVar(&f.probeTimeout, "probe-timeout", probe.DefaultTimeout, "How long one probe (all its requests) may take.")
	fs.IntVar(&f.probeFailureThreshold, "probe-failure-threshold", controller.DefaultProbeFailureThreshold,
		"Failed probes in a row after which a pool member is replaced and a lone Proxy marked ProbeFailed.")
	fs.BoolVar(&f.enableHTTP2, "enable-http2", false, "Serve metrics over HTTP/2 (off by default: CVE-2023-44487, CVE-2023-39325).")
	fs.BoolVar(&f.checkConfigAndExit, "check-config", false, "Validate the providers configuration, print a summary and exit.")
	fs.StringVar(&f.proxyImage, "proxy-image", os.Getenv("OPERATOR_IMAGE"),
		"The operator's own container image, run by kubernetes provider pods with the proxy subcommand (default: $OPERATOR_IMAGE).")
	fs.StringVar(&f.operatorNamespace, "operator-namespace", defaultNamespace(os.Getenv, os.ReadFile),
		"The operator's own namespace, where it keeps the ownership key Secret (default: $POD_NAMESPACE, else the service account's namespace).")
	fs.StringVar(&f.installationID, "installation-id", "",
		"This installation's ID, carried in every instance's mark: operators with different IDs never touch each other's instances (default: the operator's namespace).")
	fs.StringVar(&f.namespaces, "namespaces", "",
		"Comma-separated namespaces whose Proxies and ProxyPools the operator serves; empty serves every namespace "+
			"(and needs the rights of namespace-role in all of them).")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(ctrl.SetupSignalHandler(), f); err != nil {
		ctrl.Log.Error(err, "operator stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags) error {
	log := ctrl.Log.WithName("setup")
	cfg, err := config.Load(f.providersConfig, setup.Types.Registry())
	if err != nil {
		return err
	}
	if f.checkConfigAndExit {
		for _, e := range cfg.Providers {
			fmt.Printf("%s (%s): zones %v, %d machine types, images %v\n", e.Name, e.Type, e.Zones, len(e.MachineTypes), e.Images)
		}
		return nil
	}

	namespaces, err := setup.ParseNamespaces(f.namespaces)
	if err != nil {
		return fmt.Errorf("--namespaces: %w", err)
	}

	tracer, shutdownTracing, err := tracing.Setup(ctx, os.Getenv, version)
	if err != nil {
		return err
	}
	defer func() {
		// The signal cancelled ctx; flushing still needs a few seconds.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			log.Error(err, "flushing traces")
		}
	}()

	var tlsOpts []func(*tls.Config)
	if !f.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{BindAddress: f.metricsAddr, SecureServing: f.metricsSecure, TLSOpts: tlsOpts}
	if f.metricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("reaching the API server: %w", err)
	}
	if err := setup.CheckNamespaceAccess(ctx, restConfig, namespaces); err != nil {
		return err
	}
	id, loader, err := ownershipLoader(restConfig, f)
	if err != nil {
		return err
	}
	var prober probe.Prober
	if f.probe {
		prober = &probe.HTTP{Timeout: f.probeTimeout}
	}
	op, err := setup.New(setup.Options{
		RestConfig: restConfig,
		Config:     cfg,
		OwnImage:   f.proxyImage,
		Ownership:  id,
		Namespaces: namespaces,
		Manager: ctrl.Options{
			Metrics:                 metricsOpts,
			HealthProbeBindAddress:  f.probeAddr,
			LeaderElection:          f.leaderElect,
			LeaderElectionNamespace: f.leaderElectionNS,
		},
		Controller: controller.Options{
			PollInterval: f.pollInterval, ResyncInterval: f.resyncInterval, MaxConcurrentReconciles: f.workers,
			HealthInterval: f.healthInterval, GCInterval: f.gcInterval, GCGracePeriod: f.gcGracePeriod,
			Prober: prober, ProbeInterval: f.probeInterval, ProbeFailureThreshold: int32(min(max(f.probeFailureThreshold, 1), 100)),
		},
		Registerer: ctrlmetrics.Registry,
		Tracer:     tracer,
	})
	if err != nil {
		return err
	}
	if err := op.Manager.Add(loader); err != nil {
		return fmt.Errorf("adding the ownership key loader: %w", err)
	}
	served := any(namespaces)
	if len(namespaces) == 0 {
		served = "all"
	}
	log.Info("starting", "version", version, "providers", op.EntryNames(), "namespaces", served, "installation", id.Installation(), "tracing", tracing.Enabled(os.Getenv))
	if err := op.Manager.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// serviceAccountNamespace is where a pod's service account namespace is
// mounted.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// defaultNamespace is the operator's namespace as the pod knows it: the
// downward API's POD_NAMESPACE, else the service account's; empty outside
// a pod.
func defaultNamespace(getenv func(string) string, readFile func(string) ([]byte, error)) string {
	if ns := getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := readFile(serviceAccountNamespace); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}

// installation is the installation ID the flags give: --installation-id,
// else the operator's namespace. Two installations in one cluster live in
// two namespaces, so the default keeps them apart; their keys differ too.
func installation(f flags) (string, error) {
	id := f.installationID
	if id == "" {
		id = f.operatorNamespace
	}
	if id == "" {
		return "", errors.New("no installation ID: set --installation-id, or --operator-namespace outside a pod")
	}
	return id, nil
}

// ownershipLoader returns the installation's identity, pending, and the
// runnable that gives it the key Secret's key (creating the Secret at the
// first start) once this replica leads: a standby never reads or creates
// the key. The loader has a client of its own: the manager's cache holds
// no Secrets.
func ownershipLoader(restConfig *rest.Config, f flags) (*ownership.Identity, *ownership.KeyLoader, error) {
	installationID, err := installation(f)
	if err != nil {
		return nil, nil, err
	}
	if f.operatorNamespace == "" {
		return nil, nil, errors.New("the operator's namespace is unknown: set --operator-namespace (or POD_NAMESPACE) outside a pod")
	}
	c, err := client.New(restConfig, client.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("building a client for the ownership key: %w", err)
	}
	id, err := ownership.NewPending(installationID)
	if err != nil {
		return nil, nil, err
	}
	return id, &ownership.KeyLoader{Client: c, Identity: id,
		Ref: ownership.KeyRef{Namespace: f.operatorNamespace, Name: ownership.DefaultKeySecret}}, nil
}
