// Package forwardproxy is the product's own HTTP forward proxy: the proxy
// pods of the kubernetes provider run it through the operator's `proxy`
// subcommand, and the Proxmox simulator's guests will run it too.
//
// A Proxy forwards absolute-form HTTP requests (GET http://host/path) with
// its own Transport and tunnels CONNECT requests (CONNECT host:443) by
// splicing the client's connection to the upstream one. Before anything
// else it checks the client's address against the allowed source ranges
// (403 otherwise), then its Proxy-Authorization Basic credentials (407
// otherwise). It strips hop-by-hop headers and the proxy's own headers
// before forwarding, adds no Via header, and streams bodies both ways.
//
// New refuses a Config that would make an open proxy (no credentials and no
// allowed source ranges) unless Config.AllowOpen says so. Credentials are
// kept only as hashes, never logged and never echoed in a response.
//
// Serve runs a handler, usually a Proxy, on a listener and shuts it down
// gracefully: it stops accepting, lets in-flight requests and hijacked
// CONNECT tunnels finish for up to a drain period, then closes them.
package forwardproxy
