package procfs

import (
	"os"
	"os/exec"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name, reason, in string
		want             Stat
		wantErr          bool
	}{
		{name: "plain", reason: "ppid is field 4, utime and stime fields 14 and 15",
			in:   "4242 (kube-apiserver) S 4200 4242 4200 0 -1 4194560 51234 0 12 0 1500 230 0 0 20 0 17 0 123456 1234567890 54321 18446744073709551615",
			want: Stat{Comm: "kube-apiserver", PPID: 4200, UTime: 1500, STime: 230}},
		{name: "command with spaces and parentheses", reason: "the command name is whatever the process set; fields count from the last ')'",
			in:   "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 9 8 0 0 20 0 1 0 1 2 3",
			want: Stat{Comm: "a (b) c", PPID: 1, UTime: 9, STime: 8}},
		{name: "truncated", reason: "a short line is an error, not zero CPU",
			in: "7 (x) R 1 7 7", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s: error %v, want error %v", tc.reason, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\n(-want +got):\n%s", tc.reason, diff)
			}
		})
	}
	if got := (Stat{UTime: 150, STime: 50}).CPUSeconds(); got != 2 {
		t.Errorf("CPUSeconds of 150 + 50 ticks = %v, want 2 (USER_HZ is 100)", got)
	}
	if got := (Stat{UTime: 150, STime: 50}).SystemSeconds(); got != 0.5 {
		t.Errorf("SystemSeconds of 50 system ticks = %v, want 0.5 (the user ticks are not the kernel's)", got)
	}
}

func TestParseStatus(t *testing.T) {
	const sample = "Name:\tetcd\nVmPeak:\t 11111 kB\nVmHWM:\t   90000 kB\nVmRSS:\t   81920 kB\nThreads:\t12\n"
	m, err := ParseStatus([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS != 81920<<10 || m.HWM != 90000<<10 {
		t.Errorf("VmRSS and VmHWM are kB in the file: got %d and %d bytes", m.RSS, m.HWM)
	}
	if _, err := ParseStatus([]byte("Name:\tkthreadd\nThreads:\t1\n")); err == nil {
		t.Error("a status without VmRSS (a kernel thread) must be an error, not 0 bytes")
	}
	if _, err := ParseStatus([]byte("VmHWM:\t2 MB\nVmRSS:\t1 MB\n")); err == nil {
		t.Error("a unit other than kB must be an error, not a figure 1024 times off")
	}
}

// TestReadSelfAndChildren: the figures of this very process and of a child
// it starts are plausible, so the parsers agree with the running kernel's
// files.
func TestReadSelfAndChildren(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: not Linux")
	}
	m, err := ReadMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS < 1<<20 || m.HWM < m.RSS {
		t.Errorf("RSS %d, HWM %d: want at least 1 MiB and HWM ≥ RSS", m.RSS, m.HWM)
	}
	st, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != os.Getppid() || st.Comm == "" {
		t.Errorf("stat of this process: %+v, want ppid %d", st, os.Getppid())
	}

	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatalf("starting sleep: %v", err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	children := Children(os.Getpid())
	if got, ok := children[child.Process.Pid]; !ok || got.Comm != "sleep" {
		t.Errorf("Children(this process)[%d] = %+v, %v; want the sleep it started", child.Process.Pid, got, ok)
	}
	for pid, st := range children {
		if st.PPID != os.Getpid() {
			t.Errorf("Children(this process) holds process %d, a child of %d", pid, st.PPID)
		}
	}
	if la := LoadAverage(); len(la) != 3 {
		t.Errorf("LoadAverage = %q, want three fields", la)
	}
}
