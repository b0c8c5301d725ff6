package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEntryShares(t *testing.T) {
	s := entryShares{limit: shareOf(4, 2)}
	var got []bool
	for _, e := range []string{"lab", "lab", "lab", "other", "other", "other"} {
		got = append(got, s.acquire(e))
	}
	// Two of four workers each: lab's third reconcile waits, and other
	// still gets its two.
	if diff := cmp.Diff([]bool{true, true, false, true, true, false}, got); diff != "" {
		t.Errorf("acquire answers (-want +got):\n%s", diff)
	}
	s.release("lab")
	if !s.acquire("lab") {
		t.Errorf("a released worker is not given back to its entry")
	}
	for _, tc := range []struct {
		reason           string
		workers, entries int
		want             int
	}{
		{"one entry has every worker", 4, 1, 4},
		{"an equal part each", 4, 2, 2},
		{"at least one, however many entries", 4, 9, 1},
	} {
		if got := shareOf(tc.workers, tc.entries); got != tc.want {
			t.Errorf("shareOf(%d, %d) = %d, want %d (%s)", tc.workers, tc.entries, got, tc.want, tc.reason)
		}
	}
}
