// Package ownershiptest gives tests installation identities with fixed
// keys, so that a restarted provider or operator in a test keeps its
// identity, and two named installations have different keys.
package ownershiptest

import (
	"crypto/sha256"

	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
)

// Identity returns the identity of a test installation, whose key is
// derived from its name: the same name always gives the same key. It
// panics on a name that is not a DNS label (a bug of the test).
func Identity(installation string) *ownership.Identity {
	key := sha256.Sum256([]byte("egress-proxies-operator test key for " + installation))
	id, err := ownership.NewIdentity(installation, key[:])
	if err != nil {
		panic(err)
	}
	return id
}
