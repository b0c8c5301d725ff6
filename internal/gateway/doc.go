// Package gateway is the data path of a pool gateway (a ProxyGateway): one
// endpoint in front of the Serving members of one or more ProxyPools. It is
// a forwardproxy.Upstream, so the gateway is the product's forward proxy
// with its self-protection (source ranges, the strict CONNECT parser,
// connection and concurrency caps, header and idle timeouts, drain) in
// front, and this package behind it: it checks the gateway's own
// credentials, picks a member for each plain request and each tunnel
// (round-robin, random or least connections), and chains to that member's
// proxy with the member's credentials, which the client never sees.
//
// The members are a Set, fed by a watch of each pool's published Secret
// <pool>-proxies (gatewaywatch.Watch): a member that starts serving is used
// as soon as the list names it, one that leaves gets no new request or
// tunnel, and what it carries goes on until it ends.
//
// A member that fails (cannot be dialed, times out, answers 407, 502 or
// 503) before any byte reached the client is replaced by another for that
// request or tunnel, and one that keeps failing is ejected for a cool-down
// (failover.go).
//
// The gateway dials member proxies only: its Transport refuses any address
// that is not the chosen member's.
//
// # Files
//
// By path, then what the paths share:
//
//   - gateway.go: Config, Gateway, New (the Transports to members) and the
//     entry points, RoundTrip and DialTunnel, which start a span and hand
//     over to a path.
//   - auth.go: the gateway's own credentials (Authorize); options.go: the
//     options after the username (route).
//   - plain.go: a plain request (and an upgrade) through a member: its
//     try, the answer's first bytes read before its head goes on, the
//     last failed answer passed on.
//   - tunnel.go: a CONNECT through a member: its try, the member's
//     answer, the tunnel's connection (a forwardproxy.AheadConn);
//     memberconnect.go writes the CONNECT and reads the answer.
//   - attempts.go: the one attempt loop both paths run, with the
//     failover, ban and limit bookkeeping.
//   - choose.go: member choice, in one documented order of filters and
//     steps (route, ejection, bans; tried, session or strategy, limits).
//   - failover.go: member failures and ejection; bans.go: learned and
//     reported bans; adminbans.go: the administrator's; limits.go:
//     concurrency and rate limits; lru.go: the bounded table they keep;
//     session.go: rendezvous placement.
//   - members.go: the Set and its Members; feed.go: what
//     gatewaywatch feeds in (Set.SetPool, Set.RefusePool,
//     Metrics.ExpectPool; Gateway.SetAdminBans), so that this package
//     needs no API client (internal/archtest holds it to that).
//   - metrics.go, tracing.go, errortext.go, proxy.go (NewProxy, the
//     forward proxy in front).
package gateway
