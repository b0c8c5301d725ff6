package nocloud

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// image writes s and checks what every write must satisfy: no error, the
// returned count equal to the bytes written and to Size.
func image(t *testing.T, s Seed) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := Write(&buf, s)
	if err != nil {
		t.Fatalf("Write() error = %v", err)
	}
	if n != int64(buf.Len()) {
		t.Errorf("Write() returned %d, but wrote %d bytes", n, buf.Len())
	}
	if size := Size(s); size != int64(buf.Len()) {
		t.Errorf("Size() = %d, but Write wrote %d bytes: an upload with Content-Length Size() would be cut or stall", size, buf.Len())
	}
	if buf.Len()%sectorSize != 0 {
		t.Errorf("image is %d bytes, not a whole number of %d-byte sectors", buf.Len(), sectorSize)
	}
	return buf.Bytes()
}

// seedText shows a Seed's files as strings, for cmp.Diff.
type seedText struct {
	UserData, MetaData, VendorData string
	// VendorDataNil tells an absent vendor-data from an empty one.
	VendorDataNil bool
}

func text(s Seed) seedText {
	return seedText{UserData: string(s.UserData), MetaData: string(s.MetaData), VendorData: string(s.VendorData), VendorDataNil: s.VendorData == nil}
}

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
		seed   Seed
	}{
		{
			name:   "small files",
			reason: "the usual seed: each file fits in one sector",
			seed: Seed{
				UserData:   []byte("#cloud-config\npackages: [tinyproxy]\n"),
				MetaData:   MetaData("proxy-1", "proxy-1"),
				VendorData: VendorDataGuestAgent(),
			},
		},
		{
			name:   "empty files",
			reason: "empty files take no sector and must still be listed, readable and empty",
			seed:   Seed{UserData: []byte{}, MetaData: []byte{}, VendorData: []byte{}},
		},
		{
			name:   "nil files",
			reason: "nil is written as an empty file",
			seed:   Seed{},
		},
		{
			name:   "multi-sector user-data",
			reason: "100 KiB spans 50 sectors; the files after it must start after its last sector",
			seed:   Seed{UserData: big, MetaData: MetaData("i", "h"), VendorData: []byte("#cloud-config\n")},
		},
		{
			name:   "exactly one sector and one byte more",
			reason: "sizes at a sector boundary must not gain or lose a sector of padding",
			seed:   Seed{UserData: bytes.Repeat([]byte("u"), sectorSize), MetaData: bytes.Repeat([]byte("m"), sectorSize+1), VendorData: []byte("v")},
		},
		{
			name:   "binary content and empty file in the middle",
			reason: "contents are copied byte for byte, and an empty user-data between two files does not shift them",
			seed:   Seed{UserData: []byte{}, MetaData: binary, VendorData: big[:5000]},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img := image(t, tc.seed)
			got, label, err := Read(bytes.NewReader(img), int64(len(img)))
			if err != nil {
				t.Fatalf("Read() error = %v (%s)", err, tc.reason)
			}
			if label != Label {
				t.Errorf("label = %q, want %q: cloud-init finds the seed by this label", label, Label)
			}
			want := tc.seed
			// Read returns an empty, non-nil slice for an empty file.
			for _, f := range []*[]byte{&want.UserData, &want.MetaData, &want.VendorData} {
				if *f == nil {
					*f = []byte{}
				}
			}
			if diff := cmp.Diff(text(want), text(got)); diff != "" {
				t.Errorf("Read(Write(seed)) mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
}

// sampleSeed is the seed of the golden-image and layout tests.
func sampleSeed() Seed {
	return Seed{
		UserData:   []byte("#cloud-config\npackages: [tinyproxy]\n"),
		MetaData:   MetaData("iid-1", "proxy-1"),
		VendorData: VendorDataGuestAgent(),
	}
}

func TestWriteIsDeterministic(t *testing.T) {
	first := image(t, sampleSeed())
	for range 5 {
		if again := image(t, sampleSeed()); !bytes.Equal(first, again) {
			t.Fatal("Write() gave different bytes for the same seed: a retried upload would not be identical")
		}
	}
	// Two writes in one run would agree even with time.Now() timestamps;
	// the golden hash pins the bytes across runs, days and releases. If the
	// layout is changed on purpose, update it (and re-run the external tool
	// tests).
	const golden = "d4d34f6296f6314683b06ccff0daa3bfb3efd09e6545bc2e8bb6a176f407dc5e"
	sum := sha256.Sum256(first)
	if got := hex.EncodeToString(sum[:]); got != golden {
		t.Errorf("sha256 of the sample image = %s, want %s: the bytes changed (a timestamp from the clock?)", got, golden)
	}
	// Every date field holds the fixed recording time.
	for _, sector := range []int{pvdSector, svdSector} {
		d := first[sector*sectorSize:]
		for _, off := range []int{813, 830} {
			if got := string(d[off : off+16]); got != "2020010100000000" {
				t.Errorf("sector %d: date at offset %d = %q, want the fixed 2020010100000000", sector, off, got)
			}
		}
	}
}

// volumeID returns the volume identifier of the descriptor at sector.
func volumeID(img []byte, sector int) []byte {
	return img[sector*sectorSize+40 : sector*sectorSize+72]
}

// rawDir lists the identifiers, extents and sizes of the records of the
// directory at sector, decoded independently of Read.
type rawRecord struct {
	ID     string
	Extent uint32
	Size   uint32
	Dir    bool
}

func rawDir(t *testing.T, img []byte, sector uint32, joliet bool) []rawRecord {
	t.Helper()
	d := img[int(sector)*sectorSize : int(sector+1)*sectorSize]
	var out []rawRecord
	for off := 0; off < len(d) && d[off] != 0; off += int(d[off]) {
		r := d[off : off+int(d[off])]
		if off%2 != 0 {
			t.Errorf("record at odd offset %d", off)
		}
		if binary.LittleEndian.Uint32(r[2:6]) != binary.BigEndian.Uint32(r[6:10]) || binary.LittleEndian.Uint32(r[10:14]) != binary.BigEndian.Uint32(r[14:18]) {
			t.Errorf("record at offset %d: little- and big-endian halves of a both-endian field differ", off)
		}
		id := r[33 : 33+int(r[32])]
		name := string(id)
		switch {
		case len(id) == 1 && id[0] == 0:
			name = "."
		case len(id) == 1 && id[0] == 1:
			name = ".."
		case joliet:
			name = fromUCS2(id)
		}
		out = append(out, rawRecord{ID: name, Extent: binary.LittleEndian.Uint32(r[2:6]), Size: binary.LittleEndian.Uint32(r[10:14]), Dir: r[25]&2 != 0})
	}
	return out
}

func TestImageLayout(t *testing.T) {
	s := sampleSeed()
	img := image(t, s)

	// Volume descriptors: primary, Joliet, terminator.
	for _, vd := range []struct {
		sector int
		typ    byte
	}{{pvdSector, 1}, {svdSector, 2}, {termSector, 255}} {
		d := img[vd.sector*sectorSize:]
		if d[0] != vd.typ || string(d[1:6]) != "CD001" || d[6] != 1 {
			t.Errorf("sector %d: descriptor header = % x, want type %d, CD001, version 1", vd.sector, d[:7], vd.typ)
		}
	}
	if got, want := string(volumeID(img, pvdSector)), Label+strings.Repeat(" ", 32-len(Label)); got != want {
		t.Errorf("primary volume identifier = %q, want %q: blkid reports it as the label cloud-init looks for", got, want)
	}
	if got, want := volumeID(img, svdSector), append(ucs2(Label), bytes.Repeat([]byte{0, ' '}, 16-len(Label))...); !bytes.Equal(got, want) {
		t.Errorf("Joliet volume identifier = % x, want % x: blkid prefers the Joliet label when there is one", got, want)
	}
	if got := string(img[svdSector*sectorSize+88 : svdSector*sectorSize+91]); got != "%/E" {
		t.Errorf("supplementary descriptor escape sequence = %q, want %%/E: without it Linux does not see a Joliet tree", got)
	}
	total := binary.LittleEndian.Uint32(img[pvdSector*sectorSize+80:])
	if int(total)*sectorSize != len(img) {
		t.Errorf("volume space size = %d sectors, image has %d", total, len(img)/sectorSize)
	}

	wantData := []rawRecord{
		{ID: "META_DAT.;1", Extent: firstDataSector, Size: uint32(len(s.MetaData))},
		{ID: "USER_DAT.;1", Extent: firstDataSector + 1, Size: uint32(len(s.UserData))},
		{ID: "VENDOR_D.;1", Extent: firstDataSector + 2, Size: uint32(len(s.VendorData))},
	}
	for _, tree := range []struct {
		name   string
		sector int
		joliet bool
		names  []string
	}{
		{"primary", pvdSector, false, []string{"META_DAT.;1", "USER_DAT.;1", "VENDOR_D.;1"}},
		{"joliet", svdSector, true, []string{"meta-data", "user-data", "vendor-data"}},
	} {
		t.Run(tree.name, func(t *testing.T) {
			root := img[tree.sector*sectorSize+156:]
			rootExtent := binary.LittleEndian.Uint32(root[2:6])
			want := []rawRecord{
				{ID: ".", Extent: rootExtent, Size: sectorSize, Dir: true},
				{ID: "..", Extent: rootExtent, Size: sectorSize, Dir: true},
			}
			for i, f := range wantData {
				f.ID = tree.names[i]
				want = append(want, f)
			}
			if diff := cmp.Diff(want, rawDir(t, img, rootExtent, tree.joliet)); diff != "" {
				t.Errorf("root directory mismatch (-want +got): names, sort order, extents or sizes are wrong:\n%s", diff)
			}
			// Both path tables point at the same root.
			lPath := binary.LittleEndian.Uint32(img[tree.sector*sectorSize+140:])
			mPath := binary.BigEndian.Uint32(img[tree.sector*sectorSize+148:])
			if got := binary.LittleEndian.Uint32(img[int(lPath)*sectorSize+2:]); got != rootExtent {
				t.Errorf("L path table root = %d, want %d", got, rootExtent)
			}
			if got := binary.BigEndian.Uint32(img[int(mPath)*sectorSize+2:]); got != rootExtent {
				t.Errorf("M path table root = %d, want %d", got, rootExtent)
			}
		})
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
			if label != Label {
				t.Errorf("label = %q, want %q", label, Label)
			}
			if diff := cmp.Diff(want, text(got)); diff != "" {
				t.Errorf("files mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
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

func TestReadTreeChoice(t *testing.T) {
	s := sampleSeed()
	valid := image(t, s)
	noJoliet := bytes.Clone(valid)
	copy(noJoliet[svdSector*sectorSize+88:], "\x00\x00\x00")
	noVendor := bytes.Clone(valid)
	i := bytes.Index(noVendor[rootJoliet*sectorSize:], ucs2(VendorDataName))
	copy(noVendor[rootJoliet*sectorSize+i:], ucs2("vendor-date"))
	withoutVendor := s
	withoutVendor.VendorData = nil
	tests := []struct {
		name   string
		reason string
		img    []byte
		want   Seed
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
			if label != Label {
				t.Errorf("label = %q, want %q", label, Label)
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
				i := bytes.Index(img[rootJoliet*sectorSize:], ucs2(UserDataName))
				copy(img[rootJoliet*sectorSize+i:], ucs2("user-date"))
			}),
			wantErr: `the image (label "cidata") has no user-data file, which the NoCloud datasource requires`,
		},
		{
			name: "duplicate file", reason: "two records for one name are ambiguous",
			img: modified(func(img []byte) {
				i := bytes.Index(img[rootJoliet*sectorSize:], ucs2(VendorDataName))
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

// FuzzRead checks that Read never panics or reads out of bounds, whatever
// the image; `go test` runs the seed corpus, `go test -fuzz FuzzRead` more.
func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	if _, err := Write(&buf, sampleSeed()); err != nil {
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

// failingWriter fails after accepting limit bytes.
type failingWriter struct{ limit, n int }

var errDiskFull = errors.New("disk full")

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n+len(p) > w.limit {
		k := w.limit - w.n
		w.n = w.limit
		return k, errDiskFull
	}
	w.n += len(p)
	return len(p), nil
}

func TestWriteErrors(t *testing.T) {
	s := sampleSeed()
	tests := []struct {
		limit   int
		wantErr string
	}{
		{0, "writing the ISO 9660 header: disk full"},
		{firstDataSector*sectorSize + 10, "writing meta-data: disk full"},
		{int(Size(s)) - 1, "padding vendor-data: disk full"},
	}
	for _, tc := range tests {
		limit := tc.limit
		w := &failingWriter{limit: limit}
		n, err := Write(w, s)
		if !errors.Is(err, errDiskFull) || err.Error() != tc.wantErr {
			t.Errorf("limit %d: Write() error = %v, want %q, wrapping the writer's error: Write must stop at the first failure", limit, err, tc.wantErr)
		}
		if n != int64(limit) {
			t.Errorf("limit %d: Write() = %d, want the %d bytes the writer accepted", limit, n, limit)
		}
	}
}

func TestMetaData(t *testing.T) {
	tests := []struct {
		name             string
		reason           string
		instanceID, host string
		wantExact        string // "" to check only the YAML round trip
	}{
		{name: "plain", reason: "usual names are written as is", instanceID: "proxy-abc.1", host: "proxy-abc", wantExact: "instance-id: proxy-abc.1\nlocal-hostname: proxy-abc\n"},
		{name: "digits", reason: "an all-digit id would otherwise be read as a number", instanceID: "12345", host: "0x1f"},
		{name: "yaml keywords", reason: "PyYAML reads yes/no/on/off as booleans", instanceID: "yes", host: "Off"},
		{name: "special characters", reason: "a colon, a hash or a newline would break the mapping", instanceID: "a: b # c\nd", host: "\"quoted\""},
		{name: "empty", reason: "an empty value would be null", instanceID: "", host: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			md := MetaData(tc.instanceID, tc.host)
			if tc.wantExact != "" && string(md) != tc.wantExact {
				t.Errorf("MetaData() = %q, want %q (%s)", md, tc.wantExact, tc.reason)
			}
			var got map[string]any
			if err := yaml.Unmarshal(md, &got); err != nil {
				t.Fatalf("MetaData() is not YAML: %v\n%s", err, md)
			}
			want := map[string]any{"instance-id": tc.instanceID, "local-hostname": tc.host}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("MetaData() reads back wrong (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestVendorDataGuestAgent(t *testing.T) {
	vd := VendorDataGuestAgent()
	const header = "#cloud-config\n"
	if !bytes.HasPrefix(vd, []byte(header)) {
		t.Fatalf("vendor-data does not start with %q: cloud-init would not read it as cloud-config:\n%s", header, vd)
	}
	var got map[string]any
	if err := yaml.Unmarshal(vd, &got); err != nil {
		t.Fatalf("vendor-data is not YAML: %v", err)
	}
	want := map[string]any{
		"packages": []any{"qemu-guest-agent"},
		"runcmd":   []any{[]any{"systemctl", "enable", "--now", "qemu-guest-agent"}},
		// cloud-init merges vendor-data under user-data; without list
		// append, the user-data's packages and runcmd (tinyproxy's) would
		// replace these and the guest agent would never be installed.
		"merge_how": []any{
			map[string]any{"name": "list", "settings": []any{"append"}},
			map[string]any{"name": "dict", "settings": []any{"no_replace", "recurse_list"}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("vendor-data mismatch (-want +got):\n%s", diff)
	}
}
