package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports (the kernel's ABI fixes it,
// whatever CONFIG_HZ is).
const ClockTicks = 100

// Stat is what the benchmarks need of /proc/<pid>/stat.
type Stat struct {
	// Comm is the command name (field 2).
	Comm string
	// PPID is the parent's process ID.
	PPID int
	// UTime and STime are user and system CPU time, in ClockTicks.
	UTime, STime uint64
}

// CPUSeconds is user plus system time, in seconds.
func (s Stat) CPUSeconds() float64 { return float64(s.UTime+s.STime) / ClockTicks }

// SystemSeconds is system time alone, in seconds: the kernel's work on the
// process's behalf (system calls, and for a proxy the TCP stack).
func (s Stat) SystemSeconds() float64 { return float64(s.STime) / ClockTicks }

// ParseStat reads /proc/<pid>/stat. The command name (field 2) is in
// parentheses and may itself hold spaces and parentheses, so the fields
// after it are counted from the last ')'.
func ParseStat(b []byte) (Stat, error) {
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return Stat{}, fmt.Errorf("stat: no command name in %q", b)
	}
	// Fields from 3 (state) on; utime and stime are fields 14 and 15.
	f := strings.Fields(string(b[closing+1:]))
	if len(f) < 13 {
		return Stat{}, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	s := Stat{Comm: string(b[open+1 : closing])}
	var err error
	if s.PPID, err = strconv.Atoi(f[1]); err != nil {
		return Stat{}, fmt.Errorf("stat: ppid: %w", err)
	}
	if s.UTime, err = strconv.ParseUint(f[11], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("stat: utime: %w", err)
	}
	if s.STime, err = strconv.ParseUint(f[12], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("stat: stime: %w", err)
	}
	return s, nil
}

// ReadStat reads and parses the stat of process pid.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, fmt.Errorf("reading the stat of process %d: %w", pid, err)
	}
	s, err := ParseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return s, nil
}

// Memory is a process's resident memory, in bytes.
type Memory struct {
	// RSS and HWM are VmRSS and VmHWM (the peak RSS).
	RSS, HWM uint64
}

// ParseStatus takes VmRSS and VmHWM (kB in the file) from
// /proc/<pid>/status. Their absence (a kernel thread, a zombie) or another
// unit is an error, not zero bytes.
func ParseStatus(b []byte) (Memory, error) {
	var m Memory
	var haveRSS, haveHWM bool
	for line := range bytes.Lines(b) {
		key, val, ok := strings.Cut(string(line), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("status: %s is %q, not a count of kB", key, strings.TrimSpace(val))
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("status: %s: %w", key, err)
		}
		if key == "VmRSS" {
			m.RSS, haveRSS = kb<<10, true
		} else {
			m.HWM, haveHWM = kb<<10, true
		}
	}
	if !haveRSS || !haveHWM {
		return Memory{}, errors.New("status: no VmRSS or VmHWM (a kernel thread or a zombie?)")
	}
	return m, nil
}

// ReadMemory reads and parses the status of process pid.
func ReadMemory(pid int) (Memory, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return Memory{}, fmt.Errorf("reading the status of process %d: %w", pid, err)
	}
	m, err := ParseStatus(b)
	if err != nil {
		return Memory{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return m, nil
}

// Children returns the PIDs of the processes whose parent is parent, with
// their stat. A process that ends during the scan is left out.
func Children(parent int) map[int]Stat {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := map[int]Stat{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := ReadStat(pid); err == nil && st.PPID == parent {
			out[pid] = st
		}
	}
	return out
}

// LoadAverage returns the first three fields of /proc/loadavg (the load
// over 1, 5 and 15 minutes, as uptime prints them), or nil when it cannot
// be read: the figures of a shared machine depend on it.
func LoadAverage() []string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return nil
	}
	return f[:3]
}
