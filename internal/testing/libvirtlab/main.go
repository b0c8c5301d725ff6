package libvirtlab

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// nsEnv marks a test process that Main has already moved into the lab's
// namespaces; guestImageEnv and guestImageErrEnv carry the guest image's
// directory, or why it could not be built, from Main into them.
const (
	nsEnv            = "EGRESS_LIBVIRTLAB_NAMESPACE"
	guestImageEnv    = "EGRESS_LIBVIRTLAB_GUEST_IMAGE"
	guestImageErrEnv = "EGRESS_LIBVIRTLAB_GUEST_IMAGE_ERROR"
)

// Main runs the package's tests inside a new network namespace and a
// private mount namespace; call it from TestMain:
//
//	func TestMain(m *testing.M) { libvirtlab.Main(m) }
//
// It replaces the test process by `unshare --net --mount --propagation
// private` running the same test binary with the same arguments (the process
// id stays the same, so `go test` timeouts and signals reach the tests), then
// brings loopback up and runs the tests. In -short mode it runs the tests
// where they are, and Start skips.
//
// It exits the process with a message when the machine cannot run the lab
// (not root, no unshare): the lab's tests fail, they never pass by skipping.
func Main(m *testing.M) {
	flag.Parse()
	if os.Getenv(nsEnv) == "1" {
		if err := run("ip", "link", "set", "lo", "up"); err != nil {
			fmt.Fprintf(os.Stderr, "libvirtlab: bringing loopback up in the lab's network namespace: %v\n", err)
			os.Exit(1)
		}
		os.Exit(m.Run())
	}
	if testing.Short() {
		os.Exit(m.Run())
	}
	// The guest image is built here, before the namespaces: inside them
	// there is no route to the apt sources. Cached, this costs a few
	// milliseconds; a failure is kept for the Start that needs the image.
	var imageEnv string
	began := time.Now()
	if dir, err := BuildGuestImage(context.Background()); err != nil {
		imageEnv = guestImageErrEnv + "=" + err.Error()
	} else {
		imageEnv = guestImageEnv + "=" + dir
		if took := time.Since(began); took > time.Second {
			fmt.Fprintf(os.Stderr, "libvirtlab: built the guest image %s in %s\n", dir, took.Round(time.Second))
		}
	}
	if err := enterNamespaces(imageEnv); err != nil {
		fmt.Fprintf(os.Stderr, "libvirtlab: %v\n", err)
		os.Exit(1)
	}
}

// enterNamespaces replaces the process by the test binary run under unshare;
// it returns only on failure.
func enterNamespaces(extraEnv ...string) error {
	if os.Geteuid() != 0 {
		return errors.New("the libvirt lab needs root (network and mount namespaces, bridges, a system libvirtd); run the tests as root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return fmt.Errorf("the libvirt lab needs unshare (util-linux): %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the test binary: %w", err)
	}
	args := append([]string{"unshare", "--net", "--mount", "--propagation", "private", "--", self}, os.Args[1:]...)
	env := append(append(os.Environ(), nsEnv+"=1"), extraEnv...)
	if err := syscall.Exec(unshare, args, env); err != nil { //nolint:gosec // G204, G702: re-executes this very test binary with its own arguments.
		return fmt.Errorf("re-executing the tests under unshare: %w", err)
	}
	return nil
}

// InNamespace reports whether Main has moved this process into the lab's
// namespaces.
func InNamespace() bool { return os.Getenv(nsEnv) == "1" }

// command is the one place the lab starts a program: its own daemons and
// tools, with arguments it builds itself.
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, name, args...) //nolint:gosec // G204: the programs and arguments are the lab's own, never outside input.
}

// readFile reads one of the lab's own files (its temporary directory, the
// image cache, /proc).
func readFile(path string) ([]byte, error) {
	return os.ReadFile(path) //nolint:gosec // G304: the paths are the lab's own.
}

func run(name string, args ...string) error {
	out, err := command(context.Background(), name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %v: %w: %s", name, args, err, out)
	}
	return nil
}
