package libvirt

import (
	"fmt"
	"maps"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
)

// The provider types of this package. Both share the host model and the
// block; they differ only in how they talk to a host.
const (
	// TypeKVM2 speaks libvirt's RPC protocol over an SSH tunnel to the
	// host's libvirt socket.
	TypeKVM2 = "kvm2"
	// TypeKVM runs virsh on the host over SSH, for hosts where only a shell
	// is allowed.
	TypeKVM = "kvm"
)

// Defaults of the block.
const (
	DefaultSocketPath     = "/var/run/libvirt/libvirt-sock"
	DefaultSSHPort        = 22
	DefaultPollInterval   = 5 * time.Second
	DefaultRunningBudget  = 3 * time.Minute
	DefaultDialTimeout    = 10 * time.Second
	DefaultKeepalive      = 15 * time.Second
	DefaultShutdown       = 20 * time.Second
	DefaultDomainType     = "kvm"
	AddressSourceLease    = "lease"
	AddressSourceAgent    = "agent"
	defaultAddressSource  = AddressSourceLease
	defaultSSHUserMessage = "a user in the libvirt group on the host"
)

// Block is the `kvm2:` or `kvm:` block of an entry: the libvirt hosts, how to
// reach them and what a domain is made of.
type Block struct {
	// Hosts are the libvirt hosts of the entry, each in one catalogue zone.
	Hosts []Host `json:"hosts"`
	// PrivateKeyFile is the SSH private key (the kvm-ssh Secret, mounted
	// read-only). It is read at every dial, so a rotated key needs no
	// restart.
	PrivateKeyFile string `json:"privateKeyFile"`
	// KnownHostsFile is an OpenSSH known_hosts file holding the host keys of
	// every host; a host whose key is not in it is not talked to.
	KnownHostsFile string `json:"knownHostsFile,omitempty"`
	// InsecureIgnoreHostKey skips host key verification (logged loudly at
	// start). One of KnownHostsFile and InsecureIgnoreHostKey is required.
	InsecureIgnoreHostKey bool `json:"insecureIgnoreHostKey,omitempty"`
	// SocketPath is libvirt's socket on the hosts (kvm2 only).
	SocketPath string `json:"socketPath,omitempty"`
	// URI is the libvirt connection URI on the host; default qemu:///system.
	URI string `json:"uri,omitempty"`
	// Pool is the storage pool holding the images, disks and seeds.
	Pool string `json:"pool"`
	// Network is the libvirt network of the domains' interface; one of
	// Network and Bridge is required.
	Network string `json:"network,omitempty"`
	// Bridge is a host bridge for the domains' interface.
	Bridge string `json:"bridge,omitempty"`
	// VLANTag tags the interface (1 to 4094; needs a network or bridge that
	// supports VLANs, such as Open vSwitch).
	VLANTag int `json:"vlanTag,omitempty"`
	// Images maps every catalogue image to a base volume of the pool.
	Images map[string]Image `json:"images"`
	// InstallGuestAgent adds a vendor-data that installs qemu-guest-agent;
	// default true.
	InstallGuestAgent *bool `json:"installGuestAgent,omitempty"`
	// AddressSource is where a domain's address is read: lease (the
	// network's DHCP leases, the default; needs Network) or agent (the guest
	// agent).
	AddressSource string `json:"addressSource,omitempty"`
	// DomainType is the libvirt domain type: kvm (default) or qemu (TCG, for
	// hosts without hardware virtualisation).
	DomainType string `json:"domainType,omitempty"`
	// MachineType is the QEMU machine type; default pc (the seed CD-ROM is
	// on IDE, which q35 lacks).
	Machine string `json:"machine,omitempty"`
	// FullCopy copies the base volume instead of making a qcow2 overlay of
	// it.
	FullCopy bool `json:"fullCopy,omitempty"`
	// SerialLogDir, when set, sends each domain's serial console to a file
	// <dir>/<domain>.log on the host, to see why a guest did not come up.
	SerialLogDir string `json:"serialLogDir,omitempty"`
	// Budgets are the provider's poll interval and waiting budgets.
	Budgets Budgets `json:"budgets,omitempty"`
}

