package provider

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
)

// redacted is what every printed form of a Sensitive value shows.
const redacted = "[redacted]"

// Sensitive holds bytes that must never be printed: rendered cloud-init
// user-data, passwords. Every way Go prints or serialises a value (fmt verbs,
// %#v, JSON, slog, logr) shows "[redacted]" instead; only Bytes gives the
// content, and only code that hands it to the infrastructure calls it.
type Sensitive struct {
	// c holds the content behind two pointers, for the places where fmt
	// cannot call this type's methods: a Sensitive reached through an
	// unexported struct field (a Request kept in another type's private
	// field) is printed by reflection, field by field. fmt would print a
	// []byte there as text (%s, %q), hex (%x) or numbers (%v, %d), and it
	// follows one pointer to a struct when it reports a bad verb (%s of a
	// pointer); a pointer inside that struct it prints as an address only.
	c *sensitiveContent
}

type sensitiveContent struct {
	b *[]byte
}

// NewSensitive wraps b. The caller must not change b afterwards.
func NewSensitive(b []byte) Sensitive { return Sensitive{c: &sensitiveContent{b: &b}} }

// Bytes returns the content, for the one place that sends it where it is
// needed. Never log the result.
func (s Sensitive) Bytes() []byte {
	if s.c == nil || s.c.b == nil {
		return nil
	}
	return *s.c.b
}

// Len returns the length of the content; lengths are safe to log.
func (s Sensitive) Len() int { return len(s.Bytes()) }

// Format implements fmt.Formatter, so that every verb prints the marker:
// String and GoString alone cover only %v, %s, %q, %x, %X and %#v, and %d
// would print the bytes as numbers.
func (s Sensitive) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		_, _ = io.WriteString(f, strconv.Quote(redacted))
		return
	}
	_, _ = io.WriteString(f, redacted)
}

// String implements fmt.Stringer.
func (s Sensitive) String() string { return redacted }

// GoString implements fmt.GoStringer, for callers that use it directly (fmt
// itself calls Format for %#v).
func (s Sensitive) GoString() string { return redacted }

// MarshalJSON implements json.Marshaler, for structured loggers.
func (s Sensitive) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText implements encoding.TextMarshaler.
func (s Sensitive) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue implements slog.LogValuer.
func (s Sensitive) LogValue() slog.Value { return slog.StringValue(redacted) }
