// Package e2e holds end-to-end tests: the operator's controllers against a
// real API server (envtest) and a provider against its simulator, wired as
// the binary wires them.
package e2e
