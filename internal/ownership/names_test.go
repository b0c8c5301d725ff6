package ownership_test

import (
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
)

// TestSignedNames: a signed name gives back its name for the purpose and
// entry it was made for, and nothing for any other reading of it.
func TestSignedNames(t *testing.T) {
	prod := identity(t, "prod", testKey)
	signed := prod.SignedName("seed", "lab", "crawl-a-1234abcd")
	if name, ok := prod.NameOfSigned("seed", "lab", signed); !ok || name != "crawl-a-1234abcd" {
		t.Fatalf("NameOfSigned(%q) = %q, %v; want the name back", signed, name, ok)
	}
	for _, c := range []struct {
		name, reason string
		id           *ownership.Identity
		purpose      string
		entry        string
		signed       string
	}{
		{"unsigned", "a file someone named like a seed", prod, "seed", "lab", "crawl-a-1234abcd"},
		{"a made-up token", "the right shape is not enough", prod, "seed", "lab", "crawl-a-1234abcd-abcdefghijklmnop"},
		{"another name", "the token of one name on another", prod, "seed", "lab", "crawl-b-1234abcd" + signed[len("crawl-a-1234abcd"):]},
		{"another entry", "two entries share the storage", prod, "seed", "lab2", signed},
		{"another purpose", "tokens of one kind of thing are not another's", prod, "disk", "lab", signed},
		{"another installation", "staging's sweep reads production's seeds", identity(t, "staging", []byte("staging's key of thirty-two byte")), "seed", "lab", signed},
		{"only a token", "no name before it", prod, "seed", "lab", signed[len("crawl-a-1234abcd"):]},
		{"empty", "", prod, "seed", "lab", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if name, ok := c.id.NameOfSigned(c.purpose, c.entry, c.signed); ok {
				t.Errorf("NameOfSigned(%q) = %q, true; want false: %s", c.signed, name, c.reason)
			}
		})
	}
}
