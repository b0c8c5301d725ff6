package libvirt

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/crypto/ssh"
)

// shellDriver drives a host by running virsh over SSH, for hosts where only
// a shell is allowed. Every argument is quoted for the remote POSIX shell
// with quote, and documents (domain and volume XML, seed images) travel on
// standard input, never on the command line.
type shellDriver struct {
	block *Block
	ssh   *sshPool
	n     atomic.Uint64
}

func newShellDriver(b *Block) *shellDriver {
	return &shellDriver{block: b, ssh: newSSHPool(b)}
}

func (d *shellDriver) calls() uint64 { return d.n.Load() }

func (d *shellDriver) close() { d.ssh.close() }

// quote quotes s for a POSIX shell: inside single quotes nothing is special
// except the single quote itself, which is closed, escaped and reopened.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// command joins quoted arguments into a command line.
func command(args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = quote(a)
	}
	return strings.Join(q, " ")
}

// virsh is a virsh command line on the entry's URI, in the C locale so that
// its messages and tables parse.
func (d *shellDriver) virsh(args ...string) string {
	return "LC_ALL=C " + command(append([]string{"virsh", "-q", "-c", d.block.ConnectURI()}, args...)...)
}

// run runs one command line on the host with stdin and returns its standard
// output. A non-zero exit maps virsh's messages to the errNo* errors.
func (d *shellDriver) run(ctx context.Context, h Host, cmdline string, stdin []byte) ([]byte, error) {
	c, err := d.ssh.client(ctx, h)
	if err != nil {
		return nil, err
	}
	d.n.Add(1)
	s, err := c.client.NewSession()
	if err != nil {
		d.ssh.drop(h.Name, c)
		return nil, hostErr(h.Name, ReasonUnreachable, fmt.Errorf("opening an ssh session: %w", err))
	}
	defer func() { _ = s.Close() }()
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	if stdin != nil {
		s.Stdin = bytes.NewReader(stdin)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(cmdline) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = s.Signal(ssh.SIGKILL)
		_ = s.Close()
		return nil, ctx.Err()
	}
	if err == nil {
		return stdout.Bytes(), nil
	}
	var ee *ssh.ExitError
	if !errors.As(err, &ee) {
		if !c.alive() {
			return nil, hostErr(h.Name, ReasonUnreachable, fmt.Errorf("ssh connection lost: %w", err))
		}
		return nil, hostErr(h.Name, ReasonLibvirtUnavailable, fmt.Errorf("running virsh: %w", err))
	}
	return nil, mapVirshError(h.Name, ee.ExitStatus(), strings.TrimSpace(stderr.String()))
}

// mapVirshError classifies virsh's message.
func mapVirshError(host string, status int, msg string) error {
	if msg == "" {
		msg = "exit status " + strconv.Itoa(status)
	}
	msg = strings.ReplaceAll(msg, "\n", "; ")
	base := errors.New(msg)
	switch {
	case status == 127 || containsFold(msg, "virsh: not found") || containsFold(msg, "command not found"):
		return hostErr(host, ReasonLibvirtUnavailable, fmt.Errorf("virsh is not installed: %w", base))
	case containsFold(msg, "failed to connect to the hypervisor"):
		return hostErr(host, ReasonLibvirtUnavailable, base)
	case containsFold(msg, "failed to get domain"), containsFold(msg, "domain not found"):
		return fmt.Errorf("%w: %s", errNoDomain, msg)
	case containsFold(msg, "failed to get vol"), containsFold(msg, "storage volume not found"):
		return fmt.Errorf("%w: %s", errNoVolume, msg)
	case containsFold(msg, "failed to get pool"), containsFold(msg, "storage pool not found"):
		return fmt.Errorf("%w: %s", errNoPool, msg)
	case containsFold(msg, "failed to get network"), containsFold(msg, "network not found"):
		return fmt.Errorf("%w: %s", errNoNetwork, msg)
	case containsFold(msg, "guest agent is not"), containsFold(msg, "agent is not connected"), containsFold(msg, "agent not"):
		return fmt.Errorf("%w: %s", errNoAgent, msg)
	}
	return base
}

// listDomains runs one command: the names with UUIDs, the states, and the
// ids of the running ones.
func (d *shellDriver) listDomains(ctx context.Context, h Host) ([]domainInfo, error) {
	script := d.virsh("list", "--all", "--uuid", "--name") + " && echo @@ && " +
		d.virsh("domstats", "--state", "--raw") + " && echo @@ && " +
		d.virsh("list", "--id", "--name")
	out, err := d.run(ctx, h, script, nil)
	if err != nil {
		return nil, fmt.Errorf("listing domains: %w", err)
	}
	return parseShellListing(string(out))
}

