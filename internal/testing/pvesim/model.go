package pvesim

import (
	"crypto/sha1" //nolint:gosec // G505: the config digest is a SHA-1 on Proxmox too; not used for security.
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Guest status values of status/current and /cluster/resources (F8, F14).
const (
	statusRunning = "running"
	statusStopped = "stopped"
	statusUnknown = "unknown"
	qmpPaused     = "paused"
	qmpPrelaunch  = "prelaunch"
)

// lockClone and lockSuspended are the lock names the simulator sets (F7, F24).
const (
	lockClone     = "clone"
	lockSuspended = "suspended"
)

// node is a cluster node.
type node struct {
	name   string
	cpus   int
	memory int64
	// sem bounds concurrent requests (pveproxy workers).
	sem chan struct{}
}

// vm is a QEMU guest. It is kept small: thousands of them must fit in a
// modest amount of memory.
type vm struct {
	vmid int
	node string
	// status is running or stopped; qmp is running, paused, prelaunch or stopped.
	status, qmp string
	// conf is the VM config (name, tags, disks, lock, ...).
	conf map[string]string
	// cloning is true until the clone task ends (F8: nameless listing).
	cloning bool
	// started is when the VM left prelaunch; agentAt when the agent answers
	// (zero: not yet scheduled).
	started, agentAt time.Time
	// agentNever is a fault: the agent never answers.
	agentNever bool
	// waiters run when the lock is released (F3: start queued behind clone).
	waiters []func()
}

func (v *vm) lock() string    { return v.conf["lock"] }
func (v *vm) name() string    { return v.conf["name"] }
func (v *vm) template() bool  { b, _ := parseBool(v.conf["template"]); return b }
func (v *vm) agentOn() bool   { return agentEnabled(v.conf["agent"]) }
func (v *vm) isRunning() bool { return v.status == statusRunning }

// setLock sets or clears the lock; clearing it runs the queued waiters.
func (v *vm) setLock(l string) {
	if l == "" {
		delete(v.conf, "lock")
		w := v.waiters
		v.waiters = nil
		for _, f := range w {
			f()
		}
		return
	}
	v.conf["lock"] = l
}

// agentEnabled reads the agent option ("1", "enabled=1,fstrim_cloned_disks=1").
func agentEnabled(opt string) bool {
	if opt == "" {
		return false
	}
	for _, part := range strings.Split(opt, ",") {
		k, val, ok := strings.Cut(part, "=")
		if !ok {
			b, _ := parseBool(k)
			return b
		}
		if k == "enabled" {
			b, _ := parseBool(val)
			return b
		}
	}
	return false
}

// digest is the config digest (SHA-1 over the sorted config lines).
func (v *vm) digest() string {
	keys := make([]string, 0, len(v.conf))
	for k := range v.conf {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha1.New() //nolint:gosec // G401: same digest algorithm as Proxmox; not a security use.
	for _, k := range keys {
		_, _ = fmt.Fprintf(h, "%s: %s\n", k, v.conf[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// diskKeys are the config keys that hold volumes.
var diskPrefixes = []string{"scsi", "virtio", "sata", "ide", "efidisk", "tpmstate", "unused"}

// isDiskKey reports whether a config key is a disk slot.
func isDiskKey(k string) bool {
	m := reIndexed.FindStringSubmatch(k)
	return len(m) == 3 && slices.Contains(diskPrefixes, m[1])
}

// isCDROM reports whether a drive option is a CD-ROM.
func isCDROM(opt string) bool {
	return strings.Contains(opt, "media=cdrom") || opt == "none" || opt == "cdrom"
}

// driveVolume returns the volume ID of a drive option ("local-lvm:vm-100-disk-0,size=3G").
func driveVolume(opt string) string {
	v, _, _ := strings.Cut(opt, ",")
	if v == "none" || v == "cdrom" || !strings.Contains(v, ":") {
		return ""
	}
	return v
}

// driveOption returns the value of key in a drive option string.
func driveOption(opt, key string) string {
	for _, part := range strings.Split(opt, ",")[1:] {
		if k, v, ok := strings.Cut(part, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// setDriveOption replaces or appends key=value in a drive option string.
func setDriveOption(opt, key, value string) string {
	parts := strings.Split(opt, ",")
	for i, part := range parts[1:] {
		if k, _, ok := strings.Cut(part, "="); ok && k == key {
			parts[i+1] = key + "=" + value
			return strings.Join(parts, ",")
		}
	}
	return opt + "," + key + "=" + value
}

// parseSize reads a Proxmox size (3G, 512M, 1.5T, bytes without unit).
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty size")
	}
	mult := float64(1)
	switch s[len(s)-1] {
	case 'K':
		mult = 1 << 10
	case 'M':
		mult = 1 << 20
	case 'G':
		mult = 1 << 30
	case 'T':
		mult = 1 << 40
	}
	num := s
	if mult != 1 {
		num = s[:len(s)-1]
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	return int64(f * mult), nil
}

// formatSize writes bytes in the largest exact unit, as Proxmox does.
func formatSize(b int64) string {
	units := []struct {
		suffix string
		size   int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}}
	for _, u := range units {
		if b >= u.size && b%u.size == 0 {
			return strconv.FormatInt(b/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(b, 10)
}

// macFor derives a stable MAC address (Proxmox's BC:24:11 prefix) from a VMID.
func macFor(vmid, index int) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(vmid)*16+uint32(index)) //nolint:gosec // G115: VMIDs fit in 32 bits (max 999999999).
	return fmt.Sprintf("BC:24:11:%02X:%02X:%02X", b[1], b[2], b[3])
}

// GuestAddress is the loopback address a VM's guest reports through the
// agent and, once guests serve, listens on: 127.16.0.0/12 plus the VMID.
func GuestAddress(vmid int) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(vmid)&0x0fffff|0x100000) //nolint:gosec // G115: VMIDs fit in 32 bits.
	b[0] = 127
	return netip.AddrFrom4(b)
}

// guestAddress is the address VM vmid's guest reports and serves on:
// GuestAddress, or, with Config.GuestNetwork, the prefix's first address
// plus vmid modulo the prefix's size.
func (s *Sim) guestAddress(vmid int) netip.Addr {
	if !s.guestNet.IsValid() {
		return GuestAddress(vmid)
	}
	base := s.guestNet.Addr().As4()
	size := uint32(1) << (32 - s.guestNet.Bits())
	n := binary.BigEndian.Uint32(base[:]) + uint32(vmid)%size //nolint:gosec // G115: VMIDs fit in 32 bits.
	binary.BigEndian.PutUint32(base[:], n)
	return netip.AddrFrom4(base)
}

// storage is a storage definition with its volumes (one set when shared,
// one set per node otherwise).
type storage struct {
	cfg StorageConfig
	// volumes maps node ("" when shared) to volid to volume.
	volumes map[string]map[string]*volume
}

// volume is a stored image, ISO or state file.
type volume struct {
	volid   string
	content string
	format  string
	size    int64
	vmid    int
	ctime   int64
	// path is the uploaded file on disk (ISOs), removed when deleted.
	path string
}

// availableOn reports whether the storage exists on a node.
func (st *storage) availableOn(node string) bool {
	return len(st.cfg.Nodes) == 0 || slices.Contains(st.cfg.Nodes, node)
}

// supports reports whether the storage holds a content type.
func (st *storage) supports(content string) bool {
	return slices.Contains(st.cfg.Content, content)
}

// vols returns the volume set seen from a node.
func (st *storage) vols(node string) map[string]*volume {
	key := node
	if st.cfg.Shared {
		key = ""
	}
	m := st.volumes[key]
	if m == nil {
		m = map[string]*volume{}
		st.volumes[key] = m
	}
	return m
}
