package libvirtlab

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
)

// GuestImageVolume is the name the guest image has in the lab's pool.
const GuestImageVolume = "debian12-egress-guest.qcow2"

// BuildGuestImage builds the real guest image, or finds it in the cache,
// and returns its directory (disk.qcow2, vmlinuz, initrd.img, cmdline). It
// runs hack/libvirt/build-guest-image.sh of the repository the test runs in,
// and needs the machine's network (apt): Main calls it before entering the
// lab's namespaces.
func BuildGuestImage(ctx context.Context) (string, error) {
	root, err := modroot.Find()
	if err != nil {
		return "", err
	}
	cmd := command(ctx, filepath.Join(root, "hack", "libvirt", "build-guest-image.sh"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building the guest image: %w: %s", err, lastLines(stderr.String(), 30))
	}
	return strings.TrimSpace(string(out)), nil
}

func (l *Lab) importGuestImage() error {
	dir := os.Getenv(guestImageEnv)
	if dir == "" {
		if why := os.Getenv(guestImageErrEnv); why != "" {
			return fmt.Errorf("the guest image could not be built before entering the lab's namespaces: %s", why)
		}
		return errors.New("no guest image: libvirtlab.Main builds it; run the tests through it (or `make libvirt-world`)")
	}
	l.t.Logf("libvirtlab: guest image %s", dir)
	cmdline, err := readFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return err
	}
	// A copy, not a link: a domain's writes (or a full-copy clone) must never
	// reach the cache.
	if err := copyFile(filepath.Join(dir, "disk.qcow2"), filepath.Join(l.PoolPath, GuestImageVolume)); err != nil {
		return fmt.Errorf("importing the guest image: %w", err)
	}
	if _, err := l.Virsh("pool-refresh", l.Pool); err != nil {
		return err
	}
	l.GuestImageDir = dir
	l.BaseImageVolume = GuestImageVolume
	l.Kernel = filepath.Join(dir, "vmlinuz")
	l.Initrd = filepath.Join(dir, "initrd.img")
	l.KernelCmdline = strings.TrimSpace(string(cmdline))
	return nil
}

// Lease is one DHCP lease on the lab network, as libvirt's lease helper
// records it for dnsmasq.
type Lease struct {
	IP       netip.Addr `json:"ip-address"`
	MAC      string     `json:"mac-address"`
	Hostname string     `json:"hostname"`
	ClientID string     `json:"client-id"`
	Expiry   int64      `json:"expiry-time"`
}

// Leases returns the network's current DHCP leases (what `virsh
// net-dhcp-leases` reports) from the status file libvirt keeps for the
// bridge. It runs no program, so tests can poll it cheaply while a guest
// under TCG needs the CPU.
func (l *Lab) Leases() ([]Lease, error) {
	b, err := readFile("/var/lib/libvirt/dnsmasq/" + l.Bridge + ".status")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseLeases(b)
}

func parseLeases(b []byte) ([]Lease, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	var leases []Lease
	if err := json.Unmarshal(b, &leases); err != nil {
		return nil, fmt.Errorf("parsing the lease status file: %w", err)
	}
	return leases, nil
}

// SerialLog returns what the domain wrote to its serial console (the file
// of a <serial type='file'> or the <log file> of a serial or console
// device), then the tail of libvirt's qemu log for it: for failure output.
func (l *Lab) SerialLog(domain string) string {
	var b strings.Builder
	var paths []string
	if x, err := l.Virsh("dumpxml", domain); err == nil {
		paths = serialPaths(x)
	} else {
		fmt.Fprintf(&b, "(dumpxml: %v)\n", err)
	}
	if len(paths) == 0 {
		paths = []string{filepath.Join(l.SerialDir, domain+".log")}
	}
	for _, p := range paths {
		fmt.Fprintf(&b, "--- serial console %s\n%s\n", p, tail(p, 200))
	}
	q := "/var/log/libvirt/qemu/" + domain + ".log"
	fmt.Fprintf(&b, "--- %s\n%s\n", q, tail(q, 30))
	return b.String()
}

// SerialSize is how many bytes the serial console files of domain hold. A
// guest that is still booting keeps writing there, so a wait can follow the
// guest's own pace on a loaded machine rather than a fixed bound.
func (l *Lab) SerialSize(domain string) int64 {
	x, err := l.Virsh("dumpxml", domain)
	if err != nil {
		return 0
	}
	var n int64
	for _, p := range serialPaths(x) {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// serialPaths finds the files a domain's serial and console devices write.
func serialPaths(domainXML string) []string {
	type dev struct {
		Type   string `xml:"type,attr"`
		Source struct {
			Path string `xml:"path,attr"`
		} `xml:"source"`
		Log struct {
			File string `xml:"file,attr"`
		} `xml:"log"`
	}
	var d struct {
		Serials  []dev `xml:"devices>serial"`
		Consoles []dev `xml:"devices>console"`
	}
	if err := xml.Unmarshal([]byte(domainXML), &d); err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, s := range append(d.Serials, d.Consoles...) {
		candidates := []string{s.Log.File}
		if s.Type == "file" {
			candidates = append(candidates, s.Source.Path)
		}
		for _, p := range candidates {
			if p != "" && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

func copyFile(src, dst string) error {
	in, err := os.Open(src) //nolint:gosec // G304: the image cache's own file.
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600) //nolint:gosec // G304: a new file in the lab's pool.
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
