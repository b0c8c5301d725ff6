// Package logbuf collects what the code under test logs: a buffer that many
// goroutines may write at once and a test reads, and a logr.Logger that
// writes one line per entry to it. Tests search it for what must (an
// access log line) or must never (a password, a token) be logged, and print
// it when they fail.
package logbuf
