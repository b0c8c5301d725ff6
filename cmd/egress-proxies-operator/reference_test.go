package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
)

// The providers configuration of a team that moves over from the reference
// system, as it writes it: entries named <type>-home, machine types as a map
// with cores, the proxmox block with vlanTag and its Secret's mount path.
// Each entry is kept apart so that the entries of types this build registers
// can be checked on their own.
var referenceEntries = []struct {
	typ, yaml string
}{
	{"kubernetes", `
  - name: cluster-home
    type: kubernetes
    zones: [default]
    machineTypes:
      tiny: {cores: 1, memoryMiB: 64}
    images: [default]
    kubernetes:
      namespace: egress-proxies
      zones:
        default: {nodeSelector: {kubernetes.io/os: linux}}
`},
	{"proxmox", `
  - name: proxmox-home
    type: proxmox
    zones: [home]
    machineTypes:
      small: {cores: 1, memoryMiB: 512}
      medium: {cores: 2, memoryMiB: 2048, diskGiB: 10}
    images: [debian-13]
    proxmox:
      apiURL: https://pve.example.test:8006
      tokenFile: /etc/proxy-operator/proxmox/token
      caFile: /etc/proxy-operator/proxmox/ca.pem
      isoStorage: seeds
      targetStorage: local-lvm
      bridge: vmbr0
      vlanTag: 4
      installGuestAgent: true
      vmidRange: {min: 100000, max: 100999}
      zones:
        home: {nodes: [pve1]}
      images:
        debian-13: {templateVMID: 9000}
`},
	// The libvirt types (docs/libvirt.md), with the block keys a team's
	// reference config uses.
	{"kvm", `
  - name: kvm-home
    type: kvm
    zones: [home]
    machineTypes:
      medium: {cores: 2, memoryMiB: 2048, diskGiB: 10}
    images: [debian-13]
    kvm:
      hosts:
        - {name: kvm1, address: kvm1.example.com, user: egress-operator, zone: home}
      privateKeyFile: /etc/proxy-operator/kvm-ssh/ssh-privatekey
      knownHostsFile: /etc/proxy-operator/kvm-ssh/known_hosts
      pool: egress
      network: egress
      vlanTag: 4
      installGuestAgent: true
      domainType: kvm
      images:
        debian-13: {volume: debian-13.qcow2}
`},
	{"kvm2", `
  - name: kvm2-home
    type: kvm2
    zones: [home]
    machineTypes:
      medium: {cores: 2, memoryMiB: 2048, diskGiB: 10}
    images: [debian-13]
    kvm2:
      hosts:
        - {name: kvm1, address: kvm1.example.com, user: egress-operator, zone: home}
      privateKeyFile: /etc/proxy-operator/kvm-ssh/ssh-privatekey
      knownHostsFile: /etc/proxy-operator/kvm-ssh/known_hosts
      pool: egress
      network: egress
      vlanTag: 4
      installGuestAgent: true
      domainType: kvm
      images:
        debian-13: {volume: debian-13.qcow2}
`},
}

// checkConfig writes a providers file and runs the operator with
// --check-config on it.
func checkConfig(t *testing.T, types func(string) bool) {
	t.Helper()
	var b strings.Builder
	b.WriteString("providers:")
	for _, e := range referenceEntries {
		if types(e.typ) {
			b.WriteString(e.yaml)
		}
	}
	path := filepath.Join(t.TempDir(), "providers.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), flags{providersConfig: path, checkConfigAndExit: true}); err != nil {
		t.Fatalf("the operator refuses a reference-form configuration: %v", err)
	}
}

// TestReferenceConfigStarts: a reference-form providers configuration decodes
// with the strict decoder and passes --check-config.
func TestReferenceConfigStarts(t *testing.T) {
	reg := setup.Types.Registry()
	t.Run("kubernetes and proxmox entries", func(t *testing.T) {
		checkConfig(t, func(typ string) bool { return typ == "kubernetes" || typ == "proxmox" })
	})
	t.Run("every entry", func(t *testing.T) {
		for _, typ := range []string{"kvm", "kvm2"} {
			if _, ok := reg[typ]; !ok {
				// Pending on issue 11 (the libvirt types); runs once they are registered.
				t.Skipf("pending on issue 11: provider type %q is not registered in this build", typ)
			}
		}
		checkConfig(t, func(string) bool { return true })
	})
}
