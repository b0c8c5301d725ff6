package nocloudread

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf16"

	"github.com/egress-proxies/egress-proxies-operator/internal/nocloud"
)

// ISO 9660 geometry. The reader keeps its own copy rather than the writer's,
// so that it checks the writer instead of sharing its mistakes.
const (
	// sectorSize is the logical sector size of every ISO 9660 image.
	sectorSize = 2048
	// pvdSector is where the volume descriptors start (after the system
	// area of 16 sectors).
	pvdSector = 16
)

// ErrNotISO9660 is wrapped by the errors Read returns for data that is not
// an ISO 9660 image (or not one it can parse).
var ErrNotISO9660 = errors.New("not an ISO 9660 image")

// maxDescriptors bounds the volume descriptors Read scans before giving up on
// finding the terminator.
const maxDescriptors = 32

// maxDirectorySize bounds the root directory Read accepts: a seed's root
// holds a handful of records.
const maxDirectorySize = 64 * sectorSize

// descriptor is what Read needs from a volume descriptor.
type descriptor struct {
	label      string
	rootExtent uint32
	rootSize   uint32
	joliet     bool
}

// Read parses the ISO 9660 image of size bytes in r and returns the seed
// files in its root directory and its volume label.
//
// The names are taken from the Joliet tree when the image has one, as Linux
// does when it mounts the image; otherwise from the Rock Ridge NM entries of
// the primary tree, or from the primary 8.3 names (USER_DAT.;1, USERDATA.;1,
// ...). The label is the Joliet volume identifier when the Joliet tree is
// used, else the primary one, with trailing padding removed.
//
// user-data and meta-data are required, as cloud-init requires them;
// VendorData is nil when the image has no vendor-data file. Files present
// but empty are returned as empty, non-nil slices.
func Read(r io.ReaderAt, size int64) (nocloud.Seed, string, error) {
	if size < (pvdSector+1)*sectorSize {
		return nocloud.Seed{}, "", fmt.Errorf("%w: %d bytes is too short to hold a volume descriptor", ErrNotISO9660, size)
	}
	img := io.NewSectionReader(r, 0, size)
	var primary, joliet *descriptor
	for i := range maxDescriptors {
		sector := int64(pvdSector + i)
		if (sector+1)*sectorSize > size {
			return nocloud.Seed{}, "", fmt.Errorf("%w: no volume descriptor set terminator before the end of the image", ErrNotISO9660)
		}
		d := make([]byte, sectorSize)
		if _, err := img.ReadAt(d, sector*sectorSize); err != nil {
			return nocloud.Seed{}, "", fmt.Errorf("reading volume descriptor at sector %d: %w", sector, err)
		}
		if string(d[1:6]) != "CD001" {
			return nocloud.Seed{}, "", fmt.Errorf("%w: no CD001 signature at sector %d", ErrNotISO9660, sector)
		}
		switch d[0] {
		case 1:
			if primary == nil {
				primary = parseDescriptor(d, false)
			}
		case 2:
			if joliet == nil && isJolietEscape(d[88:120]) {
				joliet = parseDescriptor(d, true)
			}
		case 255:
			return readTree(img, size, primary, joliet)
		}
	}
	return nocloud.Seed{}, "", fmt.Errorf("%w: no volume descriptor set terminator in the first %d descriptors", ErrNotISO9660, maxDescriptors)
}

// isJolietEscape reports whether the escape sequences of a supplementary
// volume descriptor select UCS-2 (levels 1 to 3), which makes it Joliet.
func isJolietEscape(esc []byte) bool {
	for _, level := range []string{"%/@", "%/C", "%/E"} {
		if bytes.HasPrefix(esc, []byte(level)) {
			return true
		}
	}
	return false
}

// parseDescriptor extracts the label and the root directory's extent from a
// primary or Joliet volume descriptor.
func parseDescriptor(d []byte, joliet bool) *descriptor {
	root := d[156:190]
	label := string(d[40:72])
	if joliet {
		label = fromUCS2(d[40:72])
	}
	return &descriptor{
		label:      strings.TrimRight(label, " \x00"),
		rootExtent: binary.LittleEndian.Uint32(root[2:6]),
		rootSize:   binary.LittleEndian.Uint32(root[10:14]),
		joliet:     joliet,
	}
}

