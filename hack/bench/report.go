package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider/proxmox"
)

// Targets of issue #14.
const (
	targetCreateCalls = 10.0 // per proxy
	targetDeleteCalls = 5.0  // per proxy
	targetConvergeN   = 1000 // the count the convergence target is about
	targetConverge    = 1.25 // all-Ready time over one proxy's
)

// Target of issue #23 item 2: steady-state provider calls per proxy per
// resync at targetSteadyN proxies.
const (
	targetSteadyCalls = 0.01
	targetSteadyN     = 10000
)

// simNodes is the number of nodes of the simulated cluster.
const simNodes = 3

// steadyBound is the provider calls per proxy per resync of a steady state
// that reads the cluster-wide listing once per poll interval and each
// node's listing once per pause window, the most the provider's shared
// reads allow: the count reaches it once Proxies are looked at in every
// poll interval.
func steadyBound(o options, n int) float64 {
	intervals := float64(o.resyncInterval) / float64(o.pollInterval)
	return (intervals + simNodes*intervals/proxmox.PauseViewIntervals) / float64(n)
}

// targetRSS is the goal for the operator process's peak RSS (VmHWM) with
// N Ready proxies: issue #14's at 1000, issue #23 item 3's at 10 000 (it
// halved #14's 600 MiB).
var targetRSS = map[int]uint64{1000: 150 << 20, 10000: 300 << 20}

// targetListingGrowth is issue #23 item 2's "listing bytes per created
// proxy stay flat", as a number: the listing bytes per created proxy at N
// over those at N = 1 of the same run. The room above 1 is for the spread
// between runs of the same size; a read whose answer grows with N, read
// throughout a create phase whose length grows with N, exceeds it from a
// few hundred Proxies on.
const targetListingGrowth = 1.25

