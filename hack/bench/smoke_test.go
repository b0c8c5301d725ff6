package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be the operator process too: the bench
// starts its own executable again with the operator subcommand.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == operatorSubcommand {
		if err := operatorMain(os.Args[2:]); err != nil {
			_, _ = os.Stderr.WriteString("bench operator: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// needEnvtest skips an envtest case in -short mode without
// KUBEBUILDER_ASSETS and fails it otherwise, so that `make test` cannot
// pass by skipping it.
func needEnvtest(t *testing.T) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if testing.Short() {
			t.Skip("envtest case: needs KUBEBUILDER_ASSETS (run make test)")
		}
		t.Fatal("KUBEBUILDER_ASSETS is not set: run make test, which builds kube-apiserver and etcd")
	}
}

// TestSmoke runs the whole bench at CI size (1 and 20 proxies, fast
// simulated time, one resync), for the proxmox and the kubernetes provider,
// so that `make bench` cannot rot: it must end without error and print
// well-formed tables with a row per proxy count.
// Nothing here is timed: the figures go to docs/performance.md from full
// runs.
func TestSmoke(t *testing.T) {
	needEnvtest(t)
	for _, tc := range []struct {
		provider string
		sections []string
	}{
		{providerProxmox, []string{"### Lifecycle economy", "### Convergence", "### Memory", "### Steady state", "### The operator's requests", "### Where the operator's time goes", "### 20 proxies: simulator calls"}},
		{providerKubernetes, []string{"### Convergence", "### Memory", "### Steady state", "### The operator's requests", "### Where the operator's time goes"}},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			o, err := parseOptions([]string{"--provider", tc.provider, "--proxies", "20", "--speed", "200", "--resyncs", "1", "--timeout", "5m"}, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			var out bytes.Buffer
			if err := run(ctx, o, &out); err != nil {
				t.Fatalf("bench: %v\n%s", err, out.String())
			}
			report := out.String()
			for _, section := range tc.sections {
				rows := tableAfter(t, report, section)
				if strings.HasPrefix(section, "### 20 proxies") {
					continue // rows by call, not by count
				}
				for _, n := range []string{"1", "20"} {
					if !hasRow(rows, n) {
						t.Errorf("%s: no row for %s proxies:\n%s", section, n, strings.Join(rows, "\n"))
					}
				}
			}
		})
	}
}

// tableAfter returns the data rows of the Markdown table that follows the
// heading, after checking that every row has the header's column count.
func tableAfter(t *testing.T, report, heading string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(report, heading)
	if !ok {
		t.Fatalf("no %q in the report:\n%s", heading, report)
	}
	var table []string
	for line := range strings.Lines(rest) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(line, "|") {
			table = append(table, line)
		} else if len(table) > 0 {
			break
		}
	}
	if len(table) < 3 {
		t.Fatalf("%s: want a header, a separator and rows, got %q", heading, table)
	}
	cols := strings.Count(table[0], "|")
	if !regexp.MustCompile(`^\|(\s*-+:?\s*\||\s*:?-+\s*\|)+$`).MatchString(table[1]) || strings.Count(table[1], "|") != cols {
		t.Errorf("%s: bad separator row %q under %q", heading, table[1], table[0])
	}
	for _, row := range table[2:] {
		if strings.Count(row, "|") != cols {
			t.Errorf("%s: row %q has %d cells, the header %d", heading, row, strings.Count(row, "|")-1, cols-1)
		}
		if strings.Contains(row, "NaN") || strings.Contains(row, "Inf") {
			t.Errorf("%s: row %q has a figure that is not a number", heading, row)
		}
	}
	return table[2:]
}

func hasRow(rows []string, first string) bool {
	for _, r := range rows {
		if strings.HasPrefix(r, "| "+first+" |") {
			return true
		}
	}
	return false
}
