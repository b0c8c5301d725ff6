package proxycmd

import (
	"bufio"
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/logbuf"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// proxyPassword is the sentinel of these tests: it must never show in logs
// or errors.
const proxyPassword = "Pr0xy-sentinel-9b1d"

// proxyWait bounds every wait in these tests.
const proxyWait = 20 * time.Second

// proxyEnv returns a getenv that reads env.
func proxyEnv(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

// proxyCredentialsDir writes a mounted-Secret-like directory; a file whose
// content is nil is not written.
func proxyCredentialsDir(t *testing.T, username, password []byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string][]byte{"username": username, "password": password} {
		if content == nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRunProxyServes(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello from the origin")
	}))
	t.Cleanup(origin.Close)
	// Files as `kubectl create secret --from-file` or echo leave them:
	// with a trailing newline.
	dir := proxyCredentialsDir(t, []byte("crawler\n"), []byte(proxyPassword+"\n"))
	logs := &logbuf.Buffer{}
	log := logs.Logger(2)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs)
		}
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type addrs struct{ proxy, admin net.Addr }
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	// The origin and the tunnel target are on loopback, on random ports:
	// the egress policy must be widened for them (TestRunProxyEgress
	// shows the default).
	args := []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--credentials-dir", dir, "--drain", "1m",
		"--egress-allow-cidrs", "127.0.0.0/8", "--connect-ports", "443,1024-65535"}
	// The environment's credentials lose to the directory's.
	env := proxyEnv(map[string]string{envProxyUsername: "envuser", envProxyPassword: "envpass"})
	go func() {
		done <- Run(ctx, args, Env{Getenv: env, Log: log, Ready: func(proxy, admin net.Addr) { ready <- addrs{proxy, admin} }})
	}()
	var a addrs
	listening := time.NewTimer(proxyWait)
	defer listening.Stop()
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("Run returned %v before listening", err)
	case <-listening.C:
		t.Fatal("Run did not listen")
	}

	for _, tc := range []struct {
		name       string
		reason     string
		user       *url.Userinfo
		wantStatus int
		wantBody   string
	}{
		{name: "credentials from the directory", reason: "the mounted Secret's credentials, newline trimmed, open the proxy",
			user: url.UserPassword("crawler", proxyPassword), wantStatus: http.StatusOK, wantBody: "hello from the origin"},
		{name: "with the newline", reason: "the trailing newline is not part of the password",
			user: url.UserPassword("crawler", proxyPassword+"\n"), wantStatus: http.StatusProxyAuthRequired, wantBody: "proxy authentication required\n"},
		{name: "credentials from the environment", reason: "--credentials-dir wins over PROXY_USERNAME/PROXY_PASSWORD",
			user: url.UserPassword("envuser", "envpass"), wantStatus: http.StatusProxyAuthRequired, wantBody: "proxy authentication required\n"},
		{name: "no credentials", reason: "the proxy is not open",
			wantStatus: http.StatusProxyAuthRequired, wantBody: "proxy authentication required\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxyURL := &url.URL{Scheme: "http", Host: a.proxy.String(), User: tc.user}
			tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: proxyWait}).Get(origin.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if diff := cmp.Diff(tc.wantStatus, resp.StatusCode); diff != "" {
				t.Errorf("%s: status (-want +got):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantBody, string(body)); diff != "" {
				t.Errorf("%s: body (-want +got):\n%s", tc.reason, diff)
			}
		})
	}

	admin := &http.Client{Timeout: proxyWait}
	status, body := proxyAdminGet(t, admin, "http://"+a.admin.String()+"/healthz")
	if diff := cmp.Diff([]any{http.StatusOK, "ok"}, []any{status, body}); diff != "" {
		t.Errorf("/healthz (-want +got):\n%s", diff)
	}
	status, body = proxyAdminGet(t, admin, "http://"+a.admin.String()+"/metrics")
	if status != http.StatusOK {
		t.Errorf("/metrics status = %d", status)
	}
	for _, want := range []string{
		`egress_proxies_forward_requests_total{code="200",method="HTTP"} 1`,
		`egress_proxies_forward_requests_total{code="407",method="HTTP"} 3`,
		"go_goroutines ",
		"process_cpu_seconds_total ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// A CONNECT tunnel open at shutdown lives on during the --drain
	// period (a minute here), and Run returns once it ends.
	tunnel := proxyConnect(t, a.proxy.String(), strings.TrimPrefix(origin.URL, "http://"), "crawler", proxyPassword)
	cancel()
	proxyEventually(t, "new connections refused", func() bool {
		c, err := net.DialTimeout("tcp", a.proxy.String(), time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	})
	if _, err := io.WriteString(tunnel, "GET / HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(tunnel); err != nil || !strings.HasSuffix(string(got), "hello from the origin") {
		t.Errorf("request through a tunnel during the drain = %q, %v", got, err)
	}
	_ = tunnel.Close()
	if err := poll.Receive(t, proxyWait, "Run returning after its context was cancelled and the tunnel closed", done); err != nil {
		t.Errorf("Run = %v after shutdown, want nil", err)
	}
	out := logs.String()
	for _, want := range []string{`"msg"="forward proxy listening"`, `"auth"="basic"`, `"msg"="request"`, `"msg"="forward proxy stopped"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the logs lack %s", want)
		}
	}
	if strings.Contains(out, proxyPassword) {
		t.Errorf("the logs show the password:\n%s", out)
	}
}

// proxyConnect opens a CONNECT tunnel through the proxy at proxyAddr.
func proxyConnect(t *testing.T, proxyAddr, target, user, pass string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, proxyWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(proxyWait))
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\nProxy-Authorization: Basic "+auth+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Read the answer byte by byte, so that nothing of the tunnel is
	// buffered here.
	var head []byte
	b := make([]byte, 1)
	for !strings.HasSuffix(string(head), "\r\n\r\n") {
		if _, err := c.Read(b); err != nil {
			t.Fatalf("reading the CONNECT answer: %v", err)
		}
		head = append(head, b[0])
	}
	if !strings.HasPrefix(string(head), "HTTP/1.1 200 ") {
		t.Fatalf("CONNECT answer %q", head)
	}
	return c
}

// proxyEventually polls cond until it holds or proxyWait passes.
func proxyEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, proxyWait, func() (bool, string) { return cond(), what })
}

func proxyAdminGet(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestRunProxyRefuses(t *testing.T) {
	full := proxyCredentialsDir(t, []byte("crawler\n"), []byte(proxyPassword+"\n"))
	noPassword := proxyCredentialsDir(t, []byte("crawler\n"), nil)
	noUsername := proxyCredentialsDir(t, nil, []byte(proxyPassword+"\n"))
	emptyPassword := proxyCredentialsDir(t, []byte("crawler\n"), []byte("\n"))
	for _, tc := range []struct {
		name   string
		reason string
		args   []string
		env    map[string]string
		want   []string
	}{
		{
			name: "bad CIDR", reason: "a typo in the allow-list must not widen or empty it silently",
			args: []string{"--credentials-dir", full, "--allowed-source-ranges", "203.0.113.0/24, 203.0.113.0/33"},
			want: []string{"--allowed-source-ranges", `"203.0.113.0/33"`},
		},
		{
			name: "open", reason: "no credentials and no ranges would be an open proxy",
			want: []string{"refusing to run an open proxy", "--credentials-dir", "PROXY_USERNAME", "--allowed-source-ranges", "--allow-open"},
		},
		{
			name: "missing password file", reason: "a Secret without the password key is a broken mount, not 'no auth'",
			args: []string{"--credentials-dir", noPassword},
			want: []string{"--credentials-dir", filepath.Join(noPassword, "password")},
		},
		{
			name: "missing username file", reason: "the username is needed too",
			args: []string{"--credentials-dir", noUsername},
			want: []string{"--credentials-dir", filepath.Join(noUsername, "username")},
		},
		{
			name: "empty password file", reason: "an empty password would never match",
			args: []string{"--credentials-dir", emptyPassword},
			want: []string{"--credentials-dir", filepath.Join(emptyPassword, "password"), "is empty"},
		},
		{
			name: "half the environment", reason: "PROXY_USERNAME without PROXY_PASSWORD is a mistake",
			env:  map[string]string{envProxyUsername: "crawler"},
			want: []string{"PROXY_USERNAME", "PROXY_PASSWORD"},
		},
		{
			name: "bad egress CIDR", reason: "a typo in the egress policy must not widen or empty it silently",
			args: []string{"--credentials-dir", full, "--egress-allow-cidrs", "127.0.0.0/8,everything"},
			want: []string{"--egress-allow-cidrs", `"everything"`},
		},
		{
			name: "bad deny CIDR", reason: "same for the deny list",
			args: []string{"--credentials-dir", full, "--egress-deny-cidrs", "203.0.113.0/33"},
			want: []string{"--egress-deny-cidrs", `"203.0.113.0/33"`},
		},
		{
			name: "bad connect port", reason: "a port that does not parse is refused, not ignored",
			args: []string{"--credentials-dir", full, "--connect-ports", "443,https"},
			want: []string{"--connect-ports", `"https"`},
		},
		{
			name: "open in two halves", reason: "without credentials, source ranges that together cover the Internet are an open proxy",
			args: []string{"--allowed-source-ranges", "0.0.0.0/1,128.0.0.0/1"},
			want: []string{"refusing to run an open proxy", "--allowed-source-ranges", "at most one IPv4 /8"},
		},
		{
			name: "open through the mapped prefix", reason: "::/32 holds ::ffff:0:0/96, every IPv4 client as an IPv4-mapped address",
			args: []string{"--allowed-source-ranges", "::/32"},
			want: []string{"refusing to run an open proxy", "--allowed-source-ranges", "the IPv4 source ranges cover"},
		},
		{
			name: "no connect port", reason: "an empty list is a mistake, not 'every port'",
			args: []string{"--credentials-dir", full, "--connect-ports", ","},
			want: []string{"--connect-ports", "at least one"},
		},
		{
			name: "no capacity", reason: "a cap of zero would refuse everything",
			args: []string{"--credentials-dir", full, "--max-concurrent", "0"},
			want: []string{"--max-concurrent"},
		},
		{
			name: "bad duration", reason: "flag errors name the flag",
			args: []string{"--allow-open", "--drain", "soon"},
			want: []string{"-drain"},
		},
		{
			name: "unknown flag", reason: "a misspelt flag is not ignored",
			args: []string{"--allow-open", "--listn", ":1"},
			want: []string{"-listn"},
		},
		{
			name: "argument", reason: "the subcommand takes no arguments",
			args: []string{"--allow-open", "extra"},
			want: []string{"unexpected arguments", "extra"},
		},
		{
			name: "bad listen address", reason: "a listen failure names the flag",
			args: []string{"--allow-open", "--listen", "127.0.0.1:99999"},
			want: []string{"--listen"},
		},
		{
			name: "bad admin address", reason: "an admin listen failure names the flag",
			args: []string{"--allow-open", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:99999"},
			want: []string{"--admin-listen"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A cancelled context: if Run wrongly accepts the
			// arguments, it stops at once and returns nil.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			args := append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "0"}, tc.args...)
			err := Run(ctx, args, Env{Getenv: proxyEnv(tc.env), Log: funcr.New(func(string, string) {}, funcr.Options{})})
			if err == nil {
				t.Fatalf("%s: Run accepted %q", tc.reason, tc.args)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q lacks %q", tc.reason, err, w)
				}
			}
			if strings.Contains(err.Error(), proxyPassword) {
				t.Errorf("the error shows the password: %q", err)
			}
		})
	}
}

// The egress flags and the pod's environment make the policy: the default
// refuses loopback and ports other than 443, the flags widen and narrow it,
// and the API server's Service address is always refused.
func TestRunProxyEgress(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello from the origin")
	}))
	t.Cleanup(origin.Close)
	originHost := strings.TrimPrefix(origin.URL, "http://")
	for _, tc := range []struct {
		name       string
		reason     string
		args       []string
		env        map[string]string
		connect    bool
		wantStatus int
		wantDenied string // only a CONNECT port's refusal says why
	}{
		{name: "default", reason: "loopback is refused by default", wantStatus: http.StatusForbidden},
		{
			name: "default CONNECT", reason: "CONNECT reaches 443 only by default",
			args: []string{"--egress-allow-cidrs", "127.0.0.0/8"}, connect: true, wantStatus: http.StatusForbidden, wantDenied: "port",
		},
		{
			name: "widened", reason: "--egress-allow-cidrs reopens loopback",
			args: []string{"--egress-allow-cidrs", "127.0.0.0/8"}, wantStatus: http.StatusOK,
		},
		{
			name: "widened CONNECT", reason: "--connect-ports opens the origin's port",
			args:    []string{"--egress-allow-cidrs", "127.0.0.0/8", "--connect-ports", "1024-65535"},
			connect: true, wantStatus: http.StatusOK,
		},
		{
			name: "narrowed", reason: "--egress-deny-cidrs wins over --egress-allow-cidrs",
			args:       []string{"--egress-allow-cidrs", "127.0.0.0/8", "--egress-deny-cidrs", "127.0.0.1/32"},
			wantStatus: http.StatusForbidden,
		},
		{
			name: "API server", reason: "the pod's KUBERNETES_SERVICE_HOST is refused whatever the flags say",
			args:       []string{"--egress-allow-cidrs", "127.0.0.0/8"},
			env:        map[string]string{envKubernetesServiceHost: "127.0.0.1"},
			wantStatus: http.StatusForbidden,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			ready := make(chan net.Addr, 1)
			env := map[string]string{envProxyUsername: "crawler", envProxyPassword: proxyPassword}
			for k, v := range tc.env {
				env[k] = v
			}
			args := append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "0", "--drain", "1s"}, tc.args...)
			go func() {
				done <- Run(ctx, args, Env{Getenv: proxyEnv(env), Log: funcr.New(func(string, string) {}, funcr.Options{}),
					Ready: func(proxy, _ net.Addr) { ready <- proxy }})
			}()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			})
			var addr net.Addr
			listening := time.NewTimer(proxyWait)
			defer listening.Stop()
			select {
			case addr = <-ready:
			case err := <-done:
				t.Fatalf("Run returned %v before listening", err)
			case <-listening.C:
				t.Fatal("Run did not listen")
			}
			req := "GET " + origin.URL + "/ HTTP/1.1\r\nHost: " + originHost + "\r\n"
			if tc.connect {
				req = "CONNECT " + originHost + " HTTP/1.1\r\nHost: " + originHost + "\r\n"
			}
			auth := base64.StdEncoding.EncodeToString([]byte("crawler:" + proxyPassword))
			c, err := net.DialTimeout("tcp", addr.String(), proxyWait)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(proxyWait))
			if _, err := io.WriteString(c, req+"Proxy-Authorization: Basic "+auth+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			method := http.MethodGet
			if tc.connect {
				method = http.MethodConnect
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if diff := cmp.Diff(tc.wantStatus, resp.StatusCode); diff != "" {
				t.Errorf("%s: status (-want +got):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantDenied, resp.Header.Get("X-Egress-Denied")); diff != "" {
				t.Errorf("%s: X-Egress-Denied (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// The access log: one line per request and tunnel at the default level,
// with the time, the client, the user, the destination, the status, the
// bytes and the duration, and never a credential (sentinel: the password,
// right or wrong, in every spelling, and a password sent as the username);
// --access-log=false leaves only the proxy's own messages.
func TestRunProxyAccessLog(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello from the origin")
	}))
	t.Cleanup(origin.Close)
	originHost := strings.TrimPrefix(origin.URL, "http://")
	const wrongPassword = "Wr0ng-sentinel-5d7e"
	for _, tc := range []struct {
		name, reason string
		args         []string
		wantLines    int
	}{
		{name: "default", reason: "on by default: a line per request and tunnel", wantLines: 4},
		{name: "off", reason: "--access-log=false: no request line at the default level", args: []string{"--access-log=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logbuf.Buffer{}
			// The default level, as the operator's binary logs.
			log := logs.Logger(0)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			ready := make(chan net.Addr, 1)
			args := append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "0", "--drain", "1s",
				"--egress-allow-cidrs", "127.0.0.0/8", "--connect-ports", "1024-65535"}, tc.args...)
			env := proxyEnv(map[string]string{envProxyUsername: "crawler", envProxyPassword: proxyPassword})
			go func() {
				done <- Run(ctx, args, Env{Getenv: env, Log: log, Ready: func(proxy, _ net.Addr) { ready <- proxy }})
			}()
			addr := poll.Receive(t, proxyWait, "Run to listen", ready).String()

			for _, user := range []*url.Userinfo{
				url.UserPassword("crawler", proxyPassword),
				url.UserPassword("crawler", wrongPassword),
				// A password typed in the username's field.
				url.UserPassword(wrongPassword, ""),
			} {
				tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr, User: user}), DisableKeepAlives: true}
				resp, err := (&http.Client{Transport: tr, Timeout: proxyWait}).Get(origin.URL + "/page")
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				tr.CloseIdleConnections()
			}
			tunnel := proxyConnect(t, addr, originHost, "crawler", proxyPassword)
			if _, err := io.WriteString(tunnel, "GET / HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadAll(tunnel); err != nil {
				t.Fatal(err)
			}
			_ = tunnel.Close()
			cancel()
			if err := poll.Receive(t, proxyWait, "Run to return", done); err != nil {
				t.Fatal(err)
			}

			var lines []string
			for line := range strings.SplitSeq(logs.String(), "\n") {
				if strings.Contains(line, `"msg"="request"`) {
					lines = append(lines, line)
				}
			}
			if diff := cmp.Diff(tc.wantLines, len(lines)); diff != "" {
				t.Fatalf("%s: request lines (-want +got):\n%s\n%s", tc.reason, diff, logs)
			}
			if tc.wantLines == 0 {
				return
			}
			// A line is written when its request ends, and a plain
			// request's end may come after the next request's (its
			// connection's close is seen when the server reads it
			// again): each expected line is looked for among them all.
			left := slices.Clone(lines)
			for i, want := range [][]string{
				{`"user"="crawler"`, `"method"="GET"`, `"destination"="` + originHost + `"`, `"status"=200`, `"bytesDown"=21`},
				{`"user"=""`, `"status"=407`},
				{`"user"=""`, `"status"=407`},
				{`"user"="crawler"`, `"method"="CONNECT"`, `"destination"="` + originHost + `"`, `"status"=200`, `"bytesUp"=51`},
			} {
				fields := append(slices.Clone(want), `"level"=0`, `"time"="20`, `"client"="127.0.0.1:`, `"duration"=`)
				j := slices.IndexFunc(left, func(line string) bool {
					if !strings.HasPrefix(line, "access ") {
						return false
					}
					for _, field := range fields {
						if !strings.Contains(line, field) {
							return false
						}
					}
					return true
				})
				if j < 0 {
					t.Errorf("no access line %d with %q among:\n%s", i, fields, strings.Join(left, "\n"))
					continue
				}
				left = slices.Delete(left, j, j+1)
			}
			out := logs.String()
			for _, secret := range []string{
				proxyPassword, wrongPassword,
				base64.StdEncoding.EncodeToString([]byte("crawler:" + proxyPassword)),
				base64.StdEncoding.EncodeToString([]byte("crawler:" + wrongPassword)),
				base64.StdEncoding.EncodeToString([]byte(wrongPassword + ":")),
			} {
				if strings.Contains(out, secret) {
					t.Errorf("the logs contain %q:\n%s", secret, out)
				}
			}
		})
	}
}

// A guest's unit hands the credentials over with systemd's LoadCredential=,
// which sets CREDENTIALS_DIRECTORY: without --credentials-dir, the engine
// reads them there, and an explicit --credentials-dir still wins.
func TestRunProxyCredentialsFromSystemd(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "origin")
	}))
	t.Cleanup(origin.Close)
	systemd := proxyCredentialsDir(t, []byte("guest\n"), []byte(proxyPassword+"\n"))
	mounted := proxyCredentialsDir(t, []byte("mounted"), []byte("mounted-"+proxyPassword))
	for _, tc := range []struct {
		name, reason string
		args         []string
		user         *url.Userinfo
		want         int
	}{
		{name: "systemd's directory", reason: "CREDENTIALS_DIRECTORY is the default of --credentials-dir",
			user: url.UserPassword("guest", proxyPassword), want: http.StatusOK},
		{name: "not open", reason: "with CREDENTIALS_DIRECTORY the engine asks for its credentials",
			want: http.StatusProxyAuthRequired},
		{name: "the flag wins", reason: "an explicit --credentials-dir is read instead of systemd's",
			args: []string{"--credentials-dir", mounted}, user: url.UserPassword("guest", proxyPassword), want: http.StatusProxyAuthRequired},
		{name: "the flag's credentials", reason: "an explicit --credentials-dir is read instead of systemd's",
			args: []string{"--credentials-dir", mounted}, user: url.UserPassword("mounted", "mounted-"+proxyPassword), want: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			ready := make(chan net.Addr, 1)
			done := make(chan error, 1)
			args := append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "0", "--drain", "0s", "--egress-allow-cidrs", "127.0.0.0/8"}, tc.args...)
			go func() {
				done <- Run(ctx, args, Env{Command: "egress-proxy", Getenv: proxyEnv(map[string]string{"CREDENTIALS_DIRECTORY": systemd}),
					Log: funcr.New(func(string, string) {}, funcr.Options{}), Ready: func(proxy, _ net.Addr) { ready <- proxy }})
			}()
			t.Cleanup(func() {
				cancel()
				if err := poll.Receive(t, proxyWait, "Run to return", done); err != nil {
					t.Errorf("Run = %v", err)
				}
			})
			addr := poll.Receive(t, proxyWait, "Run to listen", ready)
			tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr.String(), User: tc.user}), DisableKeepAlives: true}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: proxyWait}).Get(origin.URL)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if diff := cmp.Diff(tc.want, resp.StatusCode); diff != "" {
				t.Errorf("%s: status (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}
