package libvirt

import (
	"encoding/xml"
	"errors"
	"fmt"
	"strings"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// MarkNamespace is the XML namespace of the operator's mark in a domain's
// <metadata>. libvirt keeps one element per namespace there, untouched by
// the tools that edit the description a human sees.
const MarkNamespace = "https://github.com/egress-proxies/egress-proxies-operator/xmlns/instance/v1"

// mark is what the operator records on a domain it created
// (ownership.Stamp: the place it is signed for is the host, hostPlace), so
// the mark can be neither edited nor copied to another domain or host.
type mark = ownership.Stamp

// markXML is the mark's element.
type markXML struct {
	XMLName      xml.Name `xml:"https://github.com/egress-proxies/egress-proxies-operator/xmlns/instance/v1 instance"`
	Installation string   `xml:"installation,omitempty"`
	OwnerUID     string   `xml:"ownerUID"`
	Name         string   `xml:"name"`
	Owner        string   `xml:"owner,omitempty"`
	CreatedAt    string   `xml:"createdAt"`
	Signature    string   `xml:"signature,omitempty"`
}

// newMark is the signed mark of a domain the provider defines on host.
func newMark(id *ownership.Identity, entry, host, ownerUID, name, owner string, created time.Time) mark {
	return id.NewStamp(entry, hostPlace(host), ownerUID, name, owner, created)
}

// hostPlace is the place a domain's mark is signed for: its host.
func hostPlace(host string) string { return "host=" + host }

// markElement is the mark as its element of the domain's <metadata>.
func markElement(m mark) (string, error) {
	b, err := xml.Marshal(markXML{Installation: m.Installation, OwnerUID: m.OwnerUID, Name: m.Name, Owner: m.Owner,
		CreatedAt: m.CreatedAt.UTC().Format(time.RFC3339), Signature: m.Signature})
	if err != nil {
		return "", fmt.Errorf("encoding the mark: %w", err)
	}
	return string(b), nil
}

// parseMark finds the mark in the inner XML of a domain's <metadata>.
func parseMark(inner string) (mark, bool) {
	var wrap struct {
		Items []markXML `xml:"https://github.com/egress-proxies/egress-proxies-operator/xmlns/instance/v1 instance"`
	}
	if err := xml.Unmarshal([]byte("<metadata>"+inner+"</metadata>"), &wrap); err != nil || len(wrap.Items) != 1 {
		return mark{}, false
	}
	x := wrap.Items[0]
	m := mark{Installation: strings.TrimSpace(x.Installation), OwnerUID: strings.TrimSpace(x.OwnerUID), Name: strings.TrimSpace(x.Name),
		Owner: x.Owner, Signature: strings.TrimSpace(x.Signature)}
	if t, err := time.Parse(time.RFC3339, strings.TrimSpace(x.CreatedAt)); err == nil {
		m.CreatedAt = t
	}
	return m, m.OwnerUID != "" && m.Name != ""
}

// Volume names of an instance in the pool.
func diskVolume(name string) string { return name + "-disk.qcow2" }

// domainSpec is everything a domain definition is built from.
type domainSpec struct {
	Name       string
	Mark       mark
	Seed       string // the seed volume the CD-ROM holds (Provider.seedVolume)
	DomainType string
	Machine    string
	Cores      int
	MemoryMiB  int
	Pool       string
	MAC        string
	Network    string
	Bridge     string
	VLANTag    int
	Image      Image
	Agent      bool
	SerialLog  string // a file on the host, or "" for a pty
}

// domainXML builds the definition of a domain. The disks refer to volumes
// of the pool by name, so the definition does not depend on where the pool
// keeps its files; they need not exist until the domain starts.
func domainXML(s domainSpec) (string, error) {
	me, err := markElement(s.Mark)
	if err != nil {
		return "", err
	}
	d := &libvirtxml.Domain{
		Type:     s.DomainType,
		Name:     s.Name,
		Metadata: &libvirtxml.DomainMetadata{XML: me},
		Memory:   &libvirtxml.DomainMemory{Value: uint(s.MemoryMiB), Unit: "MiB"},
		VCPU:     &libvirtxml.DomainVCPU{Value: uint(s.Cores)},
		OS: &libvirtxml.DomainOS{
			Type:    &libvirtxml.DomainOSType{Arch: "x86_64", Machine: s.Machine, Type: "hvm"},
			Kernel:  s.Image.Kernel,
			Initrd:  s.Image.Initrd,
			Cmdline: s.Image.Cmdline,
		},
		Features:   &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Disks: []libvirtxml.DomainDisk{
				{
					Device: "disk",
					Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2"},
					Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: s.Pool, Volume: diskVolume(s.Name)}},
					Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
				},
				{
					// IDE on the pc machine: the cloud kernels lack AHCI, so
					// a SATA CD-ROM would not be seen (docs/libvirt.md).
					Device:   "cdrom",
					Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
					Source:   &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: s.Pool, Volume: s.Seed}},
					Target:   &libvirtxml.DomainDiskTarget{Dev: seedDrive, Bus: "ide"},
					ReadOnly: &libvirtxml.DomainDiskReadOnly{},
				},
			},
			Interfaces: []libvirtxml.DomainInterface{nic(s)},
			Serials:    []libvirtxml.DomainSerial{serial(s.SerialLog)},
			Consoles:   []libvirtxml.DomainConsole{{Target: &libvirtxml.DomainConsoleTarget{Type: "serial"}}},
		},
	}
	if s.Image.Kernel == "" {
		d.OS.BootDevices = []libvirtxml.DomainBootDevice{{Dev: "hd"}}
	}
	if s.Agent {
		d.Devices.Channels = []libvirtxml.DomainChannel{{
			Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind"}},
			Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: "org.qemu.guest_agent.0"}},
		}}
	}
	out, err := d.Marshal()
	if err != nil {
		return "", fmt.Errorf("encoding the domain: %w", err)
	}
	return out, nil
}

