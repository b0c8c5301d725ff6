package provider

import "log/slog"

// redacted is what every printed form of a Sensitive value shows.
const redacted = "[redacted]"

// Sensitive holds bytes that must never be printed: rendered cloud-init
// user-data, passwords. Every way Go prints or serialises a value (fmt verbs,
// %#v, JSON, slog, logr) shows "[redacted]" instead; only Bytes gives the
// content, and only code that hands it to the infrastructure calls it.
type Sensitive struct {
	b []byte
}

// NewSensitive wraps b. The caller must not change b afterwards.
func NewSensitive(b []byte) Sensitive { return Sensitive{b: b} }

// Bytes returns the content, for the one place that sends it where it is
// needed. Never log the result.
func (s Sensitive) Bytes() []byte { return s.b }

// Len returns the length of the content; lengths are safe to log.
func (s Sensitive) Len() int { return len(s.b) }

// String implements fmt.Stringer.
func (s Sensitive) String() string { return redacted }

// GoString implements fmt.GoStringer, for %#v.
func (s Sensitive) GoString() string { return redacted }

// MarshalJSON implements json.Marshaler, for structured loggers.
func (s Sensitive) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText implements encoding.TextMarshaler.
func (s Sensitive) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue implements slog.LogValuer.
func (s Sensitive) LogValue() slog.Value { return slog.StringValue(redacted) }
