package setup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/forwardproxy"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/logbuf"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// gatewayWait bounds a wait on a gateway on loopback.
const gatewayWait = 20 * time.Second

// envOf is a Getenv over env.
func envOf(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

// publish publishes pool crawl's member list in namespace crawlers as the
// pool does: the Secret, then the ConfigMap, which the gateway watches.
func publish(t *testing.T, cs *fake.Clientset, members ...gateway.Entry) {
	t.Helper()
	js, err := json.Marshal(members)
	if err != nil {
		t.Fatal(err)
	}
	// The pool controller's labels and controller reference, without
	// which the gateway ignores the list.
	meta := metav1.ObjectMeta{Namespace: "crawlers", Name: "crawl-proxies",
		Labels:          map[string]string{published.LabelManagedBy: published.ManagedBy, crawlv1alpha1.LabelPool: "crawl"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: crawlv1alpha1.GroupVersion.String(), Kind: "ProxyPool", Name: "crawl", UID: "uid-of-crawl", Controller: ptr.To(true)}}}
	if _, err := cs.CoreV1().Secrets("crawlers").Create(t.Context(), &corev1.Secret{ObjectMeta: meta,
		Data: map[string][]byte{published.ListKeyJSON: js}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("crawlers").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: meta},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRunGatewayServesThePoolsMembers: the gateway subcommand watches the
// pool's published Secret, is ready only once it names a member, sends a
// request through that member with the gateway's credentials, and stops
// cleanly.
// memberAndOrigin starts an origin that answers page and a member (our
// forward proxy, user umember) that may reach it, both on loopback until
// the test ends.
func memberAndOrigin(t *testing.T, page string) (origin *httptest.Server, member net.Addr) {
	t.Helper()
	origin = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, page)
	}))
	t.Cleanup(origin.Close)
	p, err := forwardproxy.New(forwardproxy.Config{Username: "umember", Password: "member-password-123456",
		Egress: egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	if err != nil {
		t.Fatal(err)
	}
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = forwardproxy.Serve(ctx, mln, p, 0) }()
	t.Cleanup(func() { stop(); <-done })
	return origin, mln.Addr()
}

func TestRunGatewayServesThePoolsMembers(t *testing.T) {
	origin, member := memberAndOrigin(t, "hello from the origin")

	cs := fake.NewClientset()
	// The default level, as the operator's binary logs.
	logs := &logbuf.Buffer{}
	log := logs.Logger(0)
	getenv := envOf(map[string]string{published.EnvGatewayUsername: "ugw", published.EnvGatewayPassword: "gateway-password-123456", published.EnvPodNamespace: "crawlers"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	readyCalled := make(chan GatewayReplica, 1)
	a, wait, err := StartGateway(ctx, []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--pools", "crawl", "--drain", "1s"},
		GatewayEnv{Getenv: getenv, Clients: func() (GatewayClients, error) { return GatewayClients{Core: cs}, nil }, Log: log,
			Ready: func(r GatewayReplica) { readyCalled <- r }})
	if err != nil {
		t.Fatalf("StartGateway: %v", err)
	}
	if got := <-readyCalled; got.Addr != a.Addr || got.Members != a.Members {
		t.Errorf("env.Ready got %v; StartGateway returned %v", got, a)
	}
	readyz := func() int {
		resp, err := http.Get("http://" + a.AdminAddr.String() + "/readyz")
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if got := readyz(); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz without members: %d; want 503", got)
	}
	publish(t, cs, gateway.Entry{Name: "crawl-a", URL: "http://umember:member-password-123456@" + member.String()})
	poll.Until(t, gatewayWait, func() (bool, string) { return readyz() == http.StatusOK, "/readyz once the list names a member" })

	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: a.Addr.String(), User: url.UserPassword("ugw", "gateway-password-123456")})}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: gatewayWait}).Get(origin.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "hello from the origin" {
		t.Errorf("GET through the gateway: %s %q", resp.Status, body)
	}
	cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- wait() }()
	if err := poll.Receive(t, gatewayWait, "the gateway to stop", stopped); err != nil {
		t.Errorf("the gateway after cancel: %v", err)
	}
	// The access log, on by default: the request's line at the default
	// level, naming its member, and no credential anywhere in the log.
	var lines []string
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if strings.HasPrefix(line, "access ") && strings.Contains(line, `"msg"="request"`) {
			lines = append(lines, line)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `"level"=0`) || !strings.Contains(lines[0], `"status"=200`) || !strings.Contains(lines[0], "crawl-a") {
		t.Errorf("access lines %q; want one at level 0 with status 200 naming member crawl-a\n%s", lines, logs)
	}
	for _, secret := range []string{"gateway-password-123456", "member-password-123456"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the gateway's log holds a password")
		}
	}
}

