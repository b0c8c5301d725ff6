package ownership

import "time"

// Stamp is a Mark as an instance stores it: the fields the instance carries
// itself, and the signature over the whole Mark. The entry and the place
// are not stored: a provider knows them from where it reads the instance,
// so a stamp copied to another instance, host or entry does not verify.
// Providers that keep their mark in one record (a VM's description, a
// domain's metadata) store a Stamp; each chooses its own encoding.
type Stamp struct {
	// Installation is the ID of the installation that made the instance.
	Installation string
	// OwnerUID is the UID of the Proxy the instance was made for.
	OwnerUID string
	// Name is the instance's name.
	Name string
	// Owner is the Proxy's namespace/name, for humans.
	Owner string
	// CreatedAt is when the instance was made, at second precision in UTC.
	CreatedAt time.Time
	// Signature is Sign of Mark(entry, place).
	Signature string
}

// Mark is what the stamp's signature covers when the stamp is read from an
// instance of entry at place.
func (s Stamp) Mark(entry, place string) Mark {
	return Mark{
		Installation: s.Installation, Entry: entry, Place: place,
		Name: s.Name, OwnerUID: s.OwnerUID, Owner: s.Owner, CreatedAt: s.CreatedAt,
	}
}

// NewStamp returns this installation's signed stamp for an instance of
// entry at place, made for the Proxy ownerUID (owner, its namespace/name)
// at created. The values must be given as the provider's encoding will read
// them back, or the stamp will not verify once stored.
func (id *Identity) NewStamp(entry, place, ownerUID, name, owner string, created time.Time) Stamp {
	s := Stamp{
		Installation: id.installation, OwnerUID: ownerUID, Name: name, Owner: owner,
		CreatedAt: created.UTC().Truncate(time.Second),
	}
	s.Signature = id.Sign(s.Mark(entry, place))
	return s
}

// SignedForAnother reports whether s, read at place, verifies for one of
// entries (the configuration's entries; the reader's own may be among them,
// its check having failed already). Entries of one installation
// may share a host or a cluster: a stamp that does not verify for the
// entry reading it but does for another is that entry's instance, foreign
// to the reader yet no sign of a lost or replaced key.
func (id *Identity) SignedForAnother(s Stamp, entries []string, place string) bool {
	for _, e := range entries {
		if id.VerifyStamp(s, e, place) == nil {
			return true
		}
	}
	return false
}

// VerifyStamp is Verify of a stamp read from an instance of entry at place.
func (id *Identity) VerifyStamp(s Stamp, entry, place string) error {
	return id.Verify(s.Mark(entry, place), s.Signature)
}
