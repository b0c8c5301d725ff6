package main

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestGatewayVerdict: the gateway's verdict in each kind of scenario,
// against the goals of issue #22.
func TestGatewayVerdict(t *testing.T) {
	one := scenario{name: "CONNECT + GET 1 KiB (1 client)", connect: true, clients: 1}
	many := scenario{name: "CONNECT + GET 1 KiB (16 clients)", connect: true}
	plain := scenario{name: "GET 1 KiB (16 clients)"}
	// m is a measurement of ok requests in one second.
	m := func(ok int, p50, p99 time.Duration) measurement {
		return measurement{ok: ok, elapsed: time.Second, p50: p50, p99: p99}
	}
	cases := []struct {
		reason       string
		sc           scenario
		fp, gw, pc   measurement
		noProxyChain bool
		want         string
	}{{
		reason: "one client: the latency added over the forward proxy, within both goals, and proxy-chain's for comparison",
		sc:     one, fp: m(1000, time.Millisecond, 3*time.Millisecond), gw: m(900, 1400*time.Microsecond, 4*time.Millisecond),
		pc:   m(300, 3*time.Millisecond, 9*time.Millisecond),
		want: "p50 added 0.400 ms (≤ 0.500: met); p99 added 1.000 ms (≤ 2.000: met); proxy-chain adds 2.000 / 6.000 ms",
	}, {
		reason: "one client: past the p50 goal and the p99 goal, each missed on its own",
		sc:     one, fp: m(1000, time.Millisecond, 3*time.Millisecond), gw: m(900, 1600*time.Microsecond, 5100*time.Microsecond),
		noProxyChain: true,
		want:         "p50 added 0.600 ms (≤ 0.500: missed); p99 added 2.100 ms (≤ 2.000: missed)",
	}, {
		reason: "many clients, CONNECT: throughput against the forward proxy (0.8×) and proxy-chain (2×), both met",
		sc:     many, fp: m(1000, 0, 0), gw: m(850, 0, 0), pc: m(400, 0, 0),
		want: "throughput 0.85× the forward proxy's (≥ 0.8: met); 2.12× proxy-chain's (≥ 2: met)",
	}, {
		reason: "many clients, CONNECT: below both ratios",
		sc:     many, fp: m(1000, 0, 0), gw: m(700, 0, 0), pc: m(400, 0, 0),
		want: "throughput 0.70× the forward proxy's (≥ 0.8: missed); 1.75× proxy-chain's (≥ 2: missed)",
	}, {
		reason: "many clients, plain GET: the issue sets throughput goals for CONNECT only",
		sc:     plain, fp: m(1000, 0, 0), gw: m(500, 0, 0), pc: m(100, 0, 0),
		want: "throughput 0.50× the forward proxy's (no goal); 5.00× proxy-chain's (no goal)",
	}}
	for _, c := range cases {
		t.Run(c.reason, func(t *testing.T) {
			r := &results{scenarios: []scenario{c.sc}, proxies: []proxyResult{
				{name: "ours", scenarios: []measurement{c.fp}}, {name: nameGateway, scenarios: []measurement{c.gw}}}}
			if !c.noProxyChain {
				r.proxies = append(r.proxies, proxyResult{name: nameProxyChain, scenarios: []measurement{c.pc}})
			}
			if diff := cmp.Diff(c.want, r.gatewayVerdict(0, c.gw)); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGatewayVerdictPerCPU: with CPU times measured, the throughput verdict
// adds the work per CPU second against the forward proxy's, and for
// CONNECT the CPU per tunnel with its kernel part: the gateway's extra hop
// costs at least the TCP work of its two connections.
func TestGatewayVerdictPerCPU(t *testing.T) {
	fp := measurement{ok: 1000, elapsed: time.Second, bytes: 1000, cpu: 1, sys: 0.75, requests: 10000}
	gw := measurement{ok: 900, elapsed: time.Second, bytes: 900, cpu: 0.5, sys: 0.4, requests: 4500}
	for _, c := range []struct {
		reason string
		sc     scenario
		want   string
	}{{
		reason: "CONNECT: per CPU second and per tunnel",
		sc:     scenario{name: "CONNECT + GET 1 KiB (16 clients)", connect: true},
		want: "throughput 0.90× the forward proxy's (≥ 0.8: met); per CPU second 1.80×; " +
			"CPU per request 111.1 µs (80 % in the kernel) against the forward proxy's 100.0 µs (75 % in the kernel)",
	}, {
		reason: "plain GET: no goal, so per CPU second alone",
		sc:     scenario{name: "GET 1 KiB (16 clients)"},
		want:   "throughput 0.90× the forward proxy's (no goal); per CPU second 1.80×",
	}} {
		t.Run(c.reason, func(t *testing.T) {
			r := &results{scenarios: []scenario{c.sc}, proxies: []proxyResult{{name: "ours", scenarios: []measurement{fp}}, {name: nameGateway, scenarios: []measurement{gw}}}}
			if diff := cmp.Diff(c.want, r.gatewayVerdict(0, gw)); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParsePlacement: the placement benchmark's line, as go test prints it,
// gives the figures; a missing metric or line is an error that says which.
func TestParsePlacement(t *testing.T) {
	line := "BenchmarkSessionPlacement-2   \t      20\t 179453010 ns/op\t         0.0009450 moved-share\t      1000 members\t         0 others-moved\t         0.0009000 own-share\t     10000 sessions\t        17.95 µs/placement\n"
	cases := []struct {
		reason  string
		out     string
		want    placement
		wantErr string
	}{{
		reason: "every metric, among go test's other lines",
		out:    "goos: linux\ngoarch: amd64\n" + line + "PASS\nok  \tgithub.com/x/internal/gateway\t8.674s\n",
		want:   placement{sessions: 10000, members: 1000, microseconds: 17.95, movedShare: 0.000945, ownShare: 0.0009, othersMoved: 0},
	}, {
		reason:  "a metric missing: the benchmark changed, the bench says which",
		out:     strings.Replace(line, "0 others-moved", "", 1),
		wantErr: "BenchmarkSessionPlacement reported no others-moved",
	}, {
		reason:  "no benchmark line at all",
		out:     "PASS\n",
		wantErr: "no BenchmarkSessionPlacement line",
	}}
	for _, c := range cases {
		t.Run(c.reason, func(t *testing.T) {
			got, err := parsePlacement(c.out)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error = %v, want one with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got, cmp.AllowUnexported(placement{})); diff != "" {
				t.Errorf("placement (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlacementVerdict: microseconds per placement, and what a member's
// loss moves besides its own sessions against 1/members.
func TestPlacementVerdict(t *testing.T) {
	cases := []struct {
		reason string
		p      placement
		want   string
	}{{
		reason: "rendezvous hashing: only the lost member's sessions move, even when it had more than 1/members of them",
		p:      placement{members: 1000, microseconds: 18, movedShare: 0.0015, ownShare: 0.0015},
		want:   "18.0 µs per placement (< 1000: met); moved besides its own 0.00000 of the sessions (≤ 1/1000: met)",
	}, {
		reason: "a placement that reshuffles others (say modulo hashing) and takes milliseconds",
		p:      placement{members: 1000, microseconds: 1500, movedShare: 0.9, ownShare: 0.001},
		want:   "1500.0 µs per placement (< 1000: missed); moved besides its own 0.89900 of the sessions (≤ 1/1000: missed)",
	}}
	for _, c := range cases {
		t.Run(c.reason, func(t *testing.T) {
			if diff := cmp.Diff(c.want, c.p.verdict()); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

// TestModeScenarios: the gateway mode measures each scenario with one
// client (latency) and with --concurrency clients (throughput), and
// --scenarios picks among those names.
func TestModeScenarios(t *testing.T) {
	o := options{gateway: true, concurrency: 8}
	got := scenarioNames(modeScenarios(o))
	want := []string{"GET 1 KiB (1 client)", "GET 1 KiB (8 clients)", "GET 1 MiB (1 client)", "GET 1 MiB (8 clients)",
		"CONNECT + GET 1 KiB (1 client)", "CONNECT + GET 1 KiB (8 clients)", "CONNECT + GET 1 MiB (1 client)", "CONNECT + GET 1 MiB (8 clients)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gateway mode scenarios (-want +got):\n%s", diff)
	}
	picked, err := selectScenarios(modeScenarios(o), []string{"CONNECT + GET 1 KiB (1 client)"})
	if err != nil || len(picked) != 1 || picked[0].clients != 1 || !picked[0].connect {
		t.Errorf("selecting the one-client CONNECT scenario = %+v, %v", picked, err)
	}
	if diff := cmp.Diff(scenarioNames(scenarios), scenarioNames(modeScenarios(options{concurrency: 8}))); diff != "" {
		t.Errorf("bench-proxy's scenarios changed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"--rounds", "1"}, modeArgs([]string{"--gateway", "--rounds", "1"})); diff != "" {
		t.Errorf("the command's ARGS (-want +got):\n%s", diff)
	}
}

// The CI-sized smoke of `make bench-gateway`: a few requests of each
// scenario directly, through our forward proxy and through the gateway in
// front of it, and through proxy-chain when it is installed already (the
// smoke installs nothing and runs no placement benchmark). It checks the
// tables' shape and that nothing failed, not the figures.
func TestGatewayBenchSmoke(t *testing.T) {
	proxies := []string{"ours", nameGateway}
	if dir, err := ensureProxyChain(t.Context(), false, t.Logf); err == nil {
		t.Logf("proxy-chain installed in %s", dir)
		proxies = append(proxies, nameProxyChain)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	o := options{gateway: true, proxies: proxies, requests: 30, duration: 2 * time.Second, concurrency: 2, idle: 20, rounds: 1, command: "go test ./hack/benchproxy"}
	if err := run(ctx, o, &out, t.Logf); err != nil {
		t.Fatal(err)
	}
	t.Logf("tables:\n%s", out.String())
	var scenarioRows, memoryRows int
	for line := range strings.SplitSeq(out.String(), "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| ---") || len(cells) < 6 || strings.Contains(cells[0], "Scenario") || strings.Contains(cells[0], "Process") {
			continue
		}
		switch len(cells) {
		case 9:
			scenarioRows++
			path, verdict := strings.TrimSpace(cells[1]), cells[8]
			if path == pathName(nameGateway) && !strings.Contains(verdict, ": met") && !strings.Contains(verdict, ": missed") && !strings.Contains(verdict, "no goal") {
				t.Errorf("the gateway's row has no verdict: %q", line)
			}
			// proxy-chain's own failures are its figures (Node's agent
			// may send a CONNECT on a kept-alive upstream connection,
			// which the forward proxy refuses); ours and the gateway's
			// must have none.
			if path != pathName(nameProxyChain) && strings.Contains(verdict, "failed") {
				t.Errorf("requests failed: %q", line)
			}
		case 6:
			memoryRows++
			if strings.TrimSpace(cells[0]) == pathName(nameGateway) && strings.TrimSpace(cells[3]) != "20" {
				t.Errorf("the gateway's idle tunnels = %q, want 20", cells[3])
			}
		}
	}
	if want := len(modeScenarios(o)) * (1 + len(proxies)); scenarioRows != want {
		t.Errorf("scenario rows = %d, want %d", scenarioRows, want)
	}
	if memoryRows != len(proxies) {
		t.Errorf("idle tunnel rows = %d, want %d", memoryRows, len(proxies))
	}
}

// TestPacedScenarios: a paced scenario runs at pacedShare of the slowest
// proxy's throughput in its base scenario of the same round, picking it
// brings its base along, and the gateway mode leaves it out.
func TestPacedScenarios(t *testing.T) {
	picked, err := selectScenarios(scenarios, []string{"GET 1 KiB at one rate"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"GET 1 KiB", "GET 1 KiB at one rate"}, scenarioNames(picked)); diff != "" {
		t.Errorf("picking the paced scenario (-want +got):\n%s", diff)
	}
	rps := func(n int) measurement { return measurement{ok: n, elapsed: time.Second} }
	// Two proxies, two rounds; the base is scenario 0.
	rounds := [][][]measurement{
		{{rps(1000), rps(2000)}, {}},
		{{rps(800), rps(3000)}, {}},
	}
	if got, want := pacedRate(picked, picked[1], rounds, 0), 560.0; math.Abs(got-want) > 1e-6 {
		t.Errorf("round 1's rate = %v, want %v (pacedShare of the slower proxy)", got, want)
	}
	if got, want := pacedRate(picked, picked[1], rounds, 1), 1400.0; math.Abs(got-want) > 1e-6 {
		t.Errorf("round 2's rate = %v, want %v (that round's figures)", got, want)
	}
	for _, sc := range modeScenarios(options{gateway: true, concurrency: 8}) {
		if sc.pacedAfter != "" {
			t.Errorf("the gateway mode runs the paced scenario %q", sc.name)
		}
	}
}

// TestMeasureAtARate: paced, the workers never send more than the rate,
// and a request that waited for a slow one before it counts its latency
// from its scheduled time, as a user would see it: one worker, 100
// requests a second, each taking 20 ms, falls further behind with each
// request, so the median latency is several times the 20 ms a closed
// loop would report. (Both checks hold however loaded the machine is.)
func TestMeasureAtARate(t *testing.T) {
	const rate, took = 100.0, 20 * time.Millisecond
	o := options{requests: 1000, duration: 400 * time.Millisecond}
	slow := func() op {
		return func(ctx context.Context) (int64, error) {
			timer := time.NewTimer(took)
			defer timer.Stop()
			select {
			case <-timer.C:
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
	m := measure(context.Background(), o, scenario{name: "paced", clients: 1}, slow, rate)
	if limit := int(rate*o.duration.Seconds()) + 1; m.ok > limit {
		t.Errorf("%d requests in %s at %v a second, want at most %d", m.ok, o.duration, rate, limit)
	}
	if m.ok < 3 || m.p50 < 3*took {
		t.Errorf("%d requests, p50 %s: want the latency counted from each request's scheduled time (at least %s)", m.ok, m.p50, 3*took)
	}
}
