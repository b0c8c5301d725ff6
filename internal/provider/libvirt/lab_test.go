package libvirt

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/providertest"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/libvirtlab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// The test package runs inside the lab's namespaces.
func TestMain(m *testing.M) { libvirtlab.Main(m) }

// noOSImage is the catalogue image of the fast tier: an empty qcow2, on
// which a TCG domain runs its BIOS and finds nothing to boot.
const (
	noOSImage  = "noos"
	noOSVolume = "noos-base.qcow2"
)

// startLab starts a lab with the no-OS base volume in its pool.
func startLab(t *testing.T) *libvirtlab.Lab {
	t.Helper()
	l := libvirtlab.Start(t, libvirtlab.Options{})
	mustVirsh(t, l, "vol-create-as", "--pool", l.Pool, "--name", noOSVolume, "--capacity", "16M", "--format", "qcow2")
	return l
}

func mustVirsh(t *testing.T, l *libvirtlab.Lab, args ...string) string {
	t.Helper()
	out, err := l.Virsh(args...)
	if err != nil {
		t.Fatalf("virsh %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// labEntry is an entry of the given type whose one host is the lab.
func labEntry(t testing.TB, l *libvirtlab.Lab, typ string) *config.Entry {
	t.Helper()
	host, port, err := net.SplitHostPort(l.SSHAddr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	return &config.Entry{
		Name: typ + "-lab", Type: typ, Zones: []string{"a"}, Images: []string{noOSImage},
		MachineTypes: map[string]config.MachineType{"small": {Name: "small", Cores: 1, MemoryMiB: 64}},
		Block: &Block{
			Hosts:          []Host{{Name: "kvm1", Address: host, Port: n, User: l.SSHUser, Zone: "a"}},
			PrivateKeyFile: l.PrivateKeyFile,
			KnownHostsFile: l.KnownHostsFile,
			Pool:           l.Pool,
			Network:        l.Network,
			Images:         map[string]Image{noOSImage: {Volume: noOSVolume}},
			DomainType:     "qemu",
			SerialLogDir:   l.SerialDir,
			Budgets: Budgets{
				PollInterval: &metav1.Duration{Duration: 50 * time.Millisecond},
				// Short, for the outage tests, but following the machine's
				// pace: a keepalive a loaded machine answers late ends the
				// connection and fails the call on it.
				Dial:      &metav1.Duration{Duration: poll.Paced(3 * time.Second)},
				Keepalive: &metav1.Duration{Duration: poll.Paced(time.Second)},
				// No OS answers the ACPI power-off: do not wait for it.
				Shutdown: &metav1.Duration{Duration: time.Nanosecond},
			},
		},
	}
}

// blockOf is the libvirt block of an entry labEntry made.
func blockOf(t testing.TB, e *config.Entry) *Block {
	t.Helper()
	b, ok := e.Block.(*Block)
	if !ok {
		t.Fatalf("entry %s has a %T block", e.Name, e.Block)
	}
	return b
}

// testIdentity is the installation every provider of these tests belongs
// to, so that a restarted provider owns what an earlier one made.
var testIdentity = ownershiptest.Identity("libvirt-tests")

func newProvider(t *testing.T, e *config.Entry) *Provider {
	t.Helper()
	p, err := New(e, provider.Deps{Ownership: testIdentity, Entries: []string{e.Name, providertest.SiblingEntry}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func request(name string) provider.Request {
	return provider.Request{
		OwnerUID: "uid-" + name, Owner: provider.ObjectRef{Namespace: "ns", Name: name}, Name: name,
		Zone: "a", MachineType: "small", Image: noOSImage,
		UserData: provider.NewSensitive([]byte("#cloud-config\n")),
	}
}

// ctxT bounds one provider call: two minutes on a quiet machine, longer as
// the machine's pace says.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), poll.Paced(2*time.Minute))
	t.Cleanup(cancel)
	return ctx
}

// maxSteps bounds the calls of a resumable operation: a loop that does not
// converge fails instead of hanging.
const maxSteps = 30

// createAll calls Create until it returns an ID, failing on any error but
// InProgress.
func createAll(t *testing.T, p *Provider, req provider.Request) provider.ID {
	t.Helper()
	for range maxSteps {
		id, err := p.Create(ctxT(t), req)
		if err == nil {
			return id
		}
		if !provider.IsInProgress(err) {
			t.Fatalf("Create: %v", err)
		}
	}
	t.Fatalf("Create did not converge in %d calls", maxSteps)
	return ""
}

// deleteAll calls Delete until it returns nil.
func deleteAll(t *testing.T, p *Provider, id provider.ID) {
	t.Helper()
	for range maxSteps {
		err := p.Delete(ctxT(t), id)
		if err == nil {
			return
		}
		if !provider.IsInProgress(err) {
			t.Fatalf("Delete: %v", err)
		}
	}
	t.Fatalf("Delete did not converge in %d calls", maxSteps)
}

// domains lists the lab's domain names.
func domains(t *testing.T, l *libvirtlab.Lab) []string {
	t.Helper()
	return fieldsOf(mustVirsh(t, l, "list", "--all", "--name"))
}

// volumes lists the lab pool's volume names.
func volumes(t *testing.T, l *libvirtlab.Lab) []string {
	t.Helper()
	mustVirsh(t, l, "pool-refresh", "--pool", l.Pool)
	var out []string
	for line := range strings.SplitSeq(mustVirsh(t, l, "vol-list", "--pool", l.Pool), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] != "Name" && !strings.HasPrefix(f[0], "---") {
			out = append(out, f[0])
		}
	}
	return out
}

func fieldsOf(s string) []string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}
