package libvirt_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/libvirtlab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// The gateway phase of TestRealGuestOnBothTypes (#22): a ProxyGateway's
// data path, two replicas, in front of the two real tinyproxy guests.
const (
	// labPool is the pool whose published list names the two guests, and
	// labGateway the ProxyGateway that reads it.
	labPool    = "lab"
	labGateway = "lab"
	// fullSpread is the number of requests; fewer run when the
	// machine is too slow for them within spreadBudget.
	fullSpread   = 1000
	minSpread    = 200
	spreadBudget = 3 * time.Minute
	// labSessions sessions, each with sessionRequests plain requests and
	// a tunnel through each replica.
	labSessions     = 64
	sessionRequests = 2
	// workers is how many requests are in flight at once.
	workers = 8
	// sigmas is the width of the statistical bounds (see spreadBound).
	sigmas = 5
	// afterDeath is how many requests and tunnels run once the killed
	// member refuses connections, before the run ends.
	afterDeath = 120
)

// banOrigin is a second destination host on the lab network: it answers
// 429 to one member's egress address, as a site that banned it would.
var banOrigin = netip.MustParseAddr("198.51.100.51")

// gatewayPhase runs the gateway, as the gateway subcommand builds it, in
// front of the two Ready guests (proxies), with their members published
// the way a pool publishes them, and proves the end-to-end items on
// real tinyproxy guests: requests spread over both egress addresses within
// a binomial bound; a session keeps one egress address, on both replicas,
// where published placement (kubectl egress sessions) says; a destination's
// 429 keeps that member away from that host for the cool-down and no
// longer; a member killed mid-run (its tinyproxy stopped) fails no
// idempotent request or new tunnel, and moves only its own sessions. It
// leaves the guests serving as it found them (tinyproxy started again).
func gatewayPhase(ctx context.Context, t *testing.T, l *libvirtlab.Lab, ns string, proxies []*crawlv1alpha1.Proxy) {
	t.Helper()
	began := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()

	or := startOrigins(ctx, t, l, &wg)
	members := publishMembers(ctx, t, ns, proxies)
	user, pass := gatewayIdentity(ctx, t, ns)
	podCfg := rest.CopyConfig(env.Config)
	podCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + labGateway + "-gateway"}
	clk := &shiftedClock{}
	reps := []*replica{
		startReplica(ctx, t, &wg, podCfg, ns, user, pass, clk, "a"),
		startReplica(ctx, t, &wg, podCfg, ns, user, pass, clk, "b"),
	}
	for _, r := range reps {
		if err := poll.WaitPaced(ctx, time.Minute, func() (bool, string) {
			return r.set.Len() == len(members), fmt.Sprintf("replica %s has %d members; the list names %d", r.name, r.set.Len(), len(members))
		}); err != nil {
			t.Fatal(err)
		}
	}
	egressOf := map[string]string{} // member name -> egress address
	for _, m := range members {
		egressOf[m.Name] = m.address
	}
	t.Logf("gateway: 2 replicas with the %d guests as members %v in %s", len(members), egressOf, time.Since(began).Round(time.Millisecond))

	spreadOverMembers(ctx, t, reps, user, pass, or, members)
	before := sessionsStayPut(ctx, t, reps, user, pass, or, members)
	bansKeepTheMemberAway(ctx, t, reps, user, pass, or, members, clk)
	killAMember(ctx, t, l, ns, reps, user, pass, or, members, proxies, before)
	t.Logf("gateway phase: %s", time.Since(began).Round(time.Second))
}

// member is a guest as the gateway's members list names it.
type member struct {
	Name, address string
	proxyURL      *url.URL // the guest's tinyproxy, with its credentials
}

