package ownership_test

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func identity(t *testing.T, installation string, key []byte) *ownership.Identity {
	t.Helper()
	id, err := ownership.NewIdentity(installation, key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func sample() ownership.Mark {
	return ownership.Mark{
		Installation: "prod", Entry: "pve", Place: "vmid=150", Name: "crawl-a-1234abcd",
		OwnerUID: "0d9e0c5e-3f0a-4c5e-9d0f-1b2c3d4e5f60", Owner: "crawl/a",
		CreatedAt: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC),
	}
}

// TestVerify: a mark verifies only as it was signed, with this
// installation's key; every field is covered by the signature.
func TestVerify(t *testing.T) {
	prod := identity(t, "prod", testKey)
	m := sample()
	sig := prod.Sign(m)
	otherKey := identity(t, "prod", []byte("another key of thirty-two bytes!"))
	staging := identity(t, "staging", []byte("staging's key of thirty-two byte"))
	stagingMark := sample()
	stagingMark.Installation = "staging"
	for _, c := range []struct {
		name   string
		reason string
		id     *ownership.Identity
		mark   func(m ownership.Mark) ownership.Mark
		sig    string
		want   error
	}{
		{"as signed", "the operator's own mark", prod, nil, sig, nil},
		{"same instant in another zone", "CreatedAt is signed as an instant, in UTC", prod,
			func(m ownership.Mark) ownership.Mark {
				m.CreatedAt = m.CreatedAt.In(time.FixedZone("x", 3600))
				return m
			}, sig, nil},
		{"unsigned", "a mark written by hand, or by the operator before marks were signed", prod, nil, "", ownership.ErrUnsigned},
		{"another installation's own mark", "staging verifies what staging signed", staging,
			func(ownership.Mark) ownership.Mark { return stagingMark }, staging.Sign(stagingMark), nil},
		{"another installation's mark, read by us", "validly signed, but not ours", prod,
			func(ownership.Mark) ownership.Mark { return stagingMark }, staging.Sign(stagingMark), ownership.ErrOtherInstallation},
		{"another installation reads ours", "the installation is checked before the signature", staging, nil, sig, ownership.ErrOtherInstallation},
		{"another key", "the same installation ID with another key (a lost and recreated Secret)", otherKey, nil, sig, ownership.ErrBadSignature},
		{"installation edited", "staging's mark and signature with our ID written over its own", prod,
			nil, staging.Sign(stagingMark), ownership.ErrBadSignature},
		{"entry edited", "", prod, func(m ownership.Mark) ownership.Mark { m.Entry = "pve2"; return m }, sig, ownership.ErrBadSignature},
		{"copied to another place", "the mark of one VM on another VMID", prod,
			func(m ownership.Mark) ownership.Mark { m.Place = "vmid=151"; return m }, sig, ownership.ErrBadSignature},
		{"copied to another name", "", prod, func(m ownership.Mark) ownership.Mark { m.Name = "crawl-b-1234abcd"; return m }, sig, ownership.ErrBadSignature},
		{"owner UID edited", "", prod, func(m ownership.Mark) ownership.Mark { m.OwnerUID = "x"; return m }, sig, ownership.ErrBadSignature},
		{"owner edited", "", prod, func(m ownership.Mark) ownership.Mark { m.Owner = "crawl/b"; return m }, sig, ownership.ErrBadSignature},
		{"created-at edited", "an older time would make GC's grace period pass at once", prod,
			func(m ownership.Mark) ownership.Mark { m.CreatedAt = m.CreatedAt.Add(-time.Hour); return m }, sig, ownership.ErrBadSignature},
		{"fields shifted", "the encoding is length-prefixed: a boundary moved is another mark", prod,
			func(m ownership.Mark) ownership.Mark {
				m.Name, m.OwnerUID = m.Name+m.OwnerUID[:1], m.OwnerUID[1:]
				return m
			}, sig, ownership.ErrBadSignature},
		{"signature without version", "", prod, nil, strings.TrimPrefix(sig, "v1."), ownership.ErrBadSignature},
		{"signature truncated", "", prod, nil, sig[:len(sig)-1], ownership.ErrBadSignature},
		{"signature not base64", "", prod, nil, "v1.!!!!", ownership.ErrBadSignature},
		{"a token in place of a signature", "tokens and marks are domain-separated", prod, nil, "v1." + prod.Token("crawl-a-1234abcd"), ownership.ErrBadSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := m
			if c.mark != nil {
				got = c.mark(m)
			}
			if err := c.id.Verify(got, c.sig); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Errorf("Verify = %v, want %v (%s)", err, c.want, c.reason)
			}
			if c.id.Owns(got, c.sig) != (c.want == nil) {
				t.Errorf("Owns disagrees with Verify")
			}
		})
	}
}

