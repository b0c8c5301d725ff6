package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSteadyBound: the bound printed beside the steady state's count is
// one cluster-wide listing per poll interval plus one listing per node per
// pause window, over the Proxies; at the issue's 10 000 Proxies and the
// operator's ratio of intervals (60 poll intervals per resync) it is under
// issue #23's 0.01.
func TestSteadyBound(t *testing.T) {
	o := options{resyncInterval: 6 * time.Second, pollInterval: 100 * time.Millisecond}
	for _, c := range []struct {
		n    int
		want float64
	}{
		{1, 75},       // 60 cluster listings + 3 nodes × 5 pause windows
		{1000, 0.075}, // the same reads shared by a thousand
		{10000, 0.0075},
	} {
		if got := steadyBound(o, c.n); got < c.want*0.999 || got > c.want*1.001 {
			t.Errorf("steadyBound(N = %d) = %g, want %g", c.n, got, c.want)
		}
	}
	if got := steadyBound(o, targetSteadyN); got > targetSteadyCalls {
		t.Errorf("the design's bound at %d Proxies is %g, over the target %g", targetSteadyN, got, targetSteadyCalls)
	}
}

// TestAtQuantile: the spread table reads nearest-rank quantiles, so that
// the max is the last Proxy's time and p50 of an even count is a real
// Proxy's time, not an average of two.
func TestAtQuantile(t *testing.T) {
	s := func(secs ...int) []time.Duration {
		d := make([]time.Duration, len(secs))
		for i, v := range secs {
			d[i] = time.Duration(v) * time.Second
		}
		return d
	}
	for _, tc := range []struct {
		why    string
		sorted []time.Duration
		q      float64
		want   string
	}{
		{"nothing seen is a dash, not zero", nil, 0.5, "-"},
		{"q 0 is the first", s(3, 5, 9), 0, "3.0"},
		{"the max is the last", s(3, 5, 9), 1, "9.0"},
		{"p50 of an even count is the lower middle", s(1, 2, 3, 4), 0.5, "2.0"},
		{"p90 of ten is the ninth", s(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.9, "9.0"},
		{"p99 of ten is the tenth", s(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, "10.0"},
	} {
		if got := atQuantile(tc.sorted, tc.q); got != tc.want {
			t.Errorf("%s: atQuantile(%v, %g) = %s, want %s", tc.why, tc.sorted, tc.q, got, tc.want)
		}
	}
}

// TestTop: the per-path tables show the largest counts and every listing,
// however small its count: the listings are what issue #23 item 2 reads,
// and a change that makes them rare must still show how rare.
func TestTop(t *testing.T) {
	c := map[string]int64{"a": 5, "b": 9, "c": 1, "d": 9, "e": 2}
	for _, tc := range []struct {
		why    string
		k      int
		always []string
		want   []kv
	}{
		{"largest first, ties by key", 3, nil, []kv{{"b", 9}, {"d", 9}, {"a", 5}}},
		{"an always key below the cut is kept, in its place", 2, []string{"c"}, []kv{{"b", 9}, {"d", 9}, {"c", 1}}},
		{"an always key absent from the counts adds nothing", 2, []string{"z"}, []kv{{"b", 9}, {"d", 9}}},
		{"k beyond the entries is all of them", 9, nil, []kv{{"b", 9}, {"d", 9}, {"a", 5}, {"e", 2}, {"c", 1}}},
	} {
		if diff := cmp.Diff(tc.want, top(c, tc.k, tc.always...), cmp.AllowUnexported(kv{})); diff != "" {
			t.Errorf("%s: top(k = %d, always %v) (-want +got):\n%s", tc.why, tc.k, tc.always, diff)
		}
	}
}

// TestParseCountsRunsFromTheSmallest: the counts run from the smallest, 1
// first (the ideal of the convergence ratio and the base of the listing
// verdict), each once, so that the steady state's verdict compares every
// count with the next smaller one.
func TestParseCountsRunsFromTheSmallest(t *testing.T) {
	for _, tc := range []struct {
		why, in string
		want    []int
	}{
		{"1 is added first", "100", []int{1, 100}},
		{"given out of order, run in order", "1000,100", []int{1, 100, 1000}},
		{"a count given twice runs once", "100, 100,1", []int{1, 100}},
	} {
		got, err := parseCounts(tc.in)
		if err != nil {
			t.Fatalf("%s: parseCounts(%q): %v", tc.why, tc.in, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: parseCounts(%q) (-want +got):\n%s", tc.why, tc.in, diff)
		}
	}
	if _, err := parseCounts("100,0"); err == nil {
		t.Error("parseCounts accepted a count of 0")
	}
}

// TestReportJudgesIssue23sTargets: the report's verdict columns judge
// issue #23's targets (item 4): listing bytes per created proxy flat from
// N = 1, the steady state's listing bytes per proxy falling as N grows,
// and the operator's peak RSS against 300 MiB at 10 000 (item 3; issue #14
// allowed 600) and 150 MiB at 1000.
func TestReportJudgesIssue23sTargets(t *testing.T) {
	const kib, mib = 1024, 1 << 20
	res := func(n int, createListingKiB, steadyListingKiB float64, rss, hwm uint64) result {
		return result{
			n: n,
			create: phase{
				took:     time.Duration(n) * time.Second,
				simCalls: map[string]int64{"GET /cluster/resources": 1},
				simBytes: map[string]int64{"GET /cluster/resources": int64(createListingKiB * kib * float64(n))},
			},
			steady: phase{
				simCalls: map[string]int64{"GET /cluster/resources": 3},
				simBytes: map[string]int64{"GET /cluster/resources": int64(steadyListingKiB * kib * float64(n) * 3)},
			},
			steadyResyncs: 3,
			op:            procStats{RSS: rss, HWM: hwm},
		}
	}
	rs := []result{
		res(1, 4, 2, 40*mib, 40*mib),
		res(100, 4.8, 1, 60*mib, 70*mib),       // 1.2× N = 1's listing: flat; steady falls
		res(1000, 88, 1, 100*mib, 160*mib),     // 22×: not flat; steady the same: not falling; peak over 150 MiB
		res(10000, 200, 0.5, 250*mib, 310*mib), // peak over 300 MiB, under #14's 600
	}
	o := options{provider: providerProxmox, speed: 50, resyncInterval: 6 * time.Second, pollInterval: 100 * time.Millisecond,
		notReadyInterval: 200 * time.Millisecond, workers: 4}
	var out bytes.Buffer
	printReport(&out, o, "info", rs)
	report := out.String()
	cell := func(heading string, n, col int) string {
		t.Helper()
		for _, row := range tableAfter(t, report, heading) {
			cells := strings.Split(strings.Trim(row, "|"), "|")
			if strings.TrimSpace(cells[0]) == strconv.Itoa(n) {
				return strings.TrimSpace(cells[col])
			}
		}
		t.Fatalf("%s: no row for %d proxies", heading, n)
		return ""
	}
	for _, tc := range []struct {
		why     string
		heading string
		n, col  int
		want    string
	}{
		{"N = 1 is the base of the flat listing, not judged", "### Lifecycle economy", 1, 6, "-"},
		{"1.2× N = 1's listing bytes per created proxy is flat", "### Lifecycle economy", 100, 6, "1.20× N = 1's (flat: ≤ 1.25), met"},
		{"22× is not flat", "### Lifecycle economy", 1000, 6, "22.00× N = 1's (flat: ≤ 1.25), **not met**"},
		{"the smallest count has nothing to fall from", "### Steady state", 1, 8, "-"},
		{"half of N = 1's listing bytes per proxy per resync falls", "### Steady state", 100, 8, "0.50× N = 1's (falls: < 1), met"},
		{"the same as N = 100's does not fall", "### Steady state", 1000, 8, "1.00× N = 100's (falls: < 1), **not met**"},
		{"the peak, not the RSS at the end, is judged at 1000", "### Memory", 1000, 3, "1.07× the target, **not met**"},
		{"10 000 is judged against 300 MiB, not 600", "### Memory", 10000, 3, "1.03× the target, **not met**"},
		{"no target at 100", "### Memory", 100, 3, "-"},
	} {
		if got := cell(tc.heading, tc.n, tc.col); got != tc.want {
			t.Errorf("%s: %s, %d proxies, column %d = %q, want %q", tc.why, tc.heading, tc.n, tc.col, got, tc.want)
		}
	}
}
