//go:build !linux

package forwardproxy

import "io"

// spliceWaiting moves nothing here: splice(2) is Linux's.
func spliceWaiting(_, _ *idleConn) (int64, error) { return 0, nil }

// moveWaiting moves nothing here: the caller reads and writes instead.
func moveWaiting(io.ReaderFrom, *idleConn, int64) (int64, error) { return 0, nil }