// publishMembers writes the published list of labPool from the two Proxies
// exactly as the pool controller writes a pool's (internal/controller,
// publish): one published.ListEntry per Serving member, its URL from the
// Proxy's status and the username and password of its credentials Secret,
// in the Secret <pool>-proxies and, without credentials, the ConfigMap of
// the same name. This is the seam the real gateway reads (gatewaywatch.Watch);
// a ProxyPool of its own would boot guests of its own.
func publishMembers(ctx context.Context, t *testing.T, ns string, proxies []*crawlv1alpha1.Proxy) []member {
	t.Helper()
	var withCreds, without []published.ListEntry
	var out []member
	for _, p := range proxies {
		var s corev1.Secret
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.Status.CredentialsSecretName}, &s); err != nil {
			t.Fatal(err)
		}
		user := url.UserPassword(string(s.Data[published.CredentialsKeyUsername]), string(s.Data[published.CredentialsKeyPassword]))
		e := published.ListEntry{Name: p.Name, URL: published.ProxyURL(p.Status.Address, p.Spec.Port, user), Provider: p.Spec.Provider,
			Zone: p.Status.Zone, EgressIP: p.Status.EgressIP, Created: p.CreationTimestamp.UTC()}
		withCreds = append(withCreds, e)
		u, err := url.Parse(e.URL)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, member{Name: p.Name, address: p.Status.Address, proxyURL: u})
		e.URL = published.ProxyURL(p.Status.Address, p.Spec.Port, nil)
		without = append(without, e)
	}
	writeList(ctx, t, ns, withCreds, without)
	return out
}

// writeList creates or replaces labPool's published Secret, then its
// ConfigMap (the gateway reads the Secret when the ConfigMap changes).
func writeList(ctx context.Context, t *testing.T, ns string, withCreds, without []published.ListEntry) {
	t.Helper()
	// The labels and controller reference the pool controller sets, which
	// the gateway requires; there is no ProxyPool labPool (envtest runs no
	// garbage collector to delete the list for want of its owner).
	meta := metav1.ObjectMeta{Namespace: ns, Name: published.ListName(labPool),
		Labels: map[string]string{published.LabelManagedBy: published.ManagedBy, crawlv1alpha1.LabelPool: labPool},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: crawlv1alpha1.GroupVersion.String(), Kind: "ProxyPool", Name: labPool,
			UID: "00000000-0000-0000-0000-00000000aaaa", Controller: ptr.To(true)}}}
	txt, js := published.RenderList(withCreds)
	secret := &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{published.ListKeyText: txt, published.ListKeyJSON: js}}
	txt, js = published.RenderList(without)
	cm := &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{published.ListKeyText: string(txt), published.ListKeyJSON: string(js)}}
	for _, obj := range []client.Object{secret, cm} {
		err := env.Client.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			err = env.Client.Update(ctx, obj)
		}
		if err != nil {
			t.Fatalf("publishing the list %T: %v", obj, err)
		}
	}
}

// gatewayIdentity creates the ProxyGateway labGateway in front of labPool
// and waits for the operator to make what its pods get: the credentials
// Secret (the gateway's own username and password, GATEWAY_USERNAME and
// GATEWAY_PASSWORD of its Deployment) and the Role and RoleBinding of its
// ServiceAccount, which the replicas then act as. envtest runs no pod of
// the Deployment; the replicas run in the test instead.
func gatewayIdentity(ctx context.Context, t *testing.T, ns string) (user, pass string) {
	t.Helper()
	gw := &crawlv1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: labGateway},
		Spec: crawlv1alpha1.ProxyGatewaySpec{Pools: []string{labPool}}}
	if err := env.Client.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	name := labGateway + "-gateway"
	var creds corev1.Secret
	if err := poll.WaitPaced(ctx, time.Minute, func() (bool, string) {
		for _, obj := range []client.Object{&rbacv1.Role{}, &rbacv1.RoleBinding{}} {
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
				return false, fmt.Sprintf("the gateway's %T: %v", obj, err)
			}
		}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-credentials"}, &creds)
		return err == nil, fmt.Sprintf("the gateway's credentials Secret: %v", err)
	}); err != nil {
		t.Fatal(err)
	}
	return string(creds.Data[published.CredentialsKeyUsername]), string(creds.Data[published.CredentialsKeyPassword])
}

// shiftedClock is the replicas' clock: the real time, moved forward by the
// test to end a cool-down without waiting for it.
type shiftedClock struct{ shift atomic.Int64 }

func (c *shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c.shift.Load())) }

