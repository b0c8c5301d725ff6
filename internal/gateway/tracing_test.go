package gateway_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
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
