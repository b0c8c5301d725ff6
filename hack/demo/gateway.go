package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
)

// demoGatewayUser is the crawler's user name at the demo's gateway.
const demoGatewayUser = "crawler"

// gatewayDemo shows the pool gateway in front of the pool's members: its
// URL, 20 requests spread over the members' egress addresses, a session that
// stays on one address, and a member deleted while requests go on, none of
// which fails. The gateway runs in this process, as the `gateway`
// subcommand runs it (the same member watch, forward proxy and data path):
// the demo has no kubelet to run the Deployment a ProxyGateway makes.
// ipURL answers with the caller's address: through a member, its egress
// address.
// It returns the gateway, still running, for -wait; the caller stops it.
func gatewayDemo(ctx context.Context, out io.Writer, restCfg *rest.Config, k8s client.Client, ns, pool, ipURL string) (*demoGateway, error) {
	gw, err := startDemoGateway(ctx, restCfg, ns, pool)
	if err != nil {
		return nil, err
	}
	if err := showGateway(ctx, out, gw, k8s, ns, pool, ipURL); err != nil {
		gw.stop()
		return nil, err
	}
	if err := showGatewayObject(ctx, out, k8s, ns, pool); err != nil {
		gw.stop()
		return nil, err
	}
	return gw, nil
}

// showGatewayObject applies a ProxyGateway on the pool, as a user would
// with kubectl, and prints its Ready condition: the demo's operator has no
// image for gateway pods (there is no kubelet to run them), and the status
// says so rather than staying empty.
func showGatewayObject(ctx context.Context, out io.Writer, k8s client.Client, ns, pool string) error {
	gw := &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "front"},
		Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{pool}}}
	if err := k8s.Create(ctx, gw); err != nil {
		return fmt.Errorf("applying ProxyGateway front: %w", err)
	}
	var ready *metav1.Condition
	if err := waitUntil(ctx, time.Minute, func() bool {
		if k8s.Get(ctx, client.ObjectKeyFromObject(gw), gw) != nil {
			return false
		}
		ready = apimeta.FindStatusCondition(gw.Status.Conditions, crawlv1alpha1.ConditionReady)
		return ready != nil
	}); err != nil {
		return fmt.Errorf("ProxyGateway front has no status: %w", err)
	}
	_, _ = fmt.Fprintf(out, "==> applied ProxyGateway %s/front: Ready=%s %s: %s\n", ns, ready.Status, ready.Reason, ready.Message)
	return nil
}

func showGateway(ctx context.Context, out io.Writer, gw *demoGateway, k8s client.Client, ns, pool, ipURL string) error {
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(out, "==> "+format+"\n", args...) }
	if err := waitUntil(ctx, time.Minute, func() bool { return gw.set.Len() > 0 }); err != nil {
		return fmt.Errorf("the gateway has no members: %w", err)
	}
	members := gw.set.Members()
	say("pool gateway for ProxyPool %s at %s (a password of this run; in a cluster, the `url` key of Secret <gateway>-gateway-credentials)",
		pool, gw.redacted())
	say("it runs in this process, as `egress-proxies-operator gateway` runs in a pod (the demo has no kubelet for a ProxyGateway's Deployment), and watches the pool's published list: %d members",
		len(members))

	rotating, session := gw.client(demoGatewayUser), gw.client(demoGatewayUser+"-session-demo1")
	defer rotating.CloseIdleConnections()
	defer session.CloseIdleConnections()
	seen, err := egressesThrough(ctx, rotating, ipURL, 20)
	if err != nil {
		return fmt.Errorf("request through the gateway: %w", err)
	}
	say("20 requests through the gateway, round-robin over the members: %d egress addresses, %s", len(seen), tally(seen))
	if len(seen) != len(members) {
		return fmt.Errorf("20 requests used %d egress addresses; the gateway has %d members", len(seen), len(members))
	}

	sessionSeen, err := egressesThrough(ctx, session, ipURL, 10)
	if err != nil {
		return fmt.Errorf("request in session demo1: %w", err)
	}
	say("10 requests as user %s-session-demo1: %s", demoGatewayUser, tally(sessionSeen))
	if len(sessionSeen) != 1 {
		return fmt.Errorf("session demo1 used %d egress addresses, want 1", len(sessionSeen))
	}
	var sessionAddr string
	for a := range sessionSeen {
		sessionAddr = a
	}

	// A member that does not carry the session, so that the session shows
	// it keeps its address while another member goes.
	var victim *gateway.Member
	for _, m := range members {
		if m.EgressIP != sessionAddr {
			victim = m
			break
		}
	}
	if victim == nil {
		return errors.New("no member besides the session's")
	}
	load := startLoad(ctx, rotating, session, ipURL)
	say("deleting member %s (egress %s) while requests go on, rotating and in session demo1", victim.Name, victim.EgressIP)
	if err := k8s.Delete(ctx, &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: victim.Name}}); err != nil {
		load.stop()
		return err
	}
	err = waitUntil(ctx, 2*time.Minute, func() bool {
		gone := apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: victim.Name}, &crawlv1alpha1.Proxy{}))
		return gone && !slices.ContainsFunc(gw.set.Members(), func(m *gateway.Member) bool { return m.Name == victim.Name })
	})
	// Some requests more once it is gone from the list and its VM removed.
	load.more(ctx, 20)
	r := load.stop()
	if err != nil {
		return fmt.Errorf("waiting for %s to go: %w", victim.Name, err)
	}
	say("while %s went (its VM removed, gone from the gateway's members): %d requests, %d failed; session demo1 stayed on %s",
		victim.Name, r.ok+r.failed, r.failed, tally(r.session))
	if r.failed > 0 {
		return fmt.Errorf("%d requests failed while a member went: %w", r.failed, r.firstErr)
	}
	if len(r.session) != 1 || r.session[sessionAddr] == 0 {
		return fmt.Errorf("session demo1 moved from %s: %v", sessionAddr, r.session)
	}
	return nil
}

