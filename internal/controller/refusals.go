package controller

import (
	"sync"
	"time"
)

// refusal is the last refused read of one provider entry.
type refusal struct {
	at      time.Time
	message string
}

// refusalLog remembers, per provider entry, the last read the provider's API
// refused (provider.ReasonRefused). The Proxy reconciler and garbage
// collection record into it; the health reporter shows it in the entry's
// ProviderHealth, since a refused read is about the entry's credentials and
// not about one Proxy. It is safe for concurrent use; the zero value is
// ready.
type refusalLog struct {
	mu   sync.Mutex
	last map[string]refusal
}

// record notes a refusal of entry at the given time. message must hold no
// secret (provider errors never do).
func (l *refusalLog) record(entry, message string, at time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]refusal{}
	}
	l.last[entry] = refusal{at: at, message: message}
}

// since returns the entry's last refusal when it happened after t.
func (l *refusalLog) since(entry string, t time.Time) (refusal, bool) {
	if l == nil {
		return refusal{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.last[entry]
	return r, ok && r.at.After(t)
}