// parseShellListing reads the three sections of listDomains.
func parseShellListing(out string) ([]domainInfo, error) {
	parts := strings.Split(out, "@@\n")
	if len(parts) != 3 {
		return nil, errors.New("unexpected output of virsh list")
	}
	var list []domainInfo
	idx := map[string]int{}
	for line := range strings.SplitSeq(parts[0], "\n") {
		uuid, name, ok := strings.Cut(strings.TrimRight(line, "\r"), " ")
		if !ok || uuid == "" {
			continue
		}
		idx[name] = len(list)
		list = append(list, domainInfo{Name: name, UUID: strings.ReplaceAll(uuid, "-", ""), ID: -1})
	}
	cur := -1
	for line := range strings.SplitSeq(parts[1], "\n") {
		if n, ok := strings.CutPrefix(line, "Domain: '"); ok {
			i, found := idx[strings.TrimSuffix(n, "'")]
			cur = -1
			if found {
				cur = i
			}
			continue
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "state.state="); ok && cur >= 0 {
			n, err := strconv.Atoi(v)
			if err == nil {
				list[cur].State = domState(n)
			}
		}
	}
	for line := range strings.SplitSeq(parts[2], "\n") {
		id, name, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if i, found := idx[strings.TrimSpace(name)]; found {
			if n, err := strconv.Atoi(id); err == nil {
				list[i].ID = n
			}
		}
	}
	return list, nil
}

func (d *shellDriver) domainXML(ctx context.Context, h Host, name string) (string, error) {
	out, err := d.run(ctx, h, d.virsh("dumpxml", "--domain", name), nil)
	if err != nil {
		return "", fmt.Errorf("reading domain %s: %w", name, err)
	}
	return string(out), nil
}

func (d *shellDriver) defineDomain(ctx context.Context, h Host, doc string) error {
	if _, err := d.run(ctx, h, d.virsh("define", "--file", "/dev/stdin"), []byte(doc)); err != nil {
		return fmt.Errorf("defining a domain: %w", err)
	}
	return nil
}

func (d *shellDriver) domainCmd(ctx context.Context, h Host, what, name string, args ...string) error {
	if _, err := d.run(ctx, h, d.virsh(args...), nil); err != nil {
		return fmt.Errorf("%s domain %s: %w", what, name, err)
	}
	return nil
}

func (d *shellDriver) startDomain(ctx context.Context, h Host, name string) error {
	return d.domainCmd(ctx, h, "starting", name, "start", "--domain", name)
}

func (d *shellDriver) shutdownDomain(ctx context.Context, h Host, name string) error {
	return d.domainCmd(ctx, h, "shutting down", name, "shutdown", "--domain", name, "--mode", "agent,acpi")
}

func (d *shellDriver) destroyDomain(ctx context.Context, h Host, name string) error {
	return d.domainCmd(ctx, h, "destroying", name, "destroy", "--domain", name)
}

func (d *shellDriver) undefineDomain(ctx context.Context, h Host, name string) error {
	return d.domainCmd(ctx, h, "undefining", name, "undefine", "--domain", name,
		"--managed-save", "--snapshots-metadata", "--checkpoints-metadata", "--nvram")
}

func (d *shellDriver) volumeXML(ctx context.Context, h Host, pool, name string) (string, error) {
	out, err := d.run(ctx, h, d.virsh("vol-dumpxml", "--pool", pool, "--vol", name), nil)
	if err != nil {
		return "", fmt.Errorf("reading volume %s of pool %s: %w", name, pool, err)
	}
	return string(out), nil
}

func (d *shellDriver) createVolume(ctx context.Context, h Host, pool, doc string) error {
	if _, err := d.run(ctx, h, d.virsh("vol-create", "--pool", pool, "--file", "/dev/stdin"), []byte(doc)); err != nil {
		return fmt.Errorf("creating a volume in pool %s: %w", pool, err)
	}
	return nil
}

func (d *shellDriver) cloneVolume(ctx context.Context, h Host, pool, doc, from string) error {
	if _, err := d.run(ctx, h, d.virsh("vol-create-from", "--pool", pool, "--file", "/dev/stdin", "--vol", from, "--inputpool", pool), []byte(doc)); err != nil {
		return fmt.Errorf("copying volume %s in pool %s: %w", from, pool, err)
	}
	return nil
}

func (d *shellDriver) uploadVolume(ctx context.Context, h Host, pool, name string, data []byte) error {
	if _, err := d.run(ctx, h, d.virsh("vol-upload", "--pool", pool, "--vol", name, "--file", "/dev/stdin"), data); err != nil {
		return fmt.Errorf("uploading volume %s of pool %s: %w", name, pool, err)
	}
	return nil
}

