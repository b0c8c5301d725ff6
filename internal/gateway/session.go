package gateway

import (
	"hash/fnv"
	"time"
)

// Sessions are placed by rendezvous (highest random weight) hashing: each
// member gets a score from the session key and the member's pool/name, and
// the session goes to the highest score among the members it may use. So
// every gateway replica, with no shared state, puts a session on the same
// member; a member that leaves moves only its own sessions (each to its
// next-highest score), and one that joins takes about 1/n of them. The
// gateway keeps nothing per session, so a client that opens any number of
// sessions costs no memory.

// sessionKey is what a session is placed by: its id and, with a sesstime,
// the window it is in. Windows are ttl long and offset per session, so that
// sessions do not all move at the same instant; every replica computes the
// same window from its clock.
func sessionKey(id string, ttl time.Duration, now time.Time) uint64 {
	h := hash64(id)
	if ttl <= 0 {
		return h
	}
	offset := int64(h % uint64(ttl)) //nolint:gosec // G115: below ttl, an int64.
	window := (now.UnixNano() + offset) / int64(ttl)
	return mix(h ^ mix(uint64(window))) //nolint:gosec // G115: only the bits are hashed.
}

// place returns the member of candidates (not empty) with the highest
// score for key.
func place(key uint64, candidates []*Member) *Member {
	var best *Member
	var bestScore uint64
	for _, m := range candidates {
		s := mix(key ^ m.id)
		if best == nil || s > bestScore {
			best, bestScore = m, s
		}
	}
	return best
}

// hash64 is FNV-1a, fixed across processes and versions (unlike
// hash/maphash), then mixed.
func hash64(s string) uint64 {
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
