package guests_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egress-proxies/egress-proxies-operator/internal/cloudinit"
	"github.com/egress-proxies/egress-proxies-operator/internal/nocloud"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/pvesim/guests"
)

// writeSeed renders user-data as the operator does, packs it into a NoCloud
// seed as the Proxmox provider will, and returns the file's path.
func writeSeed(t *testing.T, p cloudinit.Proxy, label string) string {
	t.Helper()
	ud, err := cloudinit.Render(p)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := nocloud.Write(&buf, nocloud.Seed{UserData: ud, MetaData: nocloud.MetaData("proxy-test", "proxy-test")}); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if label != nocloud.Label {
		// Overwrite the label in every volume descriptor, as a seed built
		// by hand with the wrong -V would have.
		data = bytes.ReplaceAll(data, []byte("cidata"), []byte(label))
		data = bytes.ReplaceAll(data, ucs2("cidata"), ucs2(label))
	}
	path := filepath.Join(t.TempDir(), "seed.iso")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// ucs2 spells an ASCII string as Joliet does (big-endian UCS-2).
func ucs2(s string) []byte {
	out := make([]byte, 0, 2*len(s))
	for _, c := range []byte(s) {
		out = append(out, 0, c)
	}
	return out
}

// through sends a GET to origin through the proxy at proxyAddr.
func through(t *testing.T, proxyAddr, user, pass, origin string) (int, string) {
	t.Helper()
	pu := &url.URL{Scheme: "http", Host: proxyAddr}
	if user != "" {
		pu.User = url.UserPassword(user, pass)
	}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(origin)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestGuestServesWhatItsSeedConfigures(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, "hello from the origin")
	}))
	defer origin.Close()

	// A distinct loopback address per test, as the simulator gives each VM.
	addr := netip.MustParseAddr("127.42.7.1")
	seed := writeSeed(t, cloudinit.Proxy{Port: 31281, Username: "u1", Password: "pw-from-the-seed"}, nocloud.Label)
	r := &guests.Runner{}
	defer r.Close()
	g := pvesim.Guest{VMID: 104, Node: "pve1", Name: "proxy-test", Address: addr, SeedPath: seed}
	if err := r.Start(g); err != nil {
		t.Fatal(err)
	}
	proxyAddr := "127.42.7.1:31281"
	for _, tc := range []struct {
		name, reason, user, pass string
		want                     int
	}{
		{"with the seed's credentials", "the Proxy's Secret holds what the seed configured", "u1", "pw-from-the-seed", http.StatusOK},
		{"without credentials", "never an open proxy", "", "", http.StatusProxyAuthRequired},
		{"with a wrong password", "a rendering that lost the password must fail visibly", "u1", "other", http.StatusProxyAuthRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := through(t, proxyAddr, tc.user, tc.pass, origin.URL)
			if code != tc.want {
				t.Fatalf("%s: status %d (%s), want %d", tc.reason, code, body, tc.want)
			}
			if code == http.StatusOK && body != "hello from the origin" {
				t.Errorf("body %q", body)
			}
		})
	}
	if got := r.Addresses()[104]; got != proxyAddr {
		t.Errorf("Addresses()[104] = %q, want %q", got, proxyAddr)
	}

	// Stop (stop, shutdown, destroy) takes the proxy down.
	r.Stop(g)
	if code, _ := through(t, proxyAddr, "u1", "pw-from-the-seed", origin.URL); code == http.StatusOK {
		t.Error("the proxy still serves after the guest stopped")
	}
	// A second Stop, and a Stop of a guest never started, are harmless.
	r.Stop(g)
	r.Stop(pvesim.Guest{VMID: 999})
}

