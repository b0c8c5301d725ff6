package pvesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Config describes the simulated cluster. It is usually read from YAML with
// LoadConfig; zero values are replaced by defaults in New.
type Config struct {
	// Version is the pve-manager version reported by GET /version.
	Version string `json:"version,omitempty"`
	// Nodes are the cluster nodes, in order. The first one is the entry node.
	Nodes []NodeConfig `json:"nodes"`
	// Storages are the storage definitions of the cluster.
	Storages []StorageConfig `json:"storages"`
	// Templates are VMs (usually templates) present at start.
	Templates []TemplateConfig `json:"templates,omitempty"`
	// Containers are LXC containers listed by /cluster/resources; they occupy
	// their VMIDs but have no QEMU configuration.
	Containers []ContainerConfig `json:"containers,omitempty"`
	// Tokens are the API tokens the simulator accepts.
	Tokens []TokenConfig `json:"tokens"`
	// Speed divides every duration (tasks, boot delay): 100 makes the
	// simulator 100 times faster than a real host. Zero means 1.
	Speed float64 `json:"speed,omitempty"`
	// Timings are the durations before Speed is applied; zero fields take
	// the F26 defaults (DefaultTimings).
	Timings Timings `json:"timings,omitempty"`
	// MaxConcurrentPerNode bounds the requests served at once per node, like
	// pveproxy's few workers; requests beyond it wait. Zero means 3.
	MaxConcurrentPerNode int `json:"maxConcurrentPerNode,omitempty"`
	// GuestNetwork, when set, is an IPv4 prefix the guests take their
	// addresses from instead of loopback (GuestAddress): the prefix's first
	// address plus the VMID modulo its size. A test that runs the simulator
	// in a network namespace of its own puts the prefix on that namespace's
	// loopback and routes it, so that other namespaces (a cluster's pods)
	// reach the guests. Keep the provider's vmidRange no wider than the
	// prefix, or two VMs share an address.
	GuestNetwork string `json:"guestNetwork,omitempty"`
}

// NodeConfig is one cluster node.
type NodeConfig struct {
	// Name is the node name (pve-node format).
	Name string `json:"name"`
	// CPUs is the number of CPUs reported (default 8).
	CPUs int `json:"cpus,omitempty"`
	// MemoryGiB is the memory reported (default 64).
	MemoryGiB int `json:"memoryGiB,omitempty"`
}

// StorageConfig is one storage definition.
type StorageConfig struct {
	// ID is the storage ID (pve-storage-id format).
	ID string `json:"id"`
	// Type is the storage type reported (dir, lvmthin, nfs, ...; default dir).
	Type string `json:"type,omitempty"`
	// Content lists the content types: images, iso, vztmpl, rootdir, backup,
	// snippets, import. Only storages with "images" can hold VM disks (F15).
	Content []string `json:"content"`
	// Shared storages have one volume set seen by every node; others have
	// one volume set per node.
	Shared bool `json:"shared,omitempty"`
	// Nodes restricts the storage to these nodes (empty: all nodes).
	Nodes []string `json:"nodes,omitempty"`
	// SizeGiB is the total size reported (default 100).
	SizeGiB int `json:"sizeGiB,omitempty"`
}

// DiskConfig is one disk of a template.
type DiskConfig struct {
	// Slot is the config key: scsi0, virtio0, sata0, ...
	Slot string `json:"slot"`
	// Storage is the storage ID holding the disk.
	Storage string `json:"storage"`
	// Size is the disk size in Proxmox notation (3G, 512M).
	Size string `json:"size"`
}

// TemplateConfig is a VM present at start, usually a template.
type TemplateConfig struct {
	// VMID is the VM's ID.
	VMID int `json:"vmid"`
	// Node is the node the VM lives on.
	Node string `json:"node"`
	// Name is the VM name.
	Name string `json:"name"`
	// Template marks the VM as a template (default true).
	Template *bool `json:"template,omitempty"`
	// Disks are the VM's disks.
	Disks []DiskConfig `json:"disks,omitempty"`
	// Boot is the boot option (default "order=" + the first disk's slot).
	Boot string `json:"boot,omitempty"`
	// Net0 is the net0 option, e.g. "virtio=BC:24:11:00:00:01,bridge=vmbr0".
	Net0 string `json:"net0,omitempty"`
	// Agent is the agent option (e.g. "1"); empty leaves the agent off.
	Agent string `json:"agent,omitempty"`
	// CloudInitStorage, when set, gives the template a Proxmox cloud-init
	// drive on ide2 (F19: such a template is unsuitable for the provider).
	CloudInitStorage string `json:"cloudInitStorage,omitempty"`
	// Cores and MemoryMiB size the VM (defaults 1 and 1024).
	Cores     int `json:"cores,omitempty"`
	MemoryMiB int `json:"memoryMiB,omitempty"`
	// Tags is the tags option (e.g. "debian;template").
	Tags string `json:"tags,omitempty"`
	// Extra holds further config keys copied verbatim (ostype, bios, ...).
	Extra map[string]string `json:"extra,omitempty"`
}

