package ownership

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// KeySize is the size of a generated key, and the least a loaded key must
// have: the HMAC-SHA256 key length that adds no weakness.
const KeySize = 32

// signaturePrefix versions the signature's format, so that a later format
// (another algorithm, a key ID for rotation) can be told apart.
const signaturePrefix = "v1."

// The purposes domain-separate what is signed: a mark can never be taken
// for a name token and the other way round.
const (
	purposeMark  = "egress-proxies-operator/mark/v1"
	purposeToken = "egress-proxies-operator/token/v1" //nolint:gosec // G101: a domain-separation label, not a credential.
	purposeKeyID = "egress-proxies-operator/key-id/v1"
)

// Errors of Verify, so that a provider can log why it left an instance
// alone. None of them holds a secret.
var (
	// ErrUnsigned is a mark without a signature.
	ErrUnsigned = errors.New("the mark is not signed")
	// ErrOtherInstallation is a mark of another installation of the
	// operator.
	ErrOtherInstallation = errors.New("the mark names another installation")
	// ErrBadSignature is a mark whose signature does not match its fields
	// under this installation's key: forged, copied or edited.
	ErrBadSignature = errors.New("the mark's signature does not verify")
)

// Mark is what a provider records on an instance to say that this
// installation made it, for which Proxy, and where. Every field is signed.
type Mark struct {
	// Installation is the ID of the installation that made the instance.
	Installation string
	// Entry is the provider entry's name: two entries that share a host
	// never take each other's instances.
	Entry string
	// Place is where the instance was made, as the provider knows it for
	// good (a VMID, a host, a namespace): a mark copied to an instance
	// elsewhere does not verify.
	Place string
	// Name is the instance's name.
	Name string
	// OwnerUID is the UID of the Proxy the instance was made for.
	OwnerUID string
	// Owner is the Proxy's namespace/name, for humans.
	Owner string
	// CreatedAt is when the instance was made; signed at second precision,
	// in UTC, as marks store it.
	CreatedAt time.Time
}

// CreatedAtText is the form marks store CreatedAt in, and the one signed.
func (m Mark) CreatedAtText() string { return m.CreatedAt.UTC().Format(time.RFC3339) }