// replica is one gateway replica.
type replica struct {
	name string
	addr string
	set  *gateway.Set
}

// startReplica runs a replica as a ProxyGateway's pod runs one:
// setup.RunGateway with the Deployment's arguments for the gateway lab
// (--pools=lab --gateway=lab, the flags' defaults for the rest), the
// gateway's credentials in its environment, and its watches as the
// gateway's ServiceAccount (podCfg). Only the clock (clk, so that the test
// can end a cool-down), the listen addresses (loopback, port 0), a 1 s
// drain and the access log (at V(1): 3000 lines would drown the test's)
// differ.
func startReplica(ctx context.Context, t *testing.T, wg *sync.WaitGroup, podCfg *rest.Config, ns, user, pass string, clk *shiftedClock, name string) *replica {
	t.Helper()
	cs, err := kubernetes.NewForConfig(podCfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(podCfg)
	if err != nil {
		t.Fatal(err)
	}
	environ := map[string]string{published.EnvGatewayUsername: user, published.EnvGatewayPassword: pass, published.EnvPodNamespace: ns}
	args := []string{"--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0", "--pools=" + labPool, "--gateway=" + labGateway,
		"--drain=1s", "--access-log=false"}
	r, wait, err := setup.StartGateway(ctx, args, setup.GatewayEnv{
		Getenv:  func(k string) string { return environ[k] },
		Clients: func() (setup.GatewayClients, error) { return setup.GatewayClients{Core: cs, Dynamic: dyn}, nil },
		Log:     testr.NewWithOptions(t, testr.Options{Verbosity: 0}).WithName("gateway-" + name),
		Now:     clk.Now,
	})
	if err != nil {
		t.Fatalf("replica %s: %v", name, err)
	}
	// The phase's wg.Wait, after its cancel, waits for the drain.
	wg.Go(func() {
		if err := wait(); err != nil {
			t.Errorf("replica %s: %v", name, err)
		}
	})
	return &replica{name: name, addr: r.Addr.String(), set: r.Members}
}

// origins are the destinations on the lab bridge's host side. Each names,
// in its answer, the address the request came from: the egress address of
// the member that carried it.
type origins struct {
	plain  string // http://host:port/ on the bridge's own address
	tunnel string // host:443, where CONNECT may go (tinyproxy's ConnectPort)
	banned string // http://banOrigin:port/
	// bannedEgress is the address banOrigin answers 429 to; set before
	// the ban's requests.
	bannedEgress atomic.Value
	mu           sync.Mutex
	atBan        map[string]int // requests banOrigin saw, by source address
}

func (o *origins) bannedSeen() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for k, v := range o.atBan {
		out[k] = v
	}
	return out
}

// startOrigins serves the origins until ctx ends.
func startOrigins(ctx context.Context, t *testing.T, l *libvirtlab.Lab, wg *sync.WaitGroup) *origins {
	t.Helper()
	o := &origins{atBan: map[string]int{}}
	o.bannedEgress.Store("")
	source := func(r *http.Request) string {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		return host
	}
	serve := func(addr string, h http.HandlerFunc) string {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(addr, "0"))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: h}
		wg.Go(func() { _ = srv.Serve(ln) })
		context.AfterFunc(ctx, func() { _ = srv.Close() })
		return "http://" + ln.Addr().String() + "/"
	}
	o.plain = serve(l.NetworkHost.String(), func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, source(r)) })
	addOnBridge(t, l, banOrigin)
	o.banned = serve(banOrigin.String(), func(w http.ResponseWriter, r *http.Request) {
		from := source(r)
		o.mu.Lock()
		o.atBan[from]++
		o.mu.Unlock()
		if banned, _ := o.bannedEgress.Load().(string); from == banned {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = io.WriteString(w, from)
	})
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(l.NetworkHost.String(), "443"))
	if err != nil {
		t.Fatal(err)
	}
	context.AfterFunc(ctx, func() { _ = ln.Close() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			_, _ = io.WriteString(c, host+"\n")
			_ = c.Close()
		}
	})
	o.tunnel = ln.Addr().String()
	return o
}