// ContainerConfig is an LXC container listed in /cluster/resources.
type ContainerConfig struct {
	// VMID is the container's ID.
	VMID int `json:"vmid"`
	// Node is the node the container lives on.
	Node string `json:"node"`
	// Name is the container's host name.
	Name string `json:"name"`
}

// TokenConfig is an API token and its ACL.
type TokenConfig struct {
	// ID is "<user>@<realm>!<tokenid>".
	ID string `json:"id"`
	// Secret is the token secret: a lowercase UUID, as a real host
	// generates it; ParseConfig refuses another shape, and a request whose
	// secret has another shape is refused with 401 (F22).
	Secret string `json:"secret"`
	// ACL grants privileges on paths. As on Proxmox, the most specific path
	// that covers a checked path replaces the ones above it.
	ACL []ACLEntry `json:"acl"`
}

// ACLEntry grants privileges on a path and everything below it.
type ACLEntry struct {
	// Path is an ACL path: /, /vms/100, /storage/local, /nodes/pve1, ...
	Path string `json:"path"`
	// Privileges are privilege names (VM.Allocate, ...); "*" grants all.
	Privileges []string `json:"privileges"`
}

// Duration is a time.Duration that reads from YAML/JSON as a Go duration
// string ("3s", "500ms") or a number of seconds.
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("parse duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("duration must be a string or a number of seconds: %w", err)
	}
	*d = Duration(f * float64(time.Second))
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(time.Duration(d).String())
	if err != nil {
		return nil, fmt.Errorf("marshal duration: %w", err)
	}
	return b, nil
}

// Timings are the real-host durations of operations, before Speed applies.
type Timings struct {
	// Clone is the clone task duration (F26: 2 to 4 s).
	Clone Duration `json:"clone,omitempty"`
	// CloneLockLinger is how long the clone lock stays after the clone task
	// ended (create step 7, docs/proxmox-behaviour.md).
	CloneLockLinger Duration `json:"cloneLockLinger,omitempty"`
	// Upload is the imgcopy task duration (F26: about 4 s).
	Upload Duration `json:"upload,omitempty"`
	// ConfigWrite is the qmconfig task duration of POST config (F26: under 1 s).
	ConfigWrite Duration `json:"configWrite,omitempty"`
	// Start is the start task duration (F26: about 5 s), spent in prelaunch.
	Start Duration `json:"start,omitempty"`
	// Stop is the stop task duration.
	Stop Duration `json:"stop,omitempty"`
	// Shutdown is the shutdown task duration.
	Shutdown Duration `json:"shutdown,omitempty"`
	// Suspend is the suspend task duration (to RAM; to disk takes 3 times it).
	Suspend Duration `json:"suspend,omitempty"`
	// Resume is the resume task duration.
	Resume Duration `json:"resume,omitempty"`
	// Resize is the resize task duration.
	Resize Duration `json:"resize,omitempty"`
	// Destroy is the destroy task duration (F26: under a second).
	Destroy Duration `json:"destroy,omitempty"`
	// VolumeDelete is the imgdel task duration.
	VolumeDelete Duration `json:"volumeDelete,omitempty"`
	// AgentBoot is the delay from the end of the start task to the first
	// agent answer with an address (F21, F26: 47 to 50 s).
	AgentBoot Duration `json:"agentBoot,omitempty"`
}

// DefaultTimings returns the real-host timings of F26.
func DefaultTimings() Timings {
	return Timings{
		Clone:           Duration(3 * time.Second),
		CloneLockLinger: Duration(500 * time.Millisecond),
		Upload:          Duration(4 * time.Second),
		ConfigWrite:     Duration(500 * time.Millisecond),
		Start:           Duration(5 * time.Second),
		Stop:            Duration(1 * time.Second),
		Shutdown:        Duration(3 * time.Second),
		Suspend:         Duration(1 * time.Second),
		Resume:          Duration(1 * time.Second),
		Resize:          Duration(1 * time.Second),
		Destroy:         Duration(800 * time.Millisecond),
		VolumeDelete:    Duration(500 * time.Millisecond),
		AgentBoot:       Duration(48 * time.Second),
	}
}

