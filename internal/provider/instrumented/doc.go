// Package instrumented wraps any provider.Provider with the operator's
// observability: one tracing span, one duration observation, one error count
// and one outcome log line per call, and the annotation of every error with
// the entry name, the operation and the instance ID. Every configured provider
// is wrapped exactly once, so providers themselves need none of it.
//
// One wrapper type carries the methods of every optional interface
// (provider.Checker, provider.Sweeper) and says through provider.Optional
// which of them the wrapped provider has; callers ask provider.AsChecker and
// provider.AsSweeper, so a new optional interface adds a method here, not a
// wrapper type per combination.
package instrumented
