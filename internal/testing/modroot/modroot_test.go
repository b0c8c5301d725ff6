package modroot

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFindFromThePackage: go test runs in the package's directory; the root
// found there is the repository's, which holds config/crd/bases.
func TestFindFromThePackage(t *testing.T) {
	root, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	want, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if root != want {
		t.Errorf("Find() = %s, want %s", root, want)
	}
	if _, err := os.Stat(filepath.Join(root, "config", "crd", "bases")); err != nil {
		t.Errorf("the root has no config/crd/bases: %v", err)
	}
}

// TestFrom walks a tree of go.mod files written for the case.
func TestFrom(t *testing.T) {
	const other = "module " + Module + "/tools\n\ngo 1.26.0\n"
	for _, tc := range []struct {
		name   string
		reason string
		files  map[string]string // path under the tree -> contents
		start  string            // directory under the tree to start at
		want   string            // root under the tree; "" for an error
	}{
		{name: "at the root", reason: "go run from make starts at the root",
			files: map[string]string{"go.mod": "module " + Module + "\n"}, start: ".", want: "."},
		{name: "in a package", reason: "go test starts in the package's directory",
			files: map[string]string{"go.mod": "module " + Module + "\n", "internal/x/x.go": "package x\n"},
			start: "internal/x", want: "."},
		{name: "past another module", reason: "tools/ and the client check are modules of their own, under the root",
			files: map[string]string{"go.mod": "module " + Module + "\n", "tools/go.mod": other, "tools/sub/a.go": "package sub\n"},
			start: "tools/sub", want: "."},
		{name: "a module whose path only starts alike", reason: "the directive is compared whole",
			files: map[string]string{"go.mod": other, "a/a.go": "package a\n"}, start: "a", want: ""},
		{name: "quoted, with a comment", reason: "the go command accepts both",
			files: map[string]string{"go.mod": "// the operator\nmodule \"" + Module + "\" // root\n\ngo 1.26.0\n", "a/a.go": "package a\n"},
			start: "a", want: "."},
		{name: "no go.mod", reason: "outside the repository there is no root",
			files: map[string]string{"a/a.go": "package a\n"}, start: "a", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := t.TempDir()
			for p, body := range tc.files {
				path := filepath.Join(tree, p)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := From(filepath.Join(tree, tc.start))
			if tc.want == "" {
				// The temporary directory's parents hold no go.mod of the
				// module, so the walk must end in an error.
				if err == nil {
					t.Fatalf("From = %s, want an error (%s)", got, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("From: %v (%s)", err, tc.reason)
			}
			if diff := cmp.Diff(filepath.Join(tree, tc.want), got); diff != "" {
				t.Errorf("From (-want +got), %s:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestModulePath reads module directives as the go command writes them.
func TestModulePath(t *testing.T) {
	for _, tc := range []struct {
		gomod, want, reason string
	}{
		{"module a/b\n", "a/b", "the plain directive"},
		{"module \"a/b\"\n", "a/b", "a quoted path"},
		{"module a/b // comment\n", "a/b", "a trailing comment"},
		{"go 1.26.0\n\nmodule a/b\n", "a/b", "not on the first line"},
		{"modulex a/b\n", "", "another word that starts with module"},
		{"go 1.26.0\n", "", "no directive"},
	} {
		if got := modulePath([]byte(tc.gomod)); got != tc.want {
			t.Errorf("modulePath(%q) = %q, want %q (%s)", tc.gomod, got, tc.want, tc.reason)
		}
	}
}