func nic(s domainSpec) libvirtxml.DomainInterface {
	n := libvirtxml.DomainInterface{
		MAC:   &libvirtxml.DomainInterfaceMAC{Address: s.MAC},
		Model: &libvirtxml.DomainInterfaceModel{Type: "virtio"},
	}
	if s.Network != "" {
		n.Source = &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: s.Network}}
	} else {
		n.Source = &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: s.Bridge}}
	}
	if s.VLANTag != 0 {
		n.VLan = &libvirtxml.DomainInterfaceVLan{Tags: []libvirtxml.DomainInterfaceVLanTag{{ID: uint(s.VLANTag)}}}
	}
	return n
}

func serial(logFile string) libvirtxml.DomainSerial {
	port := uint(0)
	s := libvirtxml.DomainSerial{Target: &libvirtxml.DomainSerialTarget{Port: &port}}
	if logFile != "" {
		s.Source = &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: logFile}}
	} else {
		s.Source = &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}}
	}
	return s
}

// domainFacts is what the provider reads from a domain's definition.
type domainFacts struct {
	Mark   mark
	Marked bool
	// BadSignature: the mark names this installation and its signature
	// does not verify (a lost key, or a copy): foreign, but reported.
	BadSignature bool
	MAC          string
	Volumes      []string // volumes of the pool the domain's disks use
}

// parseDomain reads a domain definition. The mark counts only when it names
// the domain itself: a mark copied onto another domain is not its mark. The
// signature is checked by the caller, which knows the host.
func parseDomain(doc, pool string) (domainFacts, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(doc); err != nil {
		return domainFacts{}, fmt.Errorf("parsing the domain definition: %w", err)
	}
	var f domainFacts
	if d.Metadata != nil {
		f.Mark, f.Marked = parseMark(d.Metadata.XML)
		if f.Marked && f.Mark.Name != d.Name {
			f.Marked = false
		}
	}
	if d.Devices != nil {
		for _, n := range d.Devices.Interfaces {
			if n.MAC != nil && f.MAC == "" {
				f.MAC = strings.ToLower(n.MAC.Address)
			}
		}
		for _, disk := range d.Devices.Disks {
			if disk.Source != nil && disk.Source.Volume != nil && disk.Source.Volume.Pool == pool {
				f.Volumes = append(f.Volumes, disk.Source.Volume.Volume)
			}
		}
	}
	return f, nil
}

