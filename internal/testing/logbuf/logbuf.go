package logbuf

import (
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// Buffer is safe for concurrent use; its zero value is empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write implements io.Writer, for a daemon's output or a handler's stream.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// WriteString adds s.
func (b *Buffer) WriteString(s string) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.WriteString(s)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Logger returns a logger (funcr, up to verbosity) whose entries are lines of
// b: the logger's name, then its key-value pairs as funcr renders them.
func (b *Buffer) Logger(verbosity int) logr.Logger {
	return funcr.New(func(prefix, args string) { _, _ = b.WriteString(prefix + " " + args + "\n") }, funcr.Options{Verbosity: verbosity})
}
