package pvelab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim/guests"
)

// The cluster's fixed names.
const (
	// EntryName is the providers configuration entry that points at the lab.
	EntryName = "lab"
	// Image is the catalogue image, served by template 9000 on pve1.
	Image = "debian-13"
	// MachineType is the catalogue's one machine type.
	MachineType = "small"
	// tokenID and tokenSecret are the provider's token; the secret is a
	// fake value (a lowercase UUID, like a real one), good for nothing but
	// the simulator.
	tokenID     = "operator@pve!lab"
	tokenSecret = "1ab5ec7e-0000-4000-8000-00000000001a" //nolint:gosec // G101: a fake secret the simulator accepts, nothing else.
)

// cluster is the simulated cluster; %s is the node list.
var cluster = `
nodes: [%s]
storages:
  - {id: local-lvm, type: lvmthin, content: [images]}
  - {id: seeds, type: dir, content: [iso]}
templates:
  - {vmid: 9000, node: pve1, name: debian-13, disks: [{slot: scsi0, storage: local-lvm, size: 3G}], boot: order=scsi0,
     net0: "virtio=BC:24:11:00:90:00,bridge=vmbr0", agent: "1"}
tokens:
  - id: "` + tokenID + `"
    secret: "` + tokenSecret + `"
    acl:
      - path: /
        privileges: ` + proxmox.PrivilegesYAML(proxmox.RootPrivileges) + `
      - path: /storage/seeds
        privileges: ` + proxmox.PrivilegesYAML(proxmox.SeedStoragePrivileges) + `
`

// Options shape the lab.
type Options struct {
	// Nodes is the number of nodes, pve1 to pveN; zero means 3.
	Nodes int
	// Speed is the simulator's speed-up over real-host pace; zero means 1.
	Speed float64
	// Guests makes the VMs run the proxy their seed configures.
	Guests bool
	// Zones maps each zone to its nodes; nil means one zone per node,
	// rack-a on pve1, rack-b on pve2 and so on.
	Zones map[string][]string
	// PollInterval is the provider's budgets.pollInterval; zero keeps the
	// provider's default.
	PollInterval time.Duration
	// Dir receives the token and CA files; it must exist.
	Dir string
	// ProbeCheckURL, when set, is the entry's probe.checkURL: an IP-echo
	// URL the operator fetches through each proxy to learn its egress
	// address.
	ProbeCheckURL string
	// ProbeDeniedURL, when set, is the entry's probe.deniedURL: a
	// destination the guests' egress policy must refuse with 403.
	ProbeDeniedURL string
	// MaxConcurrentCreates, when set, is the entry's maxConcurrentCreates
	// (the operator's default is 10).
	MaxConcurrentCreates int
}

// Lab is a running simulated cluster.
type Lab struct {
	// Sim is the simulator, for faults, counters and inspection.
	Sim *pvesim.Sim
	// APIURL is its HTTPS address.
	APIURL string
	// Config is a providers configuration with one proxmox entry,
	// EntryName, pointing at the lab.
	Config *config.Config
	// Zones are the entry's zones, sorted.
	Zones []string
	// Ownership is the lab operator's installation identity: every operator
	// and provider the lab starts uses it unless told otherwise, so that a
	// restarted one still owns what the previous one made.
	Ownership *ownership.Identity
	nodes     []string
	runner    *guests.Runner
}

// Start starts the lab; it runs until ctx ends or Close is called.
func Start(ctx context.Context, o Options) (*Lab, error) {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Speed == 0 {
		o.Speed = 1
	}
	l := &Lab{Ownership: ownershiptest.Identity("pvelab")}
	for i := 1; i <= o.Nodes; i++ {
		l.nodes = append(l.nodes, fmt.Sprintf("pve%d", i))
	}
	simCfg, err := pvesim.ParseConfig(ClusterYAML(o.Nodes))
	if err != nil {
		return nil, fmt.Errorf("the lab's cluster: %w", err)
	}
	simCfg.Speed = o.Speed
	var simOpts []pvesim.Option
	if o.Guests {
		l.runner = &guests.Runner{}
		simOpts = append(simOpts, pvesim.WithGuestRunner(l.runner))
	}
	if l.Sim, err = pvesim.New(simCfg, simOpts...); err != nil {
		l.Close()
		return nil, err
	}
	if l.APIURL, err = l.Sim.Serve(ctx, pvesim.ServeOptions{Addr: "127.0.0.1:0", TLS: true}); err != nil {
		l.Close()
		return nil, err
	}
	token, ca := filepath.Join(o.Dir, "token"), filepath.Join(o.Dir, "ca.pem")
	if err := errors.Join(
		os.WriteFile(token, []byte(tokenID+"="+tokenSecret+"\n"), 0o600),
		os.WriteFile(ca, l.Sim.CACertPEM(), 0o600)); err != nil {
		l.Close()
		return nil, err
	}
	var providers string
	providers, l.Zones = ProvidersYAML(o, l.APIURL, token, ca)
	if l.Config, err = config.Parse([]byte(providers), setup.Types.Registry()); err != nil {
		l.Close()
		return nil, fmt.Errorf("the lab's providers configuration: %w", err)
	}
	return l, nil
}

