package sentinel

import (
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSpellingOrderNamesEverySpelling: AddSecret looks only for the
// spellings spellingOrder names, so one added to Spellings without it would
// silently never be looked for.
func TestSpellingOrderNamesEverySpelling(t *testing.T) {
	want := slices.Sorted(maps.Keys(Spellings("a value of some length")))
	got := slices.Sorted(slices.Values(spellingOrder))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spellingOrder against Spellings (-want +got):\n%s", diff)
	}
}
