// Package ctrlsuite is the envtest suite the controller packages'
// tests share (internal/controller, internal/controller/proxypool,
// internal/controller/proxygateway): a running operator built by
// internal/setup against the shared control plane (Start), with the fake
// provider and prober, in a namespace of its own (NewNamespace). Each package's
// suite_test.go starts the control plane (testenv.Main) and wraps these
// in its own short names.
package ctrlsuite
