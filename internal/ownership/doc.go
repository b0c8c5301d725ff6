// Package ownership holds the installation's identity: its ID and the key
// that signs the mark every provider puts on the instances it creates.
//
// A mark says whose instance it is (the installation, the Proxy's UID and
// name, the instance's name and place, when it was made). Anyone who can
// edit a VM's description, a domain's metadata or a pod's labels can write
// those words; only the operator holds the key. So an instance is the
// operator's only when its mark names this installation and its signature,
// an HMAC-SHA256 over a canonical encoding of every field, verifies. A mark
// copied to another VM, name or place, a mark whose fields were edited, an
// unsigned mark and a mark of another installation all fail, and the
// providers treat such instances as foreign: never listed, adopted,
// configured, started or deleted.
//
// The key lives in a Secret in the operator's own namespace, created by the
// operator at its first start (LoadOrCreate). Losing it makes every instance
// foreign: safe (nothing is deleted) but leaked, and the operator stops
// creating where a whole fleet no longer verifies, so back it up
// (docs/security.md). KeyID names a key without revealing it.
package ownership
