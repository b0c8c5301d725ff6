package nocloud

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"unicode/utf16"

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

// FuzzRead checks that Read never panics or reads out of bounds, whatever
// the image; `go test` runs the seed corpus, `go test -fuzz FuzzRead` more.
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

// fromUCS2 decodes a Joliet name (UCS-2 big-endian), for checking the layout.
func fromUCS2(b []byte) string {
	units := make([]uint16, len(b)/2)
	for i := range units {
		units[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	return string(utf16.Decode(units))
}
