package shared

import (
	"encoding/json"

	"github.com/egress-proxies/egress-proxies-operator/internal/egress"
)

// PolicyBytes is the canonical form of an egress policy, what its hashes
// are made from (a Proxy's status.egressPolicyHash, a pool member's
// template hash).
func PolicyBytes(p egress.Policy) []byte {
	b, _ := json.Marshal(p) //nolint:errchkjson // prefixes and port ranges always marshal.
	return b
}
