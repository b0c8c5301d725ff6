package controller

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/events"
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

// TestFittingRecorderCutsLongNotes: an event's note over the API server's
// limit (an OwnershipKeyMismatch event naming every unverified instance)
// was refused and the event lost; the recorder cuts it instead, after
// formatting, and keeps its start.
func TestFittingRecorderCutsLongNotes(t *testing.T) {
	many := strings.Repeat("pve1/104/egress-a (egress-a), ", 60)
	tests := []struct {
		name, reason string
		note         string
		args         []any
		// want is the recorded note when it fits; wantPrefix when it is cut.
		want, wantPrefix string
	}{
		{name: "fits", reason: "a short note passes as it is, its arguments formatted",
			note: "Deleted instance %s", args: []any{"pve1/104"}, want: "Deleted instance pve1/104"},
		{name: "percent in an argument", reason: "an argument is data: a %d in an error must not be formatted again",
			note: "provider error: %s", args: []any{"500 %d%s"}, want: "provider error: 500 %d%s"},
		{name: "many instances", reason: "the note counts after formatting, and over the limit is cut, not refused",
			note: "60 instances carry this installation's mark. They are: %s", args: []any{many}, wantPrefix: "60 instances carry this installation's mark. They are: pve1/104"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := &events.FakeRecorder{Events: make(chan string, 1)}
			fittingRecorder{fake}.Eventf(nil, nil, "Warning", "Reason", "Action", tc.note, tc.args...)
			got := strings.TrimPrefix(<-fake.Events, "Warning Reason ")
			if len(got) > maxEventNote {
				t.Errorf("note of %d bytes, the API server refuses over %d: %s", len(got), maxEventNote, tc.reason)
			}
			if tc.want != "" {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("note (-want +got):\n%s\n%s", diff, tc.reason)
				}
				return
			}
			if !strings.HasPrefix(got, tc.wantPrefix) || !strings.HasSuffix(got, truncationMarker) {
				t.Errorf("cut note %.80q... does not keep its start and end with the marker: %s", got, tc.reason)
			}
		})
	}
}
