package libvirt

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
)

// TestQuote runs each quoted string through a real sh: it must come back
// as exactly one argument, byte for byte, and run nothing.
func TestQuote(t *testing.T) {
	for _, s := range []string{
		"plain", "", "with space", "it's", "'", "''", `"`, "$(id)", "`id`", "a\nb", "a;b", "\\", "--flag", "*", "~root", "!x", "a\tb",
	} {
		out, err := exec.Command("sh", "-c", "printf '%s' "+quote(s)).Output()
		if err != nil {
			t.Fatalf("sh with %q: %v", quote(s), err)
		}
		if string(out) != s {
			t.Errorf("quote(%q) came back from sh as %q", s, out)
		}
	}
	if got, want := command("virsh", "dumpxml", "--domain", "a'b"), `'virsh' 'dumpxml' '--domain' 'a'\''b'`; got != want {
		t.Errorf("command = %s, want %s", got, want)
	}
}

// TestDomainXMLRoundTrip builds a definition and reads back what the
// provider relies on: the mark (only when it names the domain), the MAC and
// the pool volumes; and it checks the choices the guests need.
func TestDomainXMLRoundTrip(t *testing.T) {
	created := time.Date(2026, 12, 1, 3, 4, 5, 0, time.UTC)
	spec := domainSpec{
		Name: "px-1", Mark: newMark(testIdentity, "lab", "kvm1", "uid-1", "px-1", "ns/p", created), Seed: "px-1-token-seed.iso",
		DomainType: "qemu", Machine: "pc", Cores: 2, MemoryMiB: 512, Pool: "pool", MAC: "52:54:00:aa:bb:cc",
		Network: "net", VLANTag: 42, Image: Image{Volume: "base", Kernel: "/k", Initrd: "/i", Cmdline: "root=/dev/vda"}, Agent: true,
	}
	doc, err := domainXML(spec)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseDomain(doc, "pool")
	if err != nil {
		t.Fatal(err)
	}
	want := domainFacts{Mark: spec.Mark, Marked: true, MAC: spec.MAC, Volumes: []string{"px-1-disk.qcow2", "px-1-token-seed.iso"}}
	if diff := cmp.Diff(want, f, cmp.AllowUnexported(domainFacts{}, mark{})); diff != "" {
		t.Errorf("parsed facts (-want +got):\n%s", diff)
	}
	for _, s := range []string{
		MarkNamespace, "<target dev=\"hdc\" bus=\"ide\">", "machine=\"pc\"", "type=\"qemu\"", "<tag id=\"42\">",
		"org.qemu.guest_agent.0", "<kernel>/k</kernel>", "<cmdline>root=/dev/vda</cmdline>",
	} {
		if !strings.Contains(doc, s) {
			t.Errorf("definition lacks %s:\n%s", s, doc)
		}
	}
	if strings.Contains(doc, "<description") {
		t.Errorf("the mark must not be in the description:\n%s", doc)
	}
	// A mark copied onto another domain does not count.
	other := strings.Replace(doc, "<name>px-1</name>", "<name>copy</name>", 1)
	if f, _ := parseDomain(other, "pool"); f.Marked {
		t.Error("a copied mark counts as the copy's mark")
	}
	// Names that XML must escape stay intact.
	spec.Name, spec.Mark.Name = "a<b>&'\"", "a<b>&'\""
	doc, err = domainXML(spec)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := parseDomain(doc, "pool"); !f.Marked || f.Mark.Name != spec.Name {
		t.Errorf("escaped name read back as %q (marked %v)", f.Mark.Name, f.Marked)
	}
}

