package ownership_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
)

// TestStamp: a stamp carries this installation's ID and the creation time as
// stored (UTC, whole seconds), verifies where it was made, and only there.
func TestStamp(t *testing.T) {
	prod := identity(t, "prod", testKey)
	staging := identity(t, "staging", []byte("staging's key of thirty-two byte"))
	created := time.Date(2026, 12, 1, 7, 0, 0, 999, time.FixedZone("x", 3600))
	s := prod.NewStamp("pve", "vmid=150", "uid-a", "crawl-a", "crawl/a", created)

	want := ownership.Stamp{Installation: "prod", OwnerUID: "uid-a", Name: "crawl-a", Owner: "crawl/a",
		CreatedAt: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC), Signature: s.Signature}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("NewStamp (-want +got):\n%s", diff)
	}
	if s.Signature != prod.Sign(s.Mark("pve", "vmid=150")) {
		t.Errorf("the stamp's signature is not that of its Mark at its entry and place")
	}
	for _, c := range []struct {
		name, reason string
		id           *ownership.Identity
		stamp        ownership.Stamp
		entry, place string
		want         error
	}{
		{"where it was made", "the operator reads back its own stamp", prod, s, "pve", "vmid=150", nil},
		{"another place", "a stamp copied onto another VM", prod, s, "pve", "vmid=151", ownership.ErrBadSignature},
		{"another entry", "two entries that share a cluster", prod, s, "pve2", "vmid=150", ownership.ErrBadSignature},
		{"another installation", "staging reads production's VM", staging, s, "pve", "vmid=150", ownership.ErrOtherInstallation},
		{"unsigned", "a stamp written by hand", prod, func() ownership.Stamp { u := s; u.Signature = ""; return u }(), "pve", "vmid=150", ownership.ErrUnsigned},
		{"edited", "the owner's UID changed by hand", prod, func() ownership.Stamp { u := s; u.OwnerUID = "uid-b"; return u }(), "pve", "vmid=150", ownership.ErrBadSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.id.VerifyStamp(c.stamp, c.entry, c.place); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Errorf("VerifyStamp = %v, want %v (%s)", err, c.want, c.reason)
			}
		})
	}
}
