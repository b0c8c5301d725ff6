//go:build !unix

package forwardproxy

// rawReader is not available here: readPooled reads through Read, and an
// idle tunnel holds its buffer while it waits.
type rawReader struct{}

func newRawReader(any) *rawReader { return nil }

func (*rawReader) read() (*[]byte, int, error) { panic("forwardproxy: no raw reads on this platform") }
