package main

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
)

// The gateway mode of the bench (`make bench-gateway`, issue #22): our
// forward proxy ("ours") is the upstream; the pool gateway ("gateway") and
// Apify's proxy-chain ("proxy-chain") each chain every request and tunnel
// to it with its credentials, and the client measures all three, and the
// origin directly, in the same run.
const (
	nameGateway    = "gateway"
	nameProxyChain = "proxy-chain"
)

// childUpstreamEnv, set with childEnv, makes the child a pool gateway with
// one member, our forward proxy at the address it names.
const childUpstreamEnv = "BENCHPROXY_CHILD_UPSTREAM"

// runGatewayChild serves a pool gateway on addr until ctx ends, as the
// gateway subcommand runs it (Basic auth, metrics on, default limits), with
// one member: our forward proxy at upstream, with the bench's credentials.
// The subcommand's member watch is the only part left out: the member list
// is given, not read from an API server. The cap per member is raised to
// the idle tunnels and clients of the run, which all go to that one member.
func runGatewayChild(ctx context.Context, addr, upstream string) error {
	reg := prometheus.NewRegistry()
	gm, err := gateway.NewMetrics(reg)
	if err != nil {
		return err
	}
	fm, err := forwardproxy.NewMetrics(reg)
	if err != nil {
		return err
	}
	set := gateway.NewSet()
	set.Update("bench", []gateway.Entry{{Name: "upstream", URL: "http://" + benchUser + ":" + benchPass + "@" + upstream}})
	g, err := gateway.New(gateway.Config{Members: set, Username: benchUser, Password: benchPass,
		MaxPerMember: forwardproxy.DefaultMaxConcurrent, Metrics: gm, Log: logr.Discard()})
	if err != nil {
		return err
	}
	defer g.CloseIdleConnections()
	p, err := gateway.NewProxy(g, gateway.ProxyOptions{Metrics: fm, Log: logr.Discard()})
	if err != nil {
		return err
	}
	return serve(ctx, addr, p)
}

// proxyChainFiles are the reference's server and its pinned npm packages.
//
//go:embed proxychain/package.json proxychain/package-lock.json proxychain/server.mjs
var proxyChainFiles embed.FS

// proxyChainDir returns the directory where proxy-chain is installed: the
// project's cache, one directory per version of the files above, so that a
// change of the pinned version installs anew.
func proxyChainDir() (string, error) {
	root := os.Getenv("XDG_CACHE_HOME")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		root = filepath.Join(home, ".cache")
	}
	h := sha256.New()
	for _, name := range []string{"package.json", "package-lock.json", "server.mjs"} {
		b, err := proxyChainFiles.ReadFile("proxychain/" + name)
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	return filepath.Join(root, "egress-proxies-operator", "proxy-chain", hex.EncodeToString(h.Sum(nil))[:16]), nil
}

// ensureProxyChain installs Node.js (with apt-get) and proxy-chain (with
// npm ci, at the version package-lock.json pins) when they are missing and
// install is set, and returns the directory to run server.mjs in.
func ensureProxyChain(ctx context.Context, install bool, log func(string, ...any)) (string, error) {
	dir, err := proxyChainDir()
	if err != nil {
		return "", err
	}
	_, nodeErr := exec.LookPath("node")
	_, npmErr := exec.LookPath("npm")
	installed := fileExists(filepath.Join(dir, "node_modules", "proxy-chain", "package.json"))
	if nodeErr == nil && installed {
		return dir, nil
	}
	if !install {
		return "", errors.New("node or proxy-chain is not installed (and --install=false)")
	}
	if nodeErr != nil || npmErr != nil {
		log("node or npm is not installed; installing nodejs and npm with apt-get")
		if err := aptInstall(ctx, "nodejs", "npm"); err != nil {
			return "", err
		}
	}
	if installed {
		return dir, nil
	}
	log("installing proxy-chain (pinned in hack/benchproxy/proxychain/package-lock.json) into %s", dir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	for _, name := range []string{"package.json", "package-lock.json", "server.mjs"} {
		b, _ := proxyChainFiles.ReadFile("proxychain/" + name)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return "", err
		}
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci: %w:\n%s", err, lastLines(string(out), 5))
	}
	return dir, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// proxyChainCommand runs proxy-chain's server from dir on addr, chaining to
// our forward proxy at upstream.
func proxyChainCommand(ctx context.Context, dir, addr, upstream string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "node", "server.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "BENCH_LISTEN="+addr, "BENCH_UPSTREAM=http://"+benchUser+":"+benchPass+"@"+upstream,
		"BENCH_USER="+benchUser, "BENCH_PASS="+benchPass)
	return cmd
}
