package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports (the kernel's ABI fixes it,
// whatever CONFIG_HZ is).
const clockTicks = 100

// procStats are one process's figures from /proc.
type procStats struct {
	// RSS and HWM are VmRSS and VmHWM (peak RSS) in bytes.
	RSS, HWM uint64
	// CPU is user plus system time, in seconds.
	CPU float64
}

// readProc reads the memory and CPU figures of process pid; pid 0 (no
// such process in this run, such as the simulator of a kubernetes run) has
// zero figures.
func readProc(pid int) (procStats, error) {
	if pid == 0 {
		return procStats{}, nil
	}
	dir := "/proc/" + strconv.Itoa(pid)
	status, err := os.ReadFile(dir + "/status") //nolint:gosec // G304: a /proc file of a PID.
	if err != nil {
		return procStats{}, fmt.Errorf("reading the status of process %d: %w", pid, err)
	}
	stat, err := os.ReadFile(dir + "/stat") //nolint:gosec // G304: a /proc file of a PID.
	if err != nil {
		return procStats{}, fmt.Errorf("reading the stat of process %d: %w", pid, err)
	}
	var s procStats
	if s.RSS, s.HWM, err = parseStatus(status); err != nil {
		return procStats{}, fmt.Errorf("process %d: %w", pid, err)
	}
	st, err := parseStat(stat)
	if err != nil {
		return procStats{}, fmt.Errorf("process %d: %w", pid, err)
	}
	s.CPU = float64(st.utime+st.stime) / clockTicks
	return s, nil
}

// parseStatus takes VmRSS and VmHWM (kB in the file) from /proc/<pid>/status.
func parseStatus(b []byte) (rss, hwm uint64, err error) {
	var haveRSS, haveHWM bool
	for line := range bytes.Lines(b) {
		key, val, ok := strings.Cut(string(line), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("status: %s is %q, not a count of kB", key, strings.TrimSpace(val))
		}
		kb, perr := strconv.ParseUint(f[0], 10, 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("status: %s: %w", key, perr)
		}
		if key == "VmRSS" {
			rss, haveRSS = kb<<10, true
		} else {
			hwm, haveHWM = kb<<10, true
		}
	}
	if !haveRSS || !haveHWM {
		return 0, 0, errors.New("status: no VmRSS or VmHWM (a kernel thread or a zombie?)")
	}
	return rss, hwm, nil
}

// stat is what the bench needs of /proc/<pid>/stat.
type stat struct {
	comm         string
	ppid         int
	utime, stime uint64
}

// parseStat reads /proc/<pid>/stat. The command name (field 2) is in
// parentheses and may itself hold spaces and parentheses, so the fields
// after it are counted from the last ')'.
func parseStat(b []byte) (stat, error) {
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return stat{}, fmt.Errorf("stat: no command name in %q", b)
	}
	// Fields from 3 (state) on; utime and stime are fields 14 and 15.
	f := strings.Fields(string(b[closing+1:]))
	if len(f) < 13 {
		return stat{}, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	s := stat{comm: string(b[open+1 : closing])}
	var err error
	if s.ppid, err = strconv.Atoi(f[1]); err != nil {
		return stat{}, fmt.Errorf("stat: ppid: %w", err)
	}
	if s.utime, err = strconv.ParseUint(f[11], 10, 64); err != nil {
		return stat{}, fmt.Errorf("stat: utime: %w", err)
	}
	if s.stime, err = strconv.ParseUint(f[12], 10, 64); err != nil {
		return stat{}, fmt.Errorf("stat: stime: %w", err)
	}
	return s, nil
}

// childrenNamed returns the PIDs of the children of process parent whose
// command name is name: envtest starts kube-apiserver and etcd as children
// of the bench process and does not export their PIDs.
func childrenNamed(parent int, name string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		if st, err := parseStat(b); err == nil && st.ppid == parent && st.comm == name {
			out = append(out, pid)
		}
	}
	return out
}

// loadAverage is the first three fields of /proc/loadavg, as uptime prints
// them: the machine's load, which the figures of a shared machine depend on.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
