package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be the proxy process of the bench, as the
// bench's own binary is under `make bench-proxy`.
func TestMain(m *testing.M) {
	if addr := os.Getenv(childEnv); addr != "" {
		if err := runChild(addr, os.Getenv(childProfileEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "benchproxy child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The CI-sized smoke of `make bench-proxy`: a few requests of each scenario
// through our proxy, and through tinyproxy and squid when they are
// installed (the smoke installs nothing). It checks the tables' shape, not
// their figures: speed is measured by the full run, whose figures go into
// docs/performance.md.
func TestBenchSmoke(t *testing.T) {
	proxies := []string{"ours"}
	for _, name := range []string{"tinyproxy", "squid"} {
		if _, err := exec.LookPath(name); err == nil {
			proxies = append(proxies, name)
		}
	}
	t.Logf("measuring %v", proxies)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	o := options{proxies: proxies, requests: 40, duration: 2 * time.Second, concurrency: 2, idle: 20, rounds: 1, command: "go test ./hack/benchproxy"}
	if err := run(ctx, o, &out, t.Logf); err != nil {
		t.Fatal(err)
	}
	t.Logf("tables:\n%s", out.String())

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if !strings.HasPrefix(lines[0], "Measured ") || !strings.Contains(lines[0], "`go test ./hack/benchproxy`") {
		t.Errorf("the first line does not say when, where and how: %q", lines[0])
	}
	var scenarioRows, memoryRows [][]string
	for _, line := range lines {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| ---") || strings.HasPrefix(line, "| Scenario ") || strings.HasPrefix(line, "| Proxy ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		switch len(cells) {
		case 9:
			scenarioRows = append(scenarioRows, cells)
		case 6:
			memoryRows = append(memoryRows, cells)
		default:
			t.Errorf("row with %d cells: %q", len(cells), line)
		}
	}
	if got, want := len(scenarioRows), len(scenarios)*(1+len(proxies)); got != want {
		t.Errorf("scenario rows = %d, want %d (each scenario: direct and every proxy)", got, want)
	}
	if got, want := len(memoryRows), len(proxies); got != want {
		t.Errorf("idle tunnel rows = %d, want %d", got, want)
	}
	for _, row := range append(scenarioRows, memoryRows...) {
		proxy, verdict := strings.TrimSpace(row[0]), strings.TrimSpace(row[len(row)-1])
		if len(row) == 9 {
			proxy = strings.TrimSpace(row[1])
		}
		switch {
		case verdict == "":
			t.Errorf("row %q has no verdict", row)
		case proxy == "ours" && len(proxies) > 1 && !strings.Contains(verdict, "×"):
			t.Errorf("our row %q has no ratio to a target", row)
		case strings.Contains(verdict, "failed"):
			t.Errorf("requests failed: %q", row)
		}
	}
	for _, row := range memoryRows {
		if strings.TrimSpace(row[0]) == "ours" && strings.TrimSpace(row[3]) != "20" {
			t.Errorf("our idle tunnels = %q, want 20", row[3])
		}
	}
}
