package kubelab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// kubeletSysctls are the global settings the kubelet changes at start
// (observed: vm.overcommit_memory 0 to 1, kernel.panic 1 to 10,
// kernel.panic_on_oops 0 to 1), whatever its configuration.
var kubeletSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}

// savedSysctls is where the first running world keeps the machine's values.
var savedSysctls = filepath.Join(stateDir, "sysctls.saved")

// globalLock serialises saving and restoring across worlds.
func globalLock() (*os.File, error) { return flock(filepath.Join(stateDir, "lock"), true) }

// saveSysctls records the machine's values unless a running world already
// did. A saved file with no world running is a killed world's: its values
// are the machine's, so they are put back first.
func saveSysctls(mine int) error {
	l, err := globalLock()
	if err != nil {
		return err
	}
	defer func() { _ = l.Close() }()
	if _, err := os.Stat(savedSysctls); err == nil {
		if othersRunning(mine) {
			return nil
		}
		if err := restoreSysctlsLocked(); err != nil {
			return err
		}
	}
	var b strings.Builder
	for _, k := range kubeletSysctls {
		v, err := os.ReadFile("/proc/sys/" + k) //nolint:gosec // G304: procfs.
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s=%s\n", k, strings.TrimSpace(string(v)))
	}
	return os.WriteFile(savedSysctls, []byte(b.String()), 0o600)
}

// restoreSysctls puts the machine's values back when no other world runs.
func restoreSysctls(mine int) error {
	l, err := globalLock()
	if err != nil {
		return err
	}
	defer func() { _ = l.Close() }()
	if othersRunning(mine) {
		return nil
	}
	return restoreSysctlsLocked()
}

func restoreSysctlsLocked() error {
	b, err := os.ReadFile(savedSysctls) //nolint:gosec // G304: the package's own state file under stateDir.
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(k, "vm/") && !strings.HasPrefix(k, "kernel/") || strings.Contains(k, "..") {
			return fmt.Errorf("%s: unexpected line %q", savedSysctls, line)
		}
		if err := os.WriteFile("/proc/sys/"+k, []byte(v+"\n"), 0o644); err != nil { //nolint:gosec // G306: procfs.
			return fmt.Errorf("restoring %s: %w", k, err)
		}
	}
	return os.Remove(savedSysctls)
}
