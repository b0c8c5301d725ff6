package proxmox

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// privilegeName is a Proxmox privilege as the docs and examples write it.
var privilegeName = regexp.MustCompile(`\b(?:VM|Datastore|SDN|Sys)\.[A-Za-z.]*[A-Za-z]`)

// TestPrivilegesWrittenElsewhere: the places that tell a person which role
// to give the token list exactly RootPrivileges (the docs may keep their
// prose, but not a list of their own).
func TestPrivilegesWrittenElsewhere(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	tests := []struct {
		file, from, to string
		reason         string
	}{
		{file: "docs/proxmox.md", from: "One role on\n`/` with", to: "; and on",
			reason: "the user guide's role on / is what the provider needs"},
		{file: "docs/proxmox-behaviour.md", from: "needs one role on `/` with", to: ", plus, on",
			reason: "the setup facts' role on / is what the provider needs"},
		{file: "cmd/pvesim/example.yaml", from: "- path: /\n        privileges: [", to: "]",
			reason: "the simulator's example token has the provider's role"},
	}
	want := slices.Sorted(slices.Values(RootPrivileges))
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(root, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			_, rest, ok := strings.Cut(string(b), tc.from)
			if !ok {
				t.Fatalf("%s has no %q: update this test with the text", tc.file, tc.from)
			}
			list, _, ok := strings.Cut(rest, tc.to)
			if !ok {
				t.Fatalf("%s has no %q after %q", tc.file, tc.to, tc.from)
			}
			got := slices.Sorted(slices.Values(privilegeName.FindAllString(list, -1)))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("privileges in %s mismatch (-RootPrivileges +file) (%s):\n%s", tc.file, tc.reason, diff)
			}
		})
	}
}
