package sentinel

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// minSecretLen is the shortest value looked for: a shorter one would be
// found in ordinary text by chance.
const minSecretLen = 8

// Finding is a secret found in captured output.
type Finding struct {
	// Source is where the text came from ("logs", "events", "spans", ...).
	Source string
	// Label names the secret ("password of ns/egress-3"), never its value.
	Label string
	// Spelling is how it was written ("plain", "hex", ...).
	Spelling string
	// Excerpt is the text around it, with the secret replaced by its label.
	Excerpt string
}

func (f Finding) String() string {
	return fmt.Sprintf("%s: %s (%s) in %q", f.Source, f.Label, f.Spelling, f.Excerpt)
}

// Spellings returns the ways a value can appear in text: as is, quoted by
// Go or JSON (escapes inside), hex (lower and upper case), base64 (standard
// and URL alphabets, without the padding, which depends on what follows)
// and as the decimal byte list fmt prints for a []byte.
func Spellings(v string) map[string]string {
	quoted := strconv.Quote(v)
	b := []byte(v)
	out := map[string]string{
		"plain":     v,
		"quoted":    quoted[1 : len(quoted)-1],
		"hex":       hex.EncodeToString(b),
		"HEX":       strings.ToUpper(hex.EncodeToString(b)),
		"base64":    strings.TrimRight(base64.StdEncoding.EncodeToString(b), "="),
		"base64url": strings.TrimRight(base64.URLEncoding.EncodeToString(b), "="),
		"bytes":     byteList(b),
	}
	return out
}

// spellingOrder lists the names Spellings gives, plain first.
var spellingOrder = []string{"plain", "quoted", "hex", "HEX", "base64", "base64url", "bytes"}

// byteList is b as fmt prints a []byte with %v, without the brackets:
// decimal values separated by spaces.
func byteList(b []byte) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = strconv.Itoa(int(c))
	}
	return strings.Join(parts, " ")
}

// Watch holds captured text by source and the secrets to look for.
type Watch struct {
	mu       sync.Mutex
	secrets  map[string]secret // by spelling
	history  map[string]*strings.Builder
	findings []Finding
	seen     map[string]bool // source|label|spelling
}

type secret struct{ label, spelling string }

// NewWatch returns an empty Watch.
func NewWatch() *Watch {
	return &Watch{secrets: map[string]secret{}, history: map[string]*strings.Builder{}, seen: map[string]bool{}}
}

// AddSecret adds a value to look for (shorter values than 8 bytes are
// refused with an error: they would match by chance) and looks for it in
// everything captured so far.
func (w *Watch) AddSecret(label, value string) error {
	if len(value) < minSecretLen {
		return fmt.Errorf("secret %s is too short (%d bytes) to be looked for reliably", label, len(value))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	spellings := Spellings(value)
	// In a fixed order: where two spellings are the same text (a value
	// that needs no quoting is its own quoted spelling), the first names it,
	// whatever the map's order.
	for _, spelling := range spellingOrder {
		s := spellings[spelling]
		if _, known := w.secrets[s]; known {
			continue
		}
		w.secrets[s] = secret{label: label, spelling: spelling}
		for source, h := range w.history {
			w.scan(source, h.String(), map[string]secret{s: w.secrets[s]})
		}
	}
	return nil
}

// Add captures text from a source and looks in it for every known secret.
func (w *Watch) Add(source, text string) {
	if text == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.history[source]
	if h == nil {
		h = &strings.Builder{}
		w.history[source] = h
	}
	h.WriteString(text)
	if !strings.HasSuffix(text, "\n") {
		h.WriteString("\n")
	}
	w.scan(source, text, w.secrets)
}

// scan records the findings of secrets in text; the caller holds w.mu.
func (w *Watch) scan(source, text string, secrets map[string]secret) {
	for s, sec := range secrets {
		i := strings.Index(text, s)
		if i < 0 {
			continue
		}
		key := source + "|" + sec.label + "|" + sec.spelling
		if w.seen[key] {
			continue
		}
		w.seen[key] = true
		from, to := max(0, i-120), min(len(text), i+len(s)+120)
		excerpt := strings.ReplaceAll(text[from:to], s, "<"+sec.label+">")
		w.findings = append(w.findings, Finding{Source: source, Label: sec.label, Spelling: sec.spelling, Excerpt: excerpt})
	}
}

// Findings returns every finding so far, in the order found.
func (w *Watch) Findings() []Finding {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Finding(nil), w.findings...)
}

// Captured returns how many bytes each source has captured, so that a test
// can show that its check did not pass on empty output.
func (w *Watch) Captured() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.history))
	for s, h := range w.history {
		out[s] = h.Len()
	}
	return out
}

// Secrets returns how many values (not spellings) are looked for.
func (w *Watch) Secrets() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	labels := map[string]bool{}
	for _, s := range w.secrets {
		labels[s.label] = true
	}
	return len(labels)
}

// Text returns everything a source captured, for a failing test to save.
func (w *Watch) Text(source string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.history[source]; h != nil {
		return h.String()
	}
	return ""
}

// Contains reports whether a source's captured text holds s (for checks
// that the capture works, such as a log message that must be there).
func (w *Watch) Contains(source, s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.history[source]
	return h != nil && strings.Contains(h.String(), s)
}

// Logger returns a logger at verbosity v whose lines (funcr's text format,
// which walks values by reflection as a production encoder would) go to
// source "logs" of w.
func (w *Watch) Logger(v int) logr.Logger {
	return funcr.New(func(prefix, args string) { w.Add("logs", prefix+" "+args) },
		funcr.Options{Verbosity: v, LogTimestamp: false})
}

// SpanProcessor returns a span processor that captures every ended span
// (name, status, attributes, events and their attributes) as one line of
// source "spans" of w, without keeping the spans.
func (w *Watch) SpanProcessor() sdktrace.SpanProcessor { return spanSink{w: w} }

// spanSink is the SpanProcessor of a Watch.
type spanSink struct{ w *Watch }

func (s spanSink) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (s spanSink) OnEnd(sp sdktrace.ReadOnlySpan) {
	var b strings.Builder
	b.WriteString(sp.Name())
	b.WriteString(" status=" + sp.Status().Code.String() + " " + sp.Status().Description)
	attrs := make([]string, 0, len(sp.Attributes()))
	for _, a := range sp.Attributes() {
		attrs = append(attrs, string(a.Key)+"="+a.Value.String())
	}
	sort.Strings(attrs)
	b.WriteString(" " + strings.Join(attrs, " "))
	for _, e := range sp.Events() {
		b.WriteString(" event=" + e.Name)
		for _, a := range e.Attributes {
			b.WriteString(" " + string(a.Key) + "=" + a.Value.String())
		}
	}
	s.w.Add("spans", b.String())
}

func (s spanSink) Shutdown(context.Context) error   { return nil }
func (s spanSink) ForceFlush(context.Context) error { return nil }
