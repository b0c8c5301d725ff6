package provider_test

import (
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// TestInstanceHashIsStable pins InstanceHash (FNV-1a 64 of the owner uid
// and the name, each followed by a zero byte), the hash both VM types
// had each of their own: a Create in flight across an upgrade plans its
// node, VMID and MAC again, so a change must be deliberate.
func TestInstanceHashIsStable(t *testing.T) {
	for _, tc := range []struct {
		ownerUID, name string
		want           uint64
	}{
		{"owner-uid-1", "proxy-a", 0x76dfd612c75d4ffd},
		{"", "", 0x08328807b4eb6fed},
	} {
		if got := provider.InstanceHash(tc.ownerUID, tc.name); got != tc.want {
			t.Errorf("InstanceHash(%q, %q) = %#x, want %#x", tc.ownerUID, tc.name, got, tc.want)
		}
	}
}
