package controller

import (
	"strings"
	"unicode/utf8"
)

// maxConditionMessage is the longest message the API server accepts in a
// metav1.Condition (its OpenAPI maxLength, in bytes of UTF-8).
const maxConditionMessage = 32768

// truncationMarker ends a message that was cut to fit.
const truncationMarker = " [truncated]"

// truncateMessage returns msg as valid UTF-8 of at most maxConditionMessage
// bytes. A longer message (a provider error quoting a huge API body) is cut
// on a rune boundary and ends with truncationMarker, so that the status
// patch is not refused and the start, which says what failed, is kept.
// Invalid bytes become U+FFFD first: the API server would otherwise do it
// when encoding, and each such byte grows to three.
func truncateMessage(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	if len(msg) <= maxConditionMessage {
		return msg
	}
	cut := maxConditionMessage - len(truncationMarker)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + truncationMarker
}
