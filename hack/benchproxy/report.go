package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// proxyResult is everything measured of one proxy.
type proxyResult struct {
	name      string
	scenarios []measurement // in the order of scenarios
	rssBefore int64         // KiB, after the scenarios, before the idle tunnels
	rssIdle   int64         // KiB, with the idle tunnels open
	idle      int
	// idleRefused counts the CONNECTs of the idle tunnels that were
	// refused and opened again (openIdleTunnels).
	idleRefused int
}

// refusedNote says how many idle tunnels had to be opened again, or "".
func (r proxyResult) refusedNote() string {
	if r.idleRefused == 0 {
		return ""
	}
	return fmt.Sprintf("; %d CONNECTs refused and opened again", r.idleRefused)
}

// perTunnelKiB is the memory each idle tunnel added.
func (r proxyResult) perTunnelKiB() float64 {
	if r.idle == 0 {
		return 0
	}
	return float64(r.rssIdle-r.rssBefore) / float64(r.idle)
}

type results struct {
	opts      options
	scenarios []scenario // the scenarios run, in order
	started   time.Time
	// loadBefore and loadAfter are the one-minute load averages at the
	// start and at the end of the run.
	loadBefore, loadAfter string
	direct                []measurement
	proxies               []proxyResult
	missing               []string
	// placement is the session placement benchmark's, in the gateway mode.
	placement *placement
}

func (r *results) find(name string) (proxyResult, bool) {
	for _, p := range r.proxies {
		if p.name == name {
			return p, true
		}
	}
	return proxyResult{}, false
}

// added is the latency a proxy adds over the direct request. At the tail it
// can come out negative: the direct run had its own pauses (the client and
// the origin share the machine), which is why verdicts compare the proxies'
// own percentiles, measured under the same load.
func added(proxied, direct time.Duration) time.Duration { return proxied - direct }

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

// machine describes where the run happened.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%s, %d CPUs%s, %s", model, runtime.NumCPU(), kernel, runtime.Version())
}

// verdict of our proxy in one scenario: throughput against tinyproxy's
// (target: at least 1×, and 1.2× for CONNECT, issue #23), the latency a
// CONNECT adds at the median against tinyproxy's (target: at most 1×), and
// p99 against squid's (target: at most 1×); the direct baseline being the
// same for both, comparing p99s compares the latency each adds.
func (r *results) verdict(i int, ours measurement) string {
	if r.scenarios[i].pacedAfter != "" {
		return r.pacedVerdict(i, ours)
	}
	var parts []string
	if t, ok := r.find("tinyproxy"); ok {
		ref := t.scenarios[i]
		ratio := ours.rps() / ref.rps()
		perCPU := ""
		if ours.cpu > 0 && ours.bytes > 0 && ref.cpu > 0 && ref.bytes > 0 {
			// On a shared machine the throughput follows the CPU each
			// proxy got; the work done per CPU second does not.
			perCPU = fmt.Sprintf("; per CPU second %.2f×", (float64(ours.bytes)/ours.cpu)/(float64(ref.bytes)/ref.cpu))
		}
		goal := 1.0
		if r.scenarios[i].connect {
			goal = 1.2
		}
		parts = append(parts, fmt.Sprintf("throughput %.2f× tinyproxy's (≥ %g: %s%s)", ratio, goal, met(ratio >= goal), perCPU))
		if r.scenarios[i].connect {
			d := r.direct[i].p50
			ourAdded, refAdded := added(ours.p50, d), added(ref.p50, d)
			parts = append(parts, fmt.Sprintf("p50 added %s ms against tinyproxy's %s (≤: %s)", ms(ourAdded), ms(refAdded), met(ourAdded <= refAdded)))
			if c := cpuPerRequest(ours, ref, "tinyproxy's"); c != "" {
				parts = append(parts, c)
			}
		}
	}
	if s, ok := r.find("squid"); ok {
		ratio := p99Ratio(ours, s.scenarios[i])
		parts = append(parts, fmt.Sprintf("p99 %.2f× squid's (≤ 1: %s)", ratio, met(ratio <= 1)))
	}
	if len(parts) == 0 {
		return "no reference proxy measured"
	}
	return strings.Join(parts, "; ")
}

// pacedVerdict of our proxy in a paced scenario: every proxy served the
// same rate, so only the latency compares; the goal is squid's p99 (issue
// #23), tinyproxy's is shown.
func (r *results) pacedVerdict(i int, ours measurement) string {
	var parts []string
	if s, ok := r.find("squid"); ok {
		ratio := p99Ratio(ours, s.scenarios[i])
		parts = append(parts, fmt.Sprintf("at one rate for all: p99 %.2f× squid's (≤ 1: %s)", ratio, met(ratio <= 1)))
	}
	if t, ok := r.find("tinyproxy"); ok {
		ratio := p99Ratio(ours, t.scenarios[i])
		parts = append(parts, fmt.Sprintf("p99 %.2f× tinyproxy's", ratio))
	}
	if len(parts) == 0 {
		return "no reference proxy measured"
	}
	return strings.Join(parts, "; ")
}