// encode is the canonical encoding of a purpose and its fields: each as its
// length (uvarint) then its bytes, so that no two different field lists
// encode alike whatever the fields hold.
func encode(purpose string, fields ...string) []byte {
	n := len(purpose) + binary.MaxVarintLen64
	for _, f := range fields {
		n += len(f) + binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	for _, f := range append([]string{purpose}, fields...) {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

func (m Mark) encode() []byte {
	return encode(purposeMark, m.Installation, m.Entry, m.Place, m.Name, m.OwnerUID, m.Owner, m.CreatedAtText())
}

// Identity is one installation of the operator: its ID and its key. It is
// safe for concurrent use. Every printed or serialised form shows the ID
// only, never the key.
type Identity struct {
	installation string
	// key sits behind a pointer, so that even a reflective print of an
	// Identity reached through another struct shows an address, not bytes.
	key *[]byte
	// ready, for an identity made by NewPending, is closed once SetKey has
	// set key; nil for one made with its key.
	ready chan struct{}
	once  sync.Once
}

// NewPending returns the identity of an installation whose key is not read
// yet: only the leader reads (or, at the first start, creates) the key
// Secret, once it is elected (KeyLoader), so that a standby that starts
// while the Secret is missing never mints a second key. Every signature or
// check waits until SetKey gave the key; nothing signs or checks before
// the leader's controllers run.
func NewPending(installation string) (*Identity, error) {
	if err := ValidateInstallation(installation); err != nil {
		return nil, err
	}
	return &Identity{installation: installation, ready: make(chan struct{})}, nil
}

// SetKey gives a pending identity its key, once; the key is copied. It
// fails for a short key, for an identity made with its key, and when the
// key was set already.
func (id *Identity) SetKey(key []byte) error {
	if id.ready == nil {
		return errors.New("the identity has its key already")
	}
	if len(key) < KeySize {
		return fmt.Errorf("the ownership key has %d bytes, want at least %d", len(key), KeySize)
	}
	set := false
	id.once.Do(func() {
		k := append([]byte(nil), key...)
		id.key = &k
		close(id.ready)
		set = true
	})
	if !set {
		return errors.New("the identity's key was set already")
	}
	return nil
}

// Ready is closed once the identity has its key.
func (id *Identity) Ready() <-chan struct{} {
	if id.ready == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return id.ready
}

// NewIdentity returns the identity of an installation. The ID must be a DNS
// label (it goes into label values and single-line marks); the key must
// have at least KeySize bytes. The key is copied.
func NewIdentity(installation string, key []byte) (*Identity, error) {
	if err := ValidateInstallation(installation); err != nil {
		return nil, err
	}
	if len(key) < KeySize {
		return nil, fmt.Errorf("the ownership key has %d bytes, want at least %d", len(key), KeySize)
	}
	k := append([]byte(nil), key...)
	return &Identity{installation: installation, key: &k}, nil
}

// ValidateInstallation checks an installation ID: a DNS label, as a
// namespace name is.
func ValidateInstallation(installation string) error {
	if errs := validation.IsDNS1123Label(installation); len(errs) > 0 {
		return fmt.Errorf("installation ID %q: %s", installation, strings.Join(errs, "; "))
	}
	return nil
}

// Installation returns the installation's ID.
func (id *Identity) Installation() string { return id.installation }

func (id *Identity) mac(msg []byte) []byte {
	if id.ready != nil {
		<-id.ready
	}
	h := hmac.New(sha256.New, *id.key)
	_, _ = h.Write(msg)
	return h.Sum(nil)
}

// Sign returns the signature of a mark. The mark's Installation should be
// this installation's: Verify accepts no other.
func (id *Identity) Sign(m Mark) string {
	return signaturePrefix + base64.RawURLEncoding.EncodeToString(id.mac(m.encode()))
}

// Verify reports whether a mark read from an instance, with the signature
// stored next to it, is this installation's: nil when it is, else
// ErrUnsigned, ErrOtherInstallation or ErrBadSignature. The comparison
// takes the same time whatever the signature holds.
func (id *Identity) Verify(m Mark, signature string) error {
	if m.Installation != id.installation {
		return ErrOtherInstallation
	}
	if signature == "" {
		return ErrUnsigned
	}
	raw, ok := strings.CutPrefix(signature, signaturePrefix)
	if !ok {
		return ErrBadSignature
	}
	got, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil || !hmac.Equal(got, id.mac(m.encode())) {
		return ErrBadSignature
	}
	return nil
}

// Owns reports whether Verify accepts the mark.
func (id *Identity) Owns(m Mark, signature string) bool { return id.Verify(m, signature) == nil }

// tokenEncoding is lower-case base32 without padding: safe in file, volume
// and object names.
var tokenEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// TokenLen is the length of a Token: 80 bits of MAC.
const TokenLen = 16

// Token returns a short MAC of the installation and some fields, for names
// that cannot carry a whole mark (a seed volume's file name): TokenLen
// lower-case letters and digits. Unlike a mark, a token is short enough to
// be guessed only by trying about 2^79 names on the infrastructure itself.
func (id *Identity) Token(fields ...string) string {
	sum := id.mac(encode(purposeToken, append([]string{id.installation}, fields...)...))
	return tokenEncoding.EncodeToString(sum[:10])
}

// KeyID names the key without revealing it: TokenLen lower-case letters
// and digits of its MAC over a fixed, domain-separated input. Two
// identities have one KeyID only when they hold one key (and installation).
// It is what an administrator compares to tell a restored key from a new
// one, and what the start-afresh annotation names (docs/security.md), so
// that consent given for one key never carries over to the next.
func (id *Identity) KeyID() string {
	sum := id.mac(encode(purposeKeyID, id.installation))
	return tokenEncoding.EncodeToString(sum[:10])
}

// VerifyToken reports whether token is Token(fields...), in constant time.
func (id *Identity) VerifyToken(token string, fields ...string) bool {
	return hmac.Equal([]byte(token), []byte(id.Token(fields...)))
}

// String implements fmt.Stringer: the installation, never the key.
func (id *Identity) String() string {
	if id == nil {
		return "installation <none>"
	}
	return "installation " + id.installation
}

// GoString implements fmt.GoStringer.
func (id *Identity) GoString() string { return id.String() }

// Format implements fmt.Formatter, so that every verb prints String.
func (id *Identity) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, id.String()) }

// MarshalJSON implements json.Marshaler, for structured loggers.
func (id *Identity) MarshalJSON() ([]byte, error) { return fmt.Appendf(nil, "%q", id.String()), nil }

// LogValue implements slog.LogValuer.
func (id *Identity) LogValue() slog.Value { return slog.StringValue(id.String()) }

// MarshalLog implements logr.Marshaler.
func (id *Identity) MarshalLog() any { return id.String() }
