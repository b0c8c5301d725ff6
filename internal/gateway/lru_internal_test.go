package gateway

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLRUForgetsTheLeastRecentlyUsed: the map never holds more than its
// size, and what it forgets is what was used least recently.
func TestLRUForgetsTheLeastRecentlyUsed(t *testing.T) {
	c := newLRU[string, int](3)
	for i, k := range []string{"a", "b", "c"} {
		c.put(k, i)
	}
	c.get("a")    // a is the most recent: b is the oldest
	c.put("d", 3) // forgets b
	c.put("c", 9) // an update keeps the size
	var got []string
	for _, k := range []string{"a", "b", "c", "d"} {
		v, ok := c.get(k)
		got = append(got, fmt.Sprint(k, v, ok))
	}
	if diff := cmp.Diff([]string{"a0 true", "b0 false", "c9 true", "d3 true"}, got); diff != "" {
		t.Errorf("after puts and gets (-want +got):\n%s", diff)
	}
	for i := range 1000 {
		c.put(strconv.Itoa(i), i)
	}
	if c.len() != 3 {
		t.Errorf("after 1000 puts the map holds %d; want its size, 3", c.len())
	}
}
