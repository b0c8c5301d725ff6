package proxmox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// FuzzMarkRoundTrip: whatever the owner's names hold, the signed mark
// written into a VM's description reads back as written and verifies for
// that VM; no value can smuggle in a line of its own (an owner
// "x\negress-proxies-operator/owner-uid: y" would otherwise hand the VM to
// another Proxy); and the mark with any one value changed, or read from
// another VMID or entry, does not verify.
func FuzzMarkRoundTrip(f *testing.F) {
	f.Add("0b6a4d2e-1111-2222-3333-444455556666", "ns-web-0b6a4d2e", "ns/web", int64(1735689600))
	f.Add("uid", "name", "x\n"+markOwnerUID+"evil", int64(0))
	f.Add(" ", "n", "", int64(-1))
	f.Fuzz(func(t *testing.T, uid, name, owner string, unix int64) {
		if unix < -62135596800 || unix > 253402300799 {
			t.Skip() // RFC 3339 has four-digit years
		}
		const vmid = 100123
		in := newMark(testIdentity, "lab", vmid, uid, name, owner, time.Unix(unix, 0))
		got, ok := parseMark(description(in))
		want := mark{Installation: testIdentity.Installation(), OwnerUID: markValue(uid), Name: markValue(name), Owner: markValue(owner),
			CreatedAt: in.CreatedAt, Signature: in.Signature}
		if wantOK := want.OwnerUID != "" && want.Name != ""; ok != wantOK {
			t.Fatalf("ok = %v, want %v for %+v", ok, wantOK, want)
		}
		if got.Installation != want.Installation || got.OwnerUID != want.OwnerUID || got.Name != want.Name ||
			got.Owner != want.Owner || !got.CreatedAt.Equal(want.CreatedAt) || got.Signature != want.Signature {
			t.Fatalf("read back %+v, wrote %+v", got, want)
		}
		if err := testIdentity.VerifyStamp(got, "lab", vmidPlace(vmid)); err != nil {
			t.Fatalf("the mark read back does not verify: %v", err)
		}
		for what, m := range map[string]ownership.Mark{
			"another VMID":         got.Mark("lab", vmidPlace(vmid+1)),
			"another entry":        got.Mark("lab2", vmidPlace(vmid)),
			"another owner UID":    with(got, func(m *mark) { m.OwnerUID += "x" }).Mark("lab", vmidPlace(vmid)),
			"another name":         with(got, func(m *mark) { m.Name += "x" }).Mark("lab", vmidPlace(vmid)),
			"another owner":        with(got, func(m *mark) { m.Owner += "x" }).Mark("lab", vmidPlace(vmid)),
			"another time":         with(got, func(m *mark) { m.CreatedAt = m.CreatedAt.Add(time.Second) }).Mark("lab", vmidPlace(vmid)),
			"another installation": with(got, func(m *mark) { m.Installation += "x" }).Mark("lab", vmidPlace(vmid)),
		} {
			if testIdentity.Verify(m, got.Signature) == nil {
				t.Fatalf("the mark with %s verifies", what)
			}
		}
	})
}

// with returns a copy of m changed by change.
func with(m mark, change func(*mark)) mark {
	change(&m)
	return m
}

// fuzzSigned is the signed mark the FuzzParseMark corpus starts from, of
// VM fuzzVMID of entry "lab".
const fuzzVMID = 100123

func fuzzSigned() mark {
	return newMark(testIdentity, "lab", fuzzVMID, "u", "n", "ns/p", time.Unix(1735689600, 0))
}

// FuzzParseMark: any description (a hypervisor user may write anything)
// parses without panicking, a mark found in it survives being written
// again, and only a description that carries exactly the values of a mark
// the operator signed verifies: a mutated mark never does.
func FuzzParseMark(f *testing.F) {
	f.Add(description(mark{OwnerUID: "u", Name: "n", Owner: "ns/p", CreatedAt: time.Unix(1735689600, 0)}))
	f.Add("free text\n" + markOwnerUID + "a\n" + markName + "b\n" + markCreatedAt + "2025-01-01T00:00:00.5+01:00\n")
	f.Add("")
	f.Add(description(fuzzSigned()))
	f.Add("notes by an admin\n" + description(fuzzSigned()))
	signed := fuzzSigned()
	f.Fuzz(func(t *testing.T, desc string) {
		m, ok := parseMark(desc)
		if !ok {
			return
		}
		again, ok := parseMark(description(m))
		if !ok || again.OwnerUID != m.OwnerUID || again.Name != m.Name || again.Owner != m.Owner ||
			again.Installation != m.Installation || again.Signature != m.Signature ||
			!again.CreatedAt.Equal(m.CreatedAt.Truncate(time.Second)) {
			t.Fatalf("mark %+v read back as %+v (ok %v)", m, again, ok)
		}
		if testIdentity.VerifyStamp(m, "lab", vmidPlace(fuzzVMID)) != nil {
			return
		}
		if m.Installation != signed.Installation || m.OwnerUID != signed.OwnerUID || m.Name != signed.Name ||
			m.Owner != signed.Owner || !m.CreatedAt.Equal(signed.CreatedAt) {
			t.Fatalf("a mark with other values than the signed one verifies: %+v", m)
		}
	})
}

