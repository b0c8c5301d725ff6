package proxmox

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Citations in Go code, and the anchors docs/proxmox-behaviour.md gives them.
var (
	factCitation = regexp.MustCompile(`\bF([1-9][0-9]?)\b`)
	stepCitation = regexp.MustCompile(`\b([Cc]reate|[Gg]et|[Dd]elete) steps? ([0-9]+)(?: (?:to|and) ([0-9]+))?`)
	oldCitation  = regexp.MustCompile(`\bPart [1-4]\b|proxmox-facts\.md`)
	docAnchor    = regexp.MustCompile(`<a id="([a-z0-9-]+)"></a>`)
)

// TestCitationsResolve keeps the repository self-contained: every fact
// ("F8") and step ("create step 6") cited in Go code has a section in
// docs/proxmox-behaviour.md, and no comment cites the reference document that
// the repository does not hold.
func TestCitationsResolve(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "proxmox-behaviour.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range docAnchor.FindAllStringSubmatch(string(doc), -1) {
		anchors[m[1]] = true
	}
	cited := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(src), "\n") {
			for _, m := range factCitation.FindAllStringSubmatch(line, -1) {
				cited++
				if !anchors["f"+m[1]] {
					t.Errorf("%s:%d cites F%s, which docs/proxmox-behaviour.md does not describe", rel, i+1, m[1])
				}
			}
			for _, m := range stepCitation.FindAllStringSubmatch(line, -1) {
				cited++
				for _, n := range []string{m[2], m[3]} {
					if n != "" && !anchors[strings.ToLower(m[1])+"-step-"+n] {
						t.Errorf("%s:%d cites %s step %s, which docs/proxmox-behaviour.md does not describe", rel, i+1, m[1], n)
					}
				}
			}
			if m := oldCitation.FindString(line); m != "" {
				t.Errorf("%s:%d cites %q of a document outside the repository; cite docs/proxmox-behaviour.md", rel, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cited < 100 {
		t.Errorf("found only %d citations: the scan is broken", cited)
	}
}
