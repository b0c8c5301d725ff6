package main

import (
	"os"
	"testing"
)

// TestReadProcSelf: readProc puts this very process's figures together
// (the parsers are tested in hack/internal/procfs), and pid 0 (no such
// process in the run) has zero figures.
func TestReadProcSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: not Linux")
	}
	s, err := readProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.RSS < 1<<20 || s.HWM < s.RSS {
		t.Errorf("RSS %d, HWM %d: want at least 1 MiB and HWM ≥ RSS", s.RSS, s.HWM)
	}
	if z, err := readProc(0); err != nil || z != (procStats{}) {
		t.Errorf("readProc(0) = %+v, %v; want zero figures", z, err)
	}
}