// ClusterYAML is the lab's simulated cluster as a pvesim configuration
// (cmd/pvesim --config): nodes nodes, pve1 to pveN (zero means 3), the
// template and the provider's token, which is the first (--token-out writes
// it).
func ClusterYAML(nodes int) []byte {
	if nodes == 0 {
		nodes = 3
	}
	entries := make([]string, 0, nodes)
	for i := 1; i <= nodes; i++ {
		entries = append(entries, fmt.Sprintf("{name: pve%d}", i))
	}
	return fmt.Appendf(nil, cluster, strings.Join(entries, ", "))
}

// ProvidersYAML renders the providers configuration of the lab's entry,
// EntryName, for a simulator of ClusterYAML(o.Nodes) serving apiURL, with
// the token and the CA certificate in the named files; zones are the
// entry's zones, sorted. Start uses it for its own simulator; a benchmark
// that runs cmd/pvesim as a child process uses it for that one.
func ProvidersYAML(o Options, apiURL, token, ca string) (yaml string, zones []string) {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	zoneNodes := o.Zones
	if zoneNodes == nil {
		zoneNodes = map[string][]string{}
		for i := 1; i <= o.Nodes; i++ {
			zoneNodes[fmt.Sprintf("rack-%c", 'a'+i-1)] = []string{fmt.Sprintf("pve%d", i)}
		}
	}
	for z := range zoneNodes {
		zones = append(zones, z)
	}
	sort.Strings(zones)
	placement := make([]string, 0, len(zoneNodes))
	for _, z := range zones {
		placement = append(placement, fmt.Sprintf("%s: {nodes: [%s]}", z, strings.Join(zoneNodes[z], ", ")))
	}
	budgets := ""
	if o.PollInterval > 0 {
		budgets = fmt.Sprintf("\n      budgets: {pollInterval: %s}", o.PollInterval)
	}
	probe := ""
	if o.MaxConcurrentCreates > 0 {
		probe = fmt.Sprintf("\n    maxConcurrentCreates: %d", o.MaxConcurrentCreates)
	}
	if o.ProbeCheckURL != "" || o.ProbeDeniedURL != "" {
		probe += fmt.Sprintf("\n    probe: {checkURL: %q, deniedURL: %q}", o.ProbeCheckURL, o.ProbeDeniedURL)
	}
	return fmt.Sprintf(`
providers:
  - name: %s
    type: proxmox
    zones: [%s]
    machineTypes: {%s: {cores: 1, memoryMiB: 512}}
    images: [%s]%s
    proxmox:
      apiURL: %s
      tokenFile: %s
      caFile: %s
      zones: {%s}
      images: {%s: {templateVMID: 9000}}
      isoStorage: seeds
      acceptLoopbackAddresses: true%s
`, EntryName, strings.Join(zones, ", "), MachineType, Image, probe, apiURL, token, ca, strings.Join(placement, ", "), Image, budgets), zones
}

// Clones returns the VMs that are not templates.
func (l *Lab) Clones() []pvesim.VMInfo {
	var out []pvesim.VMInfo
	for _, vm := range l.Sim.VMs() {
		if !vm.Template {
			out = append(out, vm)
		}
	}
	return out
}

// SeedLeft reports whether a seed ISO of the named instance is on any
// node's seed storage: a file named after the instance, with a signature
// token of whichever installation made it between the name and the suffix.
func (l *Lab) SeedLeft(instanceName string) bool {
	for _, v := range l.Sim.Volumes("iso") {
		rest, ok := strings.CutPrefix(v.VolID, "seeds:iso/"+instanceName+"-")
		if ok && len(rest) == ownership.TokenLen+len("-seed.iso") && strings.HasSuffix(rest, "-seed.iso") {
			return true
		}
	}
	return false
}

// StopGuestProxy stops the proxy of a running guest while its VM keeps
// running, as a crashed proxy daemon would. It needs Options.Guests.
func (l *Lab) StopGuestProxy(vmid int) {
	if l.runner != nil {
		l.runner.Stop(pvesim.Guest{VMID: vmid})
	}
}

// Close stops the guests and the simulator.
func (l *Lab) Close() {
	if l.runner != nil {
		l.runner.Close()
	}
	if l.Sim != nil {
		_ = l.Sim.Close()
	}
}
