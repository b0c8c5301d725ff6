package gateway

import (
	"context"
	"net"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Spans: one per plain request (gateway.request) and one per tunnel
// (gateway.tunnel), from the gateway's first look at it to the member's
// answer (a plain request's response headers, a tunnel's opening; the
// bytes that follow are the access log's). Each attempt through a member
// is an event on it (attempt, with the member and its outcome), and so is
// each ban (ban). A plain request's span continues the crawler's trace
// when it sent a traceparent. No attribute or status holds a credential, a
// member's address or a session id: members are named pool/name, and an
// error's text is errorText's.

// Span attribute keys.
const (
	attrGateway = attribute.Key("egress.gateway.name")
	attrMethod  = attribute.Key("http.request.method")
	attrHost    = attribute.Key("server.address")
	attrSession = attribute.Key("egress.gateway.session")
	attrMember  = attribute.Key("egress.gateway.member")
	attrOutcome = attribute.Key("egress.gateway.outcome")
	attrCause   = attribute.Key("egress.gateway.ban.cause")
	attrStatus  = attribute.Key("http.response.status_code")
)

// startSpan starts the span of a request or tunnel to hostport (host:port
// or host, without userinfo).
func (g *Gateway) startSpan(ctx context.Context, name, method, hostport string, header http.Header) (context.Context, trace.Span) {
	if header != nil {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(header))
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if len(host) > maxHostLen {
		host = host[:maxHostLen]
	}
	return g.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrGateway.String(g.name), attrMethod.String(method), attrHost.String(host)))
}

// endSpan ends span with the answer: the status, the member that gave it,
// or the error.
func endSpan(span trace.Span, rt *route, resp *http.Response, err error) {
	span.SetAttributes(attrSession.Bool(rt != nil && rt.session != ""))
	switch {
	case err != nil:
		span.SetStatus(codes.Error, errorText(err))
	case resp != nil:
		span.SetAttributes(attrStatus.Int(resp.StatusCode))
	}
	span.End()
}

// attemptEvent records an attempt through m on ctx's span: outcome is ok,
// a failure's cause, or the ban status.
func attemptEvent(ctx context.Context, m *Member, outcome string) {
	trace.SpanFromContext(ctx).AddEvent("attempt", trace.WithAttributes(attrMember.String(m.String()), attrOutcome.String(outcome)))
}

// banEvent records a ban of m on ctx's span.
func banEvent(ctx context.Context, m *Member, cause string) {
	trace.SpanFromContext(ctx).AddEvent("ban", trace.WithAttributes(attrMember.String(m.String()), attrCause.String(cause)))
}
