package published

import (
	"hash/fnv"
	"time"
)

// Session placement is a published contract: every gateway replica, and
// any tool that wants to know where a session lands (kubectl egress
// sessions), computes it the same way from the same members, with no shared
// state. It is rendezvous (highest random weight) hashing: each member gets
// a score from the session's key and the member's key, and the session goes
// to the member with the highest score. The hashes are fixed across
// processes and versions: changing them moves every session.

// MaxSessionID is the longest session id.
const MaxSessionID = 64

// ValidSessionID reports whether id is a session id: 1 to MaxSessionID
// letters, digits or underscores.
func ValidSessionID(id string) bool {
	if id == "" || len(id) > MaxSessionID {
		return false
	}
	for _, r := range id {
		if r != '_' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			return false
		}
	}
	return true
}

// MemberKey is a member's key in placement, from its pool and name.
func MemberKey(pool, name string) uint64 { return Hash64(pool + "/" + name) }

// SessionKey is what a session is placed by: its id and, with a sesstime
// (ttl), the window it is in at now. Windows are ttl long and offset per
// session, so that sessions do not all move at the same instant.
func SessionKey(id string, ttl time.Duration, now time.Time) uint64 {
	h := Hash64(id)
	if ttl <= 0 {
		return h
	}
	offset := int64(h % uint64(ttl)) //nolint:gosec // G115: below ttl, an int64.
	window := (now.UnixNano() + offset) / int64(ttl)
	return mix(h ^ mix(uint64(window))) //nolint:gosec // G115: only the bits are hashed.
}

// Place returns the index, among n members whose keys member(i) gives, of
// the one with the highest score for key; -1 when n is 0.
func Place(key uint64, n int, member func(i int) uint64) int {
	best, bestScore := -1, uint64(0)
	for i := range n {
		if s := mix(key ^ member(i)); best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// Hash64 is FNV-1a, fixed across processes and versions (unlike
// hash/maphash), then mixed.
func Hash64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return mix(h.Sum64())
}

// mix is splitmix64's finalizer: it spreads FNV's weak low bits.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
