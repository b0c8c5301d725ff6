package kubelab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const cgroupFS = "/sys/fs/cgroup"

// v1Hierarchies lists the mounted cgroup v1 hierarchies (cpu, memory, ...,
// name=systemd), by their mount points. The kubelet's cgroupRoot must exist
// in each.
func v1Hierarchies() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		// ... mountpoint ... - fstype source options
		i := strings.Index(line, " - ")
		if i < 0 {
			continue
		}
		f, tail := strings.Fields(line[:i]), strings.Fields(line[i+3:])
		if len(f) > 4 && len(tail) > 0 && tail[0] == "cgroup" && strings.HasPrefix(f[4], cgroupFS+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// cgroupV2 reports whether /sys/fs/cgroup is the unified hierarchy.
func cgroupV2() bool {
	_, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers"))
	return err == nil
}

// makeCgroups creates the kubelet's cgroupRoot in every hierarchy, with the
// cpuset's CPUs and memory nodes copied from the parent (a new cpuset cgroup
// starts empty, and nothing can join an empty one).
func makeCgroups(name string) error {
	if cgroupV2() {
		return os.MkdirAll(filepath.Join(cgroupFS, name), 0o755) //nolint:gosec // G301: a cgroup directory's usual mode.
	}
	for _, h := range v1Hierarchies() {
		dir := filepath.Join(h, name)
		if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: a cgroup directory's usual mode.
			return err
		}
		if filepath.Base(h) == "cpuset" || strings.Contains(filepath.Base(h), "cpuset") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f)) //nolint:gosec // G304: cgroupfs.
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil { //nolint:gosec // G306: cgroupfs.
					return fmt.Errorf("setting %s of %s: %w", f, dir, err)
				}
			}
		}
	}
	return nil
}

// cgroupRoots is the world's cgroup directory in each hierarchy.
func cgroupRoots(name string) []string {
	if cgroupV2() {
		return []string{filepath.Join(cgroupFS, name)}
	}
	var out []string
	for _, h := range v1Hierarchies() {
		out = append(out, filepath.Join(h, name))
	}
	return out
}

// cgroupPIDs lists the processes in the world's cgroups, at any depth.
func cgroupPIDs(name string) []int {
	var pids []int
	for _, root := range cgroupRoots(name) {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(path, "cgroup.procs")) //nolint:gosec // G304: cgroupfs.
			if err != nil {
				return nil
			}
			for _, l := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(l); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// removeCgroups removes the world's cgroups, deepest first (a cgroup
// directory goes with rmdir only once it has no children and no process).
func removeCgroups(name string) error {
	var errs []error
	for _, root := range cgroupRoots(name) {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// thawCgroups thaws every frozen cgroup of the world, at any depth: a
// frozen process does not die of SIGKILL until it is thawed (see killAll).
// cgroup v1 has a freezer hierarchy with freezer.state; cgroup v2 a
// cgroup.freeze file in every cgroup.
func thawCgroups(name string) {
	for _, root := range cgroupRoots(name) {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			// Errors are those of a cgroup without the file, or one that
			// went meanwhile: the next round of killAll looks again.
			writeExisting(filepath.Join(path, "freezer.state"), "THAWED")
			writeExisting(filepath.Join(path, "cgroup.freeze"), "0")
			return nil
		})
	}
}

// writeExisting writes v to a cgroup file if it exists (never creating one).
func writeExisting(path, v string) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0) //nolint:gosec // G304: cgroupfs.
	if err != nil {
		return
	}
	_, _ = f.WriteString(v)
	_ = f.Close()
}
