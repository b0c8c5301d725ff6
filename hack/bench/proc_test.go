package main

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name, reason, in string
		want             stat
		wantErr          bool
	}{
		{name: "plain", reason: "ppid is field 4, utime and stime fields 14 and 15",
			in:   "4242 (kube-apiserver) S 4200 4242 4200 0 -1 4194560 51234 0 12 0 1500 230 0 0 20 0 17 0 123456 1234567890 54321 18446744073709551615",
			want: stat{comm: "kube-apiserver", ppid: 4200, utime: 1500, stime: 230}},
		{name: "command with spaces and parentheses", reason: "the command name is whatever the process set; fields count from the last ')'",
			in:   "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 9 8 0 0 20 0 1 0 1 2 3",
			want: stat{comm: "a (b) c", ppid: 1, utime: 9, stime: 8}},
		{name: "truncated", reason: "a short line is an error, not zero CPU",
			in: "7 (x) R 1 7 7", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s: error %v, want error %v", tc.reason, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(stat{})); diff != "" {
				t.Errorf("%s\n(-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	const sample = "Name:\tetcd\nVmPeak:\t 11111 kB\nVmHWM:\t   90000 kB\nVmRSS:\t   81920 kB\nThreads:\t12\n"
	rss, hwm, err := parseStatus([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if rss != 81920<<10 || hwm != 90000<<10 {
		t.Errorf("VmRSS and VmHWM are kB in the file: got %d and %d bytes", rss, hwm)
	}
	if _, _, err := parseStatus([]byte("Name:\tkthreadd\nThreads:\t1\n")); err == nil {
		t.Error("a status without VmRSS (a kernel thread) must be an error, not 0 bytes")
	}
	if _, _, err := parseStatus([]byte("VmHWM:\t2 MB\nVmRSS:\t1 MB\n")); err == nil {
		t.Error("a unit other than kB must be an error, not a figure 1024 times off")
	}
}

// TestReadProcSelf: the figures of this very process are plausible, so the
// parsers agree with the running kernel's files.
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
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseStat(b)
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != os.Getppid() || st.comm == "" {
		t.Errorf("stat of this process: %+v, want ppid %d", st, os.Getppid())
	}
}