// addOnBridge adds addr to the lab network's bridge (in the test's own
// namespace).
func addOnBridge(t *testing.T, l *libvirtlab.Lab, addr netip.Addr) {
	t.Helper()
	if out, err := exec.Command("ip", "addr", "add", addr.String()+"/32", "dev", l.Bridge).CombinedOutput(); err != nil {
		t.Fatalf("ip addr add %s dev %s: %v: %s", addr, l.Bridge, err, out)
	}
}

// gwClient is a crawler of one replica: plain requests and tunnels as
// user (with its options), the gateway's password.
type gwClient struct {
	r          *replica
	user, pass string
	http       *http.Client
}

func newClient(r *replica, user, pass string) *gwClient {
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: r.addr, User: url.UserPassword(user, pass)}), MaxIdleConnsPerHost: workers}
	return &gwClient{r: r, user: user, pass: pass, http: &http.Client{Transport: tr, Timeout: poll.Paced(time.Minute)}}
}

func (c *gwClient) close() { c.http.CloseIdleConnections() }

// get sends a GET to target and returns the egress address the origin
// names; an answer other than 200 is an error.
func (c *gwClient) get(ctx context.Context, target string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return "", fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s (Proxy-Status %q): %.100q", resp.Status, resp.Header.Get(forwardproxy.ProxyStatusHeader), b)
	}
	return string(b), nil
}

// errCutAfterConnect marks a tunnel that got its 200 and then lost its
// member before the far end spoke: bytes had reached the client, so no
// gateway may replay it elsewhere; the kill phase counts these apart.
var errCutAfterConnect = errors.New("the tunnel was cut after its 200")

// tunnel opens a CONNECT tunnel to target and returns the egress address
// the far end names. An error after the 200 wraps errCutAfterConnect.
func (c *gwClient) tunnel(ctx context.Context, target string) (string, error) {
	d := net.Dialer{Timeout: poll.Paced(time.Minute)}
	conn, err := d.DialContext(ctx, "tcp", c.r.addr)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(poll.Paced(time.Minute)))
	auth := base64.StdEncoding.EncodeToString([]byte(c.user + ":" + c.pass))
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", target, target, auth); err != nil {
		return "", err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return "", fmt.Errorf("reading the answer to CONNECT: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return "", fmt.Errorf("CONNECT: %s (Proxy-Status %q)", resp.Status, resp.Header.Get(forwardproxy.ProxyStatusHeader))
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading through the tunnel: %w: %w", errCutAfterConnect, err)
	}
	return strings.TrimSpace(line), nil
}

// run runs jobs 0..n-1 with workers in flight, until ctx ends.
func run(ctx context.Context, n int, job func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				job(i)
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

// spreadBound is the bound of a member's share of n placements over two
// members: n/2 ± sigmas standard deviations of Binomial(n, 1/2). A fair
// random pick misses it with probability under 6e-7; round-robin, the
// default strategy, gives exactly n/2 when no attempt fails over.
func spreadBound(n int) float64 { return sigmas * math.Sqrt(float64(n)/4) }

// spreadOverMembers sends requests without a session through both
// replicas, half each: every one must succeed, from one of the members'
// addresses, and each member must carry n/2 within spreadBound(n). n is
// the 1000 unless a first batch says that the machine would take
// more than spreadBudget for them.
func spreadOverMembers(ctx context.Context, t *testing.T, reps []*replica, user, pass string, or *origins, members []member) {
	t.Helper()
	clients := []*gwClient{newClient(reps[0], user, pass), newClient(reps[1], user, pass)}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	var mu sync.Mutex
	counts := map[string]int{}
	var failed []string
	send := func(i int) {
		egress, err := clients[i%2].get(ctx, or.plain)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = append(failed, err.Error())
			return
		}
		counts[egress]++
	}
	const warm = 40
	began := time.Now()
	run(ctx, warm, send)
	per := time.Since(began) / warm
	n := fullSpread
	if projected := per * fullSpread; projected > spreadBudget {
		n = max(minSpread, int(spreadBudget/per)) / 4 * 4
	}
	mu.Lock()
	counts, failed = map[string]int{}, nil
	mu.Unlock()
	began = time.Now()
	run(ctx, n, send)
	bound := spreadBound(n)
	t.Logf("spread: %d requests (%s each with %d in flight in the first %d) in %s: %v; bound %d ± %.0f per member", n, per.Round(time.Millisecond),
		workers, warm, time.Since(began).Round(time.Millisecond), counts, n/2, bound)
	if len(failed) > 0 {
		t.Errorf("spread: %d of %d requests through the gateway failed, such as %s", len(failed), n, failed[0])
	}
	for _, m := range members {
		if c := counts[m.address]; math.Abs(float64(c-n/2)) > bound {
			t.Errorf("spread: member %s (%s) carried %d of %d requests; want %d ± %.0f (all: %v)", m.Name, m.address, c, n, n/2, bound, counts)
		}
	}
	if len(counts) > len(members) {
		t.Errorf("spread: answers came from %v; want only the members' addresses", counts)
	}
}

