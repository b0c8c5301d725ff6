package main

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAPICallKey(t *testing.T) {
	for _, tc := range []struct {
		name, reason        string
		method, path, watch string
		want                string
	}{
		{"namespaced get", "the namespace and the name are left out, so calls add up per resource",
			http.MethodGet, "/api/v1/namespaces/bench-x/secrets/egress-0001", "", "GET secrets"},
		{"list", "a GET without a name is a LIST",
			http.MethodGet, "/apis/crawl.example.io/v1alpha1/namespaces/bench-x/proxies", "", "LIST proxies"},
		{"watch", "watch=true makes a LIST a WATCH: a watch is one request however long it lasts",
			http.MethodGet, "/apis/crawl.example.io/v1alpha1/namespaces/bench-x/proxies", "true", "WATCH proxies"},
		{"status subresource", "status patches are the operator's main writes and must not mix with spec writes",
			http.MethodPatch, "/apis/crawl.example.io/v1alpha1/namespaces/bench-x/proxies/egress-0001/status", "", "PATCH proxies/status"},
		{"cluster-scoped", "a cluster-scoped resource has no namespace segment",
			http.MethodGet, "/api/v1/namespaces/bench-x", "", "GET namespaces"},
		{"cluster-scoped list", "the list of namespaces is a LIST of namespaces",
			http.MethodGet, "/api/v1/namespaces", "", "LIST namespaces"},
		{"create", "a POST names no object",
			http.MethodPost, "/api/v1/namespaces/bench-x/events", "", "POST events"},
		{"discovery", "paths that are not resources stay whole",
			http.MethodGet, "/apis/crawl.example.io/v1alpha1", "", "GET /apis/crawl.example.io/v1alpha1"},
		{"version", "paths outside /api and /apis stay whole",
			http.MethodGet, "/version", "", "GET /version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, apiCallKey(tc.method, tc.path, tc.watch)); diff != "" {
				t.Errorf("%s\n(-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}
