//go:build !unix

package forwardproxy

// readable lets the caller's Read wait where peeking at a socket is not
// available: the tunnel then holds its buffer while idle.
func readable(uintptr) bool { return true }
