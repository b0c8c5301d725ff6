package main

import (
	"slices"
	"strings"

	"github.com/egress-proxies/egress-proxies-operator/hack/internal/procfs"
)

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
	m, err := procfs.ReadMemory(pid)
	if err != nil {
		return procStats{}, err
	}
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return procStats{}, err
	}
	return procStats{RSS: m.RSS, HWM: m.HWM, CPU: st.CPUSeconds()}, nil
}

// childrenNamed returns the PIDs of the children of process parent whose
// command name is name: envtest starts kube-apiserver and etcd as children
// of the bench process and does not export their PIDs.
func childrenNamed(parent int, name string) []int {
	var out []int
	for pid, st := range procfs.Children(parent) {
		if st.Comm == name {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}

// loadAverage is the machine's load over 1, 5 and 15 minutes, as uptime
// prints it: the figures of a shared machine depend on it.
func loadAverage() string {
	if la := procfs.LoadAverage(); la != nil {
		return strings.Join(la, " ")
	}
	return "unknown"
}
