package proxmox

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
)

// TypeName is the provider type that runs each Proxy as a VM cloned from a
// template on a Proxmox VE cluster.
const TypeName = "proxmox"

// Defaults of the proxmox block.
const (
	DefaultVMIDMin      = 100000
	DefaultVMIDMax      = 199999
	DefaultPollInterval = 5 * time.Second
	DefaultCloneBudget  = 5 * time.Minute
	DefaultRunBudget    = 3 * time.Minute
)

// Bounds of the proxmox block.
const (
	vmidLowest  = 100
	vmidHighest = 999999999
)

// Block is the `proxmox:` block of an entry of type proxmox.
type Block struct {
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
	Zones map[string]Zone `json:"zones"`
	// Images maps every catalogue image to a template.
	Images map[string]Image `json:"images"`
	// ISOStorage is the storage the NoCloud seed ISOs are uploaded to.
	ISOStorage string `json:"isoStorage"`
	// TargetStorage is the storage of the cloned disks; empty keeps the
	// template's.
	TargetStorage string `json:"targetStorage,omitempty"`
	// Bridge replaces the bridge of the VM's net0; empty keeps the template's.
	Bridge string `json:"bridge,omitempty"`
	// VLANTag sets the VLAN tag of net0 (1 to 4094) when net0 is rewritten,
	// keeping its MAC; 0 keeps the template's.
	VLANTag int `json:"vlanTag,omitempty"`
	// VMIDRange is where the provider allocates VMIDs.
	VMIDRange *VMIDRange `json:"vmidRange,omitempty"`
	// InstallGuestAgent adds a vendor-data that installs qemu-guest-agent;
	// default true.
	InstallGuestAgent *bool `json:"installGuestAgent,omitempty"`
	// Budgets are the provider's poll interval and waiting budgets.
	Budgets Budgets `json:"budgets,omitempty"`
	// AcceptLoopbackAddresses accepts a loopback address reported by the
	// guest agent (the simulator's guests have one); off for real hosts.
	AcceptLoopbackAddresses bool `json:"acceptLoopbackAddresses,omitempty"`
}

// Zone lists the nodes of one zone.
type Zone struct {
	// Nodes are Proxmox node names.
	Nodes []string `json:"nodes"`
}

// Image names the template of one image.
type Image struct {
	// TemplateVMID is the VMID of the template to clone.
	TemplateVMID int `json:"templateVMID"`
}

// VMIDRange is an inclusive VMID range.
type VMIDRange struct {
	// Min is the lowest VMID.
	Min int `json:"min"`
	// Max is the highest VMID.
	Max int `json:"max"`
}

