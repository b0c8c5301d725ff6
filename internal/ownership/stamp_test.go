package ownership_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSignedForAnother: a stamp that does not verify for the entry reading
// it is another entry's when it verifies for that entry at the same place;
// only then is it no sign of a lost key.
func TestSignedForAnother(t *testing.T) {
	prod := identity(t, "prod", testKey)
	created := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	kvm2s := prod.NewStamp("kvm2-lab", "host=lab1", "uid-1", "crawl-a-1234abcd", "crawl/a", created)
	lostKey := identity(t, "prod", []byte("another key of thirty-two bytes!")).NewStamp("kvm-lab", "host=lab1", "uid-2", "crawl-b-1234abcd", "crawl/b", created)
	for _, c := range []struct {
		name, reason string
		entries      []string
		place        string
		want         bool
	}{
		{"a sibling's instance", "kvm-lab reads the domain kvm2-lab made on their shared host",
			[]string{"kvm2-lab", "kvm-lab"}, "host=lab1", true},
		{"no sibling of that name", "the entry that signed it is not in the configuration (any more)",
			[]string{"kvm-lab"}, "host=lab1", false},
		{"another place", "a stamp copied to another host verifies for no entry there",
			[]string{"kvm2-lab", "kvm-lab"}, "host=lab2", false},
		{"no entries", "a configuration of one entry has no sibling to ask",
			nil, "host=lab1", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, prod.SignedForAnother(kvm2s, c.entries, c.place)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", c.reason, diff)
			}
		})
	}
	// A lost key: the stamp was signed with another key, and verifies for
	// no entry at all, its own included.
	if prod.SignedForAnother(lostKey, []string{"kvm2-lab", "kvm-lab"}, "host=lab1") {
		t.Error("a stamp of a lost key counted as a sibling's: the loss would go unreported")
	}
}
