package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/modroot"
)

// The goals of issue #22 for the gateway.
const (
	// goalAddedP50 and goalAddedP99 bound the latency the gateway adds to
	// a request or a tunnel over the forward proxy it fronts.
	goalAddedP50 = 500 * time.Microsecond
	goalAddedP99 = 2 * time.Millisecond
	// goalForwardRatio is the least CONNECT throughput against the forward
	// proxy reached directly, and goalProxyChainRatio against proxy-chain's.
	goalForwardRatio    = 0.8
	goalProxyChainRatio = 2.0
	// goalTunnelMemory is the most memory per idle tunnel against the
	// forward proxy's.
	goalTunnelMemory = 2.0
	// goalPlacement: a session's placement takes microseconds, not
	// milliseconds.
	goalPlacement = 1000.0 // µs
)

// pathName is what the gateway mode's tables call each proxy.
func pathName(name string) string {
	switch name {
	case "ours":
		return "forward proxy"
	case nameGateway, nameProxyChain:
		return name + " → forward proxy"
	}
	return name
}

// placement is what BenchmarkSessionPlacement (internal/gateway) reports.
type placement struct {
	sessions, members int
	microseconds      float64 // per placement of one session
	// movedShare and ownShare are the mean shares of the sessions that a
	// member's loss moved and that were on it; othersMoved is how many
	// moved although their member stayed.
	movedShare, ownShare float64
	othersMoved          int
}

// placementBenchmark is the benchmark's name.
const placementBenchmark = "BenchmarkSessionPlacement"

// parsePlacement reads the benchmark's line out of go test's output.
func parsePlacement(out string) (placement, error) {
	for line := range strings.SplitSeq(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || !strings.HasPrefix(fields[0], placementBenchmark) {
			continue
		}
		metrics := map[string]float64{}
		// name, iterations, then value unit pairs.
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return placement{}, fmt.Errorf("%s: %q is not a number", placementBenchmark, fields[i])
			}
			metrics[fields[i+1]] = v
		}
		var missing []string
		for _, unit := range []string{"µs/placement", "moved-share", "own-share", "others-moved", "sessions", "members"} {
			if _, ok := metrics[unit]; !ok {
				missing = append(missing, unit)
			}
		}
		if len(missing) > 0 {
			return placement{}, fmt.Errorf("%s reported no %s", placementBenchmark, strings.Join(missing, ", "))
		}
		return placement{sessions: int(metrics["sessions"]), members: int(metrics["members"]), microseconds: metrics["µs/placement"],
			movedShare: metrics["moved-share"], ownShare: metrics["own-share"], othersMoved: int(metrics["others-moved"])}, nil
	}
	return placement{}, fmt.Errorf("no %s line in go test's output:\n%s", placementBenchmark, lastLines(out, 5))
}

// verdict of the placement: microseconds per session, and a member's loss
// moving at most 1/members of the sessions besides its own.
func (p placement) verdict() string {
	extra := p.movedShare - p.ownShare
	bound := 1 / float64(p.members)
	return fmt.Sprintf("%.1f µs per placement (< %g: %s); moved besides its own %.5f of the sessions (≤ 1/%d: %s)",
		p.microseconds, goalPlacement, met(p.microseconds < goalPlacement), extra, p.members, met(extra <= bound))
}

// runPlacement runs the placement benchmark with go test in this module.
func runPlacement(ctx context.Context, benchtime string) (placement, error) {
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	root, err := modroot.Find()
	if err != nil {
		return placement{}, err
	}
	cmd := exec.CommandContext(ctx, goBin, "test", "-run", "^$", "-bench", "^"+placementBenchmark+"$", "-benchtime", benchtime, "./internal/gateway/") //nolint:gosec // G204: go from $GO, fixed arguments.
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return placement{}, fmt.Errorf("go test: %w:\n%s", err, lastLines(string(out), 10))
	}
	return parsePlacement(string(out))
}

