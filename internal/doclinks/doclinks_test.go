package doclinks

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
)

// documents returns the Markdown files whose links are checked, relative to
// root.
func documents(t *testing.T, root string) []string {
	t.Helper()
	docs := []string{"README.md", "CHANGELOG.md"}
	for _, dir := range []string{"docs", "config", "charts", "hack"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".md") {
				rel, err := filepath.Rel(root, path)
				docs = append(docs, rel)
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return docs
}

var (
	fence   = regexp.MustCompile("(?ms)^```.*?^```")
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*$`)
	anchor  = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
	inline  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	// notSlug is what GitHub drops from a heading to make its anchor:
	// everything but letters, digits, '_', '-' and spaces.
	notSlug = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// withoutCode is a document without its fenced code blocks, whose links and
// headings are not the document's.
func withoutCode(text string) string { return fence.ReplaceAllString(text, "") }

// anchors returns the fragments a document defines: its headings as GitHub
// makes them (lower case, punctuation dropped, spaces as '-', "-1", "-2"
// for repeats) and its explicit <a id> anchors.
func anchors(text string) map[string]bool {
	text = withoutCode(text)
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(text, -1) {
		h := inline.ReplaceAllString(m[1], "$1")
		h = strings.ReplaceAll(h, "`", "")
		s := strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
		if n, dup := seen[s]; dup {
			seen[s] = n + 1
			s += "-" + strconv.Itoa(n+1)
		} else {
			seen[s] = 0
		}
		out[s] = true
	}
	for _, m := range anchor.FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	return out
}

// checker finds broken links; it reads each document's anchors once,
// however many links point into it.
type checker struct {
	root    string
	anchors map[string]map[string]bool // by file
}

func newChecker(root string) *checker {
	return &checker{root: root, anchors: map[string]map[string]bool{}}
}

// anchorsOf returns the fragments file defines.
func (c *checker) anchorsOf(file string) (map[string]bool, error) {
	if a, ok := c.anchors[file]; ok {
		return a, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	c.anchors[file] = anchors(string(b))
	return c.anchors[file], nil
}

// brokenLinks returns the relative links of the document at rel (under the
// root) that name no file, or a fragment that file does not define.
func (c *checker) brokenLinks(rel string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(c.root, rel))
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, m := range link.FindAllStringSubmatch(withoutCode(string(b)), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		path, frag, _ := strings.Cut(target, "#")
		file := filepath.Join(c.root, rel)
		if path != "" {
			file = filepath.Join(filepath.Dir(file), path)
		}
		if _, err := os.Stat(file); err != nil {
			bad = append(bad, target+": no such file")
			continue
		}
		if frag == "" || !strings.HasSuffix(file, ".md") {
			continue
		}
		defined, err := c.anchorsOf(file)
		if err != nil {
			return nil, err
		}
		if !defined[frag] {
			bad = append(bad, target+": no such heading or anchor")
		}
	}
	return bad, nil
}

// TestDocumentationLinks: a renamed heading or a moved file breaks the
// links to it without anyone noticing; this finds them.
func TestDocumentationLinks(t *testing.T) {
	root, err := modroot.Find()
	if err != nil {
		t.Fatal(err)
	}
	c := newChecker(root)
	for _, doc := range documents(t, root) {
		bad, err := c.brokenLinks(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Errorf("%s: %s", doc, b)
		}
	}
}

// TestAnchors: the fragments a document defines, as GitHub makes them.
func TestAnchors(t *testing.T) {
	text := "# Pool gateway (ProxyGateway)\n" +
		"## Issue #23 item 1 and #22: where a tunnel's CPU goes (2026-12-05)\n" +
		"### `make bench`\n" +
		"### [Linked](x.md) heading\n" +
		"## Results\n## Results\n" +
		"<a id=\"f8\"></a>\n" +
		"```\n# not a heading\n```\n"
	want := map[string]bool{
		"pool-gateway-proxygateway":                                  true,
		"issue-23-item-1-and-22-where-a-tunnels-cpu-goes-2026-12-05": true,
		"make-bench": true, "linked-heading": true,
		"results": true, "results-1": true, "f8": true,
	}
	if diff := cmp.Diff(want, anchors(text)); diff != "" {
		t.Errorf("anchors (-want +got):\n%s", diff)
	}
}

// TestBrokenLinksAreFound: the check itself, on documents of its own.
func TestBrokenLinksAreFound(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"README.md": "[ok](docs/a.md#first) [self](#top) [gone](docs/none.md) [bad](docs/a.md#second) " +
			"[web](https://example.com/#x) [dir](docs)\n# Top\n```\n[in code](nowhere.md)\n```\n",
		"docs/a.md": "# First\n",
	}
	for name, text := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := newChecker(root).brokenLinks("README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"docs/none.md: no such file", "docs/a.md#second: no such heading or anchor"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("broken links (-want +got):\n%s", diff)
	}
}
