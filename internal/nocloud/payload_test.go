package nocloud

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// samplePayload is two binaries of odd sizes (not whole sectors) and a
// third file, given out of order.
func samplePayload() Payload {
	return Payload{Files: []PayloadFile{
		{Name: "egress-proxy-linux-arm64", Data: bytes.Repeat([]byte("arm64!"), 7001)},
		{Name: "egress-proxy-linux-amd64", Data: bytes.Repeat([]byte("amd64"), 9000)},
		{Name: "version", Data: []byte("v1\n")},
	}}
}

func payloadImage(t *testing.T, p Payload) []byte {
	t.Helper()
	var b bytes.Buffer
	n, err := p.WriteTo(&b)
	if err != nil {
		t.Fatal(err)
	}
	size, err := p.Size()
	if err != nil {
		t.Fatal(err)
	}
	if n != size || int64(b.Len()) != size {
		t.Fatalf("WriteTo wrote %d bytes (buffer %d), Size said %d", n, b.Len(), size)
	}
	return b.Bytes()
}

func TestPayloadIsContentAddressed(t *testing.T) {
	p := samplePayload()
	reordered := Payload{Files: []PayloadFile{p.Files[2], p.Files[0], p.Files[1]}}
	changed := samplePayload()
	changed.Files[1].Data = append(bytes.Clone(changed.Files[1].Data), 0)
	digest := func(p Payload) string {
		d, err := p.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if !bytes.Equal(payloadImage(t, p), payloadImage(t, reordered)) {
		t.Error("the order of Files changed the image: two operators given the same binaries would store two images")
	}
	if digest(p) != digest(reordered) {
		t.Error("the order of Files changed the digest")
	}
	if digest(p) == digest(changed) {
		t.Error("a binary one byte longer kept the digest: a new version would not be uploaded")
	}
	name, err := PayloadImageName(digest(p))
	if err != nil {
		t.Fatal(err)
	}
	if want := "egress-proxy-engine-" + digest(p)[:32] + ".iso"; name != want {
		t.Errorf("PayloadImageName = %q, want %q", name, want)
	}
}

func TestPayloadErrors(t *testing.T) {
	many := Payload{}
	for i := range maxPayloadFiles + 1 {
		many.Files = append(many.Files, PayloadFile{Name: fmt.Sprintf("f%d", i)})
	}
	for _, tc := range []struct {
		name, reason string
		p            Payload
		want         string
	}{
		{name: "empty", reason: "an image with no binary serves no guest", want: "1 to 10 files, not 0"},
		{name: "too many", reason: "both root directories must fit their one sector", p: many, want: "1 to 10 files, not 11"},
		{name: "upper case", reason: "the guest looks the binary up by its exact lower-case name",
			p: Payload{Files: []PayloadFile{{Name: "Egress"}}}, want: `"Egress"`},
		{name: "a path", reason: "files sit in the root directory",
			p: Payload{Files: []PayloadFile{{Name: "bin/egress"}}}, want: `"bin/egress"`},
		{name: "twice", reason: "two files of one name would make the guest's copy ambiguous",
			p: Payload{Files: []PayloadFile{{Name: "a"}, {Name: "a"}}}, want: `"a" is named twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.p.WriteTo(&bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: WriteTo error = %v, want one with %q", tc.reason, err, tc.want)
			}
			if _, err := tc.p.Size(); err == nil {
				t.Errorf("%s: Size accepted what WriteTo refuses", tc.reason)
			}
		})
	}
	for _, d := range []string{"", "abc", strings.Repeat("g", 64)} {
		if _, err := PayloadImageName(d); err == nil {
			t.Errorf("PayloadImageName(%q) accepted a digest that is not 64 hex digits", d)
		}
	}
}

// xorriso and blkid read the payload as the guest's kernel and udev do:
// every file by its real name, the label the user-data mounts.
func TestPayloadReadByTools(t *testing.T) {
	xorriso := lookPath(t, "xorriso")
	blkid := lookPath(t, "blkid")
	// Also the most a payload may hold: ten files with 64-character names.
	full := Payload{}
	for i := range maxPayloadFiles {
		full.Files = append(full.Files, PayloadFile{Name: fmt.Sprintf("%02d", i) + strings.Repeat("x", 62), Data: []byte{byte(i)}})
	}
	for name, p := range map[string]Payload{"sample": samplePayload(), "full": full} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "payload.iso")
			if err := os.WriteFile(path, payloadImage(t, p), 0o600); err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			run(t, xorriso, "-abort_on", "WARNING", "-indev", path, "-osirrox", "on", "-extract", "/", out)
			want, got := map[string][]byte{}, map[string][]byte{}
			for _, f := range p.Files {
				want[f.Name] = f.Data
			}
			entries, err := os.ReadDir(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if got[e.Name()], err = os.ReadFile(filepath.Join(out, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("files extracted by xorriso (-want +got):\n%s", diff)
			}
			if info := run(t, blkid, "-p", "-o", "export", path); !strings.Contains("\n"+info, "\nLABEL="+PayloadLabel+"\n") {
				t.Errorf("blkid -p does not see the label %s the user-data mounts:\n%s", PayloadLabel, info)
			}
		})
	}
}
