package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// scenario is one kind of client request.
type scenario struct {
	name    string
	path    string // origin path of the GET
	connect bool   // through a new CONNECT tunnel per request
	// clients, when set, replaces --concurrency for this scenario: the
	// gateway mode measures latency with one client, where the figure is
	// what a hop costs rather than how the machine queues.
	clients int
	// pacedAfter, when set, names the scenario this one repeats at one
	// rate for every proxy (and the direct path), open loop: pacedShare of
	// the lowest throughput a proxy reached in that scenario in the same
	// round. A closed loop compares tails at different loads (the proxy
	// that serves more requests also leaves the client and the origin
	// less CPU, and its requests queue longer); at one rate the p99s
	// compare what each proxy adds under the same load.
	pacedAfter string
}

// pacedShare is the part of the slowest proxy's closed-loop throughput at
// which a paced scenario runs: below every proxy's capacity, so that none
// is measured saturated.
const pacedShare = 0.7

// concurrency is the number of clients of sc.
func (sc scenario) concurrency(o options) int {
	if sc.clients > 0 {
		return sc.clients
	}
	return o.concurrency
}

// smallBody and largeBody are what the origin serves.
var (
	smallBody = bytes.Repeat([]byte("s"), 1<<10)
	largeBody = bytes.Repeat([]byte("L"), 1<<20)
	// largeLength is largeBody's Content-Length.
	largeLength = strconv.Itoa(len(largeBody))
)

// scenarios are measured in this order, for each proxy and directly. A
// tunnel carrying 1 KiB measures what opening a tunnel costs (a crawler
// opens one per HTTPS host); one carrying 1 MiB, what moving its bytes
// costs once it is open (a download, a page with its assets).
var scenarios = []scenario{
	{name: "GET 1 KiB", path: "/small"},
	{name: "GET 1 MiB", path: "/large"},
	{name: "CONNECT + GET 1 KiB", path: "/small", connect: true},
	{name: "CONNECT + GET 1 MiB", path: "/large", connect: true},
	{name: "GET 1 KiB at one rate", path: "/small", pacedAfter: "GET 1 KiB"},
}

// originPorts is how many ports the origin listens on. Tunnels open a
// connection per request, thousands a second: spread over many destination
// ports, the proxies' connections to the origin do not run out of
// ephemeral ports nor meet the origin's TIME_WAIT sockets of an earlier
// connection with the same addresses and ports.
const originPorts = 64

// origin is the HTTP server every request ends at.
type origin struct {
	addr  string   // the first port, for keep-alive GETs and idle tunnels
	addrs []string // every port, taken in turn by tunnels
	next  atomic.Uint64
	srv   *http.Server
	wg    sync.WaitGroup
}

// tunnelTarget returns the origin address of the next tunnel.
func (o *origin) tunnelTarget() string {
	return o.addrs[o.next.Add(1)%uint64(len(o.addrs))]
}

func startOrigin(ctx context.Context) (*origin, error) {
	var lns []net.Listener
	for range originPorts {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(smallBody) })
	// The large answer is a file as a static server sends it, with its
	// length; the small one gets its length from net/http, which holds
	// answers under 2 KiB whole. (Until 2026-12-06 the large one went
	// chunked: a dynamic page's framing.)
	mux.HandleFunc("/large", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", largeLength)
		_, _ = w.Write(largeBody)
	})
	// Idle tunnels hold connections that never send a request: the
	// header timeout outlasts the run.
	o := &origin{addr: lns[0].Addr().String(), srv: &http.Server{Handler: mux, ReadHeaderTimeout: time.Hour}}
	for _, ln := range lns {
		o.addrs = append(o.addrs, ln.Addr().String())
		o.wg.Go(func() { _ = o.srv.Serve(ln) })
	}
	return o, nil
}

func (o *origin) close() {
	_ = o.srv.Close()
	o.wg.Wait()
}

// op performs one request and returns the body bytes it read.
type op func(ctx context.Context) (int64, error)

// makeOp returns a new client's op; each worker makes its own.
type makeOp func() op

func getOp(c *http.Client, target string) op {
	return func(ctx context.Context) (int64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return 0, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer func() { _ = resp.Body.Close() }()
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %s", resp.Status)
		}
		return n, err
	}
}

// directClient requests the origin without a proxy: the baseline that the
// proxies' latency is compared with.
func directClient(org *origin, sc scenario, concurrency int) makeOp {
	if sc.connect {
		return func() op { return tunnelOp("", org, sc.path) }
	}
	c := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: concurrency, DisableCompression: true}}
	return func() op { return getOp(c, "http://"+org.addr+sc.path) }
}

// proxyClient requests the origin through the proxy at proxyAddr, with its
// credentials, keeping connections alive as a crawler does.
func proxyClient(org *origin, proxyAddr string, sc scenario, concurrency int) makeOp {
	if sc.connect {
		return func() op { return tunnelOp(proxyAddr, org, sc.path) }
	}
	u := &url.URL{Scheme: "http", Host: proxyAddr, User: url.UserPassword(benchUser, benchPass)}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), MaxIdleConnsPerHost: concurrency, DisableCompression: true}}
	return func() op { return getOp(c, "http://"+org.addr+sc.path) }
}

var proxyAuth = "Basic " + base64.StdEncoding.EncodeToString([]byte(benchUser+":"+benchPass))

// connectRequest is the CONNECT request for target.
func connectRequest(target string) string {
	return "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\nProxy-Authorization: " + proxyAuth + "\r\n\r\n"
}

