package nocloud

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
)

// PayloadLabel is the volume label of the guest engine's payload image,
// which the rendered user-data mounts by label (/dev/disk/by-label). It is
// not cloud-init's label, so that the NoCloud datasource never takes the
// payload for a seed.
const PayloadLabel = "EPENGINE"

// PayloadFile is one file of a payload image.
type PayloadFile struct {
	// Name is the file's name in the image (its Joliet name, which Linux
	// shows): lower-case letters, digits, '.', '_' and '-', at most 64.
	Name string
	// Data is the file's content.
	Data []byte
}

// Payload is the content of the image that carries the guest engine's
// binaries (one per guest architecture) to a VM member: an ISO 9660 image
// with Joliet names, like the seed, written as deterministically, so that
// the same binaries always give the same image and so the same digest,
// under which a provider stores it once per storage and shares it between
// its VMs (docs/guest-engine.md).
type Payload struct {
	// Files are the image's files, in any order.
	Files []PayloadFile
}

// payloadNameRE is what a payload file's name may be.
var payloadNameRE = regexp.MustCompile(`^[a-z0-9._-]{1,64}$`)

// maxPayloadFiles bounds the files so that both root directories (their
// records up to 56 bytes for the primary tree, up to 162 for Joliet) fit
// the one sector the layout gives each.
const maxPayloadFiles = 10

// volume returns the payload's volume: the files sorted by name, with
// primary (8.3) identifiers FILE0000 ... in that same order, so that both
// trees are sorted as ISO 9660 requires.
func (p Payload) volume() (volume, error) {
	if len(p.Files) == 0 || len(p.Files) > maxPayloadFiles {
		return volume{}, fmt.Errorf("a payload image holds 1 to %d files, not %d", maxPayloadFiles, len(p.Files))
	}
	files := slices.SortedFunc(slices.Values(p.Files), func(a, b PayloadFile) int { return cmp.Compare(a.Name, b.Name) })
	v := volume{label: PayloadLabel}
	for i, f := range files {
		if !payloadNameRE.MatchString(f.Name) {
			return volume{}, fmt.Errorf("payload file name %q: use 1 to 64 lower-case letters, digits, '.', '_' and '-'", f.Name)
		}
		if i > 0 && files[i-1].Name == f.Name {
			return volume{}, fmt.Errorf("payload file %q is named twice", f.Name)
		}
		if int64(len(f.Data)) > maxFileSize {
			return volume{}, fmt.Errorf("%s is %d bytes, more than the %d an ISO 9660 file can hold", f.Name, len(f.Data), int64(maxFileSize))
		}
		v.files = append(v.files, seedFile{primary: fmt.Sprintf("FILE%04d.;1", i), joliet: f.Name, data: f.Data})
	}
	return v, nil
}

// Size returns the exact number of bytes WriteTo writes for p.
func (p Payload) Size() (int64, error) {
	v, err := p.volume()
	if err != nil {
		return 0, err
	}
	return v.size(), nil
}

// WriteTo writes p's image to w and returns the number of bytes written.
// The same p (whatever the order of its Files) always yields the same
// bytes.
func (p Payload) WriteTo(w io.Writer) (int64, error) {
	v, err := p.volume()
	if err != nil {
		return 0, err
	}
	return v.write(w)
}

// Digest returns the SHA-256 of p's image, in hex: its content address.
func (p Payload) Digest() (string, error) {
	h := sha256.New()
	if _, err := p.WriteTo(h); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// PayloadImageName returns the name a provider stores a payload image of
// that digest under: the digest says what it holds, so two operators, or
// two versions, never store different bytes under one name, and an upload
// already there is never made again.
func PayloadImageName(digest string) (string, error) {
	if len(digest) != sha256.Size*2 {
		return "", errors.New("a payload digest is 64 hex digits (SHA-256)")
	}
	if _, err := hex.DecodeString(digest); err != nil {
		return "", fmt.Errorf("payload digest: %w", err)
	}
	return "egress-proxy-engine-" + digest[:32] + ".iso", nil
}
