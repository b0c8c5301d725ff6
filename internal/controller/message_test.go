package controller

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncateMessage(t *testing.T) {
	long := strings.Repeat("x", maxConditionMessage+10)
	tests := []struct {
		name   string
		reason string
		in     string
		// wantPrefix is what the output starts with; wantCut says the
		// marker must end it.
		wantPrefix string
		wantCut    bool
	}{
		{name: "short", reason: "a message that fits is kept as it is", in: "instance pve1/104 runs", wantPrefix: "instance pve1/104 runs"},
		{name: "exactly the limit", reason: "the limit is inclusive", in: long[:maxConditionMessage], wantPrefix: long[:maxConditionMessage]},
		{name: "one byte over", reason: "a message over the limit would make the API server refuse the whole status patch",
			in: long[:maxConditionMessage+1], wantPrefix: "xxxx", wantCut: true},
		{name: "multi-byte runes at the cut", reason: "a cut inside a rune would leave invalid UTF-8, which the API server mangles",
			in: strings.Repeat("é", maxConditionMessage), wantPrefix: "éé", wantCut: true},
		{name: "invalid bytes", reason: "each invalid byte becomes a three-byte U+FFFD when encoded, so the length must be counted after",
			in: strings.Repeat("\xffa", maxConditionMessage/2), wantPrefix: "\uFFFDa", wantCut: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := truncateMessage(tc.in)
			if len(got) > maxConditionMessage {
				t.Errorf("len = %d, want at most %d: %s", len(got), maxConditionMessage, tc.reason)
			}
			if !utf8.ValidString(got) {
				t.Errorf("output is not valid UTF-8: %s", tc.reason)
			}
			if !strings.HasPrefix(got, tc.wantPrefix) {
				t.Errorf("output does not start with %.20q: %s", tc.wantPrefix, tc.reason)
			}
			if cut := strings.HasSuffix(got, truncationMarker); cut != tc.wantCut {
				t.Errorf("ends with the marker = %v, want %v: %s", cut, tc.wantCut, tc.reason)
			}
		})
	}
}

// FuzzTruncateMessage: whatever a provider's error says, the condition
// message fits the API's limit, is valid UTF-8, and a message that fits is
// unchanged.
func FuzzTruncateMessage(f *testing.F) {
	f.Add("instance pve1/104 runs", 0)
	f.Add("\xff\xfe", maxConditionMessage)
	f.Add("é", maxConditionMessage-3)
	f.Fuzz(func(t *testing.T, unit string, repeat int) {
		if repeat < 0 || repeat > 2*maxConditionMessage || len(unit)*repeat > 4*maxConditionMessage {
			t.Skip()
		}
		in := unit + strings.Repeat(unit, repeat)
		got := truncateMessage(in)
		if len(got) > maxConditionMessage || !utf8.ValidString(got) {
			t.Fatalf("len %d, valid %v", len(got), utf8.ValidString(got))
		}
		if utf8.ValidString(in) && len(in) <= maxConditionMessage && got != in {
			t.Fatalf("a message that fits was changed")
		}
	})
}
