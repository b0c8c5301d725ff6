package forwardproxy

import (
	"container/list"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Admission limits of Serve, against clients that hold connections rather
// than use them (docs/security.md, "Connection admission"). A connection is
// unauthenticated from its accept until its first request is admitted: read,
// its source allowed and its credentials checked (or, under a server that
// has no credentials to check, read). Until then it may be closed at any
// moment at no client's loss but its own.
const (
	// DefaultMaxConnectionsPerSource caps the connections one client
	// address holds at once: a quarter of DefaultMaxConnections, so that
	// no single address takes every slot.
	DefaultMaxConnectionsPerSource = DefaultMaxConnections / 4
	// DefaultMaxUnauthenticated caps the unauthenticated connections of
	// the whole server. Past it, a new connection is not refused: the
	// oldest unauthenticated one is closed to make room, so that a flood
	// of silent connections displaces only other silent connections
	// (a client's own connection is unauthenticated only for the moment
	// its first head takes to arrive).
	DefaultMaxUnauthenticated = 1024
	// DefaultMaxUnauthenticatedPerSource caps the unauthenticated
	// connections of one client address; a new one past it is refused.
	// A crawler opening a burst of tunnels has that many heads in flight
	// at most for the moment the proxy takes to read them.
	DefaultMaxUnauthenticatedPerSource = 256
	// DefaultFirstRequestTimeout closes a connection that is still
	// unauthenticated that long after it was accepted: a client sends its
	// first head right after connecting, and one refused for its
	// credentials may retry on the same connection within that time.
	DefaultFirstRequestTimeout = 5 * time.Second
)

// Causes of the connections that admission refused or closed (the cause
// label of egress_proxies_forward_connections_refused_total).
const (
	// RefusedLimit: the server held MaxConnections.
	RefusedLimit = "limit"
	// RefusedSourceLimit: the client's address held
	// MaxConnectionsPerSource.
	RefusedSourceLimit = "source-limit"
	// RefusedUnauthenticatedSourceLimit: the client's address held
	// MaxUnauthenticatedPerSource unauthenticated connections.
	RefusedUnauthenticatedSourceLimit = "unauthenticated-source-limit"
	// RefusedEvicted: an unauthenticated connection closed to make room
	// for a newer one, the server holding MaxUnauthenticated.
	RefusedEvicted = "unauthenticated-evicted"
	// RefusedFirstRequestTimeout: a connection still unauthenticated at
	// FirstRequestTimeout.
	RefusedFirstRequestTimeout = "first-request-timeout"
)

// admission are the limits of a limitListener; zero values are filled in
// by ServeWith.
type admission struct {
	max, perSource             int
	unauthenticated, unauthPer int
	firstRequest               time.Duration
	// refused, when set, counts a connection refused or closed, by cause.
	refused func(cause string)
}

// limitListener hands out connections within the admission limits: a
// connection past a cap is answered 503 and closed before anything is read
// from it; an unauthenticated one that waits too long, or is the oldest
// when the server holds too many, is closed.
type limitListener struct {
	net.Listener
	lim    admission
	answer string // tooMany, with the Proxy's Proxy-Status
	open   atomic.Int64

	mu      sync.Mutex
	sources map[netip.Addr]*sourceCount // of the open connections
	waiting list.List                   // unauthenticated *countedConn, oldest first
}

// sourceCount are the connections of one client address.
type sourceCount struct{ open, unauthenticated int }

// tooMany is written, raw, to a connection over a limit: there is no
// request to answer yet, and reading one would already cost what the limit
// saves.
const tooMany = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 52\r\n\r\nthe proxy is at its limit of concurrent connections\n"

func newLimitListener(ln net.Listener, lim admission, proxyStatus string) *limitListener {
	l := &limitListener{Listener: ln, lim: lim, answer: tooMany, sources: map[netip.Addr]*sourceCount{}}
	if proxyStatus != "" {
		l.answer = strings.Replace(tooMany, "\r\n\r\n", "\r\n"+ProxyStatusHeader+": "+proxyStatus+"; error="+ProxyErrorConnectionLimitReached+"\r\n\r\n", 1)
	}
	return l
}

// Accept returns the next connection within the limits.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if cc := l.admit(c); cc != nil {
			return cc, nil
		}
	}
}

