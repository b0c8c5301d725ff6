package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
	"github.com/egress-proxies/egress-proxies-operator/internal/gateway"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// tinyproxyMember runs Debian's tinyproxy (the VM guests' proxy, 1.11.1 on
// Debian 12) on loopback with Basic credentials, as cloud-init configures
// it in a guest, and returns its entry in a pool's list as the pool
// controller publishes a VM member: engine tinyproxy. Missing tinyproxy
// fails the test in CI (CI=true), where make test installs it
// (hack/tinyproxy/install.sh), and skips it elsewhere.
func tinyproxyMember(t *testing.T, name string) gateway.Entry {
	t.Helper()
	bin, err := exec.LookPath("tinyproxy")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("tinyproxy is not installed (CI=true): run hack/tinyproxy/install.sh; %v", err)
		}
		t.Skipf("tinyproxy is not installed, so no real tinyproxy member (hack/tinyproxy/install.sh installs it): %v", err)
	}
	const user, pass = "umembertiny", "tinyproxy-member-secret-password"
	dir := t.TempDir()
	// A free port: tinyproxy takes a number, not a listener.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	conf := "Port " + port + "\nListen 127.0.0.1\nTimeout 60\nLogLevel Critical\nDisableViaHeader Yes\nBasicAuth " + user + " " + pass + "\n"
	if os.Geteuid() == 0 {
		// tinyproxy drops root for this user (its Debian package makes it).
		conf = "User tinyproxy\nGroup tinyproxy\n" + conf
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "tinyproxy.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-d", "-c", path)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("tinyproxy's output:\n%s", out.String())
		}
	})
	// It listens once it has read its file: wait at its own pace.
	poll.Until(t, wait, func() (bool, string) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, fmt.Sprintf("tinyproxy did not listen on %s: %v", addr, err)
		}
		_ = c.Close()
		return true, ""
	})
	u := url.URL{Scheme: "http", Host: addr, User: url.UserPassword(user, pass)}
	return gateway.Entry{Name: name, URL: u.String(), Provider: "lab", Zone: "rack-a", Engine: published.EngineTinyproxy}
}

// hostileOrigin is a website that answers its first request with a
// complete answer and keeps its connection open; whatever else reaches it
// on that connection it records and answers with "INJECTED". extra, when
// set, is written right behind the first answer (an answer the member
// passes on as if it belonged to the exchange). It returns its URL and the
// requests it saw past the first, on any connection.
func hostileOrigin(t *testing.T, ip, first, extra string) (string, func() []string) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var stolen []string
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	const injected = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 8\r\n\r\nINJECTED"
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if i == 0 {
						_, _ = io.WriteString(c, first+extra)
						continue
					}
					mu.Lock()
					stolen = append(stolen, req.Method+" "+req.Host+req.URL.RequestURI()+" cookie="+req.Header.Get("Cookie"))
					mu.Unlock()
					_, _ = io.WriteString(c, injected)
				}
			})
		}
	})
	return "http://" + ln.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), stolen...)
	}
}

// TestAHostileOriginBehindTinyproxyNeverGetsTheNextRequest (#38 item 1): a
// website crawled through a tinyproxy member answers completely, then
// keeps its connection open, or writes a second answer behind the first.
// tinyproxy relays raw bytes both ways once it passed the head on, so a
// kept gateway-to-member connection would now be a pipe to the website:
// the next crawler's request, cookies and the member's credentials
// included, would reach it and the website's "INJECTED" would be served
// as the other site's page. The gateway keeps no connection to a member
// that does not run our forward proxy, so the next request goes to its own
// site and gets its own answer. It fails with every member connection kept.
func TestAHostileOriginBehindTinyproxyNeverGetsTheNextRequest(t *testing.T) {
	for _, tc := range []struct {
		reason, first, extra string
	}{
		{reason: "chunked, the connection held open after the last chunk",
			first: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n0\r\n\r\n"},
		{reason: "Content-Length, the connection held open after the body",
			first: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nfirst"},
		{reason: "Content-Length with a second answer behind the body",
			first: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nfirst",
			extra: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 8\r\n\r\nINJECTED"},
		{reason: "chunked with a second answer behind the last chunk",
			first: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n0\r\n\r\n",
			extra: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 8\r\n\r\nINJECTED"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			member := tinyproxyMember(t, "crawl-vm00")
			hostile, stolen := hostileOrigin(t, "127.0.0.2", tc.first, tc.extra)
			honest := originOn(t, "127.0.0.3", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "honest page")
			}))
			set := gateway.NewSet()
			set.Update("crawl", []gateway.Entry{member})
			h := startGateway(t, gateway.Config{Members: set})
			// Each crawler keeps its own connection to the gateway: the
			// gateway's connections to the member are what is shared.
			first, second := h.client(t, gwUser), h.client(t, gwUser)
			code, body, _, err := get(first, hostile+"/bait", nil)
			if err != nil || code != http.StatusOK || body != "first" {
				t.Fatalf("the hostile site's own page: %d %q %v", code, body, err)
			}
			var got []string
			for i := range 3 {
				code, body, _, err := get(second, fmt.Sprintf("%s/account/%d", honest, i), http.Header{"Cookie": {"session=victim"}})
				got = append(got, fmt.Sprintf("%d %s %v", code, body, err))
			}
			want := []string{"200 honest page <nil>", "200 honest page <nil>", "200 honest page <nil>"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the other crawler's answers (-want +got):\n%s", diff)
			}
			if s := stolen(); len(s) != 0 {
				t.Errorf("the hostile site received other requests: %q", s)
			}
		})
	}
}
