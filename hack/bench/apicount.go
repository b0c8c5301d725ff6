package main

import (
	"maps"
	"net/http"
	"strings"
	"sync"
)

// apiCounter counts the operator's requests to the Kubernetes API server by
// verb and resource ("LIST proxies", "PATCH proxies/status", "WATCH
// secrets"), wrapped around the transport of its rest.Config: every
// request the manager, its caches and its clients send passes through it.
type apiCounter struct {
	mu     sync.Mutex
	counts map[string]int64
}

func newAPICounter() *apiCounter { return &apiCounter{counts: map[string]int64{}} }

// wrap is a rest.Config WrapTransport.
func (c *apiCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		key := apiCallKey(r.Method, r.URL.Path, r.URL.Query().Get("watch"))
		c.mu.Lock()
		c.counts[key]++
		c.mu.Unlock()
		return next.RoundTrip(r)
	})
}

// snapshot returns the counts so far.
func (c *apiCounter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// apiCallKey names a request to the API server by its verb, as the API
// server's audit log and metrics do, and its resource: a GET without a name
// is a LIST, or a WATCH with watch=true; the namespace and the object's
// name are left out, a subresource is kept ("proxies/status"). Paths that
// are not resources (discovery, /version) keep their first segments.
func apiCallKey(method, path, watch string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		rest = segs[2:] // api/v1/...
	case len(segs) >= 3 && segs[0] == "apis":
		rest = segs[3:] // apis/group/version/...
	default:
		return method + " " + path
	}
	if len(rest) == 0 {
		return method + " " + path // discovery of a group version
	}
	if rest[0] == "namespaces" && len(rest) >= 3 {
		rest = rest[2:] // namespaces/<ns>/<resource>...
	}
	resource, named := rest[0], len(rest) >= 2
	if len(rest) >= 3 {
		resource += "/" + strings.Join(rest[2:], "/")
	}
	verb := method
	switch {
	case method == http.MethodGet && !named && (watch == "true" || watch == "1"):
		verb = "WATCH"
	case method == http.MethodGet && !named:
		verb = "LIST"
	case method == http.MethodDelete && !named:
		verb = "DELETECOLLECTION"
	}
	return verb + " " + resource
}
