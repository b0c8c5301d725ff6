package gateway

import (
	"time"

	"github.com/egress-proxies/egress-proxies-operator/api/v1alpha1/published"
)

// Sessions are placed by rendezvous (highest random weight) hashing, the
// published contract of api/v1alpha1/published (Place): each member gets a
// score from the session key and the member's pool/name, and the session
// goes to the highest score among the members it may use. So every gateway
// replica, with no shared state, puts a session on the same member; a
// member that leaves moves only its own sessions (each to its next-highest
// score), and one that joins takes about 1/n of them. The gateway keeps
// nothing per session, so a client that opens any number of sessions costs
// no memory.

// sessionKey is what a session is placed by (published.SessionKey).
func sessionKey(id string, ttl time.Duration, now time.Time) uint64 {
	return published.SessionKey(id, ttl, now)
}

// place returns the member of candidates (not empty) with the highest
// score for key.
func place(key uint64, candidates []*Member) *Member {
	return candidates[published.Place(key, len(candidates), func(i int) uint64 { return candidates[i].id })]
}

// hash64 is published.Hash64.
func hash64(s string) uint64 { return published.Hash64(s) }

// PlaceSession returns the member a session with id (and sesstime ttl, 0
// for none) is on at now among all of s, before any ejection or ban; nil
// without members. It is what kubectl egress sessions computes.
func (s *Set) PlaceSession(id string, ttl time.Duration, now time.Time) *Member {
	ms := s.Members()
	if len(ms) == 0 {
		return nil
	}
	return place(sessionKey(id, ttl, now), ms)
}
