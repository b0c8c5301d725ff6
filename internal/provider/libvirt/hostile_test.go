package libvirt

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// TestShellQuotingHostileNames drives the kvm type's virsh commands through
// the real sshd with names built to break out of a shell: no command in
// them runs on the host, and each reaches virsh as the one argument it is.
func TestShellQuotingHostileNames(t *testing.T) {
	l := startLab(t)
	e := labEntry(t, l, TypeKVM)
	p := newProvider(t, e)
	h := blockOf(t, e).Hosts[0]
	dir := t.TempDir()
	marker := filepath.Join(dir, "pwned")
	hostile := []struct {
		name, why string
	}{
		{"$(touch " + marker + ")", "command substitution"},
		{"`touch " + marker + "`", "backticks"},
		{"x'; touch " + marker + "; echo '", "a closing single quote"},
		{"x\"; touch " + marker + "; echo \"", "a closing double quote"},
		{"x\ntouch " + marker, "a newline"},
		{"x; touch " + marker, "a command separator"},
		{"x && touch " + marker, "an and-list"},
		{"x | touch " + marker, "a pipe"},
		{"-x; touch " + marker, "a leading dash"},
		{"'; rm -rf " + dir + " #", "the classic"},
	}
	for _, c := range hostile {
		t.Run(c.why, func(t *testing.T) {
			ctx := ctxT(t)
			// Domain operations: the name is a domain that does not exist.
			if _, err := p.drv.domainXML(ctx, h, c.name); !errors.Is(err, errNoDomain) {
				t.Errorf("domainXML(%q) = %v, want errNoDomain (the name reached virsh whole)", c.name, err)
			}
			if err := p.drv.destroyDomain(ctx, h, c.name); err == nil {
				t.Errorf("destroyDomain(%q) succeeded", c.name)
			}
			// Volume operations, with the name as the volume and as the pool.
			if _, err := p.drv.volumeXML(ctx, h, l.Pool, c.name); !errors.Is(err, errNoVolume) {
				t.Errorf("volumeXML(%q) = %v, want errNoVolume", c.name, err)
			}
			if err := p.drv.deleteVolume(ctx, h, c.name, "x"); !errors.Is(err, errNoPool) {
				t.Errorf("deleteVolume in pool %q = %v, want errNoPool", c.name, err)
			}
			if err := p.drv.networkActive(ctx, h, c.name); !errors.Is(err, errNoNetwork) {
				t.Errorf("networkActive(%q) = %v, want errNoNetwork", c.name, err)
			}
			// A Delete of an instance with that name finds nothing and
			// succeeds.
			if err := p.Delete(ctx, provider.ID("kvm1/"+strings.ReplaceAll(c.name, "/", "_"))); err != nil && !provider.IsPermanent(err) {
				t.Errorf("Delete: %v", err)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("the host ran a command from the name %q", c.name)
			}
			if _, err := os.Stat(dir); err != nil {
				t.Fatalf("the host ran rm from the name %q: %v", c.name, err)
			}
		})
	}
	// A real volume whose name holds every hostile character is created,
	// read and deleted as itself.
	name := "vol $(x) `y` 'z' \"w\" ;&|.qcow2"
	doc, err := rawXML(name, 4096)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := p.drv.createVolume(ctx, h, l.Pool, doc); err != nil {
		t.Fatalf("createVolume(%q): %v", name, err)
	}
	got, err := p.drv.volumeXML(ctx, h, l.Pool, name)
	if err != nil {
		t.Fatalf("volumeXML(%q): %v", name, err)
	}
	if v, err := parseVolume(got); err != nil || v.Name != name || v.Capacity != 4096 {
		t.Errorf("volume read back = %+v, %v; want %q of 4096 bytes", v, err, name)
	}
	if err := p.drv.deleteVolume(ctx, h, l.Pool, name); err != nil {
		t.Errorf("deleteVolume(%q): %v", name, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the host ran a command from a volume name")
	}
}
