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

func TestLeaseAddr(t *testing.T) {
	cases := []struct {
		name, reason, out string
		want              netip.Addr
	}{{
		name:   "one lease",
		reason: "virsh -q net-dhcp-leases prints expiry, MAC, protocol, address/prefix, hostname, client id",
		out:    " 2026-12-01 04:33:46   52:54:00:c6:33:01   ipv4       198.51.100.104/24   real-guest   01:52:54:00:c6:33:01\n",
		want:   netip.MustParseAddr("198.51.100.104"),
	}, {
		name:   "none yet",
		reason: "no lease: the zero Addr, so the caller polls again",
		out:    "",
		want:   netip.Addr{},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaseAddr(tc.out); got != tc.want {
				t.Errorf("%s: got %v, want %v", tc.reason, got, tc.want)
			}
		})
	}
}
