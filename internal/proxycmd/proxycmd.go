package proxycmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
)

// Environment variables that carry the proxy's credentials when
// --credentials-dir is not set.
const (
	envProxyUsername = "PROXY_USERNAME"
	envProxyPassword = "PROXY_PASSWORD"
)

// envCredentialsDirectory is where systemd's LoadCredential= puts a
// service's credentials (a guest's unit): the default of --credentials-dir.
const envCredentialsDirectory = "CREDENTIALS_DIRECTORY"

// envKubernetesServiceHost is set by the kubelet in every pod: the API
// server's Service address, which a proxy pod always refuses as a
// destination.
const envKubernetesServiceHost = "KUBERNETES_SERVICE_HOST"

// proxyOptions are the proxy subcommand's flags.
type proxyOptions struct {
	listen         string
	adminListen    string
	credentialsDir string
	allowedRanges  string
	allowOpen      bool
	dialTimeout    time.Duration
	idleTimeout    time.Duration
	egress         *egress.Flags
	maxConcurrent  int
	serve          *forwardproxy.ServeOptions
	responseHeader time.Duration
	accessLog      bool
}

// Env is what the forward proxy takes from where it runs, beside its
// flags.
type Env struct {
	// Command is the command line that runs it, for its usage text:
	// "egress-proxies-operator proxy" in a pod (the default), "egress-proxy"
	// in a VM guest.
	Command string
	// Getenv reads the environment (os.Getenv): the credentials when
	// --credentials-dir is not set, systemd's CREDENTIALS_DIRECTORY in a
	// guest, and the Kubernetes Service address that a pod's proxy refuses
	// as a destination.
	Getenv func(string) string
	// Log is the proxy's logger.
	Log logr.Logger
	// Ready, when set, is called with the proxy's and the admin server's
	// addresses once both listen (tests listen on port 0 and learn the
	// ports there; admin is nil when --admin-listen=0).
	Ready func(proxy, admin net.Addr)
}

// Run runs the product's HTTP forward proxy until ctx is done; then it
// drains and returns nil. args are the arguments after the command
// (env.Command). The operator's `proxy` subcommand (kubernetes members'
// pods) and the guest binary cmd/egress-proxy (VM members) both call it,
// so that one engine, with the same flags and defaults, serves every
// member, and the tests run the wiring both run.
func Run(ctx context.Context, args []string, env Env) error {
	getenv, log, ready := env.Getenv, env.Log, env.Ready
	command := env.Command
	if command == "" {
		command = "egress-proxies-operator proxy"
	}
	var o proxyOptions
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.listen, "listen", ":3128", "Address of the forward proxy.")
	fs.StringVar(&o.adminListen, "admin-listen", ":9090", "Address of /healthz and /metrics; 0 disables it.")
	fs.StringVar(&o.credentialsDir, "credentials-dir", "", "Directory with the files username and password (a mounted Secret, or systemd's credentials); default $"+envCredentialsDirectory+" when set; when neither, "+envProxyUsername+" and "+envProxyPassword+" are used.")
	fs.StringVar(&o.allowedRanges, "allowed-source-ranges", "", "Comma-separated CIDRs of the clients served (default: any client with the credentials).")
	fs.BoolVar(&o.allowOpen, "allow-open", false, "Run without credentials and without --allowed-source-ranges, as an open proxy.")
	fs.DurationVar(&o.dialTimeout, "dial-timeout", forwardproxy.DefaultDialTimeout, "Timeout of a dial to an upstream server.")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", forwardproxy.DefaultIdleTimeout, "A CONNECT or upgraded tunnel, or an upstream connection, without traffic for that long is closed.")
	o.egress = egress.BindFlags(fs)
	fs.Lookup(egress.FlagDenyCIDRs).Usage += " The API server's Service address (" + envKubernetesServiceHost + ") always is."
	fs.IntVar(&o.maxConcurrent, "max-concurrent", forwardproxy.DefaultMaxConcurrent, "Requests and tunnels served at once; more get 503.")
	o.serve = ServeFlags(fs)
	fs.DurationVar(&o.responseHeader, "response-header-timeout", forwardproxy.DefaultResponseHeaderTimeout, "Time an upstream server has to answer with its headers; 504 past it.")
	fs.BoolVar(&o.accessLog, "access-log", true, "Log one line per request and tunnel at the default level (time, client, user, destination, status, bytes, duration; never a credential); false: only at -v 1.")
	if err := ParseSubcommand(fs, args, command+" [flags]"); err != nil {
		return err
	}
	if o.credentialsDir == "" {
		o.credentialsDir = getenv(envCredentialsDirectory)
	}
	cfg, err := o.config(getenv)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return fmt.Errorf("proxy: registering metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return fmt.Errorf("proxy: registering metrics: %w", err)
	}
	if cfg.Metrics, err = forwardproxy.NewMetrics(reg); err != nil {
		return fmt.Errorf("proxy: registering metrics: %w", err)
	}
	cfg.Log = log.WithName("forward")
	if o.accessLog {
		cfg.AccessLog = log.WithName("access")
	}
	p, err := forwardproxy.New(cfg)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}

	var lc net.ListenConfig
	proxyLn, err := forwardproxy.Listen(ctx, o.listen)
	if err != nil {
		return fmt.Errorf("proxy: --listen: %w", err)
	}
	var adminLn net.Listener
	var adminAddr net.Addr
	adminDesc := "disabled"
	if o.adminListen != "0" {
		if adminLn, err = lc.Listen(ctx, "tcp", o.adminListen); err != nil {
			_ = proxyLn.Close()
			return fmt.Errorf("proxy: --admin-listen: %w", err)
		}
		adminAddr = adminLn.Addr()
		adminDesc = adminAddr.String()
	}
	auth := "none"
	if cfg.Username != "" {
		auth = "basic"
	}
	log.Info("forward proxy listening", "listen", proxyLn.Addr().String(), "admin", adminDesc,
		"auth", auth, "allowedSourceRanges", fmt.Sprint(cfg.AllowedSourceRanges), "allowOpen", cfg.AllowOpen, "drain", o.serve.Drain,
		"egress", cfg.Egress.String(), "accessLog", o.accessLog)
	if ready != nil {
		ready(proxyLn.Addr(), adminAddr)
	}

	stopLogging := context.AfterFunc(ctx, func() { log.Info("forward proxy shutting down", "drain", o.serve.Drain) })
	defer stopLogging()
	var admin http.Handler
	if adminLn != nil {
		admin = AdminHandler(reg)
	}
	err = ServeWithAdmin(ctx, "proxy", proxyLn, p, *o.serve, adminLn, admin)
	p.CloseIdleConnections()
	log.Info("forward proxy stopped")
	return err
}

