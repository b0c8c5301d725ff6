package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1" //nolint:revive // goimports writes this alias: a last path element like v1 reads as a major version, not a package name.
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// fakeBinary writes bytes that stand for a static binary.
func fakeBinary(t *testing.T) (string, []byte) {
	t.Helper()
	content := []byte("\x7fELF not really, but bytes the image must carry unchanged")
	p := filepath.Join(t.TempDir(), "egress-proxies-operator")
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, content
}

// layerFile is one entry of a layer as the runtime sees it.
type layerFile struct {
	Name    string
	Mode    int64
	UID     int
	GID     int
	Content string
}

func layerFiles(t *testing.T, l v1.Layer) []layerFile {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	var out []layerFile
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, layerFile{Name: hdr.Name, Mode: hdr.Mode, UID: hdr.Uid, GID: hdr.Gid, Content: string(b)})
	}
}

func TestBuild(t *testing.T) {
	bin, content := fakeBinary(t)
	cases := []struct {
		name, reason string
		path         string
		wantFile     string
	}{
		{name: "operator", reason: "the Deployment runs /egress-proxies-operator as its command", path: "/egress-proxies-operator", wantFile: "egress-proxies-operator"},
		{name: "nested", reason: "the pause image or another tool may live below /", path: "/bin/pause", wantFile: "bin/pause"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			img, err := Build(Spec{Binary: bin, Path: tc.path, OS: "linux", Arch: "amd64", Labels: map[string]string{"k": "v"}})
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			type config struct {
				OS, Arch, User, WorkingDir string
				Entrypoint, Cmd            []string
				Labels                     map[string]string
			}
			want := config{OS: "linux", Arch: "amd64", User: "65532:65532", WorkingDir: "/", Entrypoint: []string{tc.path}, Labels: map[string]string{"k": "v"}}
			got := config{OS: cf.OS, Arch: cf.Architecture, User: cf.Config.User, WorkingDir: cf.Config.WorkingDir, Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd, Labels: cf.Config.Labels}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s: config (-want +got):\n%s", tc.reason, d)
			}
			layers, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			if len(layers) != 1 {
				t.Fatalf("%s: %d layers, want one (FROM scratch, one layer)", tc.reason, len(layers))
			}
			wantFiles := []layerFile{{Name: tc.wantFile, Mode: 0o755, Content: string(content)}}
			if d := cmp.Diff(wantFiles, layerFiles(t, layers[0])); d != "" {
				t.Errorf("%s: layer (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

func TestBuildIsReproducible(t *testing.T) {
	bin, _ := fakeBinary(t)
	digest := func() v1.Hash {
		img, err := Build(Spec{Binary: bin, Path: "/egress-proxies-operator", OS: "linux", Arch: "amd64"})
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if a, b := digest(), digest(); a != b {
		t.Errorf("two builds of one binary gave %s and %s: timestamps must be fixed", a, b)
	}
}

func TestBuildRefuses(t *testing.T) {
	bin, _ := fakeBinary(t)
	cases := []struct {
		name, reason string
		spec         Spec
		want         string
	}{
		{name: "relative path", reason: "an entrypoint must be absolute", spec: Spec{Binary: bin, Path: "egress-proxies-operator"}, want: "clean absolute"},
		{name: "root", reason: "/ is no file", spec: Spec{Binary: bin, Path: "/"}, want: "clean absolute"},
		{name: "unclean", reason: "the entrypoint and the layer entry must name the same file", spec: Spec{Binary: bin, Path: "/a/../b"}, want: "clean absolute"},
		{name: "missing binary", reason: "say which file is missing rather than build an empty image", spec: Spec{Binary: filepath.Join(t.TempDir(), "none"), Path: "/x"}, want: "reading the binary"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err = %v, want one containing %q", tc.reason, err, tc.want)
			}
		})
	}
}

// TestTarballIsDockerFormat checks what `docker load` and `ctr images
// import` read: a manifest.json naming the tag, the config and the layer.
func TestTarballIsDockerFormat(t *testing.T) {
	bin, content := fakeBinary(t)
	out := filepath.Join(t.TempDir(), "image.tar")
	var stdout bytes.Buffer
	if err := run([]string{"build", "--binary", bin, "--tag", "egress-proxies-operator:dev", "--out", out}, &stdout); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "egress-proxies-operator:dev") {
		t.Errorf("output %q does not name the tag", stdout.String())
	}
	if entries, err := os.ReadDir(filepath.Dir(out)); err != nil || len(entries) != 1 {
		t.Errorf("want the tarball alone in its directory, got %v (%v)", entries, err)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(out) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || len(m[0].Layers) != 1 {
		t.Fatalf("manifest.json = %+v, want one image with one layer", m)
	}
	if d := cmp.Diff([]string{"egress-proxies-operator:dev"}, m[0].RepoTags); d != "" {
		t.Errorf("RepoTags (-want +got):\n%s", d)
	}
	tag, err := name.NewTag("egress-proxies-operator:dev")
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := layerFiles(t, layers[0])
	if len(files) != 1 || files[0].Content != string(content) {
		t.Errorf("the tarball's layer holds %+v, want the binary alone", files)
	}
}

// TestPush pushes to an in-memory registry on loopback and pulls back.
func TestPush(t *testing.T) {
	bin, _ := fakeBinary(t)
	out := filepath.Join(t.TempDir(), "image.tar")
	if err := run([]string{"build", "--binary", bin, "--out", out}, io.Discard); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials of the machine's
	ref := strings.TrimPrefix(srv.URL, "http://") + "/egress/egress-proxies-operator:v0.1.0"
	var stdout bytes.Buffer
	if err := run([]string{"push", "--tarball", out, "--image", ref}, &stdout); err != nil {
		t.Fatal(err)
	}
	pulledRef, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(pulledRef)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := pulled.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("pulled image's user = %q", cf.Config.User)
	}
	d, err := pulled.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), d.String()) {
		t.Errorf("push printed %q, want the pulled digest %s", stdout.String(), d)
	}
}

func TestRunRefuses(t *testing.T) {
	cases := []struct {
		name, reason string
		args         []string
		want         string
	}{
		{name: "none", reason: "say what exists", args: nil, want: "no subcommand"},
		{name: "unknown", reason: "say what exists", args: []string{"load"}, want: "unknown subcommand"},
		{name: "build without out", reason: "no default output path to clobber", args: []string{"build", "--binary", "x"}, want: "needs --binary and --out"},
		{name: "push without image", reason: "never guess a registry", args: []string{"push", "--tarball", "x"}, want: "needs --tarball and --image"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err = %v, want one containing %q", tc.reason, err, tc.want)
			}
		})
	}
}
