package libvirtlab

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/cloudinit"
	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
	"github.com/egress-proxies/egress-proxies-operator/internal/nocloud"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/poll"
)

// guestDomainXML boots the real guest image directly (kernel, initrd and
// command line from the image's catalogue entry), with the NoCloud seed on
// an IDE CD-ROM of a "pc" machine: the cloud kernel has no AHCI driver, so
// a SATA CD-ROM would not be seen and cloud-init would find no datasource.
func guestDomainXML(l *Lab, name, disk, seed, mac, serial string) string {
	return fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>512</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>%s</kernel>
    <initrd>%s</initrd>
    <cmdline>%s</cmdline>
  </os>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='%s'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='%s'/>
      <target dev='hdc' bus='ide'/>
      <readonly/>
    </disk>
    <interface type='network'>
      <source network='%s'/>
      <mac address='%s'/>
      <model type='virtio'/>
    </interface>
    <channel type='unix'>
      <target type='virtio' name='org.qemu.guest_agent.0'/>
    </channel>
    <serial type='file'><source path='%s'/><target port='0'/></serial>
  </devices>
</domain>`, name, l.Kernel, l.Initrd, l.KernelCmdline, disk, seed, l.Network, mac, serial)
}

// TestRealGuestServesProxy boots the real guest image with a seed whose
// user-data is the project's own rendering (internal/cloudinit) and proves,
// on real cloud-init and real tinyproxy: the guest gets a DHCP lease on the
// lab network, the guest agent reports the address, tinyproxy serves on the
// rendered port, a request with the credentials reaches a server in the
// namespace, and one without them gets 407.
func TestRealGuestServesProxy(t *testing.T) {
	l := Start(t, Options{GuestImage: true})
	ctx, cancel := context.WithTimeout(context.Background(), poll.Paced(12*time.Minute))
	defer cancel()

	// The server the proxy forwards to, on the network's host address.
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

	const (
		name     = "real-guest"
		mac      = "52:54:00:c6:33:01"
		port     = 3128
		username = "lab-user"
		password = "lab-pass.1234"
	)
	// The lab network is a documentation range, refused by default: the
	// test opts in to reach its server there.
	userData, err := cloudinit.Render(cloudinit.Proxy{Port: port, Username: username, Password: password,
		Egress: egress.Policy{AllowCIDRs: []netip.Prefix{l.NetworkCIDR}}})
	if err != nil {
		t.Fatal(err)
	}
	seed := nocloud.Seed{
		UserData:   userData,
		MetaData:   nocloud.MetaData(name+"-1", name),
		VendorData: nocloud.VendorDataGuestAgent(),
	}
	var iso bytes.Buffer
	if _, err := nocloud.Write(&iso, seed); err != nil {
		t.Fatal(err)
	}
	seedPath := filepath.Join(l.PoolPath, name+"-seed.iso")
	if err := os.WriteFile(seedPath, iso.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(l.PoolPath, l.BaseImageVolume)
	disk := filepath.Join(l.PoolPath, name+".qcow2")
	if out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", disk).CombinedOutput(); err != nil {
		t.Fatalf("overlay: %v: %s", err, out)
	}
	mustVirsh(t, l, "pool-refresh", l.Pool)
	xmlFile := filepath.Join(l.Dir, name+".xml")
	if err := os.WriteFile(xmlFile, []byte(guestDomainXML(l, name, disk, seedPath, mac, filepath.Join(l.SerialDir, name+".log"))), 0o644); err != nil {
		t.Fatal(err)
	}
	mustVirsh(t, l, "define", xmlFile)
	started := time.Now()
	mustVirsh(t, l, "start", name)
	defer func() {
		if t.Failed() {
			t.Logf("guest console and qemu log:\n%s", l.SerialLog(name))
		}
	}()

	// 1. A DHCP lease from the lab network's dnsmasq, for the guest's MAC.
	var addr netip.Addr
	poll.UntilPaced(t, 10*time.Minute, func() (bool, string) {
		leases, err := l.Leases()
		if err != nil {
			return false, err.Error()
		}
		for _, lease := range leases {
			if lease.MAC == mac {
				addr = lease.IP
				return true, ""
			}
		}
		return false, fmt.Sprintf("no lease for %s among %v", mac, leases)
	})
	leased := time.Since(started)
	if !l.NetworkCIDR.Contains(addr) {
		t.Fatalf("leased address %s is outside %s", addr, l.NetworkCIDR)
	}
	// virsh reports the same lease.
	if out := mustVirsh(t, l, "net-dhcp-leases", l.Network, "--mac", mac); !strings.Contains(out, addr.String()+"/24") {
		t.Errorf("virsh net-dhcp-leases does not show %s:\n%s", addr, out)
	}

	// 2. tinyproxy serves on the rendered port.
	proxyAddr := net.JoinHostPort(addr.String(), strconv.Itoa(port))
	poll.UntilPaced(t, 10*time.Minute, func() (bool, string) {
		dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
		defer dcancel()
		c, err := (&net.Dialer{}).DialContext(dctx, "tcp", proxyAddr)
		if err != nil {
			return false, "tinyproxy not listening: " + err.Error()
		}
		_ = c.Close()
		return true, ""
	})
	serving := time.Since(started)

	// 3. The guest agent answers and reports the leased address.
	poll.UntilPaced(t, 5*time.Minute, func() (bool, string) {
		out, err := l.Virsh("domifaddr", name, "--source", "agent")
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(out, addr.String()+"/"), "the agent reports:\n" + out
	})
	agent := time.Since(started)

	// 4. With the credentials the request reaches the server; without, 407.
	withCreds := &url.URL{Scheme: "http", Host: proxyAddr, User: url.UserPassword(username, password)}
	status, body := proxiedGet(ctx, t, withCreds, target)
	if status != http.StatusOK || body != greeting {
		t.Errorf("through the proxy with credentials: status %d body %q, want 200 %q", status, body, greeting)
	}
	status, _ = proxiedGet(ctx, t, &url.URL{Scheme: "http", Host: proxyAddr}, target)
	if status != http.StatusProxyAuthRequired {
		t.Errorf("through the proxy without credentials: status %d, want 407", status)
	}
	// tinyproxy 1.11 answers a wrong password with 401, not 407 (it sends
	// 407 only when the Proxy-Authorization header is missing).
	wrong := &url.URL{Scheme: "http", Host: proxyAddr, User: url.UserPassword(username, "not-the-password")}
	status, _ = proxiedGet(ctx, t, wrong, target)
	if status != http.StatusUnauthorized {
		t.Errorf("through the proxy with a wrong password: status %d, want 401 (tinyproxy 1.11)", status)
	}
	// The same from a separate program in the namespace (curl), as an
	// operator's user would.
	out, err := l.InNetns(ctx, "curl", "-sS", "--max-time", "30", "-x", "http://"+proxyAddr, "-U", username+":"+password, target).CombinedOutput()
	if err != nil || string(out) != greeting {
		t.Errorf("curl through the proxy: %v: %q", err, out)
	}
	t.Logf("real guest: DHCP lease %s after %s, tinyproxy serving after %s, guest agent after %s (TCG, 1 vCPU, 512 MiB)",
		addr, leased.Round(time.Second), serving.Round(time.Second), agent.Round(time.Second))
}

// proxiedGet fetches target through proxy and returns the status and body.
func proxiedGet(ctx context.Context, t *testing.T, proxy *url.URL, target string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s through %s: %v", target, proxy.Redacted(), err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
