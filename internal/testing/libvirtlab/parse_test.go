package libvirtlab

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSerialPaths(t *testing.T) {
	cases := []struct {
		name, reason, xml string
		want              []string
	}{{
		name:   "file serial",
		reason: "a <serial type='file'> writes the console to its source path",
		xml:    `<domain><devices><serial type='file'><source path='/l/s.log'/></serial></devices></domain>`,
		want:   []string{"/l/s.log"},
	}, {
		name:   "pty serial with a log, console of the same file",
		reason: "a pty serial's <log file> is the console's copy; the console element repeats it and must not be listed twice",
		xml: `<domain><devices><serial type='pty'><source path='/dev/pts/3'/><log file='/l/c.log'/></serial>` +
			`<console type='pty'><source path='/dev/pts/3'/><log file='/l/c.log'/></console></devices></domain>`,
		want: []string{"/l/c.log"},
	}, {
		name:   "pty only",
		reason: "a pty's source path is a terminal, not a file to read",
		xml:    `<domain><devices><serial type='pty'><source path='/dev/pts/3'/></serial></devices></domain>`,
		want:   nil,
	}, {
		name:   "not XML",
		reason: "a broken dumpxml yields nothing, and SerialLog falls back to SerialDir",
		xml:    `error: failed to get domain`,
		want:   nil,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, serialPaths(tc.xml)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestParseLeases(t *testing.T) {
	cases := []struct {
		name, reason, status string
		want                 []Lease
		wantErr              bool
	}{{
		name:   "one lease",
		reason: "libvirt's lease helper writes a JSON array of dnsmasq's leases",
		status: `[{"ip-address": "198.51.100.104", "mac-address": "52:54:00:c6:33:01", "hostname": "real-guest", "client-id": "01:52:54:00:c6:33:01", "expiry-time": 1796103226}]`,
		want: []Lease{{
			IP: netip.MustParseAddr("198.51.100.104"), MAC: "52:54:00:c6:33:01", Hostname: "real-guest",
			ClientID: "01:52:54:00:c6:33:01", Expiry: 1796103226,
		}},
	}, {
		name:   "empty file",
		reason: "before the first lease the file may be empty: no leases, no error, so the caller polls again",
		status: "\n",
		want:   nil,
	}, {
		name:    "garbage",
		reason:  "a file that is not the helper's JSON is an error, not silently no leases",
		status:  "lease 198.51.100.104",
		wantErr: true,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLeases([]byte(tc.status))
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s: error %v, want error %v", tc.reason, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}
