package logbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestBufferKeepsEveryLineOfManyWriters: concurrent loggers lose no entry
// and mix none (each entry is one whole line), which the tests that search
// logs for a secret rely on.
func TestBufferKeepsEveryLineOfManyWriters(t *testing.T) {
	var b Buffer
	log := b.Logger(2)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 100 {
				log.V(2).Info("entry", "writer", w, "i", i)
			}
		})
	}
	wg.Wait()
	_, _ = fmt.Fprint(&b, "raw\n")
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if got, want := len(lines), 8*100+1; got != want {
		t.Fatalf("%d lines, want %d", got, want)
	}
	seen := map[string]bool{}
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, ` "level"=2 "msg"="entry" "writer"=`) {
			t.Errorf("a line not whole: %q", l)
		}
		seen[l] = true
	}
	if len(seen) != 800 {
		t.Errorf("%d distinct entries, want 800", len(seen))
	}
	if log.V(3).Enabled() {
		t.Error("a V(3) entry is enabled at verbosity 2")
	}
}