// volumeFacts is what the provider reads from a volume's definition.
type volumeFacts struct {
	Name     string
	Path     string
	Format   string
	Capacity uint64
}

func parseVolume(doc string) (volumeFacts, error) {
	var v libvirtxml.StorageVolume
	if err := v.Unmarshal(doc); err != nil {
		return volumeFacts{}, fmt.Errorf("parsing the volume definition: %w", err)
	}
	f := volumeFacts{Name: v.Name}
	if v.Target != nil {
		f.Path = v.Target.Path
		if v.Target.Format != nil {
			f.Format = v.Target.Format.Type
		}
	}
	if v.Capacity != nil {
		n, err := bytesOf(v.Capacity.Value, v.Capacity.Unit)
		if err != nil {
			return volumeFacts{}, err
		}
		f.Capacity = n
	}
	return f, nil
}

func bytesOf(v uint64, unit string) (uint64, error) {
	switch strings.ToLower(unit) {
	case "", "b", "bytes":
		return v, nil
	case "k", "kib":
		return v << 10, nil
	case "m", "mib":
		return v << 20, nil
	case "g", "gib":
		return v << 30, nil
	case "t", "tib":
		return v << 40, nil
	}
	return 0, fmt.Errorf("unknown size unit %q", unit)
}

// overlayXML defines a qcow2 volume backed by base, at least capacity bytes.
func overlayXML(name string, base volumeFacts, capacity uint64) (string, error) {
	if base.Path == "" {
		return "", errors.New("the base volume has no path")
	}
	capacity = max(capacity, base.Capacity)
	format := base.Format
	if format == "" {
		format = "raw"
	}
	v := &libvirtxml.StorageVolume{
		Name:         name,
		Capacity:     &libvirtxml.StorageVolumeSize{Value: capacity, Unit: "bytes"},
		Target:       &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
		BackingStore: &libvirtxml.StorageVolumeBackingStore{Path: base.Path, Format: &libvirtxml.StorageVolumeTargetFormat{Type: format}},
	}
	return marshalVolume(v)
}

// copyXML defines a qcow2 volume to be filled from the base volume.
func copyXML(name string, base volumeFacts, capacity uint64) (string, error) {
	v := &libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Value: max(capacity, base.Capacity), Unit: "bytes"},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
	}
	return marshalVolume(v)
}

// rawXML defines a raw volume of an exact size (the seed).
func rawXML(name string, size uint64) (string, error) {
	v := &libvirtxml.StorageVolume{
		Name:       name,
		Capacity:   &libvirtxml.StorageVolumeSize{Value: size, Unit: "bytes"},
		Allocation: &libvirtxml.StorageVolumeSize{Value: 0, Unit: "bytes"},
		Target:     &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "raw"}},
	}
	return marshalVolume(v)
}

func marshalVolume(v *libvirtxml.StorageVolume) (string, error) {
	out, err := v.Marshal()
	if err != nil {
		return "", fmt.Errorf("encoding volume %s: %w", v.Name, err)
	}
	return out, nil
}

// poolFacts is what the provider reads from a pool's definition.
type poolFacts struct {
	Path      string
	Available uint64
}

func parsePool(doc string) (poolFacts, error) {
	var p libvirtxml.StoragePool
	if err := p.Unmarshal(doc); err != nil {
		return poolFacts{}, fmt.Errorf("parsing the pool definition: %w", err)
	}
	var f poolFacts
	if p.Target != nil {
		f.Path = p.Target.Path
	}
	if p.Available != nil {
		n, err := bytesOf(p.Available.Value, p.Available.Unit)
		if err == nil {
			f.Available = n
		}
	}
	return f, nil
}

// macFor is the deterministic MAC of an instance, in QEMU's locally
// administered range, so that a lease can be matched without reading the
// domain first.
func macFor(ownerUID, name string) string {
	h := provider.InstanceHash(ownerUID, name)
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", (h>>16)&0xff, (h>>8)&0xff, h&0xff)
}
