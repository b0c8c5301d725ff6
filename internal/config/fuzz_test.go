package config_test

import (
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/kubernetes"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

// FuzzParse feeds the providers configuration decoder arbitrary files, with
// every real block type registered. The file is written by an administrator,
// but a decoder that panics or accepts a half-valid entry would take the
// operator down or let it act on nonsense. Whatever Parse accepts must be
// complete: named, typed entries with catalogues and a create cap in range,
// each with its decoded block; and the same bytes always give the same
// answer. The seed corpus is in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	reg := provider.Types{kubernetes.Type, proxmox.Type, fakeprovider.TypeFor(nil)}.Registry()
	f.Add([]byte("providers:\n- name: lab\n  type: fake\n  zones: [z1]\n  machineTypes: {small: {cores: 1, memoryMiB: 512}}\n  images: [d]\n"))
	f.Add([]byte("providers:\n- name: c\n  type: kubernetes\n  maxConcurrentCreates: 3\n  zones: [a]\n  machineTypes: {t: {cores: 1, memoryMiB: 64}}\n  images: [i]\n  kubernetes: {namespace: p, hostNetwork: true}\n"))
	f.Add([]byte("providers: [{name: x, type: proxmox, zones: [a], machineTypes: {}, images: [], proxmox: {}}]"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse(data, reg)
		again, err2 := config.Parse(data, reg)
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("Parse is not deterministic: %v, then %v", err, err2)
		}
		if err != nil {
			return
		}
		if len(cfg.Providers) == 0 || len(again.Providers) != len(cfg.Providers) {
			t.Fatalf("accepted a configuration with %d entries", len(cfg.Providers))
		}
		for i := range cfg.Providers {
			e := &cfg.Providers[i]
			if e.Name == "" || e.Type == "" || e.Block == nil || len(e.Zones) == 0 || len(e.Images) == 0 || len(e.MachineTypes) == 0 {
				t.Fatalf("accepted an incomplete entry %+v", e)
			}
			if n := e.CreateLimit(); n < 1 || n > 1000 {
				t.Fatalf("entry %s: create limit %d", e.Name, n)
			}
			if cfg.Entry(e.Name) != e {
				t.Fatalf("entry %s is not found by its name", e.Name)
			}
			for _, mt := range e.MachineTypes {
				if mt.Name == "" || mt.MemoryMiB < 64 {
					t.Fatalf("entry %s: accepted machine type %+v", e.Name, mt)
				}
			}
		}
	})
}