// gatewayVerdict of the gateway in scenario i: with one client, the
// latency it adds over the forward proxy; with many, its throughput against
// the forward proxy's and proxy-chain's (goals for CONNECT, issue #22).
func (r *results) gatewayVerdict(i int, gw measurement) string {
	fp, ok := r.find("ours")
	if !ok {
		return "the forward proxy was not measured"
	}
	ref := fp.scenarios[i]
	pc, hasPC := r.find(nameProxyChain)
	sc := r.scenarios[i]
	var parts []string
	if sc.clients == 1 {
		a50, a99 := added(gw.p50, ref.p50), added(gw.p99, ref.p99)
		parts = append(parts, fmt.Sprintf("p50 added %s ms (≤ %s: %s)", ms(a50), ms(goalAddedP50), met(a50 <= goalAddedP50)),
			fmt.Sprintf("p99 added %s ms (≤ %s: %s)", ms(a99), ms(goalAddedP99), met(a99 <= goalAddedP99)))
		if hasPC {
			m := pc.scenarios[i]
			parts = append(parts, fmt.Sprintf("proxy-chain adds %s / %s ms", ms(added(m.p50, ref.p50)), ms(added(m.p99, ref.p99))))
		}
		return strings.Join(parts, "; ")
	}
	goal := func(ratio, want float64) string {
		if !sc.connect {
			return "no goal"
		}
		return fmt.Sprintf("≥ %g: %s", want, met(ratio >= want))
	}
	ratio := gw.rps() / ref.rps()
	parts = append(parts, fmt.Sprintf("throughput %.2f× the forward proxy's (%s)", ratio, goal(ratio, goalForwardRatio)))
	if gw.cpu > 0 && gw.bytes > 0 && ref.cpu > 0 && ref.bytes > 0 {
		// The client, the origin and both proxies share the machine's
		// cores: the work each process does per CPU second is what does
		// not depend on how the CPU was shared.
		parts = append(parts, fmt.Sprintf("per CPU second %.2f×", (float64(gw.bytes)/gw.cpu)/(float64(ref.bytes)/ref.cpu)))
	}
	if sc.connect {
		if c := cpuPerRequest(gw, ref, "the forward proxy's"); c != "" {
			parts = append(parts, c)
		}
	}
	if hasPC {
		ratio := gw.rps() / pc.scenarios[i].rps()
		parts = append(parts, fmt.Sprintf("%.2f× proxy-chain's (%s)", ratio, goal(ratio, goalProxyChainRatio)))
	}
	return strings.Join(parts, "; ")
}

// writeGateway prints the gateway mode's tables.
func (r *results) writeGateway(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s with `%s`: %d rounds of at most %d requests or %s per scenario and path (the median round shown), %d idle tunnels; load average (1 min) %s at the start, %s at the end. "+
		"The gateway and proxy-chain chain every request and tunnel to the forward proxy, with its credentials; the latency they add is over the forward proxy reached directly, the forward proxy's over the origin reached directly.\n\n",
		r.started.UTC().Format("2006-01-02 15:04 MST"), machine(), r.opts.command, r.opts.rounds, r.opts.requests, r.opts.duration, r.opts.idle, r.loadBefore, r.loadAfter)
	fp, _ := r.find("ours")
	r.writeScenarioHead(&b, "Path")
	for i, sc := range r.scenarios {
		d := r.direct[i]
		writeDirectRow(&b, sc, d)
		for _, p := range r.proxies {
			base, v := d, "reference"
			switch p.name {
			case "ours":
				v = "the upstream of the others"
			case nameGateway:
				base, v = fp.scenarios[i], r.gatewayVerdict(i, p.scenarios[i])
			case nameProxyChain:
				base = fp.scenarios[i]
			}
			writeRow(&b, sc, pathName(p.name), p.scenarios[i], base, v)
		}
	}
	b.WriteString("\n| Process | RSS before (MiB) | RSS with the idle tunnels (MiB) | Idle tunnels | KiB per idle tunnel | Verdict |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for _, p := range r.proxies {
		v := "reference"
		switch {
		case p.name == "ours":
			v = "baseline"
		case p.name == nameGateway && fp.perTunnelKiB() > 0:
			ratio := p.perTunnelKiB() / fp.perTunnelKiB()
			v = fmt.Sprintf("%.2f× the forward proxy's (≤ %g: %s)", ratio, goalTunnelMemory, met(ratio <= goalTunnelMemory))
		case p.name == nameGateway:
			v = "the forward proxy's figure is not positive"
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %d | %.1f | %s%s |\n", pathName(p.name), float64(p.rssBefore)/1024, float64(p.rssIdle)/1024, p.idle, p.perTunnelKiB(), v, p.refusedNote())
	}
	if pl := r.placement; pl != nil {
		b.WriteString("\n| Sessions | Members | µs per placement | Share moved by a member's loss | Share that was on it | Moved although their member stayed | Verdict |\n")
		b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
		fmt.Fprintf(&b, "| %d | %d | %.2f | %.5f | %.5f | %d | %s |\n", pl.sessions, pl.members, pl.microseconds, pl.movedShare, pl.ownShare, pl.othersMoved, pl.verdict())
	}
	_, err := io.WriteString(w, b.String())
	return err
}
