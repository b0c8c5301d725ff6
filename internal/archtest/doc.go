// Package archtest holds the tests that keep the layers of
// docs/architecture.md: no package imports one of a higher layer, and no
// product package imports test support; and the gateway's data path
// (internal/gateway) imports no API client (datapath_test.go). It has no
// code of its own; its tests read the import graph with `go list`, so they
// need the go command (which `go test` has).
package archtest
