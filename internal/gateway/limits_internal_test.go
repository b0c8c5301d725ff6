package gateway

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRateLimiterBounds: a token bucket per (member, host) with its burst
// and refill, and a bounded number of pairs.
func TestRateLimiterBounds(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		reason string
		rate   float64
		burst  int
		steps  []time.Duration // offsets of the takes from t0
		want   []string
	}{
		{"a burst, then the wait for the next token", 2, 3, []time.Duration{0, 0, 0, 0}, []string{"true 0s", "true 0s", "true 0s", "false 500ms"}},
		{"the bucket refills at the rate", 2, 1, []time.Duration{0, 0, 500 * time.Millisecond, 600 * time.Millisecond}, []string{"true 0s", "false 500ms", "true 0s", "false 400ms"}},
		{"no burst given: the rate rounded up", 1.5, 0, []time.Duration{0, 0, 0}, []string{"true 0s", "true 0s", "false 666.666ms"}},
	} {
		r := newRateLimiter(tc.rate, tc.burst)
		var got []string
		for _, d := range tc.steps {
			ok, wait := r.take(1, "example.org", t0.Add(d))
			got = append(got, fmt.Sprint(ok, wait.Truncate(time.Microsecond)))
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
		}
	}
	r := newRateLimiter(1, 1)
	for i := range maxRateKeys + 100 {
		r.take(uint64(i), "example.org", t0)
	}
	if n := r.buckets.len(); n != maxRateKeys {
		t.Errorf("after %d pairs the limiter keeps %d; want its bound, %d", maxRateKeys+100, n, maxRateKeys)
	}
}

// TestBanTableBounds: the ban table keeps at most its size of (member,
// host) bans, forgets the oldest first, keeps its per-host index equal to
// what it holds, and ends bans on time.
func TestBanTableBounds(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	a, b := &Member{Pool: "p", Name: "a", id: 1}, &Member{Pool: "p", Name: "b", id: 2}
	tb := newBanTable(3)
	tb.add(a, "x.org", t0, t0.Add(time.Minute))
	tb.add(b, "x.org", t0, t0.Add(2*time.Minute))
	tb.add(a, "y.org", t0, t0.Add(3*time.Minute))
	tb.add(a, "x.org", t0, t0.Add(30*time.Second)) // shorter: the ban stays as long, and is now the newest
	tb.add(b, "z.org", t0, t0.Add(time.Minute))    // forgets (b, x.org), the oldest
	names := func(ms []*Member) (out []string) {
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	var got []string
	for _, host := range []string{"x.org", "y.org", "z.org", "w.org"} {
		allowed, _ := tb.allowed([]*Member{a, b}, 0, host, t0)
		got = append(got, fmt.Sprint(host, " ", names(allowed)))
	}
	later, _ := tb.allowed([]*Member{a, b}, 0, "x.org", t0.Add(time.Minute))
	got = append(got, fmt.Sprint("x.org at its end ", names(later)))
	want := []string{"x.org [b]", "y.org [b]", "z.org [a]", "w.org [a b]", "x.org at its end [a b]"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allowed (-want +got):\n%s", diff)
	}
	none, until := tb.allowed([]*Member{a}, 0, "y.org", t0)
	if len(none) != 0 || until != t0.Add(3*time.Minute) {
		t.Errorf("every candidate banned: %v until %v; want none until the ban's end", names(none), until.Sub(t0))
	}
	if diff := cmp.Diff(map[hostKey]int{keyOf("x.org"): 1, keyOf("y.org"): 1, keyOf("z.org"): 1}, tb.perHost); diff != "" {
		t.Errorf("the per-host index (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]map[string]int{{"p": 3}, {"p": 1}}, []map[string]int{tb.active(t0), tb.active(t0.Add(90 * time.Second))}); diff != "" {
		t.Errorf("active bans at 0 and 90s (-want +got):\n%s", diff)
	}

	big := newBanTable(maxBanKeys)
	for i := range maxBanKeys + 100 {
		big.add(a, "h"+strconv.Itoa(i)+".example", t0, t0.Add(time.Minute))
		big.firstReport(7, uint64(i), "x.org", t0, t0.Add(time.Minute))
	}
	if big.bans.len() != maxBanKeys || len(big.perHost) != maxBanKeys || big.reports.len() != maxBanKeys {
		t.Errorf("after %d bans and reports the table keeps %d bans over %d hosts and %d reports; want its bound, %d",
			maxBanKeys+100, big.bans.len(), len(big.perHost), big.reports.len(), maxBanKeys)
	}
	if !big.firstReport(7, 1<<40, "x.org", t0, t0.Add(time.Minute)) || big.firstReport(7, 1<<40, "x.org", t0.Add(time.Second), t0.Add(time.Minute)) {
		t.Error("a session's second report within the cool-down counted as a first")
	}
}

// heapAfterGC is the live heap once garbage is collected.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// maxHost is the i-th distinct destination host of the longest length a
// request may name.
func maxHost(i int) string {
	s := strconv.Itoa(i) + "."
	return s + strings.Repeat("h", maxHostLen-len(s))
}

// fillTables fills every table a client feeds, a ban table's and a rate
// limiter's, to its bound with hosts of the longest length, each key as
// distinct as a client can make it.
func fillTables(tb *banTable, rl *rateLimiter, t0 time.Time) {
	until := t0.Add(time.Hour)
	for i := range maxBanKeys {
		m := &Member{Pool: "crawl", Name: "crawl-m00", id: uint64(i)}
		host := maxHost(i)
		tb.add(m, host, t0, until)
		tb.addReported(uint64(i), m, host, t0, until)
		tb.firstReport(uint64(i), uint64(i), host, t0, until)
		rl.take(uint64(i), host, t0)
	}
	for i := range maxReportClients {
		tb.spend(uint64(i), t0)
	}
}

// TestClientFedTablesStayUnderTheirBound (#38 item 2): every table a
// client feeds, full of the longest keys it may send, holds at most
// maxClientTablesBytes on the heap: the figure the gateway pod's memory
// limit is sized from (docs/gateway.md, "Memory").
func TestClientFedTablesStayUnderTheirBound(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	before := heapAfterGC()
	tb, rl := newBanTable(maxBanKeys), newRateLimiter(1, 1)
	fillTables(tb, rl, t0)
	used := heapAfterGC() - before
	lens := []int{tb.bans.len(), tb.clients.len(), tb.reports.len(), tb.reporters.len(), rl.buckets.len(), tb.budgets.len()}
	if diff := cmp.Diff([]int{maxBanKeys, maxBanKeys, maxBanKeys, maxBanKeys, maxBanKeys, maxReportClients}, lens); diff != "" {
		t.Errorf("table sizes (-want +got):\n%s", diff)
	}
	t.Logf("every client-fed table full: %.1f MiB", float64(used)/(1<<20))
	if used > maxClientTablesBytes {
		t.Errorf("every client-fed table full takes %.1f MiB; want at most %d MiB", float64(used)/(1<<20), maxClientTablesBytes>>20)
	}
	runtime.KeepAlive(tb)
	runtime.KeepAlive(rl)
}
