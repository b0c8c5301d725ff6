package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		_, _ = fmt.Fprintln(os.Stderr, "crawler:", err)
		stop()
		os.Exit(1) //nolint:gocritic // exitAfterDefer: stop already ran.
	}
}

// bodyShown bounds how much of each answer is printed: the tier's target
// answers with one short line (the address it saw the request come from).
const bodyShown = 200

// run fetches -url through $PROXY_URL (with -session, in that gateway
// session) -n times and prints one line per request: its number, the
// proxy's host (never its credentials), the status and the start of the
// body. It fails when any request fails or gets a
// status other than -expect.
func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("crawler", flag.ContinueOnError)
	fs.SetOutput(out)
	target := fs.String("url", "", "the URL to fetch (required)")
	n := fs.Int("n", 1, "how many requests, one after another, each on a new connection")
	expect := fs.Int("expect", http.StatusOK, "the status every request must get")
	timeout := fs.Duration("timeout", 30*time.Second, "the bound of each request")
	session := fs.String("session", "", "a gateway session id: the username becomes <user>-session-<id> (docs/gateway.md)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("parse flags: %w", err)
	}
	if *target == "" || *n < 1 {
		return errors.New("-url is required and -n must be at least 1")
	}
	proxy, err := url.Parse(getenv("PROXY_URL"))
	if err != nil || proxy.Host == "" {
		// The error of url.Parse quotes the URL, credentials included.
		return errors.New("PROXY_URL is not set to a proxy URL (http://user:password@host:port)")
	}
	if *session != "" {
		if proxy.User == nil {
			return errors.New("-session needs a username in PROXY_URL")
		}
		pw, _ := proxy.User.Password()
		proxy.User = url.UserPassword(proxy.User.Username()+"-session-"+*session, pw)
	}
	// A new connection per request: each is one tunnel or request the
	// proxy (or a gateway in front of a pool) places on its own.
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: *timeout}
	var failed int
	for i := 1; i <= *n; i++ {
		code, body, err := fetch(ctx, hc, *target)
		switch {
		case err != nil:
			failed++
			_, _ = fmt.Fprintf(out, "%d via %s: %s\n", i, proxy.Host, redact(err.Error(), proxy))
		default:
			if code != *expect {
				failed++
			}
			_, _ = fmt.Fprintf(out, "%d via %s: %d %s\n", i, proxy.Host, code, body)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d requests did not get %d", failed, *n, *expect)
	}
	return nil
}

// fetch GETs target and returns the status and the first line of the body.
func fetch(ctx context.Context, hc *http.Client, target string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, http.NoBody)
	if err != nil {
		return 0, "", fmt.Errorf("build request: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, bodyShown))
	if err != nil {
		return 0, "", fmt.Errorf("read body: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return resp.StatusCode, line, nil
}

// redact removes the proxy's password from an error text, should the
// transport ever quote the proxy URL.
func redact(s string, proxy *url.URL) string {
	if p, ok := proxy.User.Password(); ok && p != "" {
		s = strings.ReplaceAll(s, p, "[redacted]")
	}
	return s
}
