//go:build !unix

package forwardproxy

// peekReadable lets the caller's Read wait where peeking at a socket is not
// available: the tunnel then holds its buffer while idle.
func peekReadable(uintptr) bool { return true }