// sessionsStayPut sends, for each of labSessions sessions (in the
// username, as a crawler does), sessionRequests plain requests and a
// tunnel through each replica: all of a session's must come from one
// egress address, the member that published placement (what kubectl
// egress sessions computes from the ConfigMap) names, and the sessions
// must spread over both members within spreadBound. It returns each
// session's egress address.
func sessionsStayPut(ctx context.Context, t *testing.T, reps []*replica, user, pass string, or *origins, members []member) []string {
	t.Helper()
	seen := make([]map[string]int, labSessions)
	var mu sync.Mutex
	var failed []string
	run(ctx, labSessions, func(i int) {
		got := map[string]int{}
		for _, r := range reps {
			c := newClient(r, sessionUser(user, i), pass)
			for range sessionRequests {
				egress, err := c.get(ctx, or.plain)
				if err != nil {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("session %d on replica %s: %v", i, r.name, err))
					mu.Unlock()
					continue
				}
				got["plain via "+r.name+": "+egress]++
			}
			egress, err := c.tunnel(ctx, or.tunnel)
			if err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("session %d's tunnel on replica %s: %v", i, r.name, err))
				mu.Unlock()
			} else {
				got["tunnel via "+r.name+": "+egress]++
			}
			c.close()
		}
		seen[i] = got
	})
	if len(failed) > 0 {
		t.Errorf("sessions: %d requests or tunnels failed, such as %s", len(failed), failed[0])
	}
	addrOf := map[string]string{}
	for _, m := range members {
		addrOf[m.Name] = m.address
	}
	out := make([]string, labSessions)
	per := map[string]int{}
	for i, got := range seen {
		addrs := map[string]bool{}
		for k := range got {
			_, egress, _ := strings.Cut(k, ": ")
			addrs[egress] = true
		}
		placed := reps[0].set.PlaceSession(sessionID(i), 0, time.Now())
		want := ""
		if placed != nil {
			want = addrOf[placed.Name]
		}
		if len(addrs) != 1 || !addrs[want] {
			t.Errorf("session %s: %v; want all %d of its requests and tunnels, on both replicas, from %s (member %v, where published placement puts it)",
				sessionID(i), got, 2*(sessionRequests+1), want, placed)
		}
		out[i] = want
		per[want]++
	}
	bound := spreadBound(labSessions)
	t.Logf("sessions: %d sessions, %d requests and a tunnel each through each replica, on %v (bound %d ± %.0f)", labSessions, sessionRequests, per, labSessions/2, bound)
	for _, m := range members {
		if c := per[m.address]; math.Abs(float64(c-labSessions/2)) > bound {
			t.Errorf("sessions: member %s holds %d of %d sessions; want %d ± %.0f", m.Name, c, labSessions, labSessions/2, bound)
		}
	}
	return out
}

func sessionID(i int) string { return "lab_" + strconv.Itoa(i) }

func sessionUser(user string, i int) string { return user + "-session-" + sessionID(i) }

