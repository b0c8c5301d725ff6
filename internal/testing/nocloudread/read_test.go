package nocloudread

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/nocloud"
)

func TestWriteReadRoundTrip(t *testing.T) {
	big := make([]byte, 100*1024)
	for i := range big {
		big[i] = byte('a' + i%26)
	}
	binary := make([]byte, 3000)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	tests := []struct {
		name   string
		reason string
		seed   nocloud.Seed
	}{
		{
			name:   "small files",
			reason: "the usual seed: each file fits in one sector",
			seed: nocloud.Seed{
				UserData:   []byte("#cloud-config\npackages: [tinyproxy]\n"),
				MetaData:   nocloud.MetaData("proxy-1", "proxy-1"),
				VendorData: nocloud.VendorDataGuestAgent(),
			},
		},
		{
			name:   "empty files",
			reason: "empty files take no sector and must still be listed, readable and empty",
			seed:   nocloud.Seed{UserData: []byte{}, MetaData: []byte{}, VendorData: []byte{}},
		},
		{
			name:   "nil files",
			reason: "nil is written as an empty file",
			seed:   nocloud.Seed{},
		},
		{
			name:   "multi-sector user-data",
			reason: "100 KiB spans 50 sectors; the files after it must start after its last sector",
			seed:   nocloud.Seed{UserData: big, MetaData: nocloud.MetaData("i", "h"), VendorData: []byte("#cloud-config\n")},
		},
		{
			name:   "exactly one sector and one byte more",
			reason: "sizes at a sector boundary must not gain or lose a sector of padding",
			seed:   nocloud.Seed{UserData: bytes.Repeat([]byte("u"), sectorSize), MetaData: bytes.Repeat([]byte("m"), sectorSize+1), VendorData: []byte("v")},
		},
		{
			name:   "binary content and empty file in the middle",
			reason: "contents are copied byte for byte, and an empty user-data between two files does not shift them",
			seed:   nocloud.Seed{UserData: []byte{}, MetaData: binary, VendorData: big[:5000]},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img := image(t, tc.seed)
			got, label, err := Read(bytes.NewReader(img), int64(len(img)))
			if err != nil {
				t.Fatalf("Read() error = %v (%s)", err, tc.reason)
			}
			if label != nocloud.Label {
				t.Errorf("label = %q, want %q: cloud-init finds the seed by this label", label, nocloud.Label)
			}
			want := tc.seed
			// Read returns an empty, non-nil slice for an empty file.
			for _, f := range []*[]byte{&want.UserData, &want.MetaData, &want.VendorData} {
				if *f == nil {
					*f = []byte{}
				}
			}
			if diff := cmp.Diff(text(want), text(got)); diff != "" {
				t.Errorf("Read(nocloud.Write(seed)) mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReadGenisoimage(t *testing.T) {
	want := seedText{
		UserData:   "#cloud-config\nhostname: from-genisoimage\n",
		MetaData:   "instance-id: iid-genisoimage\nlocal-hostname: from-genisoimage\n",
		VendorData: "#cloud-config\npackages: [qemu-guest-agent]\n",
	}
	tests := []struct {
		file   string
		reason string
	}{
		{"genisoimage-joliet-rockridge.iso.gz", "genisoimage -J -r, as cloud-init documents: names from the Joliet tree"},
		{"genisoimage-rockridge.iso.gz", "genisoimage -r: names from the Rock Ridge NM entries of the primary tree"},
		{"genisoimage-plain.iso.gz", "plain ISO 9660: names from the 8.3 primary identifiers (USER_DAT.;1)"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			img := gunzipTestdata(t, tc.file)
			if !strings.Contains(tc.file, "plain") {
				// Break the 8.3 names, so that only the Joliet or Rock
				// Ridge names can identify the files.
				img = renamePrimary(t, img)
			}
			got, label, err := Read(bytes.NewReader(img), int64(len(img)))
			if err != nil {
				t.Fatalf("Read() error = %v (%s)", err, tc.reason)
			}
			if label != nocloud.Label {
				t.Errorf("label = %q, want %q", label, nocloud.Label)
			}
			if diff := cmp.Diff(want, text(got)); diff != "" {
				t.Errorf("files mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReadTreeChoice(t *testing.T) {
	s := sampleSeed()
	valid := image(t, s)
	noJoliet := bytes.Clone(valid)
	copy(noJoliet[svdSector*sectorSize+88:], "\x00\x00\x00")
	noVendor := bytes.Clone(valid)
	i := bytes.Index(noVendor[rootJoliet*sectorSize:], ucs2(nocloud.VendorDataName))
	copy(noVendor[rootJoliet*sectorSize+i:], ucs2("vendor-date"))
	withoutVendor := s
	withoutVendor.VendorData = nil
	tests := []struct {
		name   string
		reason string
		img    []byte
		want   nocloud.Seed
	}{
		{"joliet preferred", "with the primary names broken, the Joliet names must still identify the files", renamePrimary(t, valid), s},
		{"primary fallback", "without a Joliet escape sequence, the supplementary descriptor is ignored and the 8.3 names are read", noJoliet, s},
		{"no vendor-data", "vendor-data is optional for cloud-init: its absence is nil VendorData, not an error", noVendor, withoutVendor},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, label, err := Read(bytes.NewReader(tc.img), int64(len(tc.img)))
			if err != nil {
				t.Fatalf("Read() error = %v (%s)", err, tc.reason)
			}
			if diff := cmp.Diff(text(tc.want), text(got)); diff != "" {
				t.Errorf("files mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			if label != nocloud.Label {
				t.Errorf("label = %q, want %q", label, nocloud.Label)
			}
		})
	}
}

func TestReadRejects(t *testing.T) {
	valid := image(t, sampleSeed())
	garbage := make([]byte, 64*1024)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	modified := func(f func(img []byte)) []byte {
		img := bytes.Clone(valid)
		f(img)
		return img
	}
	tests := []struct {
		name    string
		reason  string
		img     []byte
		size    int64 // 0: len(img)
		notISO  bool  // the error must wrap ErrNotISO9660
		wantErr string
	}{
		{
			name: "empty", reason: "nothing to read", img: nil, notISO: true,
			wantErr: "not an ISO 9660 image: 0 bytes is too short to hold a volume descriptor",
		},
		{
			name: "random bytes", reason: "a qcow2 or raw disk uploaded by mistake has no CD001 signature", img: garbage, notISO: true,
			wantErr: "not an ISO 9660 image: no CD001 signature at sector 16",
		},
		{
			name: "zeros", reason: "an all-zero image has no descriptor", img: make([]byte, 40*sectorSize), notISO: true,
			wantErr: "not an ISO 9660 image: no CD001 signature at sector 16",
		},
		{
			name: "no terminator", reason: "descriptors must end with a terminator; scanning stops at the end of the image",
			img: valid[:termSector*sectorSize], notISO: true,
			wantErr: "not an ISO 9660 image: no volume descriptor set terminator before the end of the image",
		},
		{
			name: "truncated", reason: "file extents beyond the end of the image must be reported, not read as zeros",
			img: valid[:firstDataSector*sectorSize+1], notISO: true,
			wantErr: "ends beyond the image's",
		},
		{
			name: "no primary descriptor", reason: "a volume without a primary descriptor is not ISO 9660",
			img: modified(func(img []byte) { img[pvdSector*sectorSize] = 3 }), notISO: true,
			wantErr: "not an ISO 9660 image: no primary volume descriptor",
		},
		{
			name: "root directory too large", reason: "sizes are bounded before anything is allocated",
			img: modified(func(img []byte) {
				putBoth32(img[svdSector*sectorSize+156+10:], 1<<30)
			}), notISO: true,
			wantErr: "root directory size 1073741824 is out of range",
		},
		{
			name: "malformed record", reason: "a record shorter than its fixed part must not be read past",
			img: modified(func(img []byte) {
				// The third record (meta-data) of the Joliet root, after
				// "." and ".." (34 bytes each).
				img[rootJoliet*sectorSize+68] = 20
			}), notISO: true,
			wantErr: "malformed directory record at offset 68",
		},
		{
			name: "record shorter than its fixed part at the end", reason: "a 4-byte record ending the directory must not be read past (it would index beyond the directory)",
			img: modified(func(img []byte) {
				// The Joliet root's records end at 228: end the directory
				// at 232 with a 4-byte record.
				putBoth32(img[svdSector*sectorSize+156+10:], 232)
				img[rootJoliet*sectorSize+228] = 4
			}), notISO: true,
			wantErr: "malformed directory record at offset 228",
		},
		{
			name: "multi-extent file", reason: "a file split over several records is not supported and must not be read as its first part",
			img: modified(func(img []byte) {
				// meta-data is the third record of the Joliet root, at 68.
				img[rootJoliet*sectorSize+68+25] |= 0x80
			}), notISO: true,
			wantErr: "not an ISO 9660 image: multi-extent files are not supported",
		},
		{
			name: "user-data is a directory", reason: "a directory named user-data is not the user-data file",
			img: modified(func(img []byte) {
				// user-data is the fourth record of the Joliet root, at 120.
				img[rootJoliet*sectorSize+120+25] |= 0x02
			}),
			wantErr: "has no user-data file",
		},
		{
			name: "no user-data", reason: "cloud-init's NoCloud requires user-data; a renamed file must be reported",
			img: modified(func(img []byte) {
				// "user-data" -> "user-date" in the Joliet root.
				i := bytes.Index(img[rootJoliet*sectorSize:], ucs2(nocloud.UserDataName))
				copy(img[rootJoliet*sectorSize+i:], ucs2("user-date"))
			}),
			wantErr: `the image (label "cidata") has no user-data file, which the NoCloud datasource requires`,
		},
		{
			name: "duplicate file", reason: "two records for one name are ambiguous",
			img: modified(func(img []byte) {
				i := bytes.Index(img[rootJoliet*sectorSize:], ucs2(nocloud.VendorDataName))
				// Same length: "user-data;1" is read as user-data.
				copy(img[rootJoliet*sectorSize+i:], ucs2("user-data;1"))
			}), notISO: true,
			wantErr: "user-data appears twice in the root directory",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			size := tc.size
			if size == 0 {
				size = int64(len(tc.img))
			}
			_, _, err := Read(bytes.NewReader(tc.img), size)
			if err == nil {
				t.Fatalf("Read() succeeded, want an error (%s)", tc.reason)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Read() error = %q, want it to contain %q (%s)", err, tc.wantErr, tc.reason)
			}
			if got := errors.Is(err, ErrNotISO9660); got != tc.notISO {
				t.Errorf("errors.Is(err, ErrNotISO9660) = %v, want %v", got, tc.notISO)
			}
		})
	}
}

func TestReadMultiSectorDirectory(t *testing.T) {
	// Directory records never cross a sector boundary: the rest of a sector
	// is zero padding, and the records go on in the next sector. Move the
	// Joliet root to two new sectors at the end of the image, with the
	// vendor-data record alone in the second.
	s := sampleSeed()
	img := image(t, s)
	root := img[rootJoliet*sectorSize : (rootJoliet+1)*sectorSize]
	var records [][]byte
	for off := 0; root[off] != 0; off += int(root[off]) {
		records = append(records, root[off:off+int(root[off])])
	}
	if len(records) != 5 {
		t.Fatalf("Joliet root has %d records, want ., .. and three files", len(records))
	}
	dir := make([]byte, 2*sectorSize)
	copy(dir, bytes.Join(records[:4], nil))
	copy(dir[sectorSize:], records[4])
	extent := uint32(len(img) / sectorSize)
	img = append(bytes.Clone(img), dir...)
	putBoth32(img[svdSector*sectorSize+156+2:], extent)
	putBoth32(img[svdSector*sectorSize+156+10:], 2*sectorSize)

	got, _, err := Read(bytes.NewReader(img), int64(len(img)))
	if err != nil {
		t.Fatalf("Read() error = %v", err)
	}
	if diff := cmp.Diff(text(s), text(got)); diff != "" {
		t.Errorf("files mismatch (-want +got): the record after the padding was missed:\n%s", diff)
	}
}

func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	if _, err := nocloud.Write(&buf, sampleSeed()); err != nil {
		f.Fatal(err)
	}
	valid := buf.Bytes()
	f.Add(valid)
	// Corrupt single bytes of the descriptors and directories.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		img := bytes.Clone(valid)
		i := pvdSector*sectorSize + rng.IntN((firstDataSector-pvdSector)*sectorSize)
		img[i] = byte(rng.Uint32())
		f.Add(img)
	}
	f.Fuzz(func(t *testing.T, img []byte) {
		s, _, err := Read(bytes.NewReader(img), int64(len(img)))
		if err == nil && int64(len(s.UserData)+len(s.MetaData)+len(s.VendorData)) > int64(len(img)) {
			t.Errorf("Read() returned more file bytes than the image holds")
		}
	})
}

// image writes s and checks what every write must satisfy: no error, the
// returned count equal to the bytes written and to Size.
func image(t *testing.T, s nocloud.Seed) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := nocloud.Write(&buf, s)
	if err != nil {
		t.Fatalf("nocloud.Write() error = %v", err)
	}
	if n != int64(buf.Len()) {
		t.Errorf("nocloud.Write() returned %d, but wrote %d bytes", n, buf.Len())
	}
	if size := nocloud.Size(s); size != int64(buf.Len()) {
		t.Errorf("nocloud.Size() = %d, but Write wrote %d bytes: an upload with Content-Length nocloud.Size() would be cut or stall", size, buf.Len())
	}
	if buf.Len()%sectorSize != 0 {
		t.Errorf("image is %d bytes, not a whole number of %d-byte sectors", buf.Len(), sectorSize)
	}
	return buf.Bytes()
}

// seedText shows a nocloud.Seed's files as strings, for cmp.Diff.
type seedText struct {
	UserData, MetaData, VendorData string
	// VendorDataNil tells an absent vendor-data from an empty one.
	VendorDataNil bool
}

func text(s nocloud.Seed) seedText {
	return seedText{UserData: string(s.UserData), MetaData: string(s.MetaData), VendorData: string(s.VendorData), VendorDataNil: s.VendorData == nil}
}

// sampleSeed is the seed of the golden-image and layout tests.
func sampleSeed() nocloud.Seed {
	return nocloud.Seed{
		UserData:   []byte("#cloud-config\npackages: [tinyproxy]\n"),
		MetaData:   nocloud.MetaData("iid-1", "proxy-1"),
		VendorData: nocloud.VendorDataGuestAgent(),
	}
}

// gunzipTestdata returns the decompressed testdata file name.
func gunzipTestdata(t *testing.T, name string) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// renamePrimary replaces the first letter of the seed files' 8.3 names
// (USER_DAT.;1 -> XSER_DAT.;1), so that the primary names no longer identify
// them.
func renamePrimary(t *testing.T, img []byte) []byte {
	t.Helper()
	img = bytes.Clone(img)
	for _, name := range []string{"META_DAT.;1", "USER_DAT.;1", "VENDOR_D.;1"} {
		if bytes.Count(img, []byte(name)) != 1 {
			t.Fatalf("%s does not appear exactly once in the image", name)
		}
		img[bytes.Index(img, []byte(name))] = 'X'
	}
	return img
}

// The sectors of the layout nocloud.Write produces, which the tests above
// corrupt on purpose (the reader itself finds everything from the volume
// descriptors).
const (
	svdSector       = 17 // Joliet Supplementary Volume Descriptor
	termSector      = 18 // Volume Descriptor Set Terminator
	rootJoliet      = 24 // root directory, Joliet names
	firstDataSector = 25
)

// putBoth32 writes v as an ISO 9660 both-endian 32-bit field.
func putBoth32(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b[0:4], v)
	binary.BigEndian.PutUint32(b[4:8], v)
}

// ucs2 encodes s as a Joliet name (UCS-2 big-endian).
func ucs2(s string) []byte {
	units := utf16.Encode([]rune(s))
	out := make([]byte, 2*len(units))
	for i, u := range units {
		binary.BigEndian.PutUint16(out[2*i:], u)
	}
	return out
}