// withDefaults fills zero timings from DefaultTimings.
func (t Timings) withDefaults() Timings {
	d := DefaultTimings()
	fill := func(v *Duration, def Duration) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&t.Clone, d.Clone)
	fill(&t.CloneLockLinger, d.CloneLockLinger)
	fill(&t.Upload, d.Upload)
	fill(&t.ConfigWrite, d.ConfigWrite)
	fill(&t.Start, d.Start)
	fill(&t.Stop, d.Stop)
	fill(&t.Shutdown, d.Shutdown)
	fill(&t.Suspend, d.Suspend)
	fill(&t.Resume, d.Resume)
	fill(&t.Resize, d.Resize)
	fill(&t.Destroy, d.Destroy)
	fill(&t.VolumeDelete, d.VolumeDelete)
	fill(&t.AgentBoot, d.AgentBoot)
	return t
}

// LoadConfig reads a YAML (or JSON) cluster description.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the path is the operator's own config flag.
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	return ParseConfig(b)
}

// ParseConfig parses a YAML (or JSON) cluster description and validates it.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Config{}, fmt.Errorf("parse config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate checks the references inside the configuration.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Nodes) == 0 {
		errs = append(errs, errors.New("config: at least one node is required"))
	}
	nodes := map[string]bool{}
	for _, n := range c.Nodes {
		if !reNodeName.MatchString(n.Name) {
			errs = append(errs, fmt.Errorf("config: invalid node name %q", n.Name))
		}
		if nodes[n.Name] {
			errs = append(errs, fmt.Errorf("config: duplicate node %q", n.Name))
		}
		nodes[n.Name] = true
	}
	if c.GuestNetwork != "" {
		if _, err := c.guestPrefix(); err != nil {
			errs = append(errs, err)
		}
	}
	storages := map[string]StorageConfig{}
	for _, s := range c.Storages {
		if !reStorageID.MatchString(s.ID) {
			errs = append(errs, fmt.Errorf("config: invalid storage id %q", s.ID))
		}
		if _, dup := storages[s.ID]; dup {
			errs = append(errs, fmt.Errorf("config: duplicate storage %q", s.ID))
		}
		for _, n := range s.Nodes {
			if !nodes[n] {
				errs = append(errs, fmt.Errorf("config: storage %q names unknown node %q", s.ID, n))
			}
		}
		storages[s.ID] = s
	}
	ids := map[int]bool{}
	for _, t := range c.Templates {
		if t.VMID < 100 || t.VMID > 999999999 {
			errs = append(errs, fmt.Errorf("config: template %q has invalid vmid %d", t.Name, t.VMID))
		}
		if ids[t.VMID] {
			errs = append(errs, fmt.Errorf("config: duplicate vmid %d", t.VMID))
		}
		ids[t.VMID] = true
		if !nodes[t.Node] {
			errs = append(errs, fmt.Errorf("config: template %d names unknown node %q", t.VMID, t.Node))
		}
		for _, d := range t.Disks {
			s, ok := storages[d.Storage]
			if !ok || !hasString(s.Content, "images") {
				errs = append(errs, fmt.Errorf("config: template %d disk %s: storage %q missing or without images", t.VMID, d.Slot, d.Storage))
			}
			if _, err := parseSize(d.Size); err != nil {
				errs = append(errs, fmt.Errorf("config: template %d disk %s: %w", t.VMID, d.Slot, err))
			}
		}
	}
	for _, ct := range c.Containers {
		if ids[ct.VMID] {
			errs = append(errs, fmt.Errorf("config: duplicate vmid %d", ct.VMID))
		}
		ids[ct.VMID] = true
		if !nodes[ct.Node] {
			errs = append(errs, fmt.Errorf("config: container %d names unknown node %q", ct.VMID, ct.Node))
		}
	}
	for _, tk := range c.Tokens {
		if _, _, ok := splitTokenID(tk.ID); !ok {
			errs = append(errs, fmt.Errorf("config: token id %q is not <user>@<realm>!<tokenid>", tk.ID))
		}
		if !isTokenSecret(tk.Secret) {
			errs = append(errs, fmt.Errorf("config: token %q: the secret must be a lowercase UUID, as Proxmox generates them", tk.ID))
		}
	}
	return errors.Join(errs...)
}

func hasString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// splitTokenID splits "<user>@<realm>!<tokenid>" into user and token id.
func splitTokenID(id string) (user, token string, ok bool) {
	user, token, ok = strings.Cut(id, "!")
	if !ok || token == "" || !strings.Contains(user, "@") || strings.HasPrefix(user, "@") {
		return "", "", false
	}
	return user, token, true
}

// guestPrefix parses GuestNetwork: an IPv4 prefix of at most 2^16
// addresses (a /16 or narrower), masked.
func (c *Config) guestPrefix() (netip.Prefix, error) {
	p, err := netip.ParsePrefix(c.GuestNetwork)
	if err != nil || !p.Addr().Is4() || p.Bits() < 16 {
		return netip.Prefix{}, fmt.Errorf("config: guestNetwork %q is not an IPv4 prefix of /16 or narrower (e.g. 198.51.100.8/29)", c.GuestNetwork)
	}
	return p.Masked(), nil
}
