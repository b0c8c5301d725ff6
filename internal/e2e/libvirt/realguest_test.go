package libvirt_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/controller"
	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership/ownershiptest"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/libvirt"
	"github.com/egress-proxies/egress-proxies-operator/internal/setup"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/libvirtlab"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/testenv"
)

var env *testenv.Env

// TestMain runs the tests inside the lab's namespaces (libvirtlab.Main
// re-executes the binary there), then starts envtest on the namespace's
// loopback.
func TestMain(m *testing.M) {
	flag.Parse()
	if !libvirtlab.InNamespace() && !testing.Short() {
		libvirtlab.Main(m)
		return
	}
	if libvirtlab.InNamespace() {
		// Loopback, and a default route into an empty bridge: kube-apiserver
		// picks its advertised address from the default route's interface.
		// The bridge has no ports and goes nowhere, so the namespace stays closed.
		for _, args := range [][]string{
			{"link", "set", "lo", "up"},
			{"link", "add", "envtest0", "type", "bridge"},
			{"addr", "add", "203.0.113.254/32", "dev", "envtest0"},
			{"link", "set", "envtest0", "up"},
			{"route", "add", "default", "dev", "envtest0"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "ip %s: %v: %s\n", strings.Join(args, " "), err, out)
				os.Exit(1)
			}
		}
	}
	os.Exit(testenv.Main(m, func(e *testenv.Env) { env = e }))
}

// The entries of the lab's config: one per type, on the same host.
const (
	kvm2Entry   = "kvm2-lab"
	kvmEntry    = "kvm-lab"
	machineType = "small"
	image       = "debian-12"
)

// deniedOrigin is an address of the lab network, outside its DHCP range,
// where a server answers like the allowed one; the entries' egressPolicy
// denies it. metadataAddr is the cloud's metadata address, served on the
// lab network's bridge as a cloud serves it next to its guests.
var (
	deniedOrigin = netip.MustParseAddr("198.51.100.50")
	metadataAddr = netip.MustParseAddr("169.254.169.254")
)

// hostilePart is the extra user-data of the kvm entry's Proxy (#21 item 1):
// what a Proxy author who may add user-data, and so runs as root on the
// guest after the operator's part, writes to open the proxy. It removes the
// BasicAuth, Allow and ConnectPort lines from tinyproxy.conf, flushes the
// nftables ruleset and restarts tinyproxy, routes the metadata address
// onto the lab network (where the test serves it, so that only the egress
// rules refuse it), flushes the ruleset again, and says on the console
// that it ran. The operator's guard (internal/cloudinit) must leave a
// proxy that still wants credentials and refuses the metadata address,
// loopback and the denied origin.
const hostilePart = `#!/bin/sh
sed -i '/^BasicAuth/d;/^Allow/d;/^ConnectPort/d' /etc/tinyproxy/tinyproxy.conf
nft flush ruleset
systemctl restart tinyproxy
dev=$(ip -o -4 addr show | awk '/ 198[.]51[.]100[.]/ {print $2; exit}')
ip route replace 169.254.169.254/32 dev "$dev"
nft flush ruleset
echo "` + hostileMarker + `"
`

// hostileMarker is the console line of hostilePart's end.
const hostileMarker = "egress-e2e: the hostile extra part ran"

// holdTrayFlag, on a lab guest's kernel command line, makes the guest
// image ignore eject requests (its udev rule for them masked) and open its
// CD-ROM at boot and keep it open, which locks the tray
// (hack/libvirt/build-guest-image.sh, egress-hold-tray.service): only a
// forced eject empties such a drive. holdTrayMarker is the console line
// that says the guest did so.
const (
	holdTrayFlag   = "egress_test.hold_tray"
	holdTrayMarker = "egress-test: holding the tray of /dev/sr0 locked, eject requests ignored"
)

