package ownership

import "strings"

// SignedName returns name followed by a dash and the Token of purpose,
// entry and name: the name of a thing that cannot carry a mark (a seed
// file on shared storage), such that only this installation could have
// chosen it. A provider appends its own suffix (".iso", "-seed.iso").
func (id *Identity) SignedName(purpose, entry, name string) string {
	return name + "-" + id.Token(purpose, entry, name)
}

// NameOfSigned is the inverse of SignedName: the name that signed carries,
// and true only when its token is this installation's for purpose, entry
// and that name. A name someone else chose, one of another installation,
// entry or purpose, and one whose name part was edited all give false.
func (id *Identity) NameOfSigned(purpose, entry, signed string) (string, bool) {
	i := strings.LastIndexByte(signed, '-')
	if i <= 0 || len(signed)-i-1 != TokenLen {
		return "", false
	}
	name, token := signed[:i], signed[i+1:]
	if !id.VerifyToken(token, purpose, entry, name) {
		return "", false
	}
	return name, true
}
