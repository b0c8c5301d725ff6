// Package procfs reads the few figures of Linux's /proc that the
// benchmarks report: a process's CPU time and resident memory, its
// children, and the machine's load. Both benchmark commands (hack/bench
// and hack/benchproxy) measure processes they started, so they share this
// one reader rather than a parser each.
package procfs
