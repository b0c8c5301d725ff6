package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// proxyStub answers as a forward proxy would: 407 without the expected
// Proxy-Authorization, otherwise the status the path names.
func proxyStub(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := parseProxyAuth(r); !ok || (u != "crawler" && u != "crawler-session-s1") || p != "s3cret-sentinel" {
			w.WriteHeader(http.StatusProxyAuthRequired)
			return
		}
		if u, _, _ := parseProxyAuth(r); r.URL.Path == "/session" && u != "crawler-session-s1" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/forbidden" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		_, _ = w.Write([]byte("198.51.100.9\nsecond line\n"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func parseProxyAuth(r *http.Request) (string, string, bool) {
	h := r.Header.Get("Proxy-Authorization")
	if h == "" {
		return "", "", false
	}
	r2 := &http.Request{Header: http.Header{"Authorization": {h}}}
	return r2.BasicAuth()
}

func TestRun(t *testing.T) {
	srv := proxyStub(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	withCreds := "http://crawler:s3cret-sentinel@" + host
	for _, tc := range []struct {
		name, reason, proxy, path string
		args                      []string
		wantErr                   string
		wantLines                 []string
	}{
		{name: "served", reason: "each request's line shows the status and the body's first line", proxy: withCreds, path: "/", args: []string{"-n", "2"},
			wantLines: []string{"1 via " + host + ": 200 198.51.100.9", "2 via " + host + ": 200 198.51.100.9"}},
		{name: "refused destination expected", reason: "a test that expects 403 passes on 403", proxy: withCreds, path: "/forbidden", args: []string{"-expect", "403"},
			wantLines: []string{"1 via " + host + ": 403 "}},
		{name: "wrong password", reason: "a status other than -expect fails the run", proxy: "http://crawler:wrong@" + host, path: "/",
			wantErr: "1 of 1 requests did not get 200", wantLines: []string{"1 via " + host + ": 407 "}},
		{name: "session", reason: "-session sends <user>-session-<id>, keeping the password", proxy: withCreds, path: "/session", args: []string{"-session", "s1"},
			wantLines: []string{"1 via " + host + ": 200 198.51.100.9"}},
		{name: "no proxy", reason: "PROXY_URL is required, and its error quotes nothing", proxy: "", path: "/", wantErr: "PROXY_URL is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			args := append([]string{"-url", "http://origin.test" + tc.path}, tc.args...)
			err := run(t.Context(), args, func(string) string { return tc.proxy }, &out)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("%s: error %v, want %q", tc.reason, err, tc.wantErr)
			}
			got := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(tc.wantLines) == 0 {
				got = nil
			}
			if len(got) != len(tc.wantLines) {
				t.Fatalf("%s: output %q, want lines %q", tc.reason, out.String(), tc.wantLines)
			}
			for i, w := range tc.wantLines {
				if strings.TrimSpace(got[i]) != strings.TrimSpace(w) {
					t.Errorf("%s: line %d = %q, want %q", tc.reason, i, got[i], w)
				}
			}
			if strings.Contains(out.String(), "s3cret-sentinel") {
				t.Errorf("the output holds the proxy's password: %q", out.String())
			}
		})
	}
}
