package manifests

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// checkDockerfile checks that the image the Dockerfile builds is what the
// Deployment (and the kubernetes provider's pods, which run it with the
// proxy subcommand as their only arguments) expect: a static binary at the
// path the Deployment runs, as user 65532, started by ENTRYPOINT.
func checkDockerfile(dockerfile string, c *corev1.Container, uid int64) error {
	var from, user, entrypoint string
	var build, copies []string
	// Join continuation lines, then read the instructions of the last stage.
	text := strings.ReplaceAll(dockerfile, "\\\n", " ")
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		instr, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			from, user, entrypoint, copies = strings.TrimSpace(rest), "", "", nil
		case "USER":
			user = strings.TrimSpace(rest)
		case "ENTRYPOINT":
			entrypoint = strings.TrimSpace(rest)
		case "COPY":
			if strings.HasPrefix(rest, "--from=builder ") {
				copies = append(copies, rest)
			}
		case "RUN":
			if strings.Contains(rest, "go build") {
				build = append(build, rest)
			}
		}
	}
	var errs []error
	if !strings.HasPrefix(from, "gcr.io/distroless/static") {
		errs = append(errs, fmt.Errorf("final stage FROM %q: want gcr.io/distroless/static:nonroot (a static binary needs no more)", from))
	}
	if want := fmt.Sprintf("%d:%d", uid, uid); user != want {
		errs = append(errs, fmt.Errorf("final stage USER %q: want %s, the Deployment's runAsUser", user, want))
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || len(ep) != 1 {
		errs = append(errs, fmt.Errorf("final stage ENTRYPOINT %q: want the binary alone, in exec form, so that pod args (proxy ...) reach it", entrypoint))
	} else if len(c.Command) > 0 && c.Command[0] != ep[0] {
		errs = append(errs, fmt.Errorf("the Deployment runs %q, the image's ENTRYPOINT is %q", c.Command[0], ep[0]))
	}
	// The binary the builder writes (-o <out>) is copied to the ENTRYPOINT.
	ok := false
	for _, b := range build {
		f := strings.Fields(b)
		out := ""
		for i := range len(f) - 1 {
			if f[i] == "-o" {
				out = f[i+1]
			}
		}
		for _, c := range copies {
			cf := strings.Fields(c)
			ok = ok || (strings.Contains(b, "CGO_ENABLED=0") && strings.Contains(b, "-trimpath") &&
				strings.HasSuffix(b, " ./cmd/egress-proxies-operator") && len(ep) == 1 &&
				len(cf) == 3 && cf[1] == out && cf[2] == ep[0])
		}
	}
	if !ok {
		errs = append(errs, errors.New("no RUN builds ./cmd/egress-proxies-operator with CGO_ENABLED=0 and -trimpath into the ENTRYPOINT's path"))
	}
	return errors.Join(errs...)
}

// TestDockerfile checks the Dockerfile against config/default's Deployment,
// and that the check catches what it is meant to.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
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
	const uid = 65532
	if err := checkDockerfile(string(data), c, uid); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		reason string
		old    string
		new    string
		want   string
	}{
		{"root user", "the Deployment's runAsNonRoot refuses an image that runs as root", "USER 65532:65532", "USER root", `USER "root"`},
		{"shell form ENTRYPOINT", "a shell form ignores the pod's args, and distroless has no shell", `ENTRYPOINT ["/egress-proxies-operator"]`, "ENTRYPOINT /egress-proxies-operator", "exec form"},
		{"binary moved", "the Deployment's command names the binary's path", `ENTRYPOINT ["/egress-proxies-operator"]`, `ENTRYPOINT ["/manager"]`, `the Deployment runs "/egress-proxies-operator"`},
		{"binary copied elsewhere", "the ENTRYPOINT must name the file the builder produced", "/out/egress-proxies-operator /egress-proxies-operator", "/out/egress-proxies-operator /bin/egress-proxies-operator", "into the ENTRYPOINT's path"},
		{"cgo on", "a cgo binary does not run on distroless/static", "CGO_ENABLED=0", "CGO_ENABLED=1", "CGO_ENABLED=0"},
		{"full base image", "the final stage is distroless", "FROM gcr.io/distroless/static:nonroot", "FROM debian:12", "final stage FROM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			broken := strings.ReplaceAll(string(data), tt.old, tt.new)
			if broken == string(data) {
				t.Fatalf("the Dockerfile has no %q to break", tt.old)
			}
			err := checkDockerfile(broken, c, uid)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s (%s): got %v, want an error containing %q", tt.name, tt.reason, err, tt.want)
			}
		})
	}
}
