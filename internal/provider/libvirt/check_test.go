package libvirt

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// TestCheck gives every verdict of a host from the real lab: the healthy
// host, then each way it can fail. Each case says what it breaks; the
// operations' errors are checked alongside, so that a Proxy's conditions
// say the same as the ProviderHealth.
func TestCheck(t *testing.T) {
	l := startLab(t)
	for _, typ := range []string{TypeKVM2, TypeKVM} {
		t.Run(typ, func(t *testing.T) {
			check := func(t *testing.T, e *config.Entry) provider.Verdict {
				t.Helper()
				p := newProvider(t, e)
				vs := p.Check(ctxT(t))
				if len(vs) != 1 {
					t.Fatalf("Check = %d verdicts, want one per host", len(vs))
				}
				return vs[0]
			}
			block := func(e *config.Entry) *Block { return blockOf(t, e) }

			t.Run("healthy host is OK", func(t *testing.T) {
				v := check(t, labEntry(t, l, typ))
				if !v.Healthy || v.Reason != ReasonOK || v.Target != "kvm1" {
					t.Errorf("verdict = %+v, want healthy OK on kvm1", v)
				}
			})
			t.Run("missing pool is PoolNotFound", func(t *testing.T) {
				e := labEntry(t, l, typ)
				block(e).Pool = "no-such-pool"
				if v := check(t, e); v.Healthy || v.Reason != ReasonPoolNotFound || !strings.Contains(v.Message, "no-such-pool") {
					t.Errorf("verdict = %+v", v)
				}
			})
			t.Run("missing network is NetworkNotFound", func(t *testing.T) {
				e := labEntry(t, l, typ)
				block(e).Network = "no-such-net"
				if v := check(t, e); v.Healthy || v.Reason != ReasonNetworkNotFound || !strings.Contains(v.Message, "no-such-net") {
					t.Errorf("verdict = %+v", v)
				}
			})
			t.Run("missing image volume is ImageNotFound, and Create says so", func(t *testing.T) {
				e := labEntry(t, l, typ)
				block(e).Images[noOSImage] = Image{Volume: "no-such-image.qcow2"}
				if v := check(t, e); v.Healthy || v.Reason != ReasonImageNotFound || !strings.Contains(v.Message, "no-such-image.qcow2") {
					t.Errorf("verdict = %+v", v)
				}
				_, err := newProvider(t, e).Create(ctxT(t), request("noimage-"+typ))
				if !provider.IsPermanent(err) || !strings.Contains(err.Error(), "no-such-image.qcow2") {
					t.Errorf("Create = %v, want Permanent naming the volume", err)
				}
				if n := countPrefix(domains(t, l), "noimage-"+typ); n != 0 {
					t.Errorf("a domain was defined for a missing image")
				}
			})
			t.Run("wrong host key is HostKeyMismatch and nothing is sent", func(t *testing.T) {
				e := labEntry(t, l, typ)
				block(e).KnownHostsFile = otherKnownHosts(t, l.SSHAddr)
				if v := check(t, e); v.Healthy || v.Reason != ReasonHostKeyMismatch {
					t.Errorf("verdict = %+v", v)
				}
				_, err := newProvider(t, e).Create(ctxT(t), request("hostkey-"+typ))
				if !provider.IsPermanent(err) || !strings.Contains(provider.ActionOf(err), "known_hosts") {
					t.Errorf("Create = %v (action %q), want Permanent with the known_hosts fix", err, provider.ActionOf(err))
				}
				if n := countPrefix(domains(t, l), "hostkey-"+typ); n != 0 {
					t.Errorf("a domain was created through a host with the wrong key")
				}
			})
			t.Run("refused key is AuthenticationFailed", func(t *testing.T) {
				e := labEntry(t, l, typ)
				block(e).PrivateKeyFile = otherPrivateKey(t)
				if v := check(t, e); v.Healthy || v.Reason != ReasonAuthenticationFailed {
					t.Errorf("verdict = %+v", v)
				}
			})
			t.Run("stopped sshd is Unreachable, and listing fails rather than finding nothing", func(t *testing.T) {
				p := newProvider(t, labEntry(t, l, typ))
				l.StopSSHD()
				defer l.StartSSHD()
				vs := p.Check(ctxT(t))
				if vs[0].Healthy || vs[0].Reason != ReasonUnreachable {
					t.Errorf("verdict = %+v", vs[0])
				}
				if _, err := p.ListByTag(ctxT(t)); err == nil || !provider.IsTransient(err) {
					t.Errorf("ListByTag with the host down = %v, want a Transient error", err)
				}
				if _, err := p.Create(ctxT(t), request("down-"+typ)); !provider.IsTransient(err) {
					t.Errorf("Create with the host down = %v, want Transient", err)
				}
			})
			t.Run("stopped libvirtd is LibvirtUnavailable, and a live connection is redialled", func(t *testing.T) {
				p := newProvider(t, labEntry(t, l, typ))
				if v := p.Check(ctxT(t)); !v[0].Healthy {
					t.Fatalf("verdict before = %+v", v[0])
				}
				l.StopLibvirtd()
				v := p.Check(ctxT(t))
				l.StartLibvirtd()
				if v[0].Healthy || v[0].Reason != ReasonLibvirtUnavailable {
					t.Errorf("verdict with libvirtd stopped = %+v", v[0])
				}
				if v := p.Check(ctxT(t)); !v[0].Healthy {
					t.Errorf("verdict after libvirtd is back = %+v, want healthy (reconnected)", v[0])
				}
			})
		})
	}
}

// otherKnownHosts writes a known_hosts file that lists addr with a key that
// is not the lab's.
func otherKnownHosts(t *testing.T, addr string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(addr, ":")
	line := "[" + host + "]:" + port + " " + string(ssh.MarshalAuthorizedKey(k))
	path := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// otherPrivateKey writes a private key the lab does not authorise.
func otherPrivateKey(t *testing.T) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
