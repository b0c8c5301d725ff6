package setup

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/proxycmd"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// silentFrom opens n connections from src (a 127.0.0.0/8 address) to addr
// and sends nothing on them; they close with the test.
func silentFrom(t *testing.T, src, addr string, n int) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: gatewayWait}
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dialing from %s: %v", src, err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
}

// refusedTotal reads egress_proxies_forward_connections_refused_total of
// cause from the admin server's /metrics.
func refusedTotal(admin, cause string) (int, error) {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^egress_proxies_forward_connections_refused_total\{cause="` + regexp.QuoteMeta(cause) + `"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		return 0, nil
	}
	return strconv.Atoi(string(m[1]))
}

// TestSilentConnectionsLeaveClientsServed is #38 item 4's exhaustion probe:
// silent connections from one source, then from many, and then on the
// admin port, while an authenticated client and the kubelet's probes are
// still served. The gateway's caps are lowered so that the flood is a few
// hundred connections; before admission counted unauthenticated
// connections, the same flood filled --max-connections and the client got
// 503.
func TestSilentConnectionsLeaveClientsServed(t *testing.T) {
	origin, member := memberAndOrigin(t, "its own page")
	cs := fake.NewClientset()
	publish(t, cs, gateway.Entry{Name: "crawl-a", URL: "http://umember:member-password-123456@" + member.String()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	getenv := envOf(map[string]string{published.EnvGatewayUsername: "ugw", published.EnvGatewayPassword: "gateway-password-123456", published.EnvPodNamespace: "crawlers"})
	const (
		maxConnections  = 300
		unauthenticated = 40
		unauthPerSource = 10
	)
	a, wait, err := StartGateway(ctx, []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--pools", "crawl", "--drain", "1s",
		"--max-connections", strconv.Itoa(maxConnections), "--max-unauthenticated", strconv.Itoa(unauthenticated),
		"--max-unauthenticated-per-source", strconv.Itoa(unauthPerSource),
		// The caps, not the timeout, must keep the clients served here.
		"--first-request-timeout", "10m"},
		GatewayEnv{Getenv: getenv, Clients: func() (GatewayClients, error) { return GatewayClients{Core: cs}, nil }, Log: logr.Discard()})
	if err != nil {
		t.Fatalf("StartGateway: %v", err)
	}
	poll.Until(t, gatewayWait, func() (bool, string) { return a.Members.Len() == 1, "the member listed" })
	admin := a.AdminAddr.String()
	gatewayAddr := a.Addr.String()

	// The client keeps one connection open and opens new ones.
	kept := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: gatewayAddr, User: url.UserPassword("ugw", "gateway-password-123456")})}
	defer kept.CloseIdleConnections()
	served := func(tr *http.Transport, what string) {
		t.Helper()
		resp, err := (&http.Client{Transport: tr, Timeout: gatewayWait}).Get(origin.URL)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "its own page" {
			t.Errorf("%s: %s %q; want 200 and its page", what, resp.Status, body)
		}
	}
	fresh := func(what string) {
		t.Helper()
		tr := kept.Clone()
		tr.DisableKeepAlives = true
		served(tr, what)
	}
	probe := func(path, what string) {
		t.Helper()
		// The kubelet's probes: a new connection each, no keep-alive.
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: gatewayWait}
		resp, err := c.Get("http://" + admin + path)
		if err != nil {
			t.Fatalf("%s %s: %v", what, path, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s %s: %s; want 200", what, path, resp.Status)
		}
	}
	evictedAtLeast := func(cause string, n int) {
		t.Helper()
		poll.Until(t, gatewayWait, func() (bool, string) {
			got, err := refusedTotal(admin, cause)
			return err == nil && got >= n, fmt.Sprintf("%d connections refused as %s (err %v); want at least %d", got, cause, err, n)
		})
	}
	served(kept, "before the flood")

	// One source: past its unauthenticated cap, its connections are
	// refused at once.
	// The client's connections come after the flood's in the listener's
	// queue, which admission takes in order.
	silentFrom(t, "127.0.0.2", gatewayAddr, 5*unauthPerSource)
	fresh("a new connection after one source's flood")
	probe("/healthz", "after one source's flood")
	evictedAtLeast(forwardproxy.RefusedUnauthenticatedSourceLimit, 4*unauthPerSource)

	// Many sources, together past --max-connections: each new silent
	// connection displaces the oldest one, so that they never hold more
	// than the unauthenticated cap.
	const sources, each = 80, unauthPerSource
	for i := range sources {
		silentFrom(t, fmt.Sprintf("127.0.1.%d", i+1), gatewayAddr, each)
	}
	served(kept, "the kept connection after many sources' flood")
	fresh("a new connection after many sources' flood")
	probe("/healthz", "after many sources' flood")
	probe("/readyz", "after many sources' flood")
	evictedAtLeast(forwardproxy.RefusedEvicted, sources*each+unauthPerSource-unauthenticated)

	// The admin port's own flood, from many sources: the probes still
	// find a slot.
	for i := range 40 {
		silentFrom(t, fmt.Sprintf("127.0.2.%d", i+1), admin, proxycmd.AdminServeOptions.MaxUnauthenticatedPerSource)
	}
	probe("/healthz", "during the admin port's flood")
	probe("/readyz", "during the admin port's flood")
	fresh("a new connection during the admin port's flood")

	cancel()
	if err := wait(); err != nil {
		t.Errorf("the gateway after cancel: %v", err)
	}
}