// bansKeepTheMemberAway: banOrigin answers 429 to one member's address.
// Each replica learns the ban from the first request that member carries
// there (the client gets the other member's answer), then keeps that
// member away from banOrigin for the cool-down: none of the next requests
// there, with or without a session that the banned member holds, comes
// from it, while the other origin still gets both. Once the cool-down has
// passed (the replicas' clock moved past it), the member gets requests to
// banOrigin again.
func bansKeepTheMemberAway(ctx context.Context, t *testing.T, reps []*replica, user, pass string, or *origins, members []member, clk *shiftedClock) {
	t.Helper()
	bannedM := members[0]
	or.bannedEgress.Store(bannedM.address)
	var mu sync.Mutex
	var failed []string
	fail := func(s string) {
		mu.Lock()
		failed = append(failed, s)
		mu.Unlock()
	}
	// First, each replica until it has sent one request there through
	// the banned member.
	for _, r := range reps {
		c := newClient(r, user, pass)
		for range 2 * len(members) {
			egress, err := c.get(ctx, or.banned)
			if err != nil {
				fail(fmt.Sprintf("replica %s learning the ban: %v", r.name, err))
			} else if egress == bannedM.address {
				fail(fmt.Sprintf("replica %s passed on the 429 of %s", r.name, bannedM.Name))
			}
		}
		c.close()
	}
	learnt := or.bannedSeen()[bannedM.address]
	if learnt != len(reps) {
		t.Errorf("bans: banOrigin saw %d requests from %s while the replicas learnt the ban; want one per replica (%d)", learnt, bannedM.Name, len(reps))
	}
	// During the cool-down: plain requests and sessions held by the
	// banned member, to banOrigin and to the other origin.
	const during = 100
	other := map[string]int{}
	run(ctx, during, func(i int) {
		r := reps[i%2]
		u := user
		if i%4 >= 2 {
			u = sessionUser(user, i%labSessions)
		}
		c := newClient(r, u, pass)
		defer c.close()
		if _, err := c.get(ctx, or.banned); err != nil {
			fail(fmt.Sprintf("request %d to the banning host during the cool-down: %v", i, err))
		}
		egress, err := c.get(ctx, or.plain)
		if err != nil {
			fail(fmt.Sprintf("request %d to the other host during the cool-down: %v", i, err))
			return
		}
		mu.Lock()
		other[egress]++
		mu.Unlock()
	})
	if got := or.bannedSeen()[bannedM.address]; got != learnt {
		t.Errorf("bans: member %s (%s) carried %d requests to the banning host during its cool-down; want none", bannedM.Name, bannedM.address, got-learnt)
	}
	if len(other) != len(members) {
		t.Errorf("bans: the other host got requests from %v during the cool-down; want both members (the ban is per destination)", other)
	}
	// After the cool-down, the member is tried there again (and banned
	// again by its 429, which the client does not see).
	clk.shift.Add(int64(gateway.DefaultBanFor + time.Second))
	for _, r := range reps {
		c := newClient(r, user, pass)
		for range 2 * len(members) {
			if _, err := c.get(ctx, or.banned); err != nil {
				fail(fmt.Sprintf("replica %s after the cool-down: %v", r.name, err))
			}
		}
		c.close()
	}
	after := or.bannedSeen()
	if after[bannedM.address] <= learnt {
		t.Errorf("bans: after the cool-down, %s got no request to the banning host (%v): a ban must end", bannedM.Name, after)
	}
	t.Logf("bans: banOrigin saw %v (%s is banned there); the other host during the cool-down: %v", after, bannedM.address, other)
	if len(failed) > 0 {
		t.Errorf("bans: %d requests failed, such as %s", len(failed), failed[0])
	}
}

