package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

const usage = `usage:
  image build --binary FILE --tag NAME:TAG --out FILE [--path /NAME] [--version V] [--os OS] [--arch ARCH]
  image push --tarball FILE --image REGISTRY/REPO:TAG`

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("no subcommand\n%s", usage)
	}
	switch args[0] {
	case "build":
		return runBuild(args[1:], stdout)
	case "push":
		return runPush(args[1:], stdout)
	default:
		return fmt.Errorf("unknown subcommand %q\n%s", args[0], usage)
	}
}

func runBuild(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	binary := fs.String("binary", "", "the static binary to put in the image")
	imgPath := fs.String("path", "/egress-proxies-operator", "where the binary lands in the image (its entrypoint)")
	tag := fs.String("tag", "egress-proxies-operator:dev", "the tarball's image name")
	out := fs.String("out", "", "the docker-format tarball to write")
	version := fs.String("version", "dev", "the org.opencontainers.image.version label")
	goos := fs.String("os", runtime.GOOS, "the binary's GOOS")
	goarch := fs.String("arch", runtime.GOARCH, "the binary's GOARCH")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binary == "" || *out == "" {
		return fmt.Errorf("build needs --binary and --out\n%s", usage)
	}
	img, err := Build(Spec{
		Binary: *binary,
		Path:   *imgPath,
		OS:     *goos,
		Arch:   *goarch,
		Labels: map[string]string{
			"org.opencontainers.image.title":   "egress-proxies-operator",
			"org.opencontainers.image.source":  "https://github.com/egress-proxies/egress-proxies-operator",
			"org.opencontainers.image.version": *version,
		},
	})
	if err != nil {
		return err
	}
	if err := WriteTarball(img, *tag, *out); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s: image %s (%s)\n", *out, *tag, digest)
	return err
}

func runPush(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	tb := fs.String("tarball", "", "a tarball that `image build` wrote")
	ref := fs.String("image", "", "where to push it, REGISTRY/REPO:TAG")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tb == "" || *ref == "" {
		return fmt.Errorf("push needs --tarball and --image\n%s", usage)
	}
	digest, err := Push(*tb, *ref)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "pushed %s@%s\n", *ref, digest)
	return err
}
