package nocloud

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"time"
	"unicode/utf16"
)

// Label is the volume label cloud-init's NoCloud datasource looks for.
const Label = "cidata"

// The three files of a NoCloud seed, by their real (Joliet) names.
const (
	UserDataName   = "user-data"
	MetaDataName   = "meta-data"
	VendorDataName = "vendor-data"
)

// Seed is the content of a NoCloud seed image.
type Seed struct {
	// UserData is the instance's user-data (a #cloud-config, a script or a
	// MIME multipart message).
	UserData []byte
	// MetaData holds at least the instance-id; see MetaData.
	MetaData []byte
	// VendorData is processed like user-data, with lower priority.
	VendorData []byte
}

// sectorSize is the ISO 9660 logical block size used throughout the image.
const sectorSize = 2048

// The fixed layout of the image, in sectors. Sectors 0-15 are the unused
// system area.
const (
	pvdSector       = 16 // Primary Volume Descriptor
	svdSector       = 17 // Joliet Supplementary Volume Descriptor
	termSector      = 18 // Volume Descriptor Set Terminator
	pathLPrimary    = 19 // type L (little-endian) path table, primary tree
	pathMPrimary    = 20 // type M (big-endian) path table, primary tree
	pathLJoliet     = 21
	pathMJoliet     = 22
	rootPrimary     = 23 // root directory, primary (8.3) names
	rootJoliet      = 24 // root directory, Joliet names
	firstDataSector = 25
)

// pathTableSize is the size of a path table holding only the root: an
// 8-byte header, the 1-byte identifier and a padding byte.
const pathTableSize = 10

// maxFileSize is the largest file a single ISO 9660 extent can describe.
const maxFileSize = math.MaxUint32

// recordingTime is the timestamp of every directory record and volume
// descriptor: a constant, so that the image is deterministic.
var recordingTime = time.Date(2020, time.January, 1, 0, 0, 0, 0, time.UTC)

// recordingDate is recordingTime as a directory record stores it
// (ECMA-119 9.1.5): years since 1900, month, day, hour, minute, second and
// the offset from GMT in 15-minute intervals.
var recordingDate = [7]byte{2020 - 1900, 1, 1, 0, 0, 0, 0}

// seedFile is one file of the image.
type seedFile struct {
	primary string // ISO 9660 level 1 identifier
	joliet  string // Joliet identifier, the real name
	data    []byte
}

// volume is what an image holds: its label and the files of its root
// directory, in the order of their directory records, which ISO 9660
// requires to be sorted by identifier (the same order for the primary and
// the Joliet names).
type volume struct {
	label string
	files []seedFile
}

// volume returns the seed's volume.
func (s Seed) volume() volume {
	return volume{label: Label, files: []seedFile{
		{primary: "META_DAT.;1", joliet: MetaDataName, data: s.MetaData},
		{primary: "USER_DAT.;1", joliet: UserDataName, data: s.UserData},
		{primary: "VENDOR_D.;1", joliet: VendorDataName, data: s.VendorData},
	}}
}

// sectors returns how many sectors n bytes occupy.
func sectors(n int64) int64 {
	return (n + sectorSize - 1) / sectorSize
}

// Size returns the exact number of bytes Write writes for s, when Write
// succeeds.
func Size(s Seed) int64 { return s.volume().size() }

// size is the length of v's image.
func (v volume) size() int64 {
	total := int64(firstDataSector)
	for _, f := range v.files {
		total += sectors(int64(len(f.data)))
	}
	return total * sectorSize
}

// Write writes the ISO 9660 image of s to w and returns the number of bytes
// written, which is Size(s) when the error is nil. The same s always yields
// the same bytes. The file contents are written straight from s, not copied.
func Write(w io.Writer, s Seed) (int64, error) { return s.volume().write(w) }