// labConfig is the providers configuration of the lab: a kvm2 entry reading
// addresses from the network's DHCP leases, and a kvm entry asking the
// guest agent, so that both address sources are proven.
func labConfig(t *testing.T, l *libvirtlab.Lab) *config.Config {
	t.Helper()
	host, port, err := net.SplitHostPort(l.SSHAddr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	entry := func(name, typ, source string) config.Entry {
		return config.Entry{
			Name: name, Type: typ, Zones: []string{"lab"}, Images: []string{image},
			MachineTypes: map[string]config.MachineType{machineType: {Name: machineType, Cores: 1, MemoryMiB: 512}},
			// The lab network is a documentation range, in the built-in
			// deny list: the test opts in to it, and one address of it is
			// denied by the administrator (deny wins over allow).
			EgressPolicy: egress.Policy{
				AllowCIDRs: []netip.Prefix{l.NetworkCIDR},
				DenyCIDRs:  []netip.Prefix{netip.PrefixFrom(deniedOrigin, 32)},
			},
			Block: &libvirt.Block{
				Hosts:          []libvirt.Host{{Name: "lab1", Address: host, Port: n, User: l.SSHUser, Zone: "lab"}},
				PrivateKeyFile: l.PrivateKeyFile,
				KnownHostsFile: l.KnownHostsFile,
				Pool:           l.Pool,
				Network:        l.Network,
				Images: map[string]libvirt.Image{image: {
					Volume: l.BaseImageVolume, Kernel: l.Kernel, Initrd: l.Initrd, Cmdline: l.KernelCmdline,
				}},
				AddressSource: source,
				DomainType:    "qemu",
				SerialLogDir:  l.SerialDir,
				Budgets: libvirt.Budgets{
					PollInterval: &metav1.Duration{Duration: time.Second},
					// A TCG guest on a busy machine powers off slowly; it must,
					// to release its lease.
					Shutdown: &metav1.Duration{Duration: 3 * time.Minute},
				},
			},
		}
	}
	// The kvm entry's administrator allows extra user-data: its Proxy
	// carries hostilePart.
	kvm := entry(kvmEntry, libvirt.TypeKVM, libvirt.AddressSourceAgent)
	kvm.AllowExtraUserData = true
	entries := []config.Entry{entry(kvm2Entry, libvirt.TypeKVM2, libvirt.AddressSourceLease), kvm}
	// Both guests hold their CD-ROM tray locked from early boot on and
	// ignore eject requests (#21 item 7): the seed must still go, by
	// each type's forced eject (libvirt's RPC flag for kvm2, virsh
	// change-media --force for kvm).
	for _, e := range entries {
		blk, ok := e.Block.(*libvirt.Block)
		if !ok {
			t.Fatalf("the %s entry's block is a %T", e.Name, e.Block)
		}
		img := blk.Images[image]
		img.Cmdline += " " + holdTrayFlag
		blk.Images[image] = img
	}
	return &config.Config{Providers: entries}
}

// startOperator runs the operator as the binary builds it (internal/setup),
// confined to namespace ns, as its ServiceAccount with the shipped RBAC
// bound the way an install binds it: a right the libvirt providers need
// and the markers miss fails this test, not a first install.
func startOperator(t *testing.T, cfg *config.Config, ns string) {
	t.Helper()
	restCfg, err := env.AsOperator(t.Context(), testenv.RBAC{Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	op, err := setup.New(setup.Options{
		RestConfig: restCfg, Config: cfg, Namespaces: []string{ns},
		Ownership: ownershiptest.Identity("libvirt-e2e"),
		Manager:   ctrl.Options{Scheme: env.Scheme},
		Controller: controller.Options{
			PollInterval: time.Second, ResyncInterval: 5 * time.Second,
			HealthInterval: 10 * time.Second, GCInterval: time.Hour, SkipNameValidation: true,
			// The gateway phase's ProxyGateway: envtest runs no pod of
			// its Deployment, so the image is only a name.
			GatewayImage: "registry.example/egress-proxies-operator:libvirt-e2e",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Manager.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	})
}

// TestRealGuestOnBothTypes is the real-guest tier: a Proxy on kvm2
// and one on kvm go Ready with the address DHCP (kvm2) or the guest agent
// (kvm) reports; through each, a request with the Secret's credentials
// reaches a server in the namespace and one without gets 407; both
// entries' ProviderHealth say OK; the entry's egress policy holds in the
// guest (checkEgressPolicy); the kvm Proxy carries hostilePart as extra
// user-data (its entry allows it), and once the part has run the
// operator's guard has undone it: 407 without credentials, the metadata
// address (reachable from that guest, served on the bridge), loopback and
// the denied origin refused, CONNECT to a port without ConnectPort 403
// (waitForTheGuard, then the same checks as the other Proxy); once Ready,
// the seed volume is gone and the CD-ROM is empty; a pool gateway in front
// of both guests spreads, places sessions, honours bans and fails over
// (gatewayPhase); deleting the Proxies
// leaves no domain, disk, seed or DHCP lease. Besides, on each: a wrong
// password gets 401 (tinyproxy 1.11), curl in the namespace gets through,
// and the address is dnsmasq's lease of the domain's MAC, as virsh reports
// it (the only real-guest boots of make test are these two).
func TestRealGuestOnBothTypes(t *testing.T) {
	testenv.Need(t, env)
	l := libvirtlab.Start(t, libvirtlab.Options{GuestImage: true})
	cfg := labConfig(t, l)
	ctx := context.Background()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "libvirt-"}}
	if err := env.Client.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	startOperator(t, cfg, ns)

	const greeting = "hello from the lab's namespace"
	ln, err := net.Listen("tcp", net.JoinHostPort(l.NetworkHost.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, greeting)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	target := "http://" + ln.Addr().String() + "/"
	deniedTarget := serveOnBridge(t, l, deniedOrigin, greeting)
	metadataTarget := serveOnBridge(t, l, metadataAddr, greeting) + "latest/meta-data/"

	entries := []string{kvm2Entry, kvmEntry}
	created := time.Now()
	for _, e := range entries {
		p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "egress-" + e},
			Spec: crawlv1alpha1.ProxySpec{Provider: e, MachineType: machineType, Image: image}}
		if e == kvmEntry {
			p.Spec.ExtraUserData = hostilePart
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// Both guests boot at once (TCG, one vCPU each). The wait follows their
	// pace: it goes on while a guest writes to its serial console or its
	// Proxy changes phase, and gives up after bootStall without either (a
	// guest that is stuck), or at bootLimit; both are quiet-machine figures
	// that follow the machine's pace (poll.Paced), within the package's
	// timeout.
	const (
		bootStall = 5 * time.Minute
		bootLimit = 18 * time.Minute
	)
	limit := withinDeadline(t, created, bootLimit)
	var wg sync.WaitGroup
	ready := make([]time.Duration, len(entries))
	proxies := make([]*crawlv1alpha1.Proxy, len(entries))
	why := make([]string, len(entries))
	for i, e := range entries {
		wg.Go(func() {
			key := client.ObjectKey{Namespace: ns, Name: "egress-" + e}
			progress, phase, seen := time.Now(), crawlv1alpha1.ProxyPhase(""), int64(0)
			for {
				var p crawlv1alpha1.Proxy
				if err := env.Client.Get(ctx, key, &p); err == nil {
					if p.Status.Phase == crawlv1alpha1.ProxyPhaseReady {
						ready[i], proxies[i] = time.Since(created), &p
						return
					}
					if p.Status.Phase != phase {
						phase, progress = p.Status.Phase, time.Now()
					}
					if p.Status.InstanceName != "" {
						if n := l.SerialSize(p.Status.InstanceName); n > seen { //nolint:contextcheck // virsh runs under its own 2-minute bound (libvirtlab.Lab.Virsh).
							seen, progress = n, time.Now()
						}
					}
				}
				switch {
				case time.Since(created) > limit():
					why[i] = fmt.Sprintf("not Ready after %s", limit())
					return
				case time.Since(progress) > poll.Paced(bootStall):
					why[i] = fmt.Sprintf("no serial console output and no phase change for %s (%d bytes of console output)", poll.Paced(bootStall), seen)
					return
				case ctx.Err() != nil:
					why[i] = ctx.Err().Error()
					return
				}
				waitABit(ctx, 2*time.Second)
			}
		})
	}
	wg.Wait()
	for i, e := range entries {
		if proxies[i] == nil {
			var p crawlv1alpha1.Proxy
			_ = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "egress-" + e}, &p)
			t.Fatalf("Proxy on %s never went Ready (%s): phase %s, conditions %+v\nserial log:\n%s", e, why[i], p.Status.Phase, p.Status.Conditions, l.SerialLog(p.Status.InstanceName))
		}
	}
	for i, e := range entries {
		p := proxies[i]
		t.Logf("%s: Ready at %s after %s (instance %s)", e, p.Status.Address, ready[i].Round(time.Second), p.Status.InstanceID)
		if !strings.HasPrefix(p.Status.Address, "198.51.100.") {
			t.Errorf("%s: address %q is not on the lab network", e, p.Status.Address)
		}
		var secret corev1.Secret
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.Status.CredentialsSecretName}, &secret); err != nil {
			t.Fatal(err)
		}
		withCreds, err := url.Parse(string(secret.Data["url"]))
		if err != nil || withCreds.User == nil {
			t.Fatalf("%s: the Secret's url %v is not a URL with credentials", e, err)
		}
		// Ready means the instance runs with an address; tinyproxy starts at
		// the end of cloud-init, a little later under TCG, and much later
		// when other TCG guests share the cores (9 minutes after create was
		// seen with four guests on two cores), so the bound counts from the
		// create, not from Ready, and follows the machine's pace.
		var code int
		var body string
		serveLimit := withinDeadline(t, created, 15*time.Minute)
		for time.Since(created) < serveLimit() {
			if code, body = get(ctx, withCreds, target); code == http.StatusOK {
				break
			}
			waitABit(ctx, 2*time.Second)
		}
		t.Logf("%s: serving %s after the first create", e, time.Since(created).Round(time.Second))
		if code != http.StatusOK || body != greeting {
			t.Errorf("%s: through the proxy with the Secret's credentials: %d %q, want 200 %q", e, code, body, greeting)
		}
		bare := *withCreds
		bare.User = nil
		if code, _ := get(ctx, &bare, target); code != http.StatusProxyAuthRequired {
			t.Errorf("%s: through the proxy without credentials: %d, want 407", e, code)
		}
		if e == kvmEntry {
			waitForTheGuard(ctx, t, l, domainOf(t, p), withCreds, &bare, target, metadataTarget)
		}
		// tinyproxy 1.11 answers a wrong password with 401, not 407 (it
		// sends 407 only when the Proxy-Authorization header is missing;
		// docs/libvirt-testworld.md).
		wrong := *withCreds
		wrong.User = url.UserPassword(withCreds.User.Username(), "not-the-password")
		if code, _ := get(ctx, &wrong, target); code != http.StatusUnauthorized {
			t.Errorf("%s: through the proxy with a wrong password: %d, want 401 (tinyproxy 1.11)", e, code)
		}
		curlThrough(ctx, t, l, e, withCreds, target, greeting)
		checkEgressPolicy(ctx, t, e, withCreds, ln.Addr().String(), deniedTarget, metadataTarget)
		var ph crawlv1alpha1.ProviderHealth
		if err := env.Client.Get(ctx, client.ObjectKey{Name: e}, &ph); err != nil {
			t.Errorf("%s: ProviderHealth: %v", e, err)
		} else if len(ph.Status.Targets) != 1 || !ph.Status.Targets[0].Healthy || ph.Status.Targets[0].Reason != libvirt.ReasonOK {
			t.Errorf("%s: ProviderHealth targets = %+v, want lab1 healthy OK", e, ph.Status.Targets)
		}
	}

	// The guests consumed their seeds: no seed volume, no CD-ROM media
	// (the provider releases them at the Get that sees the address),
	// although each holds its drive open and ignores eject requests.
	for i, e := range entries {
		name := domainOf(t, proxies[i])
		if b, _ := os.ReadFile(filepath.Join(l.SerialDir, name+".log")); !bytes.Contains(b, []byte(holdTrayMarker)) {
			t.Errorf("%s: the guest did not say on its console that it holds the CD-ROM open (%q)", e, holdTrayMarker)
		}
		poll.UntilPaced(t, 2*time.Minute, func() (bool, string) {
			_, _ = l.Virsh("pool-refresh", "--pool", l.Pool)
			vols, err := l.Virsh("vol-list", "--pool", l.Pool)
			if err != nil {
				return false, err.Error()
			}
			for line := range strings.SplitSeq(vols, "\n") {
				// <domain>-<token>-seed.iso: the seed's name carries a
				// token of the installation (docs/libvirt.md).
				if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], name+"-") && strings.HasSuffix(f[0], "-seed.iso") {
					return false, e + ": the seed volume " + f[0] + " is still in the pool"
				}
			}
			blk, err := l.Virsh("domblklist", "--domain", name)
			if err != nil {
				return false, err.Error()
			}
			for line := range strings.SplitSeq(blk, "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "hdc" && f[1] != "-" {
					return false, e + ": the CD-ROM still holds " + f[1]
				}
			}
			inactive, err := l.Virsh("dumpxml", "--inactive", "--domain", name)
			if err != nil {
				return false, err.Error()
			}
			if strings.Contains(inactive, "-seed.iso") {
				return false, e + ": the definition still names the seed"
			}
			return true, ""
		})
	}

	// cloud-init says on the console when the merged configuration (the
	// image's and the seed's) breaks its schema; it then may skip what it
	// cannot read. The rendered part is schema-checked in internal/cloudinit;
	// this catches the rest on the real guest.
	for _, p := range proxies {
		name := domainOf(t, p)
		b, err := os.ReadFile(filepath.Join(l.SerialDir, name+".log"))
		if err != nil {
			t.Errorf("reading the serial log of %s: %v", name, err)
		} else if bytes.Contains(b, []byte("Invalid cloud-config provided")) {
			t.Errorf("%s: cloud-init found the guest's configuration invalid (see its serial log)", name)
		}
	}

	// Each Proxy's address is the lab network's DHCP lease of its domain's
	// MAC: read from dnsmasq's status file, and as virsh net-dhcp-leases
	// reports it (the kvm2 entry's source; the kvm entry's address came
	// from the guest agent, and must be the same).
	macs := map[string]string{}
	for i, e := range entries {
		macs[e] = macOf(t, l, domainOf(t, proxies[i]))
		checkLease(t, l, e, macs[e], proxies[i].Status.Address)
	}

	// The pool gateway (#22) in front of both guests, before anything
	// breaks or deletes them.
	gatewayPhase(ctx, t, l, ns, proxies)

	if t.Failed() {
		for _, p := range proxies {
			t.Logf("serial log of %s:\n%s", domainOf(t, p), l.SerialLog(domainOf(t, p)))
		}
	}
	for _, e := range entries {
		if err := env.Client.Delete(ctx, &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "egress-" + e}}); err != nil {
			t.Fatal(err)
		}
	}
	deleted := time.Now()
	poll.UntilPaced(t, 8*time.Minute, func() (bool, string) {
		for _, e := range entries {
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "egress-" + e}, &crawlv1alpha1.Proxy{})
			if !apierrors.IsNotFound(err) {
				return false, "Proxy " + e + " is not gone yet"
			}
		}
		return true, ""
	})
	t.Logf("both Proxies deleted in %s", time.Since(deleted).Round(time.Second))
	doms, _ := l.Virsh("list", "--all", "--name")
	_, _ = l.Virsh("pool-refresh", "--pool", l.Pool)
	vols, _ := l.Virsh("vol-list", "--pool", l.Pool)
	leases, _ := l.Virsh("net-dhcp-leases", "--network", l.Network)
	for i, e := range entries {
		name := domainOf(t, proxies[i])
		if strings.Contains(doms, name) {
			t.Errorf("%s: domain %s left behind", e, name)
		}
		if strings.Contains(vols, name+"-") {
			t.Errorf("%s: a volume of %s left behind:\n%s", e, name, vols)
		}
		// Delete powers the guest off cleanly, and the image's DHCP client
		// releases its lease when it stops.
		if mac := macs[e]; mac == "" {
			t.Errorf("%s: the domain's MAC was not read before delete", e)
		} else if strings.Contains(strings.ToLower(leases), strings.ToLower(mac)) {
			t.Errorf("%s: the DHCP lease of MAC %s is still in the network's lease list:\n%s", e, mac, leases)
		}
	}
}