// killAMember stops tinyproxy on the kvm guest (through its guest agent)
// while requests, session requests and new tunnels run through both
// replicas: none of them may fail (the gateway fails over to the other
// member before any byte reached the client; a tunnel that had its 200
// from the victim before it went is cut with it, as through any proxy,
// and only counted), none that starts once the
// member refuses connections may come from it, and only its sessions
// move. Then the published list drops it, as the pool does when its probe
// fails; every session is then on the survivor. tinyproxy is started
// again at the end.
func killAMember(ctx context.Context, t *testing.T, l *libvirtlab.Lab, ns string, reps []*replica, user, pass string, or *origins,
	members []member, proxies []*crawlv1alpha1.Proxy, before []string,
) {
	t.Helper()
	victim, survivor := members[1], members[0]
	domain := domainOf(t, proxies[1])

	type outcome struct {
		started time.Time
		kind    string
		session int // -1: none
		egress  string
		err     error
	}
	var mu sync.Mutex
	var outcomes []outcome
	var deadAt atomic.Int64 // UnixNano once the victim refuses connections
	var afterDead atomic.Int64
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	killed := make(chan error, 1)
	go func() {
		// Kill once the run is under way.
		for afterDead.Load() == 0 && loadCtx.Err() == nil {
			mu.Lock()
			n := len(outcomes)
			mu.Unlock()
			if n >= 3*workers {
				break
			}
			waitABit(loadCtx, 100*time.Millisecond)
		}
		err := guestExec(loadCtx, l, domain, "/bin/systemctl", "stop", "tinyproxy")
		if err == nil {
			err = poll.WaitPaced(loadCtx, time.Minute, func() (bool, string) {
				d := net.Dialer{Timeout: 5 * time.Second}
				c, err := d.DialContext(loadCtx, "tcp", victim.proxyURL.Host)
				if err == nil {
					_ = c.Close()
					return false, "the victim's tinyproxy still accepts connections"
				}
				return true, ""
			})
		}
		if err == nil {
			deadAt.Store(time.Now().UnixNano())
		} else {
			stopLoad()
		}
		killed <- err
	}()
	limit := 20 * afterDeath * workers // a bound on the run, far above its need
	run(loadCtx, limit, func(i int) {
		o := outcome{started: time.Now(), session: -1}
		r := reps[i%2]
		u := user
		switch i % 3 {
		case 1:
			o.session = (i / 3) % labSessions
			u = sessionUser(user, o.session)
		case 2:
			o.session = (i / 3) % labSessions
			u = sessionUser(user, o.session)
			o.kind = "tunnel"
		}
		c := newClient(r, u, pass)
		if o.kind == "tunnel" {
			o.egress, o.err = c.tunnel(loadCtx, or.tunnel)
		} else {
			o.kind = "plain"
			o.egress, o.err = c.get(loadCtx, or.plain)
		}
		c.close()
		if loadCtx.Err() != nil {
			return // the run ended under it
		}
		mu.Lock()
		outcomes = append(outcomes, o)
		mu.Unlock()
		if d := deadAt.Load(); d != 0 && o.started.UnixNano() > d && afterDead.Add(1) >= afterDeath {
			stopLoad()
		}
	})
	if err := <-killed; err != nil {
		t.Errorf("kill: stopping tinyproxy on %s: %v", domain, err)
		return
	}
	dead := time.Unix(0, deadAt.Load())
	var failures []string
	fromVictim, moved, movedOwn, ownSessions, cut := 0, 0, 0, 0, 0
	for _, o := range outcomes {
		if errors.Is(o.err, errCutAfterConnect) && !o.started.After(dead) {
			// Established before the victim went, cut when it went: the
			// client had its 200, so this is the member's death, not a
			// failover the gateway missed.
			cut++
			continue
		}
		if o.err != nil {
			failures = append(failures, fmt.Sprintf("%s %s after the kill began: %v", o.kind, o.started.Sub(dead).Round(time.Millisecond), o.err))
			continue
		}
		if o.started.After(dead) && o.egress == victim.address {
			fromVictim++
		}
		if o.session < 0 {
			continue
		}
		switch was := before[o.session]; {
		case was != victim.address && o.egress != was:
			moved++
		case was == victim.address && o.started.After(dead):
			ownSessions++
			if o.egress == survivor.address {
				movedOwn++
			}
		}
	}
	t.Logf("kill: %d requests and tunnels, %d once %s refused connections (%d of its own sessions' moved to %s); %d tunnels open through it when it went were cut",
		len(outcomes), afterDead.Load(), victim.Name, movedOwn, survivor.Name, cut)
	if len(failures) > 0 {
		t.Errorf("kill: %d of %d idempotent requests and new tunnels failed while %s was killed; want 0, such as: %s", len(failures), len(outcomes), victim.Name, failures[0])
	}
	if fromVictim > 0 {
		t.Errorf("kill: %d requests that began after %s refused connections came from its address", fromVictim, victim.Name)
	}
	if moved > 0 {
		t.Errorf("kill: %d requests of sessions held by %s came from another address: only the killed member's sessions may move", moved, survivor.Name)
	}
	if ownSessions == 0 || movedOwn != ownSessions {
		t.Errorf("kill: %d of the %d requests of %s's sessions after the kill went to %s; want all (and some)", movedOwn, ownSessions, victim.Name, survivor.Name)
	}

	// The pool drops a member whose probe fails: the list without it.
	p := proxies[0]
	e := published.ListEntry{Name: p.Name, URL: survivor.proxyURL.String(), Provider: p.Spec.Provider, Zone: p.Status.Zone, EgressIP: p.Status.EgressIP,
		Created: p.CreationTimestamp.UTC()}
	withCreds := []published.ListEntry{e}
	e.URL = published.ProxyURL(p.Status.Address, p.Spec.Port, nil)
	without := []published.ListEntry{e}
	writeList(ctx, t, ns, withCreds, without)
	for _, r := range reps {
		if err := poll.WaitPaced(ctx, time.Minute, func() (bool, string) {
			return r.set.Len() == 1, fmt.Sprintf("replica %s has %d members after the list dropped %s", r.name, r.set.Len(), victim.Name)
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range labSessions {
		for _, r := range reps {
			c := newClient(r, sessionUser(user, i), pass)
			if egress, err := c.get(ctx, or.plain); err != nil || egress != survivor.address {
				t.Errorf("kill: session %s on replica %s after the list dropped %s: %q %v; want %s", sessionID(i), r.name, victim.Name, egress, err, survivor.address)
			}
			c.close()
		}
	}
	if err := guestExec(ctx, l, domain, "/bin/systemctl", "start", "tinyproxy"); err != nil {
		t.Errorf("starting tinyproxy again on %s: %v", domain, err)
	}
}

// guestExec runs argv in the guest through its agent (guest-exec) and
// waits for it to end with status 0.
func guestExec(ctx context.Context, l *libvirtlab.Lab, domain string, argv ...string) error {
	cmd, err := json.Marshal(map[string]any{"execute": "guest-exec", "arguments": map[string]any{"path": argv[0], "arg": argv[1:], "capture-output": true}})
	if err != nil {
		return err
	}
	out, err := l.Virsh("qemu-agent-command", "--domain", domain, string(cmd)) //nolint:contextcheck // virsh runs under its own paced 2-minute bound (libvirtlab.Lab.Virsh).
	if err != nil {
		return fmt.Errorf("guest-exec %s: %w", strings.Join(argv, " "), err)
	}
	var started struct {
		Return struct {
			PID int `json:"pid"`
		} `json:"return"`
	}
	if err := json.Unmarshal([]byte(out), &started); err != nil {
		return fmt.Errorf("guest-exec %s: %q: %w", strings.Join(argv, " "), out, err)
	}
	status := fmt.Sprintf(`{"execute":"guest-exec-status","arguments":{"pid":%d}}`, started.Return.PID)
	var why error
	err = poll.WaitPaced(ctx, time.Minute, func() (bool, string) { //nolint:contextcheck // virsh runs under its own paced 2-minute bound (libvirtlab.Lab.Virsh).
		out, err := l.Virsh("qemu-agent-command", "--domain", domain, status)
		if err != nil {
			return false, err.Error()
		}
		var st struct {
			Return struct {
				Exited   bool   `json:"exited"`
				ExitCode int    `json:"exitcode"`
				ErrData  string `json:"err-data"`
			} `json:"return"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return false, err.Error()
		}
		if st.Return.Exited && st.Return.ExitCode != 0 {
			stderr, _ := base64.StdEncoding.DecodeString(st.Return.ErrData)
			why = fmt.Errorf("%s: exit status %d: %.200q", strings.Join(argv, " "), st.Return.ExitCode, stderr)
		}
		return st.Return.Exited, "still running"
	})
	return errors.Join(err, why)
}
