// Package fakeprobe is the probe.Prober of the controller tests: every
// proxy passes with an egress address of its own unless a test makes it fail,
// report another egress address or hang; it counts the probes it started and
// finished. It lives under internal/testing so that the product's probe
// package holds only the real prober.
package fakeprobe
