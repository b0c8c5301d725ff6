package libvirt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// sshPool keeps one SSH connection per host. A connection is checked with
// keepalives; one that misses an answer is closed, and the next caller
// dials again, so a dead connection is never reused.
type sshPool struct {
	block *Block

	mu    sync.Mutex
	conns map[string]*sshConn    // by host name
	dials map[string]*sync.Mutex // by host name: one dial at a time
}

// sshConn is one live connection and the signal of its end.
type sshConn struct {
	client *ssh.Client
	dead   chan struct{} // closed when the connection ends
}

func (c *sshConn) alive() bool {
	select {
	case <-c.dead:
		return false
	default:
		return true
	}
}

func newSSHPool(b *Block) *sshPool {
	return &sshPool{block: b, conns: map[string]*sshConn{}, dials: map[string]*sync.Mutex{}}
}

// client returns a live connection to the host, dialling when there is none.
// Dials to one host are serialised, so a burst of callers makes one dial.
func (p *sshPool) client(ctx context.Context, h Host) (*sshConn, error) {
	p.mu.Lock()
	c, ok := p.conns[h.Name]
	if ok && c.alive() {
		p.mu.Unlock()
		return c, nil
	}
	delete(p.conns, h.Name)
	p.mu.Unlock()

	// One dial per host at a time: waiters take the fresh connection.
	unlock := p.lockHost(h.Name)
	defer unlock()
	p.mu.Lock()
	if c, ok := p.conns[h.Name]; ok && c.alive() {
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := p.dial(ctx, h)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.conns[h.Name] = c
	p.mu.Unlock()
	return c, nil
}

func (p *sshPool) lockHost(name string) func() {
	p.mu.Lock()
	mu, ok := p.dials[name]
	if !ok {
		mu = &sync.Mutex{}
		p.dials[name] = mu
	}
	p.mu.Unlock()
	mu.Lock()
	return mu.Unlock
}

// drop closes the host's connection if it is still c, so that the next
// caller dials again.
func (p *sshPool) drop(name string, c *sshConn) {
	p.mu.Lock()
	if cur, ok := p.conns[name]; ok && cur == c {
		delete(p.conns, name)
	}
	p.mu.Unlock()
	_ = c.client.Close()
}

// close closes every connection; their keepalive goroutines end with them.
func (p *sshPool) close() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[string]*sshConn{}
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.client.Close()
	}
}

// signer reads the private key at every dial, so that a rotated Secret
// needs no restart.
func (p *sshPool) signer() (ssh.Signer, error) {
	data, err := os.ReadFile(p.block.PrivateKeyFile)
	if err != nil {
		return nil, fmt.Errorf("reading the private key file: %w", err)
	}
	s, err := ssh.ParsePrivateKey(data)
	if err != nil {
		// The parser's message names no key material.
		return nil, fmt.Errorf("parsing the private key file %s: %w", p.block.PrivateKeyFile, err)
	}
	return s, nil
}

func (p *sshPool) hostKeyCallback() (ssh.HostKeyCallback, error) {
	if p.block.InsecureIgnoreHostKey {
		return ssh.InsecureIgnoreHostKey(), nil //nolint:gosec // G106: explicit, loudly logged opt-in of the entry.
	}
	cb, err := knownhosts.New(p.block.KnownHostsFile)
	if err != nil {
		return nil, fmt.Errorf("reading the known_hosts file: %w", err)
	}
	return cb, nil
}

// dial opens an SSH connection and starts its keepalive.
func (p *sshPool) dial(ctx context.Context, h Host) (*sshConn, error) {
	signer, err := p.signer()
	if err != nil {
		return nil, hostErr(h.Name, ReasonAuthenticationFailed, err)
	}
	hkcb, err := p.hostKeyCallback()
	if err != nil {
		return nil, hostErr(h.Name, ReasonHostKeyMismatch, err)
	}
	timeout := p.block.DialTimeout()
	cfg := &ssh.ClientConfig{
		User:            h.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: hkcb,
		Timeout:         timeout,
	}
	addr := h.SSHAddr()
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, hostErr(h.Name, ReasonUnreachable, fmt.Errorf("connecting to %s: %w", addr, err))
	}
	// The handshake honours the context through the deadline.
	deadline, _ := dctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(dctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	cc, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	stop()
	if err != nil {
		_ = conn.Close()
		return nil, hostErr(h.Name, handshakeReason(err), fmt.Errorf("ssh handshake with %s: %w", addr, err))
	}
	_ = conn.SetDeadline(time.Time{})
	c := &sshConn{client: ssh.NewClient(cc, chans, reqs), dead: make(chan struct{})}
	go func() {
		_ = c.client.Wait()
		close(c.dead)
	}()
	go p.keepalive(c)
	return c, nil
}

// handshakeReason tells a host key problem from an authentication failure
// from a network failure.
func handshakeReason(err error) string {
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	switch {
	case errors.As(err, &ke), errors.As(err, &re):
		return ReasonHostKeyMismatch
	case strings.Contains(err.Error(), "unable to authenticate"):
		return ReasonAuthenticationFailed
	}
	return ReasonUnreachable
}

// keepalive sends a keepalive request every interval and closes the
// connection when one is not answered within the interval. It ends when
// the connection ends.
func (p *sshPool) keepalive(c *sshConn) {
	every := p.block.KeepaliveInterval()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.dead:
			return
		case <-t.C:
		}
		answered := make(chan error, 1)
		go func() {
			_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
			answered <- err
		}()
		timer := time.NewTimer(every)
		select {
		case err := <-answered:
			timer.Stop()
			if err != nil {
				_ = c.client.Close()
				return
			}
		case <-timer.C:
			_ = c.client.Close()
			return
		case <-c.dead:
			timer.Stop()
			return
		}
	}
}
