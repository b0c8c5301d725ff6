package libvirt

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	lv "github.com/digitalocean/go-libvirt"
)

// rpcDriver speaks libvirt's RPC protocol (github.com/digitalocean/go-libvirt)
// over an SSH channel to the host's libvirt socket (direct-streamlocal), one
// libvirt connection per host, redialled when it or its SSH connection ends.
type rpcDriver struct {
	block *Block
	ssh   *sshPool
	n     atomic.Uint64

	mu    sync.Mutex
	conns map[string]*rpcConn // by host name
	dials map[string]*sync.Mutex
}

// rpcConn is one libvirt connection over one SSH channel.
type rpcConn struct {
	ssh     *sshConn
	channel net.Conn
	l       *lv.Libvirt
}

func newRPCDriver(b *Block) *rpcDriver {
	return &rpcDriver{block: b, ssh: newSSHPool(b), conns: map[string]*rpcConn{}, dials: map[string]*sync.Mutex{}}
}

func (d *rpcDriver) calls() uint64 { return d.n.Load() }

func (d *rpcDriver) close() {
	d.mu.Lock()
	conns := d.conns
	d.conns = map[string]*rpcConn{}
	d.mu.Unlock()
	for _, c := range conns {
		_ = c.channel.Close()
	}
	d.ssh.close()
}

// channelDialer hands go-libvirt the SSH channel to the socket.
type channelDialer struct {
	dial func() (net.Conn, error)
}

func (c channelDialer) Dial() (net.Conn, error) { return c.dial() }

func (d *rpcDriver) hostLock(name string) *sync.Mutex {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.dials[name]
	if !ok {
		m = &sync.Mutex{}
		d.dials[name] = m
	}
	return m
}

// conn returns a live libvirt connection to the host.
func (d *rpcDriver) conn(ctx context.Context, h Host) (*rpcConn, error) {
	sc, err := d.ssh.client(ctx, h)
	if err != nil {
		return nil, err
	}
	lock := d.hostLock(h.Name)
	lock.Lock()
	defer lock.Unlock()
	d.mu.Lock()
	c, ok := d.conns[h.Name]
	d.mu.Unlock()
	if ok && c.ssh == sc && sc.alive() && c.l.IsConnected() {
		return c, nil
	}
	if ok {
		_ = c.channel.Close()
	}
	channel, err := sc.client.Dial("unix", d.block.Socket())
	if err != nil {
		if !sc.alive() {
			return nil, hostErr(h.Name, ReasonUnreachable, fmt.Errorf("ssh connection lost: %w", err))
		}
		return nil, hostErr(h.Name, ReasonLibvirtUnavailable, fmt.Errorf("opening libvirt socket %s through ssh: %w", d.block.Socket(), err))
	}
	l := lv.NewWithDialer(channelDialer{dial: func() (net.Conn, error) { return channel, nil }})
	done := make(chan error, 1)
	go func() { done <- l.ConnectToURI(lv.ConnectURI(d.block.ConnectURI())) }()
	d.n.Add(1)
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = channel.Close()
		return nil, ctx.Err()
	}
	if err != nil {
		_ = channel.Close()
		return nil, hostErr(h.Name, ReasonLibvirtUnavailable, fmt.Errorf("connecting to libvirt (%s) on %s: %w", d.block.ConnectURI(), d.block.Socket(), err))
	}
	c = &rpcConn{ssh: sc, channel: channel, l: l}
	d.mu.Lock()
	d.conns[h.Name] = c
	d.mu.Unlock()
	return c, nil
}