// write writes v's image to w.
func (v volume) write(w io.Writer) (int64, error) {
	files := v.files
	extents := make([]uint32, len(files))
	next := int64(firstDataSector)
	for i, f := range files {
		if int64(len(f.data)) > maxFileSize {
			return 0, fmt.Errorf("%s is %d bytes, more than the %d an ISO 9660 file can hold", f.joliet, len(f.data), int64(maxFileSize))
		}
		// An empty file takes no sector; like genisoimage, it points at the
		// sector where the next data would start (possibly the end of the
		// image): a reader never reads a zero-length extent.
		extents[i] = uint32(next)
		next += sectors(int64(len(f.data)))
	}
	total := uint32(next)

	head := make([]byte, firstDataSector*sectorSize)
	at := func(sector int) []byte { return head[sector*sectorSize : (sector+1)*sectorSize] }
	writeVolumeDescriptor(at(pvdSector), v.label, false, total)
	writeVolumeDescriptor(at(svdSector), v.label, true, total)
	term := at(termSector)
	term[0] = 255
	copy(term[1:6], "CD001")
	term[6] = 1
	writePathTable(at(pathLPrimary), rootPrimary, binary.LittleEndian)
	writePathTable(at(pathMPrimary), rootPrimary, binary.BigEndian)
	writePathTable(at(pathLJoliet), rootJoliet, binary.LittleEndian)
	writePathTable(at(pathMJoliet), rootJoliet, binary.BigEndian)
	writeRootDirectory(at(rootPrimary), rootPrimary, files, extents, false)
	writeRootDirectory(at(rootJoliet), rootJoliet, files, extents, true)

	var written int64
	n, err := w.Write(head)
	written += int64(n)
	if err != nil {
		return written, fmt.Errorf("writing the ISO 9660 header: %w", err)
	}
	var zeros [sectorSize]byte
	for _, f := range files {
		n, err := w.Write(f.data)
		written += int64(n)
		if err != nil {
			return written, fmt.Errorf("writing %s: %w", f.joliet, err)
		}
		if pad := sectors(int64(len(f.data)))*sectorSize - int64(len(f.data)); pad > 0 {
			n, err := w.Write(zeros[:pad])
			written += int64(n)
			if err != nil {
				return written, fmt.Errorf("padding %s: %w", f.joliet, err)
			}
		}
	}
	return written, nil
}

// putBoth16 writes v in both byte orders, little-endian first (ECMA-119
// 7.2.3).
func putBoth16(b []byte, v uint16) {
	binary.LittleEndian.PutUint16(b[0:2], v)
	binary.BigEndian.PutUint16(b[2:4], v)
}

// putBoth32 writes v in both byte orders, little-endian first (ECMA-119
// 7.3.3).
func putBoth32(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b[0:4], v)
	binary.BigEndian.PutUint32(b[4:8], v)
}

// ucs2 encodes s as big-endian UCS-2, as Joliet records names.
func ucs2(s string) []byte {
	units := utf16.Encode([]rune(s))
	out := make([]byte, 2*len(units))
	for i, u := range units {
		binary.BigEndian.PutUint16(out[2*i:], u)
	}
	return out
}

// putText fills field with s padded with spaces: ASCII for the primary
// descriptor, UCS-2 spaces (0x0020) for Joliet.
func putText(field []byte, s string, joliet bool) {
	if !joliet {
		n := copy(field, s)
		for i := n; i < len(field); i++ {
			field[i] = ' '
		}
		return
	}
	n := copy(field, ucs2(s))
	for i := n; i+1 < len(field); i += 2 {
		field[i], field[i+1] = 0, ' '
	}
}

// volumeTime is the 17-byte date and time of a volume descriptor
// (ECMA-119 8.4.26.1): digits, hundredths, and a zero offset from GMT.
func volumeTime(t time.Time) []byte {
	b := []byte(t.Format("20060102150405") + "00")
	return append(b, 0)
}

// notSpecified is the volume descriptor date meaning "not specified".
func notSpecified() []byte {
	return append([]byte("0000000000000000"), 0)
}

