package modroot

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Module is the module path that the go.mod of the root declares; the
// repository's other modules (tools/, the simulator's client check, the
// envtest builds under hack/) declare others and are passed over.
const Module = "github.com/egress-proxies/egress-proxies-operator"

// Find returns the repository's root: the nearest directory at or above the
// working directory whose go.mod declares Module.
func Find() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	return From(wd)
}

// From returns the nearest directory at or above dir whose go.mod declares
// Module.
func From(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	for d := abs; ; {
		b, err := os.ReadFile(filepath.Join(d, "go.mod")) //nolint:gosec // G304: a go.mod above the caller's own directory.
		switch {
		case err == nil && modulePath(b) == Module:
			return d, nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("finding the module root: %w", err)
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod of module %s at or above %s", Module, abs)
		}
		d = parent
	}
}

// modulePath is the path of the module directive of go.mod's text, or ""
// when there is none. It reads the directive as the go command writes it
// (module path, optionally quoted, optionally followed by a comment).
func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		rest, _, _ = strings.Cut(rest, "//")
		rest = strings.TrimSpace(rest)
		if p, err := strconv.Unquote(rest); err == nil {
			return p
		}
		return rest
	}
	return ""
}
