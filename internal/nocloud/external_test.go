package nocloud

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The tests in this file read our images with independent ISO 9660
// implementations. Each skips when its tool is not installed (Debian:
// genisoimage for isoinfo, xorriso, util-linux for blkid); they were also run
// by hand when the writer was written.

// writeImages writes a typical seed and a multi-sector one into a temporary
// directory and returns their paths and seeds.
func writeImages(t *testing.T) map[string]Seed {
	t.Helper()
	dir := t.TempDir()
	seeds := map[string]Seed{
		filepath.Join(dir, "sample.iso"): sampleSeed(),
		filepath.Join(dir, "big.iso"): {
			UserData:   bytes.Repeat([]byte("0123456789abcdef"), 100*1024/16),
			MetaData:   MetaData("big", "big"),
			VendorData: []byte{},
		},
		// Every extent points at the end of the image.
		filepath.Join(dir, "empty.iso"): {},
	}
	for path, s := range seeds {
		if err := os.WriteFile(path, image(t, s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return seeds
}

// lookPath returns the tool's path, or skips the test when it is absent.
func lookPath(t *testing.T, tool string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err != nil {
		t.Skipf("%s is not installed, so this cross-check cannot run here: %v", tool, err)
	}
	return path
}

// run runs a tool and returns its standard output.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func TestIsoinfoReadsImage(t *testing.T) {
	isoinfo := lookPath(t, "isoinfo")
	for path, s := range writeImages(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			info := run(t, isoinfo, "-d", "-i", path)
			for _, want := range []string{"Volume id: " + Label + "\n", "Joliet with UCS level 3 found", "Logical block size is: 2048"} {
				if !strings.Contains(info, want) {
					t.Errorf("isoinfo -d lacks %q:\n%s", want, info)
				}
			}
			// The names each tree lists, in order, from lines like
			// "----------   0 0 0   36 Jan  1 2020 [ 26 00]  user-data ".
			listed := func(args ...string) []string {
				var names []string
				for line := range strings.SplitSeq(run(t, isoinfo, append(args, "-l", "-i", path)...), "\n") {
					if strings.HasPrefix(line, "-") {
						_, name, _ := strings.Cut(line, "]")
						names = append(names, strings.TrimSpace(name))
					}
				}
				return names
			}
			if diff := cmp.Diff([]string{"meta-data", "user-data", "vendor-data"}, listed("-J")); diff != "" {
				t.Errorf("Joliet names listed by isoinfo -J -l (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"META_DAT.;1", "USER_DAT.;1", "VENDOR_D.;1"}, listed()); diff != "" {
				t.Errorf("primary names listed by isoinfo -l (-want +got):\n%s", diff)
			}
			for name, want := range map[string][]byte{UserDataName: s.UserData, MetaDataName: s.MetaData, VendorDataName: s.VendorData} {
				if got := run(t, isoinfo, "-J", "-x", "/"+name, "-i", path); got != string(want) {
					t.Errorf("isoinfo -J -x /%s returned %d bytes, want the %d written", name, len(got), len(want))
				}
			}
		})
	}
}

func TestXorrisoExtractsImage(t *testing.T) {
	xorriso := lookPath(t, "xorriso")
	for path, s := range writeImages(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			out := t.TempDir()
			// Extract the whole tree: xorriso picks the Joliet names (there
			// is no Rock Ridge), so the directory shows what a guest sees.
			run(t, xorriso, "-abort_on", "WARNING", "-indev", path, "-osirrox", "on", "-extract", "/", out)
			entries, err := os.ReadDir(out)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, e := range entries {
				b, err := os.ReadFile(filepath.Join(out, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				got[e.Name()] = string(b)
			}
			want := map[string]string{UserDataName: string(s.UserData), MetaDataName: string(s.MetaData), VendorDataName: string(s.VendorData)}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("files extracted by xorriso (-want +got):\n%s", diff)
			}
			if info := run(t, xorriso, "-indev", path, "-pvd_info"); !strings.Contains(info, "Volume Id    : "+Label+"\n") {
				t.Errorf("xorriso -pvd_info lacks volume id %s:\n%s", Label, info)
			}
		})
	}
}

func TestBlkidSeesLabel(t *testing.T) {
	// cloud-init finds the seed with `blkid -t LABEL=cidata`; libblkid
	// prefers the Joliet volume identifier when the image has one.
	blkid := lookPath(t, "blkid")
	for path := range writeImages(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			got := run(t, blkid, "-p", "-o", "export", path)
			for _, want := range []string{"\nLABEL=" + Label + "\n", "\nTYPE=iso9660\n"} {
				if !strings.Contains("\n"+got, want) {
					t.Errorf("blkid -p lacks %q:\n%s", strings.TrimSpace(want), got)
				}
			}
		})
	}
}