// macOf is the MAC of the domain's interface (virsh domiflist), or "" when
// virsh cannot say (the checks that need it then fail, naming it).
func macOf(t *testing.T, l *libvirtlab.Lab, domain string) string {
	t.Helper()
	out, err := l.Virsh("domiflist", "--domain", domain)
	if err != nil {
		t.Errorf("virsh domiflist %s: %v", domain, err)
		return ""
	}
	mac := ""
	for line := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(line); len(f) >= 5 {
			mac = f[4]
		}
	}
	return mac
}

// checkLease: the lab network's dnsmasq leased address to mac (its status
// file, libvirtlab.Lab.Leases) and virsh net-dhcp-leases reports the same.
func checkLease(t *testing.T, l *libvirtlab.Lab, entry, mac, address string) {
	t.Helper()
	leases, err := l.Leases()
	if err != nil {
		t.Errorf("%s: the lab network's leases: %v", entry, err)
		return
	}
	var leased []string
	for _, lease := range leases {
		if strings.EqualFold(lease.MAC, mac) {
			leased = append(leased, lease.IP.String())
		}
	}
	if !slices.Contains(leased, address) {
		t.Errorf("%s: dnsmasq leased %v to MAC %q, not the Proxy's address %s (all leases: %+v)", entry, leased, mac, address, leases)
	}
	if out, err := l.Virsh("net-dhcp-leases", "--network", l.Network, "--mac", mac); err != nil || !strings.Contains(out, address+"/") {
		t.Errorf("%s: virsh net-dhcp-leases --mac %s does not show %s: %v:\n%s", entry, mac, address, err, out)
	}
}