// jolietEscape marks a Supplementary Volume Descriptor as Joliet, UCS-2
// level 3 (what genisoimage writes).
const jolietEscape = "%/E"

// writeVolumeDescriptor writes the primary (joliet false) or the Joliet
// supplementary volume descriptor of a volume labelled label into the
// 2048-byte d.
func writeVolumeDescriptor(d []byte, label string, joliet bool, total uint32) {
	d[0] = 1
	lPath, mPath, root := uint32(pathLPrimary), uint32(pathMPrimary), uint32(rootPrimary)
	if joliet {
		d[0] = 2
		lPath, mPath, root = pathLJoliet, pathMJoliet, rootJoliet
	}
	copy(d[1:6], "CD001")
	d[6] = 1
	putText(d[8:40], "", joliet)     // system identifier
	putText(d[40:72], label, joliet) // volume identifier
	putBoth32(d[80:88], total)       // volume space size
	if joliet {
		copy(d[88:91], jolietEscape)
	}
	putBoth16(d[120:124], 1)          // volume set size
	putBoth16(d[124:128], 1)          // volume sequence number
	putBoth16(d[128:132], sectorSize) // logical block size
	putBoth32(d[132:140], pathTableSize)
	binary.LittleEndian.PutUint32(d[140:144], lPath)
	binary.BigEndian.PutUint32(d[148:152], mPath)
	copy(d[156:190], dirRecord([]byte{0}, root, sectorSize, true))
	putText(d[190:318], "", joliet)             // volume set identifier
	putText(d[318:446], "", joliet)             // publisher
	putText(d[446:574], "", joliet)             // data preparer
	putText(d[574:702], "", joliet)             // application
	putText(d[702:739], "", joliet)             // copyright file
	putText(d[739:776], "", joliet)             // abstract file
	putText(d[776:813], "", joliet)             // bibliographic file
	copy(d[813:830], volumeTime(recordingTime)) // creation
	copy(d[830:847], volumeTime(recordingTime)) // modification
	copy(d[847:864], notSpecified())            // expiration
	copy(d[864:881], notSpecified())            // effective
	d[881] = 1                                  // file structure version
}

// writePathTable writes a path table holding only the root directory,
// located at sector root, in byte order order (ECMA-119 9.4).
func writePathTable(d []byte, root uint32, order binary.ByteOrder) {
	d[0] = 1 // length of the identifier
	order.PutUint32(d[2:6], root)
	order.PutUint16(d[6:8], 1) // parent: the root itself
	d[8] = 0                   // the root's identifier
}

// writeRootDirectory writes the root directory (at sector self) holding
// files at extents, with primary or Joliet identifiers.
func writeRootDirectory(d []byte, self uint32, files []seedFile, extents []uint32, joliet bool) {
	var b []byte
	b = append(b, dirRecord([]byte{0}, self, sectorSize, true)...) // "."
	b = append(b, dirRecord([]byte{1}, self, sectorSize, true)...) // ".."
	for i, f := range files {
		id := []byte(f.primary)
		if joliet {
			id = ucs2(f.joliet)
		}
		b = append(b, dirRecord(id, extents[i], uint32(len(f.data)), false)...) //nolint:gosec // G115: Write checked the size against maxFileSize.
	}
	copy(d, b)
}

// dirRecord returns a directory record (ECMA-119 9.1).
func dirRecord(id []byte, extent, size uint32, dir bool) []byte {
	n := 33 + len(id)
	if n%2 == 1 {
		n++ // padding field: records start at even offsets
	}
	r := make([]byte, n)
	r[0] = byte(n) //nolint:gosec // G115: identifiers are at most 22 bytes, records at most 56.
	putBoth32(r[2:10], extent)
	putBoth32(r[10:18], size)
	copy(r[18:25], recordingDate[:])
	if dir {
		r[25] = 2
	}
	putBoth16(r[28:32], 1) // volume sequence number
	r[32] = byte(len(id))  //nolint:gosec // G115: identifiers are at most 22 bytes.
	copy(r[33:], id)
	return r
}