// listingCalls are the simulator's answers whose size grows with the
// number of VMs (or volumes, or tasks): the listings the provider decodes.
var listingCalls = []string{
	"GET /cluster/resources",
	"GET /nodes/{node}/qemu",
	"GET /nodes/{node}/storage/{storage}/content",
	"GET /nodes/{node}/tasks",
	"GET /nodes",
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// listingBytes adds up the bytes of the listing answers.
func listingBytes(b map[string]int64) int64 {
	var n int64
	for _, k := range listingCalls {
		n += b[k]
	}
	return n
}

type kv struct {
	key string
	n   int64
}

// top returns the k largest entries and every entry whose key is in
// always, largest first, ties by key.
func top(c map[string]int64, k int, always ...string) []kv {
	out := make([]kv, 0, len(c))
	for _, key := range slices.Sorted(maps.Keys(c)) {
		out = append(out, kv{key, c[key]})
	}
	slices.SortStableFunc(out, func(a, b kv) int { return int(b.n - a.n) })
	kept := out[:0:0]
	for i, e := range out {
		if i < k || slices.Contains(always, e.key) {
			kept = append(kept, e)
		}
	}
	return kept
}

// atQuantile is the q-quantile of sorted (nearest rank) in seconds, or a
// dash when there is none.
func atQuantile(sorted []time.Duration, q float64) string {
	if len(sorted) == 0 {
		return "-"
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return fmt.Sprintf("%.1f", sorted[min(max(i, 0), len(sorted)-1)].Seconds())
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// verdict is "ratio×, met" or "ratio×, not met" for a figure whose target
// is an upper bound.
func verdict(got, target float64) string {
	word := "met"
	if got > target {
		word = "**not met**"
	}
	return fmt.Sprintf("%.2f× the target, %s", got/target, word)
}

// flatVerdict judges listing bytes per created proxy at N against those at
// N = 1 (base) with targetListingGrowth: "-" when there is nothing to
// compare.
func flatVerdict(got, base float64) string {
	if base <= 0 {
		return "-"
	}
	growth := got / base
	word := "met"
	if growth > targetListingGrowth {
		word = "**not met**"
	}
	return fmt.Sprintf("%.2f× N = 1's (flat: ≤ %g), %s", growth, targetListingGrowth, word)
}

// fallsVerdict judges the steady state's listing bytes per proxy per
// resync at N against those at the run's next smaller count (prev, at
// prevN): issue #23 item 2 wants them to fall as N grows.
func fallsVerdict(got, prev float64, prevN int) string {
	if prev <= 0 {
		return "-"
	}
	word := "met"
	if got >= prev {
		word = "**not met**"
	}
	return fmt.Sprintf("%.2f× N = %d's (falls: < 1), %s", got/prev, prevN, word)
}

// printReport prints the Markdown tables of the results.
func printReport(w io.Writer, o options, info string, rs []result) {
	if len(rs) == 0 {
		return
	}
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }
	defer p("\n%s\n", info)
	sim := o.provider == providerProxmox
	if sim {
		p("\n## Proxmox provider against pvesim: speed %g, resync %s, provider poll %s, not-Ready poll %s, %d workers, %s, GOMAXPROCS %d\n",
			o.speed, o.resyncInterval, o.pollInterval, o.notReadyInterval, o.workers, o.createCapText(), runtime.GOMAXPROCS(0))
		p("\n### Lifecycle economy (calls and listing bytes per proxy)\n\n")
		p("| proxies | create calls/proxy | verdict (≤ %g) | delete calls/proxy | verdict (≤ %g) | listing KiB/proxy, create | verdict (flat from N = 1) | listing KiB/proxy, delete | all answers KiB/proxy, create + delete |\n", targetCreateCalls, targetDeleteCalls)
		p("|---:|---:|---|---:|---|---:|---|---:|---:|\n")
		base := float64(listingBytes(rs[0].create.simBytes)) / 1024 / float64(rs[0].n)
		for i, r := range rs {
			n := float64(r.n)
			cc, dc := float64(sum(r.create.simCalls))/n, float64(sum(r.delete.simCalls))/n
			lc := float64(listingBytes(r.create.simBytes)) / 1024 / n
			flat := "-"
			if i > 0 && rs[0].n == 1 {
				flat = flatVerdict(lc, base)
			}
			p("| %d | %.1f | %s | %.1f | %s | %.1f | %s | %.1f | %.1f |\n", r.n, cc, verdict(cc, targetCreateCalls), dc, verdict(dc, targetDeleteCalls),
				lc, flat, float64(listingBytes(r.delete.simBytes))/1024/n,
				float64(sum(r.create.simBytes)+sum(r.delete.simBytes))/1024/n)
		}
	} else {
		p("\n## Kubernetes provider on the envtest API server (the bench plays the kubelet): resync %s, not-Ready poll %s, %d workers, %s, GOMAXPROCS %d\n",
			o.resyncInterval, o.notReadyInterval, o.workers, o.createCapText(), runtime.GOMAXPROCS(0))
	}
	orDash := func(ok bool, format string, v float64) string {
		if !ok {
			return "-"
		}
		return fmt.Sprintf(format, v)
	}

	ideal := rs[0].create.took // N=1 always runs first
	p("\n### Convergence and the operator's CPU\n\n")
	p("| proxies | objects created in | all Ready after | ideal (N=1) | ratio | verdict (≤ %g at N = %d) | operator CPU s/proxy, create | delete | lifecycle | operator cores used while creating | pvesim CPU s, create | kube-apiserver + etcd CPU s, create | delete took |\n", targetConverge, targetConvergeN)
	p("|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		n := float64(r.n)
		ratio := r.create.took.Seconds() / ideal.Seconds()
		v := "-"
		if r.n == targetConvergeN && sim {
			v = verdict(ratio, targetConverge)
		}
		p("| %d | %s | %s | %s | %.2f | %s | %.4f | %.4f | %.4f | %.2f | %s | %.1f | %s |\n", r.n,
			r.create.objectsTook.Round(time.Millisecond), r.create.took.Round(time.Millisecond), ideal.Round(time.Millisecond), ratio, v,
			r.create.opCPU/n, r.delete.opCPU/n, (r.create.opCPU+r.delete.opCPU)/n, r.create.opCPU/r.create.took.Seconds(),
			orDash(sim, "%.1f", r.create.simCPU), r.create.controlCPU, r.delete.took.Round(time.Millisecond))
	}

	p("\n### How the creates spread (seconds from the first Create call, as the bench's informer saw them)\n\n")
	p("| proxies | instance recorded: p50 | p90 | max | Ready: first | p50 | p90 | p99 | max |\n")
	p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		i, rd := r.instanceAt, r.readyAt
		p("| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.n, atQuantile(i, 0.5), atQuantile(i, 0.9), atQuantile(i, 1),
			atQuantile(rd, 0), atQuantile(rd, 0.5), atQuantile(rd, 0.9), atQuantile(rd, 0.99), atQuantile(rd, 1))
	}

	p("\n### Memory with all N Ready (MiB)\n\n")
	p("| proxies | operator VmRSS | operator VmHWM | verdict (peak RSS) | operator Go heap in use | goroutines | kube-apiserver VmRSS | etcd VmRSS | pvesim VmRSS |\n")
	p("|---:|---:|---:|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		v := "-"
		if t, ok := targetRSS[r.n]; ok {
			v = verdict(float64(r.op.HWM), float64(t))
		}
		p("| %d | %.1f | %.1f | %s | %.1f | %d | %.1f | %.1f | %s |\n", r.n, mib(r.op.RSS), mib(r.op.HWM), v,
			mib(r.heap.HeapInuse), r.heap.Goroutines, mib(r.api.RSS), mib(r.etcd.RSS), orDash(sim, "%.1f", mib(r.sim.RSS)))
	}

	if rs[0].steadyResyncs > 0 {
		p("\n### Steady state (%d resyncs)\n\n", rs[0].steadyResyncs)
		p("| proxies | calls/proxy/resync | verdict (≤ %g at N = %d) | bound (one cluster listing per poll interval, one node listing per node per pause window): calls/proxy/resync | `/cluster/resources` listings | node listings | listing KiB/resync | listing KiB/proxy/resync | verdict (falls as N grows) | operator CPU s/resync | operator API requests/proxy/resync |\n",
			targetSteadyCalls, targetSteadyN)
		p("|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|\n")
		perProxy := func(r result) float64 {
			return float64(listingBytes(r.steady.simBytes)) / 1024 / float64(r.steadyResyncs) / float64(r.n)
		}
		var prev *result // the next smaller count's
		for _, r := range rs {
			n, k := float64(r.n), float64(r.steadyResyncs)
			calls := float64(sum(r.steady.simCalls)) / n / k
			v, falls := "-", "-"
			if sim && r.n >= targetSteadyN {
				v = verdict(calls, targetSteadyCalls)
			}
			if sim && prev != nil {
				falls = fallsVerdict(perProxy(r), perProxy(*prev), prev.n)
			}
			prev = &r
			p("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %.3f | %.3f |\n", r.n, orDash(sim, "%.3f", calls), v, orDash(sim, "%.3f", steadyBound(o, r.n)),
				orDash(sim, "%.0f", float64(r.steady.simCalls["GET /cluster/resources"])), orDash(sim, "%.0f", float64(r.steady.simCalls["GET /nodes/{node}/qemu"])),
				orDash(sim, "%.1f", float64(listingBytes(r.steady.simBytes))/1024/k), orDash(sim, "%.2f", perProxy(r)), falls, r.steady.opCPU/k, float64(sum(r.steady.apiCalls))/n/k)
		}
	}

	p("\n### The operator's requests to the Kubernetes API server, per proxy\n\n")
	p("| proxies | create | delete | steady, per resync |\n|---:|---:|---:|---:|\n")
	for _, r := range rs {
		n := float64(r.n)
		p("| %d | %.2f | %.2f | %s |\n", r.n, float64(sum(r.create.apiCalls))/n, float64(sum(r.delete.apiCalls))/n,
			orDash(r.steadyResyncs > 0, "%.3f", float64(sum(r.steady.apiCalls))/n/float64(max(r.steadyResyncs, 1))))
	}
	for _, r := range rs {
		p("\n#### %d proxies: the operator's requests by verb and resource\n\n| phase | request | count | per proxy |\n|---|---|---:|---:|\n", r.n)
		for _, ph := range []struct {
			name string
			ph   phase
		}{{"create", r.create}, {"steady", r.steady}, {"delete", r.delete}} {
			for _, e := range top(ph.ph.apiCalls, 12) {
				p("| %s | `%s` | %d | %.2f |\n", ph.name, e.key, e.n, float64(e.n)/float64(r.n))
			}
		}
	}

	p("\n### Where the operator's time goes while creating (per proxy: calls and seconds)\n\n")
	p("| proxies | histogram | count/proxy | mean s | s/proxy |\n|---:|---|---:|---:|---:|\n")
	for _, r := range rs {
		n := float64(r.n)
		for _, k := range slices.Sorted(maps.Keys(r.create.timings)) {
			t := r.create.timings[k]
			p("| %d | %s | %.2f | %.3f | %.3f |\n", r.n, k, float64(t.Count)/n, t.Sum/float64(max(t.Count, 1)), t.Sum/n)
		}
	}

	if sim {
		for _, r := range rs {
			p("\n### %d proxies: simulator calls by path (top 10 per phase, and every listing)\n\n| phase | call | count | per proxy | KiB answered per proxy |\n|---|---|---:|---:|---:|\n", r.n)
			for _, ph := range []struct {
				name string
				ph   phase
			}{{"create", r.create}, {"steady", r.steady}, {"delete", r.delete}} {
				for _, e := range top(ph.ph.simCalls, 10, listingCalls...) {
					p("| %s | `%s` | %d | %.2f | %.2f |\n", ph.name, e.key, e.n, float64(e.n)/float64(r.n), float64(ph.ph.simBytes[e.key])/1024/float64(r.n))
				}
			}
		}
		p("\n\"Listing\" answers are %s.\n", quoted(listingCalls))
	}
	p("\nThe operator, pvesim, kube-apiserver and etcd each run in their own process; CPU and RSS are from /proc/<pid>/stat and\n")
	p("/proc/<pid>/status. The operator's requests are counted by a transport wrapped around its rest.Config.\n")
}

func quoted(ss []string) string {
	parts := make([]string, 0, len(ss))
	for _, v := range ss {
		parts = append(parts, "`"+v+"`")
	}
	return strings.Join(parts, ", ")
}
