package poll

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// disguisedSleep is a receive from a timer's channel as a statement of its
// own (`<-t.C`, `<-time.NewTimer(d).C`): a sleep that no context can end.
// golangci-lint's forbidigo rules catch time.Sleep and time.After; this shape
// is beyond a pattern on names, so this test looks for it.
var disguisedSleep = regexp.MustCompile(`^\s*<-\s*[\w.]+(\([^)]*\))?\.C\s*$`)

// TestNoDisguisedSleeps scans every Go file of the repository.
func TestNoDisguisedSleeps(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go"):
			return nil
		}
		files++
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if disguisedSleep.MatchString(line) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d: %q waits on a timer no context can end; poll for a condition (internal/testing/poll) or select on ctx.Done()", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("scanned %d Go files: the walk missed the repository", files)
	}
}