func TestGuestEnforcesTheSeedsAllowList(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer origin.Close()
	r := &guests.Runner{}
	defer r.Close()
	// Clients here come from 127.0.0.1; a seed that allows only another
	// network refuses them, as tinyproxy's Allow would.
	seed := writeSeed(t, cloudinit.Proxy{Port: 31282, AllowedSourceRanges: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}, nocloud.Label)
	if err := r.Start(pvesim.Guest{VMID: 1, Address: netip.MustParseAddr("127.42.7.2"), SeedPath: seed}); err != nil {
		t.Fatal(err)
	}
	if code, body := through(t, "127.42.7.2:31282", "", "", origin.URL); code != http.StatusForbidden {
		t.Errorf("from outside the allow-list: %d %s, want 403", code, body)
	}
	seed = writeSeed(t, cloudinit.Proxy{Port: 31283, AllowedSourceRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, nocloud.Label)
	if err := r.Start(pvesim.Guest{VMID: 2, Address: netip.MustParseAddr("127.42.7.3"), SeedPath: seed}); err != nil {
		t.Fatal(err)
	}
	if code, body := through(t, "127.42.7.3:31283", "", "", origin.URL); code != http.StatusOK {
		t.Errorf("from inside the allow-list: %d %s, want 200", code, body)
	}
}

func TestGuestRefusesSeedsCloudInitWouldNotUse(t *testing.T) {
	r := &guests.Runner{}
	defer r.Close()
	for _, tc := range []struct {
		name, reason, want string
		seed               func(t *testing.T) string
	}{
		{
			name: "wrong label", reason: "cloud-init finds the seed by its cidata label",
			seed: func(t *testing.T) string {
				return writeSeed(t, cloudinit.Proxy{Port: 3128, Username: "u", Password: "p"}, "CDROM1")
			},
			want: "volume label",
		},
		{
			name: "not an ISO", reason: "a broken upload must not look like a working guest",
			seed: func(t *testing.T) string {
				path := filepath.Join(t.TempDir(), "seed.iso")
				if err := os.WriteFile(path, []byte("not an iso"), 0o600); err != nil {
					t.Fatal(err)
				}
				return path
			},
			want: "reading the seed",
		},
		{
			name: "missing file", reason: "a seed deleted under a running VM",
			seed: func(t *testing.T) string { return filepath.Join(t.TempDir(), "absent.iso") },
			want: "opening the seed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.Start(pvesim.Guest{VMID: 7, Address: netip.MustParseAddr("127.42.7.9"), SeedPath: tc.seed(t)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: Start = %v, want an error about %q", tc.reason, err, tc.want)
			}
		})
	}
	// No seed at all: the VM boots and serves nothing.
	if err := r.Start(pvesim.Guest{VMID: 8, Address: netip.MustParseAddr("127.42.7.10")}); err != nil {
		t.Errorf("a VM without a seed: %v", err)
	}
	if len(r.Addresses()) != 0 {
		t.Errorf("guests running after refused starts: %v", r.Addresses())
	}
}

// TestGuestBootsAgainFromItsCache: the provider removes the seed once the
// guest is up (#12 item 6), so a guest that boots again runs from what it
// read at its first boot, as cloud-init's instance cache does; a new
// instance on the same VMID (another name) does not get it.
func TestGuestBootsAgainFromItsCache(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer origin.Close()
	r := &guests.Runner{}
	defer r.Close()
	addr := netip.MustParseAddr("127.42.7.11")
	seed := writeSeed(t, cloudinit.Proxy{Port: 31284, Username: "u1", Password: "pw"}, nocloud.Label)
	first := pvesim.Guest{VMID: 11, Name: "proxy-test", Address: addr, SeedPath: seed}
	if err := r.Start(first); err != nil {
		t.Fatal(err)
	}
	r.Stop(first)
	again := first
	again.SeedPath = ""
	if err := r.Start(again); err != nil {
		t.Fatal(err)
	}
	if code, body := through(t, "127.42.7.11:31284", "u1", "pw", origin.URL); code != http.StatusOK {
		t.Errorf("the same instance booted again without its seed: %d %s, want 200", code, body)
	}
	r.Stop(again)
	other := again
	other.Name = "proxy-other"
	if err := r.Start(other); err != nil {
		t.Fatal(err)
	}
	if got := r.Addresses(); len(got) != 0 {
		t.Errorf("another instance on the VMID, without a seed, runs %v; want nothing", got)
	}
}