// TestTokens: a token is short, name-safe, bound to the installation, key
// and fields.
func TestTokens(t *testing.T) {
	prod := identity(t, "prod", testKey)
	tok := prod.Token("seed", "crawl-a-1234abcd")
	if len(tok) != ownership.TokenLen || strings.Trim(tok, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		t.Fatalf("token %q: want %d lower-case base32 characters", tok, ownership.TokenLen)
	}
	if !prod.VerifyToken(tok, "seed", "crawl-a-1234abcd") {
		t.Error("a token does not verify with its own fields")
	}
	for _, c := range []struct {
		reason string
		id     *ownership.Identity
		fields []string
	}{
		{"another name", prod, []string{"seed", "crawl-b-1234abcd"}},
		{"fields joined differently", prod, []string{"seedcrawl-a-1234abcd"}},
		{"another installation with the same key", identity(t, "staging", testKey), []string{"seed", "crawl-a-1234abcd"}},
		{"another key", identity(t, "prod", []byte("another key of thirty-two bytes!")), []string{"seed", "crawl-a-1234abcd"}},
	} {
		if c.id.VerifyToken(tok, c.fields...) {
			t.Errorf("the token verifies with %s", c.reason)
		}
	}
}

// TestNewIdentityRefuses short keys and IDs that cannot go into a label.
func TestNewIdentityRefuses(t *testing.T) {
	for _, c := range []struct {
		installation string
		key          []byte
	}{
		{"prod", testKey[:31]},
		{"", testKey},
		{"Prod", testKey},
		{"prod\nowner-uid: x", testKey},
		{strings.Repeat("a", 64), testKey},
	} {
		if _, err := ownership.NewIdentity(c.installation, c.key); err == nil {
			t.Errorf("NewIdentity(%q, %d bytes) succeeded", c.installation, len(c.key))
		}
	}
}

// TestIdentityNeverPrintsItsKey in any printed or serialised form, also
// reached through another struct.
func TestIdentityNeverPrintsItsKey(t *testing.T) {
	id := identity(t, "prod", testKey)
	holder := struct{ id *ownership.Identity }{id}
	j, _ := json.Marshal(struct{ ID *ownership.Identity }{id})
	var sb strings.Builder
	slog.New(slog.NewTextHandler(&sb, nil)).Info("x", "id", id)
	outs := []string{fmt.Sprint(id), fmt.Sprintf("%+v %#v %s %q %x %d", id, id, id, id, id, id),
		fmt.Sprintf("%+v %#v", holder, holder), string(j), sb.String()}
	for _, out := range outs {
		if strings.Contains(out, string(testKey)) || strings.Contains(out, hex.EncodeToString(testKey)) ||
			strings.Contains(out, strings.Trim(fmt.Sprint([]int{48, 49, 50, 51, 52}), "[]")) {
			t.Errorf("printed form holds the key: %s", out)
		}
	}
	if !strings.Contains(fmt.Sprint(id), "prod") {
		t.Errorf("%v does not name the installation", id)
	}
}

// TestKeyID: the key's name is the same for the same key and installation,
// differs for another key, and shows nothing of the key.
func TestKeyID(t *testing.T) {
	prod := identity(t, "prod", testKey)
	for _, c := range []struct {
		name, reason string
		other        *ownership.Identity
		same         bool
	}{
		{"the same key, restored", "a key restored from its backup is recognised by its ID", identity(t, "prod", testKey), true},
		{"a new key", "a key minted after a loss has another ID", identity(t, "prod", []byte("another key of thirty-two bytes!")), false},
		{"another installation", "one key shared by two installations still names each apart", identity(t, "staging", testKey), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := prod.KeyID() == c.other.KeyID(); got != c.same {
				t.Errorf("KeyID %q vs %q: same = %v, want %v (%s)", prod.KeyID(), c.other.KeyID(), got, c.same, c.reason)
			}
		})
	}
	if id := prod.KeyID(); len(id) != ownership.TokenLen || strings.Contains(id, string(testKey)) || id == prod.Token() {
		t.Errorf("KeyID = %q: want %d characters, not the key, not a token", id, ownership.TokenLen)
	}
}