// answer is a RoundTripper that answers every request with one status and
// body, as a misbehaving API (or something posing as it) would.
type answer struct {
	status int
	body   []byte
}

func (a answer) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: a.status, Status: strconv.Itoa(a.status) + " " + http.StatusText(a.status),
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(a.body)),
		ContentLength: int64(len(a.body)), Request: req,
	}, nil
}

// FuzzAPIAnswers sends arbitrary answers (status and body) to every read
// of the client and to the error parser: nothing panics, a non-200 answer
// is an APIError with its status and a message of bounded size, every
// error classifies, and an address taken from the guest agent is one it
// reported, IPv4, and neither loopback nor link-local.
func FuzzAPIAnswers(f *testing.F) {
	f.Add(200, []byte(`{"data":[{"id":"qemu/100","type":"qemu","vmid":100,"node":"pve1","status":"running","tags":"proxy_operator"}]}`))
	f.Add(200, []byte(`{"data":{"result":[{"name":"lo","ip-addresses":[{"ip-address":"127.0.0.1","ip-address-type":"ipv4"}]},`+
		`{"name":"eth0","ip-addresses":[{"ip-address":"fe80::1","ip-address-type":"ipv6"},{"ip-address":"198.51.100.7","ip-address-type":"ipv4"}]}]}}`))
	f.Add(200, []byte(`{"data":{"status":"stopped","exitstatus":"OK"}}`))
	f.Add(500, []byte(`{"data":null,"message":"Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist\n"}`))
	f.Add(400, []byte(`{"errors":{"vmid":"invalid format"},"data":null}`))
	f.Add(401, []byte(``))
	f.Add(596, []byte(`not json`))
	dir := f.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("op@pve!t=00000000-0000-0000-0000-000000000000\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 100 || status > 999 {
			t.Skip()
		}
		c := newClient("https://pve.invalid:8006", tokenFile, "", false)
		c.http = &http.Client{Transport: answer{status: status, body: body}}
		ctx := context.Background()
		_, errResources := c.resources(ctx)
		_, errConfig := c.vmConfig(ctx, "pve1", 100)
		_, errStatus := c.status(ctx, "pve1", 100)
		_, errTask := c.taskStatus(ctx, "pve1", "UPID:pve1:x")
		ifaces, errAgent := c.agentInterfaces(ctx, "pve1", 100)
		for _, err := range []error{errResources, errConfig, errStatus, errTask, errAgent} {
			if status != http.StatusOK {
				var ae *APIError
				if !errors.As(err, &ae) || ae.Status != status || ae.Message == "" || len(ae.Message) > maxErrorBody {
					t.Fatalf("status %d: error %v, want an APIError with its status and a bounded message", status, err)
				}
			}
			if err != nil && provider.ClassOf(classify("reading", err)) == "" {
				t.Fatalf("error %v has no class", err)
			}
		}
		if errAgent != nil {
			return
		}
		a := firstAddress(ifaces, false)
		if !a.IsValid() {
			return
		}
		if !a.Is4() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast() {
			t.Fatalf("picked address %s", a)
		}
		var listed []netip.Addr
		for _, in := range ifaces {
			for _, ip := range in.IPAddresses {
				if p, err := netip.ParseAddr(ip.Address); err == nil {
					listed = append(listed, p)
				}
			}
		}
		if !slices.Contains(listed, a) {
			t.Fatalf("picked %s, which the agent did not report", a)
		}
		if !utf8.ValidString(a.String()) {
			t.Fatal("address text is not UTF-8")
		}
	})
}