// config turns the options and the environment into a forwardproxy.Config
// without Metrics and Log.
func (o proxyOptions) config(getenv func(string) string) (forwardproxy.Config, error) {
	cfg := forwardproxy.Config{
		AllowOpen: o.allowOpen, DialTimeout: o.dialTimeout, IdleTimeout: o.idleTimeout,
		ResponseHeaderTimeout: o.responseHeader, MaxConcurrent: o.maxConcurrent,
	}
	if o.dialTimeout < 0 || o.idleTimeout < 0 || o.responseHeader < 0 {
		return cfg, errors.New("--dial-timeout, --idle-timeout and --response-header-timeout must not be negative")
	}
	if o.maxConcurrent < 1 {
		return cfg, errors.New("--max-concurrent must be at least 1")
	}
	if o.serve != nil {
		if err := CheckServeFlags(o.serve); err != nil {
			return cfg, err
		}
	}
	var err error
	if cfg.AllowedSourceRanges, err = egress.ParsePrefixes(o.allowedRanges); err != nil {
		return cfg, fmt.Errorf("--allowed-source-ranges: %w", err)
	}
	if cfg.Egress, err = o.egress.Policy(); err != nil {
		return cfg, err
	}
	if host := getenv(envKubernetesServiceHost); host != "" {
		if ip, err := netip.ParseAddr(host); err == nil {
			cfg.Egress.DenyCIDRs = append(cfg.Egress.DenyCIDRs, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
		}
	}
	if o.credentialsDir != "" {
		if cfg.Username, err = readProxyCredential(o.credentialsDir, "username"); err != nil {
			return cfg, err
		}
		if cfg.Password, err = readProxyCredential(o.credentialsDir, "password"); err != nil {
			return cfg, err
		}
	} else {
		cfg.Username, cfg.Password = getenv(envProxyUsername), getenv(envProxyPassword)
		if (cfg.Username == "") != (cfg.Password == "") {
			return cfg, fmt.Errorf("set both %s and %s, or neither", envProxyUsername, envProxyPassword)
		}
	}
	if cfg.Username == "" && len(cfg.AllowedSourceRanges) > 0 && !cfg.AllowOpen {
		if err := egress.CheckOpenSources(cfg.AllowedSourceRanges); err != nil {
			return cfg, fmt.Errorf("refusing to run an open proxy: --allowed-source-ranges without credentials: %w; pass --allow-open to run one on purpose", err)
		}
	}
	if cfg.Username == "" && len(cfg.AllowedSourceRanges) == 0 && !cfg.AllowOpen {
		return cfg, fmt.Errorf("refusing to run an open proxy: no credentials (--credentials-dir, or %s and %s) and no --allowed-source-ranges; pass --allow-open to run one on purpose",
			envProxyUsername, envProxyPassword)
	}
	return cfg, nil
}

// readProxyCredential reads dir/name, without trailing newlines (files written
// by hand or with echo end with one). The error names the file, never its
// content.
func readProxyCredential(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path) //nolint:gosec // G304: the path comes from the operator's own --credentials-dir flag
	if err != nil {
		return "", fmt.Errorf("--credentials-dir: reading the %s: %w", name, err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("--credentials-dir: %s is empty", path)
	}
	return s, nil
}