// curlThrough fetches target through the proxy with curl, a program of its
// own in the lab's namespace, as a user of the operator would. The proxy's
// URL, credentials included, goes to curl in its environment
// (http_proxy), not on its command line.
func curlThrough(ctx context.Context, t *testing.T, l *libvirtlab.Lab, entry string, proxy *url.URL, target, want string) {
	t.Helper()
	cmd := l.InNetns(ctx, "curl", "-sS", "--max-time", "30", target)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return strings.HasSuffix(strings.ToLower(k), "_proxy") // the machine's own proxy settings
	}), "http_proxy="+proxy.String())
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != want {
		t.Errorf("%s: curl through the proxy: %v: %.200q, want %q", entry, err, out, want)
	}
}

// domainOf is the domain name of a Proxy's instance ID (host/domain).
func domainOf(t *testing.T, p *crawlv1alpha1.Proxy) string {
	t.Helper()
	_, name, ok := strings.Cut(p.Status.InstanceID, "/")
	if !ok {
		t.Fatalf("instance id %q is not host/domain", p.Status.InstanceID)
	}
	return name
}

// get sends a GET through a proxy URL and returns the status and body, or
// 0 on a transport error.
func get(ctx context.Context, proxyURL *url.URL, target string) (int, string) {
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL)}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitABit waits d or until ctx ends.
func waitABit(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// serveOnBridge adds addr to the lab network's bridge (in the test's own
// namespace) and serves greeting there; it returns the URL.
func serveOnBridge(t *testing.T, l *libvirtlab.Lab, addr netip.Addr, greeting string) string {
	t.Helper()
	addOnBridge(t, l, addr)
	ln, err := net.Listen("tcp", net.JoinHostPort(addr.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, greeting)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/"
}

// checkEgressPolicy proves, through a guest's tinyproxy with valid
// credentials, the destination policy that the rendered user-data enforces
// (docs/security.md "Destination policy"): CONNECT to a port without a
// ConnectPort line gets 403 from tinyproxy; loopback, the metadata address
// and an address in the entry's denyCIDRs are refused by the guest's
// nftables rules for the tinyproxy user, which tinyproxy answers with 500;
// the allowed origin answered 200 before this is called. Without the rules,
// http://127.0.0.1:<tinyproxy's port>/ would reach tinyproxy itself (407)
// and the denied origin would answer 200.
func checkEgressPolicy(ctx context.Context, t *testing.T, entry string, proxy *url.URL, allowedHostPort, deniedTarget, metadataTarget string) {
	t.Helper()
	if code := connect(ctx, t, proxy, allowedHostPort); code != http.StatusForbidden {
		t.Errorf("%s: CONNECT %s (port not allowed) = %d, want 403", entry, allowedHostPort, code)
	}
	for _, c := range []struct{ what, target string }{
		{"loopback", "http://127.0.0.1:" + proxy.Port() + "/"},
		{"the metadata address", metadataTarget},
		{"an address in denyCIDRs", deniedTarget},
	} {
		if code, body := get(ctx, proxy, c.target); code != http.StatusInternalServerError {
			t.Errorf("%s: GET %s (%s) through the proxy = %d %.80q, want 500 (refused in the guest)", entry, c.target, c.what, code, body)
		}
	}
}

// connect sends CONNECT hostPort through the proxy with its URL's
// credentials and returns the status code, or 0 on a transport error.
func connect(ctx context.Context, t *testing.T, proxy *url.URL, hostPort string) int {
	t.Helper()
	d := net.Dialer{Timeout: 30 * time.Second}
	c, err := d.DialContext(ctx, "tcp", proxy.Host)
	if err != nil {
		t.Logf("dialing the proxy: %v", err)
		return 0
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	pass, _ := proxy.User.Password()
	auth := base64.StdEncoding.EncodeToString([]byte(proxy.User.Username() + ":" + pass))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", hostPort, hostPort, auth); err != nil {
		t.Logf("writing CONNECT: %v", err)
		return 0
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Logf("reading the answer to CONNECT: %v", err)
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// waitForTheGuard waits, on the guest whose Proxy carries hostilePart, until
// the part has run (its line on the serial console) and the operator's
// guard has put the operator's configuration back (tinyproxy restarted
// after cloud-init's final stage with the operator's tinyproxy.conf and
// rules): without credentials 407, and the metadata address and loopback
// refused. Before the guard's restart, the rules the part flushed last are
// missing for a moment; without the guard they stay missing and the proxy
// stays open, and this fails.
func waitForTheGuard(ctx context.Context, t *testing.T, l *libvirtlab.Lab, domain string, withCreds, bare *url.URL, target, metadataTarget string) {
	t.Helper()
	serial := filepath.Join(l.SerialDir, domain+".log")
	err := poll.WaitPaced(ctx, 2*time.Minute, func() (bool, string) {
		b, _ := os.ReadFile(serial)
		if !bytes.Contains(b, []byte(hostileMarker)) {
			return false, "the hostile part has not said on the console that it ran"
		}
		if code, _ := get(ctx, bare, target); code != http.StatusProxyAuthRequired {
			return false, fmt.Sprintf("after the hostile part, without credentials: %d, want 407", code)
		}
		for _, dst := range []string{metadataTarget, "http://127.0.0.1:" + withCreds.Port() + "/"} {
			if code, _ := get(ctx, withCreds, dst); code != http.StatusInternalServerError {
				return false, fmt.Sprintf("after the hostile part, GET %s with credentials: %d, want 500 (refused in the guest)", dst, code)
			}
		}
		return true, ""
	})
	if err != nil {
		t.Errorf("the guard did not undo the hostile extra part: %v", err)
		return
	}
	b, _ := os.ReadFile(serial)
	t.Logf("%s: the hostile extra part ran and the guard undid it (console says the guard ran: %t)", domain, bytes.Contains(b, []byte("egress-proxy-guard")) || bytes.Contains(b, []byte("the operator's configuration and egress rules")))
}

// withinDeadline returns the bound of a wait that began at from: quiet on
// a quiet machine, following the machine's pace (poll.Paced, read at each
// call), and never reaching past the test's deadline less two minutes for
// the checks and cleanup after it.
func withinDeadline(t *testing.T, from time.Time, quiet time.Duration) func() time.Duration {
	dl, has := t.Deadline()
	return func() time.Duration {
		b := poll.Paced(quiet)
		if has {
			b = min(b, dl.Add(-2*time.Minute).Sub(from))
		}
		return b
	}
}