// call runs one RPC (or a few tied ones) on the host's connection,
// honouring ctx: when ctx ends first, the channel is closed, which ends the
// call and makes the next caller connect again.
func (d *rpcDriver) call(ctx context.Context, h Host, what string, fn func(l *lv.Libvirt) error) error {
	c, err := d.conn(ctx, h)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- fn(c.l) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		d.dropConn(h.Name, c)
		// Closing the channel ends the call at once (go-libvirt fails its
		// pending calls, "procedure interrupted"). Wait for it: fn writes
		// the caller's variables, which the caller reads once this returns
		// (a race a hung libvirtd showed, TestPausedLibvirtdHoldsOnlyItsEntry).
		<-done //nolint:errcheck // the interrupted call's error ("procedure interrupted") says less than ctx's
		return fmt.Errorf("%s on host %s: %w", what, h.Name, ctx.Err())
	}
	if err == nil {
		return nil
	}
	var le lv.Error
	if !errors.As(err, &le) {
		// The transport failed: the connection is not trusted again.
		d.dropConn(h.Name, c)
		return hostErr(h.Name, ReasonLibvirtUnavailable, fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("%s: %w", what, mapLibvirtError(le))
}

func (d *rpcDriver) dropConn(name string, c *rpcConn) {
	d.mu.Lock()
	if cur, ok := d.conns[name]; ok && cur == c {
		delete(d.conns, name)
	}
	d.mu.Unlock()
	_ = c.channel.Close()
}

// mapLibvirtError turns libvirt's "no such object" codes into the errNo*
// errors, keeping libvirt's message.
func mapLibvirtError(le lv.Error) error {
	var sentinel error
	switch lv.ErrorNumber(le.Code) { //nolint:gosec // G115: libvirt error numbers are small.
	case lv.ErrNoDomain:
		sentinel = errNoDomain
	case lv.ErrNoStorageVol:
		sentinel = errNoVolume
	case lv.ErrNoStoragePool:
		sentinel = errNoPool
	case lv.ErrNoNetwork:
		sentinel = errNoNetwork
	case lv.ErrAgentUnresponsive, lv.ErrAgentUnsynced, lv.ErrArgumentUnsupported:
		sentinel = errNoAgent
	default:
		return le
	}
	return fmt.Errorf("%w: %s", sentinel, le.Message)
}

func uuidString(u lv.UUID) string { return hex.EncodeToString(u[:]) }

// lookupDomain resolves a domain by name: calls that take a domain need its
// UUID as well.
func lookupDomain(l *lv.Libvirt, name string) (lv.Domain, error) {
	return l.DomainLookupByName(name)
}

func (d *rpcDriver) listDomains(ctx context.Context, h Host) ([]domainInfo, error) {
	var recs []lv.DomainStatsRecord
	err := d.call(ctx, h, "listing domains", func(l *lv.Libvirt) error {
		var err error
		d.n.Add(1)
		recs, err = l.ConnectGetAllDomainStats(nil, uint32(lv.DomainStatsState), 0)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]domainInfo, 0, len(recs))
	for _, r := range recs {
		di := domainInfo{Name: r.Dom.Name, UUID: uuidString(r.Dom.UUID), ID: int(r.Dom.ID)}
		for _, p := range r.Params {
			if p.Field == "state.state" {
				if v, ok := p.Value.I.(int32); ok {
					di.State = domState(v)
				}
			}
		}
		out = append(out, di)
	}
	return out, nil
}

func (d *rpcDriver) domainXML(ctx context.Context, h Host, name string) (string, error) {
	var doc string
	err := d.call(ctx, h, "reading domain "+name, func(l *lv.Libvirt) error {
		d.n.Add(2)
		dom, err := lookupDomain(l, name)
		if err != nil {
			return err
		}
		doc, err = l.DomainGetXMLDesc(dom, 0)
		return err
	})
	return doc, err
}

func (d *rpcDriver) defineDomain(ctx context.Context, h Host, doc string) error {
	return d.call(ctx, h, "defining a domain", func(l *lv.Libvirt) error {
		d.n.Add(1)
		_, err := l.DomainDefineXML(doc)
		return err
	})
}

func (d *rpcDriver) domainOp(ctx context.Context, h Host, what, name string, op func(l *lv.Libvirt, dom lv.Domain) error) error {
	return d.call(ctx, h, what+" domain "+name, func(l *lv.Libvirt) error {
		d.n.Add(2)
		dom, err := lookupDomain(l, name)
		if err != nil {
			return err
		}
		return op(l, dom)
	})
}

func (d *rpcDriver) startDomain(ctx context.Context, h Host, name string) error {
	return d.domainOp(ctx, h, "starting", name, func(l *lv.Libvirt, dom lv.Domain) error { return l.DomainCreate(dom) })
}

func (d *rpcDriver) shutdownDomain(ctx context.Context, h Host, name string) error {
	return d.domainOp(ctx, h, "shutting down", name, func(l *lv.Libvirt, dom lv.Domain) error {
		// The guest agent first (it needs no ACPI support in the guest),
		// then the ACPI power button.
		return l.DomainShutdownFlags(dom, lv.DomainShutdownGuestAgent|lv.DomainShutdownAcpiPowerBtn)
	})
}

func (d *rpcDriver) destroyDomain(ctx context.Context, h Host, name string) error {
	return d.domainOp(ctx, h, "destroying", name, func(l *lv.Libvirt, dom lv.Domain) error { return l.DomainDestroy(dom) })
}

func (d *rpcDriver) undefineDomain(ctx context.Context, h Host, name string) error {
	flags := lv.DomainUndefineManagedSave | lv.DomainUndefineSnapshotsMetadata | lv.DomainUndefineNvram | lv.DomainUndefineCheckpointsMetadata
	return d.domainOp(ctx, h, "undefining", name, func(l *lv.Libvirt, dom lv.Domain) error { return l.DomainUndefineFlags(dom, flags) })
}

func (d *rpcDriver) volOp(ctx context.Context, h Host, what, pool, name string, op func(l *lv.Libvirt, p lv.StoragePool, v lv.StorageVol) error) error {
	return d.call(ctx, h, what+" volume "+name+" of pool "+pool, func(l *lv.Libvirt) error {
		d.n.Add(2)
		p, err := l.StoragePoolLookupByName(pool)
		if err != nil {
			return err
		}
		v, err := l.StorageVolLookupByName(p, name)
		if err != nil {
			return err
		}
		return op(l, p, v)
	})
}

func (d *rpcDriver) volumeXML(ctx context.Context, h Host, pool, name string) (string, error) {
	var doc string
	err := d.volOp(ctx, h, "reading", pool, name, func(l *lv.Libvirt, _ lv.StoragePool, v lv.StorageVol) error {
		d.n.Add(1)
		var err error
		doc, err = l.StorageVolGetXMLDesc(v, 0)
		return err
	})
	return doc, err
}

func (d *rpcDriver) createVolume(ctx context.Context, h Host, pool, doc string) error {
	return d.call(ctx, h, "creating a volume in pool "+pool, func(l *lv.Libvirt) error {
		d.n.Add(2)
		p, err := l.StoragePoolLookupByName(pool)
		if err != nil {
			return err
		}
		_, err = l.StorageVolCreateXML(p, doc, 0)
		return err
	})
}

func (d *rpcDriver) cloneVolume(ctx context.Context, h Host, pool, doc, from string) error {
	return d.volOp(ctx, h, "copying", pool, from, func(l *lv.Libvirt, p lv.StoragePool, v lv.StorageVol) error {
		d.n.Add(1)
		_, err := l.StorageVolCreateXMLFrom(p, doc, v, 0)
		return err
	})
}

func (d *rpcDriver) uploadVolume(ctx context.Context, h Host, pool, name string, data []byte) error {
	return d.volOp(ctx, h, "uploading to", pool, name, func(l *lv.Libvirt, _ lv.StoragePool, v lv.StorageVol) error {
		d.n.Add(1)
		return l.StorageVolUpload(v, bytes.NewReader(data), 0, uint64(len(data)), 0)
	})
}

func (d *rpcDriver) deleteVolume(ctx context.Context, h Host, pool, name string) error {
	return d.volOp(ctx, h, "deleting", pool, name, func(l *lv.Libvirt, _ lv.StoragePool, v lv.StorageVol) error {
		d.n.Add(1)
		return l.StorageVolDelete(v, lv.StorageVolDeleteNormal)
	})
}

func (d *rpcDriver) listVolumes(ctx context.Context, h Host, pool string) ([]string, error) {
	var out []string
	err := d.call(ctx, h, "listing the volumes of pool "+pool, func(l *lv.Libvirt) error {
		d.n.Add(2)
		p, err := l.StoragePoolLookupByName(pool)
		if err != nil {
			return err
		}
		vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
		for _, v := range vols {
			out = append(out, v.Name)
		}
		return err
	})
	return out, err
}

func (d *rpcDriver) ejectMedia(ctx context.Context, h Host, name, dev string) error {
	doc, err := ejectedCDROMXML(dev)
	if err != nil {
		return err
	}
	return d.domainOp(ctx, h, "ejecting the CD-ROM of", name, func(l *lv.Libvirt, dom lv.Domain) error {
		d.n.Add(1)
		return l.DomainUpdateDeviceFlags(dom, doc, lv.DomainDeviceModifyLive|lv.DomainDeviceModifyConfig|lv.DomainDeviceModifyForce)
	})
}

func (d *rpcDriver) poolXML(ctx context.Context, h Host, pool string) (string, error) {
	var doc string
	err := d.call(ctx, h, "reading pool "+pool, func(l *lv.Libvirt) error {
		d.n.Add(3)
		p, err := l.StoragePoolLookupByName(pool)
		if err != nil {
			return err
		}
		active, err := l.StoragePoolIsActive(p)
		if err != nil {
			return err
		}
		if active == 0 {
			return fmt.Errorf("pool %s: %w", pool, errInactive)
		}
		doc, err = l.StoragePoolGetXMLDesc(p, 0)
		return err
	})
	return doc, err
}

func (d *rpcDriver) networkActive(ctx context.Context, h Host, network string) error {
	return d.call(ctx, h, "reading network "+network, func(l *lv.Libvirt) error {
		d.n.Add(2)
		n, err := l.NetworkLookupByName(network)
		if err != nil {
			return err
		}
		active, err := l.NetworkIsActive(n)
		if err != nil {
			return err
		}
		if active == 0 {
			return fmt.Errorf("network %s: %w", network, errInactive)
		}
		return nil
	})
}

func (d *rpcDriver) leases(ctx context.Context, h Host, network string) ([]lease, error) {
	var out []lease
	err := d.call(ctx, h, "reading the leases of network "+network, func(l *lv.Libvirt) error {
		d.n.Add(2)
		n, err := l.NetworkLookupByName(network)
		if err != nil {
			return err
		}
		ls, _, err := l.NetworkGetDhcpLeases(n, nil, 1, 0)
		if err != nil {
			return err
		}
		for _, x := range ls {
			a, err := netip.ParseAddr(x.Ipaddr)
			if err != nil || len(x.Mac) == 0 {
				continue
			}
			out = append(out, lease{MAC: strings.ToLower(x.Mac[0]), Addr: a})
		}
		return nil
	})
	return out, err
}

func (d *rpcDriver) agentInterfaces(ctx context.Context, h Host, name string) ([]guestInterface, error) {
	var out []guestInterface
	err := d.domainOp(ctx, h, "asking the guest agent of", name, func(l *lv.Libvirt, dom lv.Domain) error {
		ifaces, err := l.DomainInterfaceAddresses(dom, uint32(lv.DomainInterfaceAddressesSrcAgent), 0)
		if err != nil {
			return err
		}
		for _, i := range ifaces {
			gi := guestInterface{Name: i.Name}
			if len(i.Hwaddr) > 0 {
				gi.MAC = strings.ToLower(i.Hwaddr[0])
			}
			for _, a := range i.Addrs {
				if ip, err := netip.ParseAddr(a.Addr); err == nil {
					gi.Addrs = append(gi.Addrs, ip)
				}
			}
			out = append(out, gi)
		}
		return nil
	})
	return out, err
}

func (d *rpcDriver) ping(ctx context.Context, h Host) error {
	return d.call(ctx, h, "reading the libvirt version", func(l *lv.Libvirt) error {
		d.n.Add(1)
		_, err := l.ConnectGetLibVersion()
		return err
	})
}
