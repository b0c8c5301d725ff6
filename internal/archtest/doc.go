// Package archtest holds the test that keeps the layers of
// docs/architecture.md: no package imports one of a higher layer, and no
// product package imports test support. It has no code of its own; its one
// test reads the import graph with `go list`, so it needs the go command
// (which `go test` has).
package archtest
