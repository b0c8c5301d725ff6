package config

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// messages joins the errors, in order, for comparison.
func messages(errs field.ErrorList) string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return strings.Join(out, "; ")
}

func TestValidateTrust(t *testing.T) {
	p := field.NewPath("providers").Key("lab").Child("kvm")
	cases := []struct {
		reason   string
		file     string
		insecure bool
		want     string
	}{
		{"a file verifies the peer", "/etc/known_hosts", false, ""},
		{"skipping verification is allowed when explicit", "", true, ""},
		{"no file and no explicit skip: verification is never skipped by omission", "", false,
			`providers[lab].kvm.knownHostsFile: Required value: the hosts' SSH host keys (or insecureIgnoreHostKey: true, not recommended)`},
		{"a file and a skip contradict each other", "/etc/known_hosts", true,
			`providers[lab].kvm.insecureIgnoreHostKey: Forbidden: give knownHostsFile or insecureIgnoreHostKey, not both`},
	}
	for _, tc := range cases {
		got := messages(ValidateTrust(p, "knownHostsFile", tc.file, "insecureIgnoreHostKey", tc.insecure, "the hosts' SSH host keys"))
		if got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.reason, got, tc.want)
		}
	}
}

func TestValidateVLANTag(t *testing.T) {
	p := field.NewPath("vlanTag")
	for tag, want := range map[int]string{
		0:    "",
		1:    "",
		4094: "",
		-1:   "vlanTag: Invalid value: -1: must be between 1 and 4094",
		4095: "vlanTag: Invalid value: 4095: must be between 1 and 4094",
	} {
		if got := messages(ValidateVLANTag(p, tag)); got != want {
			t.Errorf("tag %d: got %q, want %q", tag, got, want)
		}
	}
}
