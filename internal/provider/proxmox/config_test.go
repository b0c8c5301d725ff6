package proxmox_test

import (
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
)

func proxmoxRegistry() config.Registry {
	return provider.Types{proxmox.Type}.Registry()
}

const proxmoxEntry = `
providers:
  - name: lab
    type: proxmox
    zones: [zone-a]
    machineTypes: {small: {cores: 1, memoryMiB: 512}}
    images: [debian]
    proxmox:
`

const proxmoxMinimal = "      apiURL: https://pve.example.test:8006\n      tokenFile: /etc/pve/token\n      caFile: /etc/pve/ca.pem\n" +
	"      zones: {zone-a: {nodes: [pve1]}}\n      images: {debian: {templateVMID: 9000}}\n      isoStorage: seeds\n"

func TestProxmoxBlock(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block string
		want  []string
	}{
		{name: "minimal", block: proxmoxMinimal},
		{name: "everything", block: proxmoxMinimal + "      targetStorage: local-lvm\n      bridge: vmbr1\n      vlanTag: 4\n" +
			"      vmidRange: {min: 5000, max: 5999}\n      installGuestAgent: false\n      acceptLoopbackAddresses: true\n" +
			"      budgets: {pollInterval: 2s, clone: 1m, running: 90s}\n"},
		{name: "http with insecure", block: strings.Replace(strings.Replace(proxmoxMinimal, "https:", "http:", 1), "      caFile: /etc/pve/ca.pem\n", "      insecureSkipTLSVerify: true\n", 1)},
		{name: "http without insecure", block: strings.Replace(proxmoxMinimal, "https:", "http:", 1),
			want: []string{"providers[lab].proxmox.apiURL: Invalid value"}},
		{name: "no url", block: strings.Replace(proxmoxMinimal, "      apiURL: https://pve.example.test:8006\n", "", 1),
			want: []string{"providers[lab].proxmox.apiURL: Required value"}},
		{name: "relative url", block: strings.Replace(proxmoxMinimal, "https://pve.example.test:8006", "pve", 1),
			want: []string{"providers[lab].proxmox.apiURL: Invalid value"}},
		{name: "no token", block: strings.Replace(proxmoxMinimal, "      tokenFile: /etc/pve/token\n", "", 1),
			want: []string{"providers[lab].proxmox.tokenFile: Required value"}},
		{name: "no ca nor insecure", block: strings.Replace(proxmoxMinimal, "      caFile: /etc/pve/ca.pem\n", "", 1),
			want: []string{"providers[lab].proxmox.caFile: Required value"}},
		{name: "ca and insecure", block: proxmoxMinimal + "      insecureSkipTLSVerify: true\n",
			want: []string{"providers[lab].proxmox.insecureSkipTLSVerify: Forbidden"}},
		{name: "zone without nodes", block: strings.Replace(proxmoxMinimal, "[pve1]", "[]", 1),
			want: []string{"providers[lab].proxmox.zones[zone-a].nodes: Required value"}},
		{name: "catalogue zone missing", block: strings.Replace(proxmoxMinimal, "zone-a: {nodes", "zone-b: {nodes", 1),
			want: []string{"providers[lab].proxmox.zones[zone-a]: Required value", "providers[lab].proxmox.zones[zone-b]: Unsupported value"}},
		{name: "catalogue image missing", block: strings.Replace(proxmoxMinimal, "debian: {", "ubuntu: {", 1),
			want: []string{"providers[lab].proxmox.images[debian]: Required value", "providers[lab].proxmox.images[ubuntu]: Unsupported value"}},
		{name: "bad template vmid", block: strings.Replace(proxmoxMinimal, "9000", "7", 1),
			want: []string{"providers[lab].proxmox.images[debian].templateVMID: Invalid value"}},
		{name: "no iso storage", block: strings.Replace(proxmoxMinimal, "      isoStorage: seeds\n", "", 1),
			want: []string{"providers[lab].proxmox.isoStorage: Required value"}},
		{name: "vlanTag out of range", block: proxmoxMinimal + "      vlanTag: 4095\n",
			want: []string{"providers[lab].proxmox.vlanTag: Invalid value"}},
		{name: "vlan in bridge", block: proxmoxMinimal + "      bridge: \"vmbr0,tag=4\"\n",
			want: []string{"providers[lab].proxmox.bridge: Invalid value"}},
		{name: "range reversed", block: proxmoxMinimal + "      vmidRange: {min: 6000, max: 5000}\n",
			want: []string{"providers[lab].proxmox.vmidRange: Invalid value"}},
		{name: "range too low", block: proxmoxMinimal + "      vmidRange: {min: 99, max: 5000}\n",
			want: []string{"providers[lab].proxmox.vmidRange.min: Invalid value"}},
		{name: "range too high", block: proxmoxMinimal + "      vmidRange: {min: 100, max: 1000000000}\n",
			want: []string{"providers[lab].proxmox.vmidRange.max: Invalid value"}},
		{name: "template inside range", block: proxmoxMinimal + "      vmidRange: {min: 8000, max: 9999}\n",
			want: []string{"providers[lab].proxmox.images[debian].templateVMID: Invalid value"}},
		{name: "bad duration", block: proxmoxMinimal + "      budgets: {clone: soon}\n",
			want: []string{"providers[lab].proxmox"}},
		{name: "negative duration", block: proxmoxMinimal + "      budgets: {running: -1s}\n",
			want: []string{"providers[lab].proxmox.budgets.running: Invalid value"}},
		{name: "unknown field", block: proxmoxMinimal + "      apiUrl: x\n",
			want: []string{`unknown field "apiUrl"`}},
		// The reference name is vlanTag; there is no alias.
		{name: "vlan is not a key", block: proxmoxMinimal + "      vlan: 4\n",
			want: []string{`unknown field "vlan"`}},
		{name: "vlanTag zero keeps the template's", block: proxmoxMinimal + "      vlanTag: 0\n"},
		{name: "vlanTag highest", block: proxmoxMinimal + "      vlanTag: 4094\n"},
		{name: "vlanTag negative", block: proxmoxMinimal + "      vlanTag: -1\n",
			want: []string{"providers[lab].proxmox.vlanTag: Invalid value", "between 1 and 4094"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(proxmoxEntry+tc.block), proxmoxRegistry())
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestProxmoxBlockDefaults(t *testing.T) {
	cfg, err := config.Parse([]byte(proxmoxEntry+proxmoxMinimal), proxmoxRegistry())
	if err != nil {
		t.Fatal(err)
	}
	b, ok := cfg.Providers[0].Block.(*proxmox.Block)
	if !ok {
		t.Fatalf("block is %T", cfg.Providers[0].Block)
	}
	if lo, hi := b.VMIDs(); lo != 100000 || hi != 199999 {
		t.Errorf("vmid range %d-%d, want 100000-199999", lo, hi)
	}
	if !b.GuestAgent() {
		t.Error("the guest agent is installed by default")
	}
	if b.PollInterval() != 5*time.Second || b.CloneBudget() != 5*time.Minute || b.RunningBudget() != 3*time.Minute {
		t.Errorf("budgets %v %v %v", b.PollInterval(), b.CloneBudget(), b.RunningBudget())
	}
	if got := b.Nodes(); len(got) != 1 || got[0] != "pve1" {
		t.Errorf("nodes %v", got)
	}
}

// TestBlockOfAnotherTypeNamesBoth: a block under an entry of another type
// (a copy-paste from another entry) is refused with a message that names
// the block and the entry's type, whichever way round.
func TestBlockOfAnotherTypeNamesBoth(t *testing.T) {
	reg := provider.Types{proxmox.Type, kubernetes.Type}.Registry()
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{
			name: "kubernetes block under a proxmox entry",
			yaml: proxmoxEntry + proxmoxMinimal + "    kubernetes: {namespace: egress-proxies}\n",
			want: []string{"providers[lab].kubernetes: Forbidden", "a kubernetes block", `type "proxmox"`},
		},
		{
			name: "proxmox block under a kubernetes entry",
			yaml: "providers:\n  - name: cluster\n    type: kubernetes\n    zones: [default]\n    images: [default]\n" +
				"    machineTypes: {tiny: {cores: 1, memoryMiB: 64}}\n    kubernetes: {namespace: egress-proxies}\n    proxmox:\n" + proxmoxMinimal,
			want: []string{"providers[cluster].proxmox: Forbidden", "a proxmox block", `type "kubernetes"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml), reg)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