func (d *shellDriver) deleteVolume(ctx context.Context, h Host, pool, name string) error {
	if _, err := d.run(ctx, h, d.virsh("vol-delete", "--pool", pool, "--vol", name), nil); err != nil {
		return fmt.Errorf("deleting volume %s of pool %s: %w", name, pool, err)
	}
	return nil
}

func (d *shellDriver) listVolumes(ctx context.Context, h Host, pool string) ([]string, error) {
	out, err := d.run(ctx, h, d.virsh("vol-list", "--pool", pool), nil)
	if err != nil {
		return nil, fmt.Errorf("listing the volumes of pool %s: %w", pool, err)
	}
	return parseVolList(string(out)), nil
}

// parseVolList reads the names of virsh vol-list (name and path per line,
// no header with -q). A name holding a space reads as its first word: such
// a name is never one of the operator's.
func parseVolList(out string) []string {
	var names []string
	for line := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "---") {
			names = append(names, f[0])
		}
	}
	return names
}

func (d *shellDriver) ejectMedia(ctx context.Context, h Host, name, dev string) error {
	return d.domainCmd(ctx, h, "ejecting the CD-ROM of", name, "change-media", "--domain", name, "--path", dev, "--eject", "--live", "--config", "--force")
}

func (d *shellDriver) poolXML(ctx context.Context, h Host, pool string) (string, error) {
	out, err := d.run(ctx, h, d.virsh("pool-info", "--pool", pool)+" && echo @@ && "+d.virsh("pool-dumpxml", "--pool", pool), nil)
	if err != nil {
		return "", fmt.Errorf("reading pool %s: %w", pool, err)
	}
	info, doc, ok := strings.Cut(string(out), "@@\n")
	if !ok {
		return "", errors.New("unexpected output of virsh pool-info")
	}
	if infoField(info, "State") != "running" {
		return "", fmt.Errorf("pool %s: %w", pool, errInactive)
	}
	return doc, nil
}

func (d *shellDriver) networkActive(ctx context.Context, h Host, network string) error {
	out, err := d.run(ctx, h, d.virsh("net-info", "--network", network), nil)
	if err != nil {
		return fmt.Errorf("reading network %s: %w", network, err)
	}
	if infoField(string(out), "Active") != "yes" {
		return fmt.Errorf("network %s: %w", network, errInactive)
	}
	return nil
}

// infoField reads "Key: value" from virsh's info output.
func infoField(out, key string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func (d *shellDriver) leases(ctx context.Context, h Host, network string) ([]lease, error) {
	out, err := d.run(ctx, h, d.virsh("net-dhcp-leases", "--network", network), nil)
	if err != nil {
		return nil, fmt.Errorf("reading the leases of network %s: %w", network, err)
	}
	return parseLeases(string(out)), nil
}

// parseLeases reads virsh net-dhcp-leases: expiry date and time, MAC,
// protocol, address/prefix, hostname, client id.
func parseLeases(out string) []lease {
	var ls []lease
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || !strings.Contains(f[2], ":") {
			continue
		}
		ip, _, _ := strings.Cut(f[4], "/")
		a, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		ls = append(ls, lease{MAC: strings.ToLower(f[2]), Addr: a})
	}
	return ls
}

func (d *shellDriver) agentInterfaces(ctx context.Context, h Host, name string) ([]guestInterface, error) {
	out, err := d.run(ctx, h, d.virsh("domifaddr", "--domain", name, "--source", "agent", "--full"), nil)
	if err != nil {
		return nil, fmt.Errorf("asking the guest agent of domain %s: %w", name, err)
	}
	return parseDomifaddr(string(out)), nil
}

// parseDomifaddr reads virsh domifaddr --full: name, MAC, protocol,
// address/prefix per line.
func parseDomifaddr(out string) []guestInterface {
	var ifaces []guestInterface
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || strings.HasPrefix(f[0], "-") && len(f[0]) > 1 {
			continue
		}
		ip, _, _ := strings.Cut(f[3], "/")
		a, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		if len(ifaces) == 0 || ifaces[len(ifaces)-1].Name != f[0] {
			ifaces = append(ifaces, guestInterface{Name: f[0], MAC: strings.ToLower(f[1])})
		}
		last := &ifaces[len(ifaces)-1]
		last.Addrs = append(last.Addrs, a)
	}
	return ifaces
}

func (d *shellDriver) ping(ctx context.Context, h Host) error {
	if _, err := d.run(ctx, h, d.virsh("version"), nil); err != nil {
		return fmt.Errorf("reading the libvirt version: %w", err)
	}
	return nil
}