// admit counts c in, or refuses it (and returns nil).
func (l *limitListener) admit(c net.Conn) *countedConn {
	if l.open.Add(1) > int64(l.lim.max) {
		l.open.Add(-1)
		l.refuse(c, RefusedLimit)
		return nil
	}
	src := sourceOf(c.RemoteAddr())
	cc := &countedConn{RelayConn: RelayConn{Conn: c}, l: l, src: src}
	l.mu.Lock()
	n := l.sources[src]
	if n == nil {
		n = &sourceCount{}
		l.sources[src] = n
	}
	var cause string
	switch {
	case n.open >= l.lim.perSource:
		cause = RefusedSourceLimit
	case n.unauthenticated >= l.lim.unauthPer:
		cause = RefusedUnauthenticatedSourceLimit
	}
	if cause != "" {
		if n.open == 0 {
			delete(l.sources, src)
		}
		l.mu.Unlock()
		l.open.Add(-1)
		l.refuse(c, cause)
		return nil
	}
	n.open++
	n.unauthenticated++
	var evicted *countedConn
	if l.waiting.Len() >= l.lim.unauthenticated {
		evicted, _ = l.waiting.Front().Value.(*countedConn) // the list holds only *countedConn
		l.authenticatedLocked(evicted)
	}
	cc.waiting = l.waiting.PushBack(cc)
	cc.timer = time.AfterFunc(l.lim.firstRequest, func() { l.expire(cc) })
	l.mu.Unlock()
	if evicted != nil {
		// Outside the lock, which release takes. Its slot is given back
		// now, not when its handler notices the close: a flood would
		// otherwise hold the server's slots for as long as handlers take
		// to wake, and a new client would meet the global cap.
		l.count(RefusedEvicted)
		evicted.release()
		_ = evicted.Conn.Close()
	}
	return cc
}

// refuse answers c 503 and closes it.
func (l *limitListener) refuse(c net.Conn, cause string) {
	l.count(cause)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(c, l.answer)
	_ = c.Close()
}

func (l *limitListener) count(cause string) {
	if l.lim.refused != nil {
		l.lim.refused(cause)
	}
}

// expire closes cc if it is still unauthenticated.
func (l *limitListener) expire(cc *countedConn) {
	l.mu.Lock()
	late := cc.waiting != nil
	l.authenticatedLocked(cc)
	l.mu.Unlock()
	if late {
		l.count(RefusedFirstRequestTimeout)
		cc.release()
		_ = cc.Conn.Close()
	}
}

// authenticatedLocked takes cc out of the unauthenticated connections, if
// it is one. l.mu is held.
func (l *limitListener) authenticatedLocked(cc *countedConn) {
	if cc.waiting == nil {
		return
	}
	l.waiting.Remove(cc.waiting)
	cc.waiting = nil
	cc.timer.Stop()
	// Not kept: an idle tunnel should not hold a stopped timer.
	cc.timer = nil
	if n := l.sources[cc.src]; n != nil {
		n.unauthenticated--
	}
}

// release gives cc's slot back.
func (l *limitListener) release(cc *countedConn) {
	l.mu.Lock()
	l.authenticatedLocked(cc)
	if n := l.sources[cc.src]; n != nil {
		if n.open--; n.open <= 0 {
			delete(l.sources, cc.src)
		}
	}
	l.mu.Unlock()
	l.open.Add(-1)
}

// sourceOf is the client address that per-source limits count: the IP of
// a TCP peer, IPv4-mapped addresses as IPv4 (the zero Addr for a peer that
// is not TCP, which all such peers share).
func sourceOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}

// authenticator is a connection that admission counts as unauthenticated
// until its first request is admitted.
type authenticator interface{ authenticated() }

// markAuthenticated tells Serve's admission that c's client was admitted,
// when c is one of Serve's connections.
func markAuthenticated(c net.Conn) {
	if a, ok := c.(authenticator); ok {
		a.authenticated()
	}
}

// countedConn gives its slot back when closed, hijacked or not, or, once
// it was refused, when its write half is shut: the refused client has its
// answer, and the moment Serve lingers to read what it still sends (so that
// closing does not reset the answer away) is not taken from other clients.
// It keeps what the relays use of the socket (RelayConn).
type countedConn struct {
	RelayConn
	l         *limitListener
	src       netip.Addr
	once      sync.Once
	isRefused atomic.Bool
	// waiting is cc's place among the unauthenticated connections, nil
	// once authenticated; timer closes it at FirstRequestTimeout. Both
	// are l.mu's.
	waiting *list.Element
	timer   *time.Timer
}

// refusedConn is a client connection that was given a refusal and ends
// with it.
type refusedConn interface{ refused() }

func (c *countedConn) refused() { c.isRefused.Store(true) }

func (c *countedConn) authenticated() {
	c.l.mu.Lock()
	c.l.authenticatedLocked(c)
	c.l.mu.Unlock()
}

func (c *countedConn) release() { c.once.Do(func() { c.l.release(c) }) }

// Close closes the connection and gives its slot back.
func (c *countedConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// CloseWrite shuts the write half of a TCP connection, and gives the slot
// of a refused one back.
func (c *countedConn) CloseWrite() error {
	if c.isRefused.Load() {
		c.release()
	}
	return c.RelayConn.CloseWrite()
}
