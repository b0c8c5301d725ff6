package manifests

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// checkImageBuild checks that `make image` builds what the Deployment (and
// the kubernetes provider's pods, which run the image with the proxy
// subcommand as their only arguments) expect: the static binary of
// ./cmd/egress-proxies-operator put at the path the Deployment runs. hack/image's
// own tests check the image's user, entrypoint and layer.
func checkImageBuild(makefile string, c *corev1.Container) error {
	var errs []error
	goBuild := regexp.MustCompile(`(?m)^GO_BUILD\s*=\s*(.*)$`).FindStringSubmatch(makefile)
	if len(goBuild) < 2 || !strings.Contains(goBuild[1], "CGO_ENABLED=0") || !strings.Contains(goBuild[1], "-trimpath") {
		errs = append(errs, errors.New("GO_BUILD must build with CGO_ENABLED=0 and -trimpath (a static binary in a FROM-scratch image)"))
	}
	recipe := regexp.MustCompile(`(?ms)^image:.*?\n((?:\t.*\n)+)`).FindStringSubmatch(makefile)
	if recipe == nil {
		return errors.Join(append(errs, errors.New("no image target"))...)
	}
	if !strings.Contains(recipe[1], "$(GO_BUILD) -o $(IMAGE_BIN) ./cmd/egress-proxies-operator") {
		errs = append(errs, errors.New("the image target must build ./cmd/egress-proxies-operator with $(GO_BUILD) into $(IMAGE_BIN)"))
	}
	path := regexp.MustCompile(`hack/image build --binary \$\(IMAGE_BIN\) --path (\S+)`).FindStringSubmatch(recipe[1])
	switch {
	case path == nil:
		errs = append(errs, errors.New("the image target must run hack/image build --binary $(IMAGE_BIN) --path <the Deployment's command>"))
	case len(c.Command) == 0 || c.Command[0] != path[1]:
		errs = append(errs, fmt.Errorf("the Deployment runs %q, the image's entrypoint is %q", c.Command, path[1]))
	}
	return errors.Join(errs...)
}

// TestImageBuild checks the Makefile's image target against config/default's
// Deployment, and that the check catches what it is meant to.
func TestImageBuild(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := decode(decoder(t), renderDocs(t, "config/default"))
	if err != nil {
		t.Fatal(err)
	}
	_, c, err := operator(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkImageBuild(string(data), c); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, reason, old, new, want string
	}{
		{"cgo on", "a cgo binary does not run in a FROM-scratch image", "CGO_ENABLED=0 $(GO) build", "CGO_ENABLED=1 $(GO) build", "CGO_ENABLED=0"},
		{"binary moved", "the Deployment's command names the binary's path", "--path /egress-proxies-operator", "--path /manager", `the Deployment runs`},
		{"another package", "the image carries the operator", "-o $(IMAGE_BIN) ./cmd/egress-proxies-operator", "-o $(IMAGE_BIN) ./cmd/pvesim", "must build ./cmd/egress-proxies-operator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			broken := strings.ReplaceAll(string(data), tt.old, tt.new)
			if broken == string(data) {
				t.Fatalf("the Makefile has no %q to break", tt.old)
			}
			err := checkImageBuild(broken, c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s (%s): got %v, want an error containing %q", tt.name, tt.reason, err, tt.want)
			}
		})
	}
}
