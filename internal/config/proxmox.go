package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ProxmoxType is the provider type that runs each Proxy as a VM cloned from a
// template on a Proxmox VE cluster.
const ProxmoxType = "proxmox"

// Defaults of the proxmox block.
const (
	DefaultProxmoxVMIDMin      = 100000
	DefaultProxmoxVMIDMax      = 199999
	DefaultProxmoxPollInterval = 5 * time.Second
	DefaultProxmoxCloneBudget  = 5 * time.Minute
	DefaultProxmoxRunBudget    = 3 * time.Minute
)

// Bounds of the proxmox block.
const (
	proxmoxVMIDLowest  = 100
	proxmoxVMIDHighest = 999999999
	proxmoxVLANMax     = 4094
)

// ProxmoxBlock is the `proxmox:` block of an entry of type proxmox.
type ProxmoxBlock struct {
	// APIURL is the base URL of the API, such as https://pve.example:8006
	// (without /api2/json). http is allowed only with InsecureSkipTLSVerify.
	APIURL string `json:"apiURL"`
	// TokenFile holds the API token as `user@realm!tokenid=secret`; it is
	// read on every request, so that a rotated token needs no restart.
	TokenFile string `json:"tokenFile"`
	// CAFile is a PEM file with the CA that signed the API certificate.
	CAFile string `json:"caFile,omitempty"`
	// InsecureSkipTLSVerify disables certificate verification (a warning is
	// logged at start). One of CAFile and InsecureSkipTLSVerify is required.
	InsecureSkipTLSVerify bool `json:"insecureSkipTLSVerify,omitempty"`
	// Zones maps every catalogue zone to the nodes that serve it.
	Zones map[string]ProxmoxZone `json:"zones"`
	// Images maps every catalogue image to a template.
	Images map[string]ProxmoxImage `json:"images"`
	// ISOStorage is the storage the NoCloud seed ISOs are uploaded to.
	ISOStorage string `json:"isoStorage"`
	// TargetStorage is the storage of the cloned disks; empty keeps the
	// template's.
	TargetStorage string `json:"targetStorage,omitempty"`
	// Bridge replaces the bridge of the VM's net0; empty keeps the template's.
	Bridge string `json:"bridge,omitempty"`
	// VLAN sets a VLAN tag on net0 (1 to 4094); 0 keeps the template's.
	VLAN int `json:"vlan,omitempty"`
	// VMIDRange is where the provider allocates VMIDs.
	VMIDRange *ProxmoxVMIDRange `json:"vmidRange,omitempty"`
	// InstallGuestAgent adds a vendor-data that installs qemu-guest-agent;
	// default true.
	InstallGuestAgent *bool `json:"installGuestAgent,omitempty"`
	// Budgets are the provider's poll interval and waiting budgets.
	Budgets ProxmoxBudgets `json:"budgets,omitempty"`
	// AcceptLoopbackAddresses accepts a loopback address reported by the
	// guest agent (the simulator's guests have one); off for real hosts.
	AcceptLoopbackAddresses bool `json:"acceptLoopbackAddresses,omitempty"`
}

// ProxmoxZone lists the nodes of one zone.
type ProxmoxZone struct {
	// Nodes are Proxmox node names.
	Nodes []string `json:"nodes"`
}

// ProxmoxImage names the template of one image.
type ProxmoxImage struct {
	// TemplateVMID is the VMID of the template to clone.
	TemplateVMID int `json:"templateVMID"`
}

// ProxmoxVMIDRange is an inclusive VMID range.
type ProxmoxVMIDRange struct {
	// Min is the lowest VMID.
	Min int `json:"min"`
	// Max is the highest VMID.
	Max int `json:"max"`
}

// ProxmoxBudgets are durations of the provider.
type ProxmoxBudgets struct {
	// PollInterval is the age at most of the shared VM listing and the delay
	// suggested while a task runs. Default 5s.
	PollInterval *metav1.Duration `json:"pollInterval,omitempty"`
	// Clone is how long a clone (or a lock on a probed VMID) is waited for.
	// Default 5m.
	Clone *metav1.Duration `json:"clone,omitempty"`
	// Running is how long a started VM is waited for until it runs.
	// Default 3m.
	Running *metav1.Duration `json:"running,omitempty"`
}

func durOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil || d.Duration == 0 {
		return def
	}
	return d.Duration
}

// PollInterval returns the poll interval, defaulted.
func (b *ProxmoxBlock) PollInterval() time.Duration {
	return durOr(b.Budgets.PollInterval, DefaultProxmoxPollInterval)
}

// CloneBudget returns the clone budget, defaulted.
func (b *ProxmoxBlock) CloneBudget() time.Duration {
	return durOr(b.Budgets.Clone, DefaultProxmoxCloneBudget)
}

// RunningBudget returns the running budget, defaulted.
func (b *ProxmoxBlock) RunningBudget() time.Duration {
	return durOr(b.Budgets.Running, DefaultProxmoxRunBudget)
}

// VMIDs returns the VMID range, defaulted.
func (b *ProxmoxBlock) VMIDs() (lo, hi int) {
	if b.VMIDRange == nil {
		return DefaultProxmoxVMIDMin, DefaultProxmoxVMIDMax
	}
	return b.VMIDRange.Min, b.VMIDRange.Max
}

// GuestAgent reports whether the seed installs the guest agent.
func (b *ProxmoxBlock) GuestAgent() bool {
	return b.InstallGuestAgent == nil || *b.InstallGuestAgent
}

// Nodes returns every configured node, sorted and without duplicates.
func (b *ProxmoxBlock) Nodes() []string {
	var out []string
	for _, z := range b.Zones {
		for _, n := range z.Nodes {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Validate implements Block.
func (b *ProxmoxBlock) Validate(path *field.Path, e *Entry) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, b.validateAPI(path)...)
	zp := path.Child("zones")
	for _, z := range e.Zones {
		if _, ok := b.Zones[z]; !ok {
			errs = append(errs, field.Required(zp.Key(z), "every catalogue zone needs its nodes: {nodes: [pve1]}"))
		}
	}
	for _, z := range sortedKeys(b.Zones) {
		p := zp.Key(z)
		if !slices.Contains(e.Zones, z) {
			errs = append(errs, field.NotSupported(p, z, e.Zones))
		}
		if len(b.Zones[z].Nodes) == 0 {
			errs = append(errs, field.Required(p.Child("nodes"), "at least one node"))
		}
		seen := map[string]bool{}
		for i, n := range b.Zones[z].Nodes {
			errs = append(errs, validateName(p.Child("nodes").Index(i), n)...)
			if seen[n] {
				errs = append(errs, field.Duplicate(p.Child("nodes").Index(i), n))
			}
			seen[n] = true
		}
	}
	ip := path.Child("images")
	for _, im := range e.Images {
		if _, ok := b.Images[im]; !ok {
			errs = append(errs, field.Required(ip.Key(im), "every catalogue image needs a template: {templateVMID: 9000}"))
		}
	}
	for _, im := range sortedKeys(b.Images) {
		p := ip.Key(im)
		if !slices.Contains(e.Images, im) {
			errs = append(errs, field.NotSupported(p, im, e.Images))
		}
		if v := b.Images[im].TemplateVMID; v < proxmoxVMIDLowest || v > proxmoxVMIDHighest {
			errs = append(errs, field.Invalid(p.Child("templateVMID"), v, fmt.Sprintf("must be between %d and %d", proxmoxVMIDLowest, proxmoxVMIDHighest)))
		}
	}
	if b.ISOStorage == "" {
		errs = append(errs, field.Required(path.Child("isoStorage"), "a storage with ISO content for the seed images, ideally dedicated to them"))
	} else {
		errs = append(errs, validateName(path.Child("isoStorage"), b.ISOStorage)...)
	}
	if b.TargetStorage != "" {
		errs = append(errs, validateName(path.Child("targetStorage"), b.TargetStorage)...)
	}
	if b.Bridge != "" && strings.ContainsAny(b.Bridge, ",= \t") {
		errs = append(errs, field.Invalid(path.Child("bridge"), b.Bridge, "a bridge name such as vmbr0 (a VLAN goes in vlan, not vmbr0.4)"))
	}
	if b.VLAN != 0 && (b.VLAN < 1 || b.VLAN > proxmoxVLANMax) {
		errs = append(errs, field.Invalid(path.Child("vlan"), b.VLAN, fmt.Sprintf("must be between 1 and %d", proxmoxVLANMax)))
	}
	if r := b.VMIDRange; r != nil {
		rp := path.Child("vmidRange")
		if r.Min < proxmoxVMIDLowest || r.Min > proxmoxVMIDHighest {
			errs = append(errs, field.Invalid(rp.Child("min"), r.Min, fmt.Sprintf("must be between %d and %d", proxmoxVMIDLowest, proxmoxVMIDHighest)))
		}
		if r.Max < proxmoxVMIDLowest || r.Max > proxmoxVMIDHighest {
			errs = append(errs, field.Invalid(rp.Child("max"), r.Max, fmt.Sprintf("must be between %d and %d", proxmoxVMIDLowest, proxmoxVMIDHighest)))
		}
		if r.Min >= r.Max {
			errs = append(errs, field.Invalid(rp, fmt.Sprintf("%d-%d", r.Min, r.Max), "min must be lower than max"))
		}
		for _, im := range sortedKeys(b.Images) {
			if v := b.Images[im].TemplateVMID; v >= r.Min && v <= r.Max {
				errs = append(errs, field.Invalid(ip.Key(im).Child("templateVMID"), v, "must lie outside vmidRange"))
			}
		}
	}
	bp := path.Child("budgets")
	for name, d := range map[string]*metav1.Duration{"pollInterval": b.Budgets.PollInterval, "clone": b.Budgets.Clone, "running": b.Budgets.Running} {
		if d != nil && d.Duration < 0 {
			errs = append(errs, field.Invalid(bp.Child(name), d.Duration.String(), "must not be negative"))
		}
	}
	return errs
}

func (b *ProxmoxBlock) validateAPI(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	up := path.Child("apiURL")
	if b.APIURL == "" {
		errs = append(errs, field.Required(up, "such as https://pve.example:8006"))
	} else if u, err := url.Parse(b.APIURL); err != nil || u.Host == "" {
		errs = append(errs, field.Invalid(up, b.APIURL, "must be an absolute URL such as https://pve.example:8006"))
	} else {
		switch {
		case u.Scheme == "https":
		case u.Scheme == "http" && b.InsecureSkipTLSVerify:
		case u.Scheme == "http":
			errs = append(errs, field.Invalid(up, b.APIURL, "http is allowed only with insecureSkipTLSVerify: true; use https"))
		default:
			errs = append(errs, field.Invalid(up, b.APIURL, "the scheme must be https"))
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			errs = append(errs, field.Invalid(up, b.APIURL, "must hold no credentials, query or fragment"))
		}
	}
	if b.TokenFile == "" {
		errs = append(errs, field.Required(path.Child("tokenFile"), "a file holding user@realm!tokenid=secret"))
	}
	switch {
	case b.CAFile == "" && !b.InsecureSkipTLSVerify:
		errs = append(errs, field.Required(path.Child("caFile"), "the CA of the API certificate (or insecureSkipTLSVerify: true, not recommended)"))
	case b.CAFile != "" && b.InsecureSkipTLSVerify:
		errs = append(errs, field.Forbidden(path.Child("insecureSkipTLSVerify"), "give caFile or insecureSkipTLSVerify, not both"))
	}
	return errs
}

// String summarises the block for --check-config.
func (b *ProxmoxBlock) String() string {
	lo, hi := b.VMIDs()
	return fmt.Sprintf("api %s, nodes %s, seeds on %s, vmids %d-%d", b.APIURL, strings.Join(b.Nodes(), ","), b.ISOStorage, lo, hi)
}
