package controller

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// maxConditionMessage is the longest message the API server accepts in a
// metav1.Condition (its OpenAPI maxLength, in bytes of UTF-8).
const maxConditionMessage = 32768

// maxEventNote is the longest note the API server accepts in an Event (its
// validation's NoteLengthLimit, in bytes). A longer one is refused, and the
// event lost: the recorder does not retry.
const maxEventNote = 1024

// truncationMarker ends a message that was cut to fit.
const truncationMarker = " [truncated]"

// truncateMessage returns msg as valid UTF-8 of at most maxConditionMessage
// bytes. A longer message (a provider error quoting a huge API body) is cut
// on a rune boundary and ends with truncationMarker, so that the status
// patch is not refused and the start, which says what failed, is kept.
// Invalid bytes become U+FFFD first: the API server would otherwise do it
// when encoding, and each such byte grows to three.
func truncateMessage(msg string) string { return truncateTo(msg, maxConditionMessage) }

// truncateTo is truncateMessage for a limit of limit bytes.
func truncateTo(msg string, limit int) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	if len(msg) <= limit {
		return msg
	}
	cut := limit - len(truncationMarker)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + truncationMarker
}

// fittingRecorder cuts every event's note to maxEventNote, as
// truncateMessage does for conditions: an event naming many instances, or
// quoting a long provider error, is kept with its start instead of being
// refused by the API server.
type fittingRecorder struct{ events.EventRecorder }

// Eventf implements events.EventRecorder.
func (r fittingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", truncateTo(fmt.Sprintf(note, args...), maxEventNote))
}