// Host is one libvirt host.
type Host struct {
	// Name identifies the host in instance IDs and verdicts.
	Name string `json:"name"`
	// Address is the host's DNS name or IP address for SSH.
	Address string `json:"address"`
	// Port is the SSH port; default 22.
	Port int `json:"port,omitempty"`
	// User is the SSH user.
	User string `json:"user"`
	// Zone is the catalogue zone the host serves.
	Zone string `json:"zone"`
}

// Image is the catalogue entry of one image.
type Image struct {
	// Volume is the base volume in the pool (a qcow2 or raw disk image).
	Volume string `json:"volume"`
	// Kernel, Initrd and Cmdline boot the kernel directly (paths on the
	// host), for images without a boot loader.
	Kernel  string `json:"kernel,omitempty"`
	Initrd  string `json:"initrd,omitempty"`
	Cmdline string `json:"cmdline,omitempty"`
}

// Budgets are durations of the provider.
type Budgets struct {
	// PollInterval is the age at most of a host's shared domain listing and
	// the delay suggested between steps. Default 5s.
	PollInterval *metav1.Duration `json:"pollInterval,omitempty"`
	// Running is how long a started domain is waited for until it runs.
	// Default 3m.
	Running *metav1.Duration `json:"running,omitempty"`
	// Dial is the timeout of an SSH dial. Default 10s.
	Dial *metav1.Duration `json:"dial,omitempty"`
	// Keepalive is the interval of SSH keepalives; a connection that misses
	// one is closed and redialled. Default 15s.
	Keepalive *metav1.Duration `json:"keepalive,omitempty"`
	// Shutdown is how long Delete waits for a guest to shut down after an
	// ACPI power-off (so that it releases its DHCP lease) before it
	// destroys the domain. Default 20s.
	Shutdown *metav1.Duration `json:"shutdown,omitempty"`
}

// PollInterval returns the poll interval, defaulted.
func (b *Block) PollInterval() time.Duration {
	return config.DurationOr(b.Budgets.PollInterval, DefaultPollInterval)
}

// RunningBudget returns the running budget, defaulted.
func (b *Block) RunningBudget() time.Duration {
	return config.DurationOr(b.Budgets.Running, DefaultRunningBudget)
}

// DialTimeout returns the SSH dial timeout, defaulted.
func (b *Block) DialTimeout() time.Duration {
	return config.DurationOr(b.Budgets.Dial, DefaultDialTimeout)
}

// KeepaliveInterval returns the SSH keepalive interval, defaulted.
func (b *Block) KeepaliveInterval() time.Duration {
	return config.DurationOr(b.Budgets.Keepalive, DefaultKeepalive)
}

// ShutdownBudget returns the graceful shutdown budget, defaulted.
func (b *Block) ShutdownBudget() time.Duration {
	return config.DurationOr(b.Budgets.Shutdown, DefaultShutdown)
}

// GuestAgent reports whether the seed installs the guest agent.
func (b *Block) GuestAgent() bool { return b.InstallGuestAgent == nil || *b.InstallGuestAgent }

// Socket returns the libvirt socket path, defaulted.
func (b *Block) Socket() string {
	if b.SocketPath == "" {
		return DefaultSocketPath
	}
	return b.SocketPath
}

// ConnectURI returns the libvirt URI, defaulted.
func (b *Block) ConnectURI() string {
	if b.URI == "" {
		return "qemu:///system"
	}
	return b.URI
}

// Addresses returns the address source, defaulted.
func (b *Block) Addresses() string {
	if b.AddressSource == "" {
		if b.Network == "" {
			return AddressSourceAgent
		}
		return defaultAddressSource
	}
	return b.AddressSource
}

// Type returns the domain type, defaulted.
func (b *Block) Type() string {
	if b.DomainType == "" {
		return DefaultDomainType
	}
	return b.DomainType
}

// MachineType returns the QEMU machine type, defaulted.
func (b *Block) MachineType() string {
	if b.Machine == "" {
		return "pc"
	}
	return b.Machine
}