// TestRunGatewayRefuses: bad flags and an open gateway are refused before
// anything listens, each with an error that names what is wrong, returned
// by StartGateway itself with no wait to call: a caller must not block on
// a replica that never ran.
func TestRunGatewayRefuses(t *testing.T) {
	none := func() (GatewayClients, error) { return GatewayClients{Core: fake.NewClientset()}, nil }
	creds := map[string]string{published.EnvPodNamespace: "ns", published.EnvGatewayUsername: "u", published.EnvGatewayPassword: "p"}
	for _, tc := range []struct {
		reason string
		args   []string
		env    map[string]string
		want   string // in the error
	}{
		{"no pools", nil, creds, "--pools"},
		{"no credentials and no source ranges", []string{"--pools", "a"}, map[string]string{published.EnvPodNamespace: "ns"}, "open gateway"},
		{"an unknown strategy", []string{"--pools", "a", "--strategy", "fastest"}, creds, "fastest"},
		{"a bad range", []string{"--pools", "a", "--allowed-source-ranges", "10.0.0.0/33"}, map[string]string{published.EnvPodNamespace: "ns"}, "--allowed-source-ranges"},
		{"ranges that open it to the world without credentials", []string{"--pools", "a", "--allowed-source-ranges", "0.0.0.0/1"}, map[string]string{published.EnvPodNamespace: "ns"}, "open gateway"},
		{"a ban status that is not a number", []string{"--pools", "a", "--ban-statuses", "429,too-many"}, creds, "too-many"},
		{"a member's failure as a ban status", []string{"--pools", "a", "--ban-statuses", "429,502"}, creds, "502"},
		{"no ban status", []string{"--pools", "a", "--ban-statuses", ","}, creds, "no status code"},
		{"no room for a connection before it authenticates", []string{"--pools", "a", "--max-unauthenticated", "0"}, creds, "--max-unauthenticated"},
		{"a negative first-request deadline", []string{"--pools", "a", "--first-request-timeout", "-1s"}, creds, "--first-request-timeout"},
	} {
		_, wait, err := StartGateway(t.Context(), append(tc.args, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"),
			GatewayEnv{Getenv: envOf(tc.env), Clients: none, Log: logr.Discard()})
		if err == nil || !strings.Contains(err.Error(), tc.want) || wait != nil {
			t.Errorf("%s: err %v, wait set %t; want an error naming %q and no wait", tc.reason, err, wait != nil, tc.want)
		}
	}
}

// TestRunGatewayRecordsEjections: a member that fails --eject-after times
// in a row is ejected, and the replica records it as a Warning event on the
// member's Proxy (which only the replica knows of: the operator does not
// see it), once per ejection, naming the member, its pool and the cause,
// and no credential.
func TestRunGatewayRecordsEjections(t *testing.T) {
	// A member nobody listens on: every attempt is refused.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close()
	cs := fake.NewClientset()
	publish(t, cs, gateway.Entry{Name: "crawl-dead", URL: "http://umember:member-password-123456@" + deadAddr})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	getenv := envOf(map[string]string{published.EnvGatewayUsername: "ugw", published.EnvGatewayPassword: "gateway-password-123456", published.EnvPodNamespace: "crawlers"})
	a, wait, err := StartGateway(ctx, []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--pools", "crawl", "--drain", "1s",
		"--eject-after", "2", "--max-attempts", "1"},
		GatewayEnv{Getenv: getenv, Clients: func() (GatewayClients, error) { return GatewayClients{Core: cs}, nil }, Log: logr.Discard()})
	if err != nil {
		t.Fatalf("StartGateway: %v", err)
	}
	poll.Until(t, gatewayWait, func() (bool, string) { return a.Members.Len() == 1, "the member listed" })
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: a.Addr.String(), User: url.UserPassword("ugw", "gateway-password-123456")})}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: gatewayWait}
	// Two failures eject; the third request finds the only member ejected
	// and tries it anyway (docs/gateway.md, Failover): a third failure,
	// which starts a new run, not a second ejection.
	for range 3 {
		resp, err := c.Get("http://origin.invalid/")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("through a dead member: %s; want 502", resp.Status)
		}
	}
	var notes []string
	poll.Until(t, gatewayWait, func() (bool, string) {
		list, err := cs.EventsV1().Events("crawlers").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		notes = notes[:0]
		for _, e := range list.Items {
			if e.Reason == ReasonMemberEjected && e.Type == corev1.EventTypeWarning && e.Regarding.Kind == "Proxy" && e.Regarding.Name == "crawl-dead" &&
				e.ReportingController == GatewayEventSource {
				notes = append(notes, e.Note)
			}
		}
		return len(notes) > 0, fmt.Sprintf("no MemberEjected event on Proxy crawl-dead among %d events", len(list.Items))
	})
	if len(notes) != 1 || !strings.Contains(notes[0], "member crawl-dead of pool crawl after 2 failures in a row (the last: refused)") {
		t.Errorf("ejection events %q; want one naming the member, its pool, the failures and the cause", notes)
	}
	for _, n := range notes {
		if strings.Contains(n, "member-password-123456") || strings.Contains(n, "gateway-password-123456") || strings.Contains(n, deadAddr) {
			t.Errorf("an ejection event holds a password or the member's address: %q", n)
		}
	}
	cancel()
	if err := wait(); err != nil {
		t.Errorf("the gateway after cancel: %v", err)
	}
}
