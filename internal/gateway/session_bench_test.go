package gateway

import (
	"fmt"
	"testing"
	"time"
)

// Placement figures of `make bench-gateway` (issue #22): sessions placed
// over members, and how many a member's loss moves.
const (
	benchSessions = 10000
	benchMembers  = 1000
	// benchLost is how many members, each in turn, are taken away to count
	// the sessions their loss moves.
	benchLost = 20
)

// BenchmarkSessionPlacement places 10 000 sessions over 1000 members per
// op, as every gateway replica does for each request or tunnel of a
// session. Its extra metrics: µs/placement (one session), and, averaged
// over benchLost members each lost in turn, the share of the sessions that
// moved (moved-share), the share that was on the lost member (own-share),
// and the sessions that moved although their member stayed (others-moved,
// which rendezvous hashing keeps at 0), and the sessions and members.
// hack/benchproxy reads them.
func BenchmarkSessionPlacement(b *testing.B) {
	members := benchMemberSet(benchMembers)
	now := time.Now()
	keys := make([]uint64, benchSessions)
	for i := range keys {
		keys[i] = sessionKey(fmt.Sprintf("s%d", i), 0, now)
	}
	before := make([]*Member, len(keys))
	for i, k := range keys {
		before[i] = place(k, members)
	}
	moved, own, others := lossMoves(keys, before, members, benchLost)

	b.ResetTimer()
	for b.Loop() {
		for _, k := range keys {
			before[0] = place(k, members)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(len(keys)), "µs/placement")
	b.ReportMetric(moved, "moved-share")
	b.ReportMetric(own, "own-share")
	b.ReportMetric(float64(others), "others-moved")
	b.ReportMetric(benchSessions, "sessions")
	b.ReportMetric(benchMembers, "members")
}

// benchMemberSet returns n members as a pool's published list makes them.
func benchMemberSet(n int) []*Member {
	entries := make([]Entry, n)
	for i := range entries {
		entries[i] = Entry{Name: fmt.Sprintf("crawl-%04d", i), URL: fmt.Sprintf("http://u:p@127.0.%d.%d:3128", i/250, i%250+1)}
	}
	set := NewSet()
	set.Update("crawl", entries)
	return set.Members()
}

// lossMoves takes away lost members of all (spread over the list), each in
// turn, places every session again over the others, and returns the mean
// share of sessions that moved, the mean share that was on the lost member,
// and the total that moved although their own member stayed.
func lossMoves(keys []uint64, before, all []*Member, lost int) (moved, own float64, others int) {
	rest := make([]*Member, 0, len(all)-1)
	for l := range lost {
		gone := all[l*len(all)/lost]
		rest = rest[:0]
		for _, m := range all {
			if m != gone {
				rest = append(rest, m)
			}
		}
		for i, k := range keys {
			wasOwn := before[i] == gone
			if wasOwn {
				own++
			}
			if place(k, rest) != before[i] {
				moved++
				if !wasOwn {
					others++
				}
			}
		}
	}
	n := float64(lost * len(keys))
	return moved / n, own / n, others
}