// tunnelOp opens a tunnel through proxyAddr (none: a direct connection),
// sends one GET through it and closes it: what a crawler does for each
// HTTPS host, without the TLS, which would only measure the client.
func tunnelOp(proxyAddr string, org *origin, path string) op {
	return func(ctx context.Context) (int64, error) {
		var d net.Dialer
		target := org.tunnelTarget()
		addr := target
		if proxyAddr != "" {
			addr = proxyAddr
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return 0, err
		}
		defer func() {
			// A reset rather than a FIN: the client's side keeps no
			// TIME_WAIT socket, and thousands of tunnels a second do not
			// exhaust its ports.
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}()
		if dl, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(dl)
		}
		br := bufio.NewReader(c)
		if proxyAddr != "" {
			if _, err := io.WriteString(c, connectRequest(target)); err != nil {
				return 0, err
			}
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil {
				return 0, err
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return 0, fmt.Errorf("CONNECT: %s", resp.Status)
			}
		}
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+target+"\r\nConnection: close\r\n\r\n"); err != nil {
			return 0, err
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
		if err != nil {
			return 0, err
		}
		defer func() { _ = resp.Body.Close() }()
		return io.Copy(io.Discard, resp.Body)
	}
}

// measurement is one scenario's figures.
type measurement struct {
	scenario scenario
	ok       int
	errors   int
	firstErr error
	elapsed  time.Duration
	bytes    int64
	p50, p99 time.Duration
	cpu      float64 // the proxy's CPU seconds during the scenario
	sys      float64 // of cpu, the system (kernel) seconds
	requests int     // after median: the successful requests of all rounds
}

// rps is the successful requests per second.
func (m measurement) rps() float64 { return float64(m.ok) / m.elapsed.Seconds() }

// measure runs the scenario with its concurrency's workers until o.requests
// were sent or o.duration passed. With rate > 0 the workers send rate
// requests a second in all, each at its scheduled time (open loop), and a
// request's latency counts from that time: a request that had to wait for
// the one before it is as late as a user would see it.
func measure(ctx context.Context, o options, sc scenario, mk makeOp, rate float64) measurement {
	start := time.Now()
	// The clock, not ctx.Err(), ends the run: the context's timer may fire
	// a little after its deadline, and requests started in between fail
	// at once on their connections' deadline, which is not a failure of
	// the proxy. The context's deadline is that same instant, so that a
	// request it cuts short is never counted as failed either.
	end := start.Add(o.duration)
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var (
		sent atomic.Int64
		mu   sync.Mutex
		m    = measurement{scenario: sc}
		lats []time.Duration
		wg   sync.WaitGroup
	)
	workers := sc.concurrency(o)
	for w := range workers {
		wg.Go(func() {
			do := mk()
			var mine []time.Duration
			var n int64
			var errs int
			var firstErr error
			for k := 0; sent.Add(1) <= int64(o.requests) && time.Now().Before(end); k++ {
				t := time.Now()
				if rate > 0 {
					t = start.Add(time.Duration(float64(k*workers+w) / rate * float64(time.Second)))
					if !waitUntil(ctx, t) {
						break
					}
				}
				b, err := do(ctx)
				if err != nil {
					if time.Now().Before(end) {
						errs++
						if firstErr == nil {
							firstErr = err
						}
					}
					continue
				}
				mine = append(mine, time.Since(t))
				n += b
			}
			mu.Lock()
			defer mu.Unlock()
			lats = append(lats, mine...)
			m.bytes += n
			m.errors += errs
			if m.firstErr == nil {
				m.firstErr = firstErr
			}
		})
	}
	wg.Wait()
	m.elapsed = time.Since(start)
	m.ok = len(lats)
	slices.Sort(lats)
	if len(lats) > 0 {
		m.p50 = lats[len(lats)/2]
		m.p99 = lats[min(len(lats)-1, len(lats)*99/100)]
	}
	return m
}

// waitUntil waits until t, or less when ctx ends first; it reports
// whether t was reached.
func waitUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// openIdleTunnels opens n CONNECT tunnels to target through proxyAddr and
// leaves them idle. A CONNECT that is refused is tried again on a new
// connection, up to maxIdleRefusals in all, and counted in refused, so
// that the memory table says so: proxy-chain sends a CONNECT on a
// connection to its upstream that it kept alive after plain requests,
// which our forward proxy refused until 2026-12-06 (400, proxy-chain's
// 590). It serves them now; a refusal here is a finding.
func openIdleTunnels(ctx context.Context, proxyAddr, target string, n int) (conns []net.Conn, refused int, err error) {
	conns = make([]net.Conn, 0, n)
	req := []byte(connectRequest(target))
	var d net.Dialer
	for len(conns) < n {
		c, err := d.DialContext(ctx, "tcp", proxyAddr)
		if err != nil {
			return conns, refused, err
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(req); err != nil {
			_ = c.Close()
			return conns, refused, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			_ = c.Close()
			return conns, refused, err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			_ = c.Close()
			if refused++; refused > maxIdleRefusals {
				return conns, refused, fmt.Errorf("CONNECT: %s (%d refused)", resp.Status, refused)
			}
			continue
		}
		_ = c.SetDeadline(time.Time{})
		conns = append(conns, c)
	}
	return conns, refused, nil
}

// maxIdleRefusals bounds the refused CONNECTs that openIdleTunnels tries
// again.
const maxIdleRefusals = 10

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		_ = c.Close()
	}
}

// errorSummary says how many requests failed, for the table's notes.
func errorSummary(m measurement) string {
	if m.errors == 0 {
		return ""
	}
	msg := "?"
	if m.firstErr != nil {
		msg = m.firstErr.Error()
	}
	return fmt.Sprintf("%d failed (%s)", m.errors, strings.ReplaceAll(msg, "|", "/"))
}