// p99Ratio is ours's p99 over ref's (a ref under a microsecond counts as
// one).
func p99Ratio(ours, ref measurement) float64 {
	return float64(ours.p99) / float64(max(ref.p99, time.Microsecond))
}

// cpuPerRequest compares the CPU two proxies spent per request, and the
// kernel's part of it (refName is the reference's, possessive): a tunnel's
// CPU is mostly the TCP stack's, which every proxy pays for its two
// connections, so the user-space part is what a proxy's own code can win
// on. Empty when either was not measured.
func cpuPerRequest(ours, ref measurement, refName string) string {
	if ours.requests == 0 || ref.requests == 0 || ours.cpu <= 0 || ref.cpu <= 0 {
		return ""
	}
	per := func(m measurement) string {
		return fmt.Sprintf("%.1f µs (%.0f %% in the kernel)", m.cpu/float64(m.requests)*1e6, 100*m.sys/m.cpu)
	}
	return fmt.Sprintf("CPU per request %s against %s %s", per(ours), refName, per(ref))
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// write prints the Markdown tables.
func (r *results) write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s with `%s`: %d rounds of at most %d requests or %s per scenario and proxy (the median round shown), %d concurrent clients, %d idle tunnels; load average (1 min) %s at the start, %s at the end.\n\n",
		r.started.UTC().Format("2006-01-02 15:04 MST"), machine(), r.opts.command, r.opts.rounds, r.opts.requests, r.opts.duration, r.opts.concurrency, r.opts.idle, r.loadBefore, r.loadAfter)
	r.writeScenarioHead(&b, "Proxy")
	for i, sc := range r.scenarios {
		d := r.direct[i]
		writeDirectRow(&b, sc, d)
		for _, p := range r.proxies {
			m := p.scenarios[i]
			v := "reference"
			if p.name == "ours" {
				v = r.verdict(i, m)
			}
			writeRow(&b, sc, p.name, m, d, v)
		}
	}
	b.WriteString("\n| Proxy | RSS before (MiB) | RSS with the idle tunnels (MiB) | Idle tunnels | KiB per idle tunnel | Verdict |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	least := 0.0
	for _, p := range r.proxies {
		if p.name != "ours" && (least == 0 || p.perTunnelKiB() < least) {
			least = p.perTunnelKiB()
		}
	}
	for _, p := range r.proxies {
		v := "reference"
		if p.name == "ours" {
			v = "no reference proxy measured"
			if least > 0 {
				ratio := p.perTunnelKiB() / least
				v = fmt.Sprintf("%.2f× the least of the others (≤ 1: %s)", ratio, met(ratio <= 1))
			}
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %d | %.1f | %s%s |\n", p.name, float64(p.rssBefore)/1024, float64(p.rssIdle)/1024, p.idle, p.perTunnelKiB(), v, p.refusedNote())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeScenarioHead writes which proxies are missing and the scenario
// table's head, whose second column is named column.
func (r *results) writeScenarioHead(b *strings.Builder, column string) {
	if len(r.missing) > 0 {
		fmt.Fprintf(b, "Not measured (not installed): %s.\n\n", strings.Join(r.missing, ", "))
	}
	b.WriteString("| Scenario | " + column + " | Requests/s | p50 (ms) | p99 (ms) | p50 added (ms) | p99 added (ms) | CPU s/GB | Verdict |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
}

// writeDirectRow writes the scenario's baseline, the origin reached
// directly.
func writeDirectRow(b *strings.Builder, sc scenario, d measurement) {
	fmt.Fprintf(b, "| %s | direct | %.0f | %s | %s | | | | baseline%s |\n", sc.name, d.rps(), ms(d.p50), ms(d.p99), notes(d))
}

// writeRow writes a proxy's row: m, with the latency added over base.
func writeRow(b *strings.Builder, sc scenario, name string, m, base measurement, verdict string) {
	cpuPerGB := "n/a"
	if m.bytes > 0 {
		cpuPerGB = fmt.Sprintf("%.2f", m.cpu/(float64(m.bytes)/1e9))
	}
	fmt.Fprintf(b, "| %s | %s | %.0f | %s | %s | %s | %s | %s | %s%s |\n", sc.name, name, m.rps(),
		ms(m.p50), ms(m.p99), ms(added(m.p50, base.p50)), ms(added(m.p99, base.p99)), cpuPerGB, verdict, notes(m))
}

func notes(m measurement) string {
	if s := errorSummary(m); s != "" {
		return "; " + s
	}
	return ""
}
