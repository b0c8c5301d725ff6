package probe

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// DefaultDeniedURL is the destination the denied-destination check asks
// for: the link-local cloud metadata address, which the forward proxy's
// default egress policy refuses.
const DefaultDeniedURL = "http://169.254.169.254/"

// DefaultTimeout bounds one probe (all its requests).
const DefaultTimeout = 5 * time.Second

// wrongPasswordURL is where the wrong-password request goes. The proxy
// refuses it before it resolves or dials anything; .invalid never resolves
// anyway.
const wrongPasswordURL = "http://probe.invalid/" //nolint:gosec // G101: a URL, not a credential.

// Target is one proxy to probe.
type Target struct {
	// Address is the proxy's host:port.
	Address string
	// Username and Password are the proxy's credentials; both empty for a
	// proxy without authentication.
	Username, Password string
	// CheckURL, when set, is an IP-echo URL fetched through the proxy; its
	// answer is the egress address.
	CheckURL string
	// DeniedURL, when set, is a destination the proxy must refuse with 403.
	DeniedURL string
}

// Result is what a passed probe found.
type Result struct {
	// Latency is how long the probe's requests took in total.
	Latency time.Duration
	// EgressIP is the address the check URL saw; invalid without a check
	// URL.
	EgressIP netip.Addr
}

// Prober probes proxies. Implementations must be safe for concurrent use.
type Prober interface {
	// Probe sends requests through the proxy and returns what it found, or
	// an error that says which check failed (never with credentials).
	Probe(ctx context.Context, t Target) (Result, error)
}

// HTTP is the real prober. The zero value is ready to use.
type HTTP struct {
	// Timeout bounds one probe; zero means DefaultTimeout.
	Timeout time.Duration
	// Dialer dials the proxy; nil means a net.Dialer.
	Dialer interface {
		DialContext(ctx context.Context, network, address string) (net.Conn, error)
	}
	// Now is the clock for latency; nil means time.Now.
	Now func() time.Time
}

var _ Prober = (*HTTP)(nil)

// Probe implements Prober.
func (h *HTTP) Probe(ctx context.Context, t Target) (Result, error) {
	timeout := h.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	now := h.Now
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := now()
	var res Result
	auth := t.Username != "" || t.Password != ""
	if auth {
		code, _, err := h.do(ctx, t.Address, wrongPasswordURL, t.Username, t.Password+"-wrong", true)
		if err != nil {
			return res, fmt.Errorf("wrong-password check: %w", err)
		}
		if code != http.StatusProxyAuthRequired {
			return res, fmt.Errorf("wrong-password check: the proxy answered %d instead of 407", code)
		}
	}
	if t.DeniedURL != "" {
		code, _, err := h.do(ctx, t.Address, t.DeniedURL, t.Username, t.Password, auth)
		if err != nil {
			return res, fmt.Errorf("denied-destination check: %w", err)
		}
		if code != http.StatusForbidden {
			return res, fmt.Errorf("denied-destination check: the proxy answered %d instead of 403 for %s", code, redactURL(t.DeniedURL))
		}
	}
	if t.CheckURL != "" {
		code, body, err := h.do(ctx, t.Address, t.CheckURL, t.Username, t.Password, auth)
		if err != nil {
			return res, fmt.Errorf("check URL: %w", err)
		}
		if code != http.StatusOK {
			return res, fmt.Errorf("check URL: the proxy answered %d for %s", code, redactURL(t.CheckURL))
		}
		ip, err := netip.ParseAddr(strings.TrimSpace(body))
		if err != nil {
			return res, fmt.Errorf("check URL: %s did not answer with an IP address", redactURL(t.CheckURL))
		}
		res.EgressIP = ip.Unmap()
	}
	res.Latency = now().Sub(start)
	return res, nil
}

// maxBody is how much of an answer is read: an IP address is short.
const maxBody = 256

// do sends one absolute-form GET through the proxy on its own connection
// and returns the status code and (a bounded prefix of) the body.
func (h *HTTP) do(ctx context.Context, proxyAddr, target, user, pass string, auth bool) (int, string, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return 0, "", fmt.Errorf("%s is not an http:// URL", redactURL(target))
	}
	var d interface {
		DialContext(ctx context.Context, network, address string) (net.Conn, error)
	} = &net.Dialer{}
	if h.Dialer != nil {
		d = h.Dialer
	}
	conn, err := d.DialContext(ctx, "tcp", proxyAddr)
	if err != nil {
		return 0, "", fmt.Errorf("dialling the proxy: %w", err)
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: egress-proxies-operator-probe\r\nConnection: close\r\n", u.String(), u.Host)
	if auth {
		cred := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
		fmt.Fprintf(&b, "Proxy-Authorization: Basic %s\r\n", cred)
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return 0, "", fmt.Errorf("sending the request: %w", ctxErr(ctx, err))
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", fmt.Errorf("reading the answer: %w", ctxErr(ctx, err))
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, "", fmt.Errorf("reading the answer: %w", ctxErr(ctx, err))
	}
	return resp.StatusCode, string(body), nil
}

// ctxErr prefers the context's error (a timeout says more than "use of
// closed connection").
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.Join(ctx.Err(), err)
	}
	return err
}

// redactURL drops any user information from a URL for messages.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(an unparsable URL)"
	}
	u.User = nil
	return u.String()
}