// demoGateway is the in-process gateway.
type demoGateway struct {
	set        *gateway.Set
	addr, pass string
	stop       func()
}

func (g *demoGateway) redacted() string {
	return (&url.URL{Scheme: "http", User: url.UserPassword(demoGatewayUser, "xxxxx"), Host: g.addr}).String()
}

// client returns an HTTP client that uses the gateway as user.
func (g *demoGateway) client(user string) *http.Client {
	u := &url.URL{Scheme: "http", User: url.UserPassword(user, g.pass), Host: g.addr}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 15 * time.Second}
}

// startDemoGateway starts a gateway in front of pool's members on a
// loopback port, with a password of its own: setup.RunGateway with the
// arguments a ProxyGateway's Deployment gives the gateway subcommand
// (--pools), its watch reaching the API server as the demo does, and its
// log discarded (the demo prints what it shows).
func startDemoGateway(ctx context.Context, restCfg *rest.Config, ns, pool string) (*demoGateway, error) {
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	pass := rand.Text()
	environ := map[string]string{published.EnvGatewayUsername: demoGatewayUser, published.EnvGatewayPassword: pass, published.EnvPodNamespace: ns}
	args := []string{"--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0", "--pools=" + pool, "--drain=1s"}
	ctx, cancel := context.WithCancel(ctx)
	r, wait, err := setup.StartGateway(ctx, args, setup.GatewayEnv{
		Getenv:  func(k string) string { return environ[k] },
		Clients: func() (setup.GatewayClients, error) { return setup.GatewayClients{Core: cs}, nil },
		Log:     logr.Discard(),
	})
	if err != nil {
		cancel()
		return nil, err
	}
	return &demoGateway{set: r.Members, addr: r.Addr.String(), pass: pass, stop: func() {
		cancel()
		if err := wait(); err != nil {
			fmt.Fprintf(os.Stderr, "the demo's gateway: %v\n", err)
		}
	}}, nil
}

// egressThrough fetches ipURL through c and returns the address it saw.
func egressThrough(ctx context.Context, c *http.Client, ipURL string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ipURL, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return strings.TrimSpace(string(body)), nil
}

// egressesThrough sends n requests to ipURL through c and counts the
// addresses they came from.
func egressesThrough(ctx context.Context, c *http.Client, ipURL string, n int) (map[string]int, error) {
	seen := map[string]int{}
	for range n {
		addr, err := egressThrough(ctx, c, ipURL)
		if err != nil {
			return nil, err
		}
		seen[addr]++
	}
	return seen, nil
}

// tally prints addresses with their counts, in address order.
func tally(seen map[string]int) string {
	addrs := make([]string, 0, len(seen))
	for a := range seen {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	parts := make([]string, len(addrs))
	for i, a := range addrs {
		parts[i] = fmt.Sprintf("%s ×%d", a, seen[a])
	}
	return strings.Join(parts, ", ")
}

// load sends requests one after the other, alternating a rotating one and
// one in a session, until stopped.
type load struct {
	mu      sync.Mutex
	res     loadResult
	done    chan struct{}
	stopped chan struct{}
}

type loadResult struct {
	ok, failed int
	firstErr   error
	session    map[string]int // egress addresses of the session's requests
}

func startLoad(ctx context.Context, rotating, session *http.Client, ipURL string) *load {
	l := &load{res: loadResult{session: map[string]int{}}, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(l.stopped)
		for i := 0; ; i++ {
			select {
			case <-l.done:
				return
			case <-ctx.Done():
				return
			default:
			}
			c := rotating
			if i%2 == 1 {
				c = session
			}
			addr, err := egressThrough(ctx, c, ipURL)
			l.mu.Lock()
			switch {
			case err != nil && ctx.Err() == nil:
				l.res.failed++
				if l.res.firstErr == nil {
					l.res.firstErr = err
				}
			case err == nil:
				l.res.ok++
				if c == session {
					l.res.session[addr]++
				}
			}
			l.mu.Unlock()
		}
	}()
	return l
}

// more waits until n more requests were sent.
func (l *load) more(ctx context.Context, n int) {
	l.mu.Lock()
	want := l.res.ok + l.res.failed + n
	l.mu.Unlock()
	_ = waitUntil(ctx, time.Minute, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.res.ok+l.res.failed >= want
	})
}

// stop ends the load and returns what it counted.
func (l *load) stop() loadResult {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	<-l.stopped
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.res
}

// writeURL writes the gateway's URL, with its password, to a file of its
// own in dir, for -wait: the password appears in no output.
func (g *demoGateway) writeURL(dir string) (string, error) {
	path := filepath.Join(dir, "gateway-url")
	u := &url.URL{Scheme: "http", User: url.UserPassword(demoGatewayUser, g.pass), Host: g.addr}
	return path, os.WriteFile(path, []byte(u.String()), 0o600)
}
