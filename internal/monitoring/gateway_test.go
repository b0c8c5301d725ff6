package monitoring_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
)

// The world's gateways' client credentials.
const gwUser, gwPass = "crawler", "gateway-test-password"

// gatewayTarget is a gateway running in the test process as the gateway
// subcommand runs it: its proxy and its metrics, on loopback.
type gatewayTarget struct {
	name, namespace string
	proxy, metrics  string
	set             *gateway.Set
}

// startGateway runs a gateway in front of pools, as a ProxyGateway's pod
// runs one (setup.RunGateway), its members followed from their published
// lists on the test's API server. A member may carry one request or tunnel
// at a time (so that traffic finds members at their limit) and is ejected
// at its first failure.
func startGateway(ctx context.Context, t *testing.T, namespace, name string, pools ...string) *gatewayTarget {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	environ := map[string]string{published.EnvGatewayUsername: gwUser, published.EnvGatewayPassword: gwPass, published.EnvPodNamespace: namespace}
	args := []string{"--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0", "--pools=" + strings.Join(pools, ","), "--drain=1s",
		"--eject-after=1", "--eject-for=2s", "--max-per-member=1"}
	gctx, cancel := context.WithCancel(ctx)
	r, wait, err := setup.StartGateway(gctx, args, setup.GatewayEnv{
		Getenv:  func(k string) string { return environ[k] },
		Clients: func() (setup.GatewayClients, error) { return setup.GatewayClients{Core: cs}, nil },
		Log:     logr.Discard(),
	})
	if err != nil {
		cancel()
		t.Fatalf("gateway %s: %v", name, err)
	}
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Errorf("gateway %s: %v", name, err)
		}
	})
	return &gatewayTarget{name: name, namespace: namespace, proxy: r.Addr.String(), metrics: r.AdminAddr.String(), set: r.Members}
}

// sendTraffic sends, until ctx is done, plain requests to target (an
// http:// URL) through the gateway one after another, and every tenth
// round four CONNECT tunnels to it at once, held until all four have their
// answer: with members that carry one each, some find every member busy.
func sendTraffic(ctx context.Context, gw *gatewayTarget, target string) {
	proxyURL := &url.URL{Scheme: "http", Host: gw.proxy, User: url.UserPassword(gwUser, gwPass)}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	defer c.CloseIdleConnections()
	host := target[len("http://"):]
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for round := 0; ; round++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/ip", nil); err == nil {
			if resp, err := c.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		}
		if round%10 == 0 {
			tunnels(ctx, gw.proxy, host, 4)
		}
	}
}

// tunnels opens n CONNECT tunnels to host through the gateway at addr at
// once and closes them once each has its answer (or failed).
func tunnels(ctx context.Context, addr, host string, n int) {
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(gwUser+":"+gwPass))
	var answered, done sync.WaitGroup
	release := make(chan struct{})
	for range n {
		answered.Add(1)
		done.Go(func() {
			d := net.Dialer{Timeout: 5 * time.Second}
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				answered.Done()
				return
			}
			defer func() { _ = conn.Close() }()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			_, err = fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", host, host, auth)
			if err == nil {
				// The status line is the answer; what follows is the tunnel.
				_, _ = bufio.NewReader(conn).ReadString('\n')
			}
			answered.Done()
			<-release
		})
	}
	answered.Wait()
	close(release)
	done.Wait()
}

// httpGet returns the body of a GET of u on loopback.
func httpGet(ctx context.Context, t *testing.T, u string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// lintGatewayMetrics checks what the gateway's /metrics serves, after
// traffic, with promtool check metrics, and that each of the gateway's own
// metrics is in the table of docs/gateway.md.
func lintGatewayMetrics(t *testing.T, gw *gatewayTarget) {
	t.Helper()
	text := httpGet(t.Context(), t, "http://"+gw.metrics+"/metrics")
	if out, err := promtool(t, t.TempDir(), text, "check", "metrics"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("promtool check metrics on the gateway's metrics: %v\n%s", err, out)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "gateway.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`(?m)^# TYPE (egress_proxies_gateway_[a-z_]+) `).FindAllSubmatch(text, -1)
	if len(names) == 0 {
		t.Fatalf("the gateway serves none of its metrics:\n%s", text)
	}
	for _, n := range names {
		if !strings.Contains(string(doc), "| `"+string(n[1])+"` |") {
			t.Errorf("%s is not in the metrics table of docs/gateway.md", n[1])
		}
	}
}