// fromUCS2 decodes big-endian UCS-2 (an odd final byte is ignored).
func fromUCS2(b []byte) string {
	units := make([]uint16, len(b)/2)
	for i := range units {
		units[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	return string(utf16.Decode(units))
}

// readTree reads the seed files from the root directory of the Joliet tree,
// or of the primary tree when there is none.
func readTree(img *io.SectionReader, size int64, primary, joliet *descriptor) (nocloud.Seed, string, error) {
	if primary == nil {
		return nocloud.Seed{}, "", fmt.Errorf("%w: no primary volume descriptor", ErrNotISO9660)
	}
	d := primary
	if joliet != nil {
		d = joliet
	}
	if d.rootSize == 0 || d.rootSize > maxDirectorySize {
		return nocloud.Seed{}, "", fmt.Errorf("%w: root directory size %d is out of range 1-%d", ErrNotISO9660, d.rootSize, maxDirectorySize)
	}
	dir, err := readExtent(img, size, d.rootExtent, d.rootSize)
	if err != nil {
		return nocloud.Seed{}, "", fmt.Errorf("reading the root directory: %w", err)
	}
	found := map[string][]byte{}
	for off := 0; off < len(dir); {
		n := int(dir[off])
		if n == 0 {
			// Records do not cross sector boundaries; the rest of this
			// sector is padding.
			off = (off/sectorSize + 1) * sectorSize
			continue
		}
		if n < 34 || off+n > len(dir) || int(dir[off+32])+33 > n {
			return nocloud.Seed{}, "", fmt.Errorf("%w: malformed directory record at offset %d of the root directory", ErrNotISO9660, off)
		}
		rec := dir[off : off+n]
		off += n
		flags := rec[25]
		idLen := int(rec[32])
		id := rec[33 : 33+idLen]
		if flags&0x02 != 0 || (idLen == 1 && id[0] <= 1) {
			continue // a directory, "." or ".."
		}
		if flags&0x80 != 0 {
			return nocloud.Seed{}, "", fmt.Errorf("%w: multi-extent files are not supported", ErrNotISO9660)
		}
		name := seedName(rec, id, d.joliet)
		if name == "" {
			continue
		}
		if _, dup := found[name]; dup {
			return nocloud.Seed{}, "", fmt.Errorf("%w: %s appears twice in the root directory", ErrNotISO9660, name)
		}
		data, err := readExtent(img, size, binary.LittleEndian.Uint32(rec[2:6]), binary.LittleEndian.Uint32(rec[10:14]))
		if err != nil {
			return nocloud.Seed{}, "", fmt.Errorf("reading %s: %w", name, err)
		}
		found[name] = data
	}
	for _, required := range []string{nocloud.UserDataName, nocloud.MetaDataName} {
		if _, ok := found[required]; !ok {
			return nocloud.Seed{}, "", fmt.Errorf("the image (label %q) has no %s file, which the NoCloud datasource requires", d.label, required)
		}
	}
	return nocloud.Seed{UserData: found[nocloud.UserDataName], MetaData: found[nocloud.MetaDataName], VendorData: found[nocloud.VendorDataName]}, d.label, nil
}

// readExtent reads length bytes at sector extent, checking they lie within
// the image.
func readExtent(img *io.SectionReader, size int64, extent, length uint32) ([]byte, error) {
	if length == 0 {
		return []byte{}, nil
	}
	start := int64(extent) * sectorSize
	if start+int64(length) > size {
		return nil, fmt.Errorf("%w: extent at sector %d of %d bytes ends beyond the image's %d bytes", ErrNotISO9660, extent, length, size)
	}
	b := make([]byte, length)
	if _, err := img.ReadAt(b, start); err != nil {
		return nil, fmt.Errorf("reading sector %d: %w", extent, err)
	}
	return b, nil
}

// seedName returns which seed file a directory record names ("user-data",
// "meta-data", "vendor-data"), or "" for any other file.
func seedName(rec, id []byte, joliet bool) string {
	var name string
	switch {
	case joliet:
		name = fromUCS2(id)
	case rockRidgeName(rec, len(id)) != "":
		name = rockRidgeName(rec, len(id))
	default:
		return primarySeedName(string(id))
	}
	name = strings.TrimSuffix(name, ";1")
	switch name {
	case nocloud.UserDataName, nocloud.MetaDataName, nocloud.VendorDataName:
		return name
	}
	return ""
}

// primarySeedName maps an ISO 9660 level 1 identifier to a seed file: the
// name without its version and separators must be USERDATA, METADATA or
// VENDORDATA, or their first eight letters.
func primarySeedName(id string) string {
	base, _, _ := strings.Cut(id, ";")
	base = strings.TrimSuffix(base, ".")
	base = strings.NewReplacer("_", "", "-", "", ".", "").Replace(strings.ToUpper(base))
	for _, name := range []string{nocloud.UserDataName, nocloud.MetaDataName, nocloud.VendorDataName} {
		full := strings.ToUpper(strings.ReplaceAll(name, "-", ""))
		short := full[:min(len(full), 8)]
		// USER_DAT loses its underscore: accept the 8-letter truncation of
		// the name and the same truncation with one separator dropped.
		if base == full || base == short || base == short[:len(short)-1] {
			return name
		}
	}
	return ""
}

// rockRidgeName returns the Rock Ridge alternate name (NM entries, IEEE
// P1282) in the system use area of a primary directory record, or "".
func rockRidgeName(rec []byte, idLen int) string {
	off := 33 + idLen
	if off%2 == 1 {
		off++
	}
	var name strings.Builder
	for off+4 <= len(rec) {
		sig, n := string(rec[off:off+2]), int(rec[off+2])
		if n < 4 || off+n > len(rec) {
			break
		}
		if sig == "NM" && n >= 5 {
			name.Write(rec[off+5 : off+n])
		}
		off += n
	}
	return name.String()
}
