// Package forwardproxy is the product's own HTTP forward proxy: the proxy
// pods of the kubernetes provider run it through the operator's `proxy`
// subcommand, and the Proxmox simulator's guests run it too.
//
// A Proxy forwards absolute-form HTTP requests (GET http://host/path) over
// kept-alive connections to origins that it writes and reads on the
// request's own goroutine (originTransport; http.Transport only for
// upgrades), splicing the bulk of an answer of known length from the
// origin's socket to the client's, and tunnels CONNECT requests (CONNECT
// host:443) by splicing the client's connection to the upstream one. A
// ProxyTransport does the same towards other proxies, for an Upstream.
// Before anything else it checks the client's address against the allowed
// source ranges (403 otherwise), then its Proxy-Authorization Basic
// credentials (407 otherwise), then its capacity (503 past MaxConcurrent).
// Every answer it gives itself rather than relays closes the connection.
// It strips hop-by-hop headers and the proxy's own headers before
// forwarding, adds no Via header, and streams bodies both ways.
//
// Destinations follow an egress.Policy whose zero value refuses everything
// that is not the public Internet (egress.DefaultDeniedRanges) and CONNECT
// to ports other than egress.DefaultConnectPorts. The check runs in the dialer's ControlContext hook, on
// the address about to be connected after the name was resolved, so that
// DNS answers pointing inside, rebinding included, are refused too. Every
// destination refused by its address, or whose name does not resolve,
// gets one 403, so that a client cannot tell whether an internal name
// exists; only a CONNECT port's refusal says why (X-Egress-Denied: port),
// and a 502 or 504 for an allowed destination says what failed
// (X-Upstream-Error).
//
// New refuses a Config that would make an open proxy (no credentials and no
// allowed source ranges) unless Config.AllowOpen says so. Credentials are
// kept only as hashes, never logged and never echoed in a response.
//
// Serve (ServeWith for other limits) runs a handler, usually a Proxy, on a
// listener: it caps the client connections (503 past the cap, before
// reading anything), bounds the time to send headers, closes idle
// keep-alive connections, and shuts down gracefully: it stops accepting,
// lets in-flight requests and CONNECT tunnels finish for up to a drain
// period, then closes them, both ends of a tunnel. Tunnels and upgraded
// (WebSocket) connections end after an idle timeout without traffic either
// way; a side that closes its write half still gets the other side's
// answer. An idle tunnel holds no copy buffer and one goroutine per
// direction.
//
// For a Proxy, Serve reads the first request of each connection itself: a
// CONNECT, which is how clients begin a tunnel, is parsed from a pooled
// reader by a strict parser (no space before a colon, no folded lines, no
// control characters, no duplicate credentials, no body; 431 past 64 KiB)
// and served without net/http's per-request machinery; anything else, and
// every later request on the connection, goes through net/http and
// ServeHTTP. Both paths admit a request with one function (admit: source,
// credentials, slot), and Serve's accept loop (accept.go) counts each
// connection against the caps of its address (admission.go). A CONNECT that
// net/http read (after another request on its connection, as Node.js
// keep-alive agents send it, or under another server) is held to the strict
// parser's rules on what net/http parsed (one Proxy-Authorization, no body,
// a host:port target; 400 otherwise), then its connection is hijacked and
// the tunnel runs as any other.
//
// With a Config.Upstream, a Proxy reaches no destination itself: the
// Upstream checks the credentials, forwards plain requests and opens the
// far end of tunnels (the pool gateway, internal/gateway, chains them to a
// pool's proxies this way), and everything in front of it stays the same.
package forwardproxy
