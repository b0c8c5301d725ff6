package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1" //nolint:revive // goimports writes this alias: a last path element like v1 reads as a major version, not a package name.
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// nonroot is the user and group the image runs as: the numeric user the
// Deployment's and the proxy pods' runAsNonRoot needs (distroless's nonroot).
const nonroot = "65532:65532"

// epoch is every timestamp in the image (the layer's file and the config's
// created): the same binary gives the same digest.
var epoch = time.Unix(0, 0).UTC()

// Spec says what goes into an image.
type Spec struct {
	// Binary is the static executable on disk.
	Binary string
	// Path is where it lands in the image, absolute ("/egress-proxies-operator").
	Path string
	// OS and Arch are the platform the binary was built for.
	OS, Arch string
	// Labels are the image config's labels (org.opencontainers.image.*).
	Labels map[string]string
}

// Build returns the image of spec: FROM scratch, one layer with the binary at
// spec.Path (mode 0755, root-owned), user 65532:65532, entrypoint the binary.
func Build(spec Spec) (v1.Image, error) {
	if !path.IsAbs(spec.Path) || path.Clean(spec.Path) != spec.Path || spec.Path == "/" {
		return nil, fmt.Errorf("image path %q: want a clean absolute file path", spec.Path)
	}
	bin, err := os.ReadFile(spec.Binary)
	if err != nil {
		return nil, fmt.Errorf("reading the binary: %w", err)
	}
	layerTar, err := singleFileTar(spec.Path[1:], bin, 0o755)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("building the layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("appending the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = spec.OS, spec.Arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config.User = nonroot
	cf.Config.Entrypoint = []string{spec.Path}
	cf.Config.Cmd = nil
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = spec.Labels
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the config: %w", err)
	}
	return img, nil
}

// singleFileTar is a tar stream holding one regular file, root-owned, with
// fixed timestamps, and no directory entries (the runtime creates /).
func singleFileTar(name string, content []byte, mode int64) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Mode:     mode,
		Size:     int64(len(content)),
		ModTime:  epoch,
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, fmt.Errorf("writing the layer: %w", err)
	}
	if _, err := tw.Write(content); err != nil {
		return nil, fmt.Errorf("writing the layer: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("writing the layer: %w", err)
	}
	return buf.Bytes(), nil
}

// WriteTarball writes img as a docker-format tarball (what `docker save`
// writes) tagged tag, through a temporary file renamed into place, so that
// an interrupted build never leaves a partial tarball at out and two builds
// at once never write into one file.
func WriteTarball(img v1.Image, tag, out string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("tag %q: %w", tag, err)
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }()
	if err := tarball.Write(ref, img, f); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	// CreateTemp's 0600 would keep `docker load` by another user out.
	if err := os.Chmod(tmp, 0o644); err != nil { //nolint:gosec // G302: an image is no secret.
		return err
	}
	return os.Rename(tmp, out)
}

// Push uploads the image of a tarball that WriteTarball wrote to the
// registry of ref, with the credentials of the docker configuration
// (~/.docker/config.json, $DOCKER_CONFIG), as `docker push` would.
func Push(tarballPath, ref string) (v1.Hash, error) {
	dst, err := name.ParseReference(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image %q: %w", ref, err)
	}
	img, err := tarball.ImageFromPath(tarballPath, nil)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("reading %s: %w", tarballPath, err)
	}
	if err := remote.Write(dst, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing to %s: %w", dst, err)
	}
	return img.Digest()
}