// SSHAddr returns host:port of a host.
func (h Host) SSHAddr() string {
	p := h.Port
	if p == 0 {
		p = DefaultSSHPort
	}
	return net.JoinHostPort(h.Address, strconv.Itoa(p))
}

// Validate implements config.Block.
func (b *Block) Validate(p *field.Path, e *config.Entry) field.ErrorList {
	var errs field.ErrorList
	hp := p.Child("hosts")
	if len(b.Hosts) == 0 {
		errs = append(errs, field.Required(hp, "at least one host: {name: kvm1, address: kvm1.example, user: operator, zone: a}"))
	}
	names := map[string]bool{}
	zones := map[string]bool{}
	for i, h := range b.Hosts {
		ip := hp.Index(i)
		if h.Name != "" {
			ip = hp.Key(h.Name)
		}
		errs = append(errs, config.ValidateName(ip.Child("name"), h.Name)...)
		if names[h.Name] && h.Name != "" {
			errs = append(errs, field.Duplicate(ip.Child("name"), h.Name))
		}
		names[h.Name] = true
		if h.Address == "" {
			errs = append(errs, field.Required(ip.Child("address"), "the host's DNS name or IP address"))
		} else if strings.ContainsAny(h.Address, " \t\n/@:") && net.ParseIP(h.Address) == nil {
			errs = append(errs, field.Invalid(ip.Child("address"), h.Address, "a DNS name or IP address, without user, port or path"))
		}
		if h.Port < 0 || h.Port > 65535 {
			errs = append(errs, field.Invalid(ip.Child("port"), h.Port, "must be between 1 and 65535 (0 means 22)"))
		}
		if h.User == "" {
			errs = append(errs, field.Required(ip.Child("user"), defaultSSHUserMessage))
		} else if strings.ContainsAny(h.User, " \t\n@:/'\"$`\\;") {
			errs = append(errs, field.Invalid(ip.Child("user"), h.User, "a plain user name"))
		}
		if !slices.Contains(e.Zones, h.Zone) {
			errs = append(errs, field.NotSupported(ip.Child("zone"), h.Zone, e.Zones))
		}
		zones[h.Zone] = true
	}
	for _, z := range e.Zones {
		if len(b.Hosts) > 0 && !zones[z] {
			errs = append(errs, field.Required(p.Child("hosts"), fmt.Sprintf("zone %q has no host", z)))
		}
	}
	if b.PrivateKeyFile == "" {
		errs = append(errs, field.Required(p.Child("privateKeyFile"), "the SSH private key, such as /etc/proxy-operator/kvm-ssh/id_ed25519"))
	}
	errs = append(errs, config.ValidateTrust(p, "knownHostsFile", b.KnownHostsFile, "insecureIgnoreHostKey", b.InsecureIgnoreHostKey, "the hosts' SSH host keys")...)
	if b.SocketPath != "" && !path.IsAbs(b.SocketPath) {
		errs = append(errs, field.Invalid(p.Child("socketPath"), b.SocketPath, "an absolute path on the host"))
	}
	if b.URI != "" && !strings.Contains(b.URI, ":///") {
		errs = append(errs, field.Invalid(p.Child("uri"), b.URI, "a local libvirt URI such as qemu:///system"))
	}
	errs = append(errs, validateObjectName(p.Child("pool"), b.Pool, true)...)
	switch {
	case b.Network == "" && b.Bridge == "":
		errs = append(errs, field.Required(p.Child("network"), "a libvirt network (or bridge: a host bridge)"))
	case b.Network != "" && b.Bridge != "":
		errs = append(errs, field.Forbidden(p.Child("bridge"), "give network or bridge, not both"))
	}
	errs = append(errs, validateObjectName(p.Child("network"), b.Network, false)...)
	errs = append(errs, validateObjectName(p.Child("bridge"), b.Bridge, false)...)
	errs = append(errs, config.ValidateVLANTag(p.Child("vlanTag"), b.VLANTag)...)
	imp := p.Child("images")
	errs = append(errs, config.ValidateCatalogueKeys(imp, b.Images, e.Images, "every catalogue image needs a base volume: {volume: debian-12.qcow2}")...)
	for _, im := range slices.Sorted(maps.Keys(b.Images)) {
		ip := imp.Key(im)
		img := b.Images[im]
		errs = append(errs, validateObjectName(ip.Child("volume"), img.Volume, true)...)
		for name, v := range map[string]string{"kernel": img.Kernel, "initrd": img.Initrd} {
			if v != "" && !path.IsAbs(v) {
				errs = append(errs, field.Invalid(ip.Child(name), v, "an absolute path on the host"))
			}
		}
		if img.Kernel == "" && (img.Initrd != "" || img.Cmdline != "") {
			errs = append(errs, field.Required(ip.Child("kernel"), "initrd and cmdline need a kernel"))
		}
	}
	switch b.AddressSource {
	case "", AddressSourceAgent:
	case AddressSourceLease:
		if b.Network == "" {
			errs = append(errs, field.Invalid(p.Child("addressSource"), b.AddressSource, "leases are known only on a libvirt network; use agent with a bridge"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("addressSource"), b.AddressSource, []string{AddressSourceLease, AddressSourceAgent}))
	}
	if b.Addresses() == AddressSourceAgent && b.InstallGuestAgent != nil && !*b.InstallGuestAgent {
		errs = append(errs, field.Invalid(p.Child("installGuestAgent"), false, "addressSource agent needs the guest agent (or an image that has it: leave this unset)"))
	}
	switch b.DomainType {
	case "", "kvm", "qemu":
	default:
		errs = append(errs, field.NotSupported(p.Child("domainType"), b.DomainType, []string{"kvm", "qemu"}))
	}
	if b.Machine != "" {
		errs = append(errs, validateObjectName(p.Child("machine"), b.Machine, false)...)
	}
	if b.SerialLogDir != "" && !path.IsAbs(b.SerialLogDir) {
		errs = append(errs, field.Invalid(p.Child("serialLogDir"), b.SerialLogDir, "an absolute path on the host"))
	}
	errs = append(errs, config.ValidateBudgets(p.Child("budgets"), map[string]*metav1.Duration{
		"pollInterval": b.Budgets.PollInterval, "running": b.Budgets.Running, "dial": b.Budgets.Dial, "keepalive": b.Budgets.Keepalive, "shutdown": b.Budgets.Shutdown,
	})...)
	return errs
}

// String summarises the block for --check-config.
func (b *Block) String() string {
	hosts := make([]string, 0, len(b.Hosts))
	for _, h := range b.Hosts {
		hosts = append(hosts, h.Name+"("+h.Zone+")")
	}
	nic := "network " + b.Network
	if b.Bridge != "" {
		nic = "bridge " + b.Bridge
	}
	return fmt.Sprintf("hosts %s, pool %s, %s, domain type %s", strings.Join(hosts, ","), b.Pool, nic, b.Type())
}

// HostsIn returns the hosts of a zone, in configuration order.
func (b *Block) HostsIn(zone string) []Host {
	var out []Host
	for _, h := range b.Hosts {
		if h.Zone == zone {
			out = append(out, h)
		}
	}
	return out
}

// Host returns the host of a name.
func (b *Block) Host(name string) (Host, bool) {
	for _, h := range b.Hosts {
		if h.Name == name {
			return h, true
		}
	}
	return Host{}, false
}

// validateObjectName accepts libvirt object names (pools, networks, volumes,
// bridges): no path separators, no whitespace or control characters, so
// that a name can never address a file outside its pool.
func validateObjectName(p *field.Path, v string, required bool) field.ErrorList {
	if v == "" {
		if required {
			return field.ErrorList{field.Required(p, "a libvirt object name")}
		}
		return nil
	}
	if len(v) > 255 || strings.ContainsAny(v, "/\\\x00") || v == "." || v == ".." || strings.HasPrefix(v, "-") ||
		strings.IndexFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return field.ErrorList{field.Invalid(p, v, "a name without slashes, spaces or control characters, not starting with -")}
	}
	return nil
}
