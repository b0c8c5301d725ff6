package gateway_test

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// TestSpansPerRequestAndTunnel: a span per plain request and per tunnel,
// with an event per attempt through a member (a failing member, then a good
// one), one per ban, the crawler's trace continued, a refusal as an error;
// and no member credential, no gateway password and no member address in
// any name, attribute, event or status.
func TestSpansPerRequestAndTunnel(t *testing.T) {
	bad := startFailingMember(t, "crawl-bad", http.StatusBadGateway) // first in turn
	ms := startMembers(t, 2)
	w := watchSecrets(t, ms)
	for name, secret := range map[string]string{"the failing member's password": "failing-member-password-0xdead", "the gateway's password": gwPass} {
		if err := w.AddSecret(name, secret); err != nil {
			t.Fatal(err)
		}
	}
	banner := startBanningOrigin(t, "127.0.0.1", http.StatusTooManyRequests, ms[1].egress)
	target := tcpEcho(t)
	set := gateway.NewSet()
	set.Update("crawl", append([]gateway.Entry{bad.entry()}, entries(ms)...))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	h := startGateway(t, gateway.Config{Members: set, Tracer: tp.Tracer("test"), Now: newClock().Now})
	c := h.client(t, gwUser)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	// bad (502), then ms[1] (banned by the origin), then ms[0].
	if code, body, _, err := get(c, banner.url, http.Header{"Traceparent": {"00-" + traceID + "-00f067aa0ba902b7-01"}}); code != http.StatusOK {
		t.Fatalf("GET: %d %q %v", code, body, err)
	}
	tunnelEgress(t, h.addr, target, gwUser)
	code, _, _, _ := get(c, banner.url, http.Header{gateway.BanHeader: {"example.org"}})
	if code != http.StatusBadRequest {
		t.Fatalf("a report without a session: %d; want 400", code)
	}

	var got []string
	var dump strings.Builder
	for _, s := range rec.Ended() {
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		var events []string
		for _, e := range s.Events() {
			var kvs []string
			for _, kv := range e.Attributes {
				kvs = append(kvs, string(kv.Key)+"="+kv.Value.String())
			}
			slices.Sort(kvs)
			events = append(events, e.Name+" "+strings.Join(kvs, " "))
		}
		fmt.Fprintln(&dump, s.Name(), attrs, events, s.Status())
		got = append(got, fmt.Sprintf("%s %s %s status=%s session=%s trace=%t error=%t", s.Name(), attrs["http.request.method"],
			attrs["server.address"], attrs["http.response.status_code"], attrs["egress.gateway.session"],
			s.SpanContext().TraceID().String() == traceID, s.Status().Description != ""))
		for _, e := range events {
			got = append(got, "  "+e)
		}
	}
	m0, m1 := "egress.gateway.member=crawl/"+ms[0].name, "egress.gateway.member=crawl/"+ms[1].name
	want := []string{
		`gateway.request GET 127.0.0.1 status=200 session=false trace=true error=false`,
		"  attempt egress.gateway.member=crawl/crawl-bad egress.gateway.outcome=status-502",
		"  attempt " + m1 + " egress.gateway.outcome=ban-status-429",
		"  ban egress.gateway.ban.cause=status-429 " + m1,
		"  attempt " + m0 + " egress.gateway.outcome=ok",
		// Round-robin's turn, without the member banned from the host.
		`gateway.tunnel CONNECT 127.0.0.1 status= session=false trace=false error=false`,
		"  attempt " + m0 + " egress.gateway.outcome=ok",
		`gateway.request GET 127.0.0.1 status= session=false trace=false error=true`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spans (-want +got):\n%s\nall:\n%s", diff, dump.String())
	}
	w.Add("spans", dump.String())
	for _, addr := range []string{ms[0].addr, ms[1].addr, strings.Split(bad.url, "@")[1]} {
		if strings.Contains(dump.String(), addr) {
			t.Errorf("a span names the member address %s:\n%s", addr, dump.String())
		}
	}
	for _, f := range w.Findings() {
		t.Error(f)
	}
}

// TestRefusedMemberAddressInNoSpanOrAccessLog: a member that refuses
// connections fails a plain request and a tunnel; their spans' status and
// their access log lines say what failed and name the member as pool/name,
// never its address. The member listens on 127.0.0.2, the client on
// 127.0.0.1, so that the client's address in the log is not the member's.
func TestRefusedMemberAddressInNoSpanOrAccessLog(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: connections are refused
	set := gateway.NewSet()
	u := url.URL{Scheme: "http", Host: addr, User: url.UserPassword("ugone", "gone-member-password-0xbeef")}
	set.Update("crawl", []gateway.Entry{{Name: "crawl-gone", URL: u.String(), EgressIP: "127.0.0.99", Engine: published.EngineForwardProxy}})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	h := startGateway(t, gateway.Config{Members: set, Tracer: tp.Tracer("test")})

	if code, body, _, _ := get(h.client(t, gwUser), "http://example.test/", nil); code != http.StatusBadGateway {
		t.Fatalf("GET through a refusing member: %d %q; want 502", code, body)
	}
	resp, _, _ := connect(t, h.addr, "example.test:443", basic(gwUser, gwPass), "")
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("CONNECT through a refusing member: %s; want 502", resp.Status)
	}

	var got []string
	for _, s := range rec.Ended() {
		got = append(got, s.Name()+": "+s.Status().Description)
	}
	// The access log's lines end when the answer was written: poll.
	var lines []string
	poll.Until(t, wait, func() (bool, string) {
		lines = nil
		for line := range strings.Lines(h.logs.String()) {
			if strings.Contains(line, `"request"`) {
				lines = append(lines, line)
			}
		}
		return len(lines) == 2, fmt.Sprintf("access log lines: %q", lines)
	})
	want := []string{
		"gateway.request: member crawl/crawl-gone: dial tcp: connect: connection refused",
		"gateway.tunnel: member crawl/crawl-gone: dial tcp: connect: connection refused",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("span statuses (-want +got):\n%s", diff)
	}
	ip, _, _ := net.SplitHostPort(addr)
	for _, line := range append(got, lines...) {
		if !strings.Contains(line, "connection refused") || !strings.Contains(line, "crawl/crawl-gone") {
			t.Errorf("want the cause and the member's name in %q", line)
		}
		if strings.Contains(line, ip) {
			t.Errorf("%q names the member's address %s", line, addr)
		}
	}
}