// Budgets are durations of the provider.
type Budgets struct {
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

// PollInterval returns the poll interval, defaulted.
func (b *Block) PollInterval() time.Duration {
	return config.DurationOr(b.Budgets.PollInterval, DefaultPollInterval)
}

// CloneBudget returns the clone budget, defaulted.
func (b *Block) CloneBudget() time.Duration {
	return config.DurationOr(b.Budgets.Clone, DefaultCloneBudget)
}

// RunningBudget returns the running budget, defaulted.
func (b *Block) RunningBudget() time.Duration {
	return config.DurationOr(b.Budgets.Running, DefaultRunBudget)
}

// VMIDs returns the VMID range, defaulted.
func (b *Block) VMIDs() (lo, hi int) {
	if b.VMIDRange == nil {
		return DefaultVMIDMin, DefaultVMIDMax
	}
	return b.VMIDRange.Min, b.VMIDRange.Max
}

// GuestAgent reports whether the seed installs the guest agent.
func (b *Block) GuestAgent() bool {
	return b.InstallGuestAgent == nil || *b.InstallGuestAgent
}

// Nodes returns every configured node, sorted and without duplicates.
func (b *Block) Nodes() []string {
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
func (b *Block) Validate(path *field.Path, e *config.Entry) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, b.validateAPI(path)...)
	zp := path.Child("zones")
	errs = append(errs, config.ValidateCatalogueKeys(zp, b.Zones, e.Zones, "every catalogue zone needs its nodes: {nodes: [pve1]}")...)
	for _, z := range slices.Sorted(maps.Keys(b.Zones)) {
		p := zp.Key(z)
		if len(b.Zones[z].Nodes) == 0 {
			errs = append(errs, field.Required(p.Child("nodes"), "at least one node"))
		}
		seen := map[string]bool{}
		for i, n := range b.Zones[z].Nodes {
			errs = append(errs, config.ValidateName(p.Child("nodes").Index(i), n)...)
			if seen[n] {
				errs = append(errs, field.Duplicate(p.Child("nodes").Index(i), n))
			}
			seen[n] = true
		}
	}
	ip := path.Child("images")
	errs = append(errs, config.ValidateCatalogueKeys(ip, b.Images, e.Images, "every catalogue image needs a template: {templateVMID: 9000}")...)
	for _, im := range slices.Sorted(maps.Keys(b.Images)) {
		p := ip.Key(im)
		if v := b.Images[im].TemplateVMID; v < vmidLowest || v > vmidHighest {
			errs = append(errs, field.Invalid(p.Child("templateVMID"), v, fmt.Sprintf("must be between %d and %d", vmidLowest, vmidHighest)))
		}
	}
	if b.ISOStorage == "" {
		errs = append(errs, field.Required(path.Child("isoStorage"), "a storage with ISO content for the seed images, ideally dedicated to them"))
	} else {
		errs = append(errs, config.ValidateName(path.Child("isoStorage"), b.ISOStorage)...)
	}
	if b.TargetStorage != "" {
		errs = append(errs, config.ValidateName(path.Child("targetStorage"), b.TargetStorage)...)
	}
	if b.Bridge != "" && strings.ContainsAny(b.Bridge, ",= \t") {
		errs = append(errs, field.Invalid(path.Child("bridge"), b.Bridge, "a bridge name such as vmbr0 (a VLAN goes in vlanTag, not vmbr0.4)"))
	}
	errs = append(errs, config.ValidateVLANTag(path.Child("vlanTag"), b.VLANTag)...)
	if r := b.VMIDRange; r != nil {
		rp := path.Child("vmidRange")
		if r.Min < vmidLowest || r.Min > vmidHighest {
			errs = append(errs, field.Invalid(rp.Child("min"), r.Min, fmt.Sprintf("must be between %d and %d", vmidLowest, vmidHighest)))
		}
		if r.Max < vmidLowest || r.Max > vmidHighest {
			errs = append(errs, field.Invalid(rp.Child("max"), r.Max, fmt.Sprintf("must be between %d and %d", vmidLowest, vmidHighest)))
		}
		if r.Min >= r.Max {
			errs = append(errs, field.Invalid(rp, fmt.Sprintf("%d-%d", r.Min, r.Max), "min must be lower than max"))
		}
		for _, im := range slices.Sorted(maps.Keys(b.Images)) {
			if v := b.Images[im].TemplateVMID; v >= r.Min && v <= r.Max {
				errs = append(errs, field.Invalid(ip.Key(im).Child("templateVMID"), v, "must lie outside vmidRange"))
			}
		}
	}
	errs = append(errs, config.ValidateBudgets(path.Child("budgets"), map[string]*metav1.Duration{
		"pollInterval": b.Budgets.PollInterval, "clone": b.Budgets.Clone, "running": b.Budgets.Running,
	})...)
	return errs
}

func (b *Block) validateAPI(path *field.Path) field.ErrorList {
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
	return append(errs, config.ValidateTrust(path, "caFile", b.CAFile, "insecureSkipTLSVerify", b.InsecureSkipTLSVerify, "the CA of the API certificate")...)
}

// String summarises the block for --check-config.
func (b *Block) String() string {
	lo, hi := b.VMIDs()
	return fmt.Sprintf("api %s, nodes %s, seeds on %s, vmids %d-%d", b.APIURL, strings.Join(b.Nodes(), ","), b.ISOStorage, lo, hi)
}
