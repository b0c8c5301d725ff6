package controller

import "sync"

// entryShares bounds how many of the Proxy reconciler's workers one provider
// entry holds at once: a provider that hangs (until the call's deadline) or
// crawls keeps at most its share busy, and the Proxies of the other entries
// are still reconciled. A reconcile that finds its entry's share taken is
// requeued without a provider call. It is safe for concurrent use; the
// zero value allows nothing until limit is set.
type entryShares struct {
	// limit is the share of each entry.
	limit int
	mu    sync.Mutex
	held  map[string]int
}

// shareOf returns each entry's share of workers among entries: an equal
// part, at least one. With one entry it has every worker.
func shareOf(workers, entries int) int {
	if entries <= 1 {
		return workers
	}
	return max(1, workers/entries)
}

// acquire takes a worker of entry's share, and reports false when the share
// is all taken.
func (s *entryShares) acquire(entry string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[entry] >= s.limit {
		return false
	}
	if s.held == nil {
		s.held = map[string]int{}
	}
	s.held[entry]++
	return true
}

// release gives back a worker that acquire took.
func (s *entryShares) release(entry string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[entry]--; s.held[entry] <= 0 {
		delete(s.held, entry)
	}
}