// TestMarkSignature: the signed mark read back from a definition verifies
// for its own host and entry, and for no other; one without a signature
// does not verify.
func TestMarkSignature(t *testing.T) {
	m := newMark(testIdentity, "lab", "kvm1", "uid-1", "px-1", "ns/p", time.Now())
	doc, err := domainXML(domainSpec{Name: "px-1", Mark: m, Pool: "pool", MAC: "52:54:00:aa:bb:cc", Network: "net"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseDomain(doc, "pool")
	if err != nil || !f.Marked {
		t.Fatalf("parseDomain = %+v, %v", f, err)
	}
	for _, c := range []struct {
		reason      string
		entry, host string
		sig         string
		want        bool
	}{
		{"as defined", "lab", "kvm1", f.Mark.Signature, true},
		{"copied to another host's domain of the same name", "lab", "kvm2", f.Mark.Signature, false},
		{"another entry on the same host", "lab2", "kvm1", f.Mark.Signature, false},
		{"the signature removed", "lab", "kvm1", "", false},
	} {
		if got := testIdentity.Owns(f.Mark.Mark(c.entry, hostPlace(c.host)), c.sig); got != c.want {
			t.Errorf("%s: verifies %v, want %v", c.reason, got, c.want)
		}
	}
}

func TestParseShellListing(t *testing.T) {
	out := "6695eb01-f6a4-8304-79aa-97f2502e193f px-1\n1111eb01-f6a4-8304-79aa-97f2502e193f other dom\n@@\n" +
		"Domain: 'px-1'\n  state.state=1\n  state.reason=1\n\nDomain: 'other dom'\n  state.state=5\n  state.reason=0\n\n@@\n 3 px-1\n"
	got, err := parseShellListing(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []domainInfo{
		{Name: "px-1", UUID: "6695eb01f6a4830479aa97f2502e193f", ID: 3, State: stateRunning},
		{Name: "other dom", UUID: "1111eb01f6a4830479aa97f2502e193f", ID: -1, State: stateShutoff},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listing (-want +got):\n%s", diff)
	}
	if _, err := parseShellListing("garbage"); err == nil {
		t.Error("garbage parsed")
	}
}

func TestParseLeasesAndDomifaddr(t *testing.T) {
	leases := parseLeases(" 2026-12-01 04:55:21   52:54:00:8C:23:CD   ipv4   198.51.100.249/24   host   01:52:54:00:8c:23:cd\n")
	if diff := cmp.Diff([]lease{{MAC: "52:54:00:8c:23:cd", Addr: netip.MustParseAddr("198.51.100.249")}}, leases, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("leases (-want +got):\n%s", diff)
	}
	ifaces := parseDomifaddr(" lo     00:00:00:00:00:00    ipv4         127.0.0.1/8\n lo     00:00:00:00:00:00    ipv6         ::1/128\n" +
		" enp0s2 52:54:00:aa:bb:cc    ipv4         198.51.100.7/24\n enp0s2 52:54:00:aa:bb:cc    ipv6         fe80::1/64\n")
	if got := agentAddress(ifaces, "52:54:00:aa:bb:cc"); got != netip.MustParseAddr("198.51.100.7") {
		t.Errorf("agent address = %v, want 198.51.100.7 (the NIC's IPv4, not loopback or link-local)", got)
	}
}

// TestParseVolList reads virsh -q vol-list: the names, whatever the paths.
func TestParseVolList(t *testing.T) {
	out := " a-disk.qcow2      /var/lib/pool/a-disk.qcow2\n" +
		" a-seed.iso        /var/lib/pool/a-seed.iso\n\n" +
		" with space.img    /var/lib/pool/with space.img\n"
	want := []string{"a-disk.qcow2", "a-seed.iso", "with"}
	if diff := cmp.Diff(want, parseVolList(out)); diff != "" {
		t.Errorf("parseVolList (-want +got):\n%s", diff)
	}
}

func TestBlockValidate(t *testing.T) {
	entry := &config.Entry{Name: "kvm2-home", Type: TypeKVM2, Zones: []string{"a"}, Images: []string{"debian"}}
	valid := func() *Block {
		return &Block{
			Hosts:          []Host{{Name: "kvm1", Address: "kvm1.example", User: "operator", Zone: "a"}},
			PrivateKeyFile: "/etc/proxy-operator/kvm-ssh/id_ed25519", KnownHostsFile: "/etc/proxy-operator/kvm-ssh/known_hosts",
			Pool: "default", Network: "egress", Images: map[string]Image{"debian": {Volume: "debian-12.qcow2"}},
		}
	}
	cases := []struct {
		why    string
		change func(b *Block)
		want   string // a substring of the error, "" for valid
	}{
		{"the sample is valid", func(*Block) {}, ""},
		{"a zone without a host cannot place proxies", func(b *Block) { b.Hosts[0].Zone = "b" }, "hosts"},
		{"host keys are verified unless skipping is explicit", func(b *Block) { b.KnownHostsFile = "" }, "knownHostsFile"},
		{"both known_hosts and skipping is a contradiction", func(b *Block) { b.InsecureIgnoreHostKey = true }, "insecureIgnoreHostKey"},
		{"skipping alone is allowed", func(b *Block) { b.KnownHostsFile, b.InsecureIgnoreHostKey = "", true }, ""},
		{"a user with shell characters is refused", func(b *Block) { b.Hosts[0].User = "root;id" }, "user"},
		{"a pool name cannot be a path", func(b *Block) { b.Pool = "../etc" }, "pool"},
		{"network or bridge, not both", func(b *Block) { b.Bridge = "br0" }, "bridge"},
		{"network or bridge is needed", func(b *Block) { b.Network = "" }, "network"},
		{"leases need a network", func(b *Block) { b.Network, b.Bridge, b.AddressSource = "", "br0", AddressSourceLease }, "addressSource"},
		{"a VLAN tag is 1-4094", func(b *Block) { b.VLANTag = 4095 }, "vlanTag"},
		{"every catalogue image needs a volume", func(b *Block) { b.Images = nil }, "images"},
		{"initrd without kernel boots nothing", func(b *Block) { b.Images["debian"] = Image{Volume: "v", Initrd: "/i"} }, "kernel"},
		{"domain type is kvm or qemu", func(b *Block) { b.DomainType = "xen" }, "domainType"},
		{"a relative socket path is refused", func(b *Block) { b.SocketPath = "libvirt-sock" }, "socketPath"},
	}
	for _, c := range cases {
		t.Run(c.why, func(t *testing.T) {
			b := valid()
			c.change(b)
			errs := b.Validate(nil, entry)
			got := errs.ToAggregate()
			switch {
			case c.want == "" && got != nil:
				t.Errorf("want valid, got %v", got)
			case c.want != "" && (got == nil || !strings.Contains(got.Error(), c.want)):
				t.Errorf("want an error naming %s, got %v", c.want, got)
			}
		})
	}
}
