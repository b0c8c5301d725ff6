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
// <pool>-proxies (Watch): a member that starts serving is used as soon as
// the list names it, one that leaves gets no new request or tunnel, and
// what it carries goes on until it ends.
//
// A member that fails (cannot be dialed, times out, answers 407, 502 or
// 503) before any byte reached the client is replaced by another for that
// request or tunnel, and one that keeps failing is ejected for a cool-down
// (failover.go).
//
// The gateway dials member proxies only: its Transport refuses any address
// that is not the chosen member's.
package gateway
