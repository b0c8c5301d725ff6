package sentinel_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/egress-proxies/egress-proxies-operator/internal/testing/sentinel"
)

// pass is a sentinel value, not a credential.
const pass = "s3cret-Pa55word+/x"

// TestFindsEverySpelling: each way an encoder writes a value is found, and
// the excerpt names the secret without its value.
func TestFindsEverySpelling(t *testing.T) {
	for _, tc := range []struct {
		name, text, spelling string
	}{
		{"plain", "password=" + pass, "plain"},
		{"json inside a quoted string", `{"msg":"` + strings.ReplaceAll(pass, `"`, `\"`) + `"}`, "plain"},
		{"hex as %x prints bytes", fmt.Sprintf("data=%x", []byte(pass)), "hex"},
		{"base64 as encoding/json writes []byte", "data=" + base64.StdEncoding.EncodeToString([]byte(pass)), "base64"},
		{"decimal bytes as %v prints []byte", fmt.Sprintf("data=%v", []byte(pass)), "bytes"},
		{"upper-case hex", "data=" + strings.ToUpper(hex.EncodeToString([]byte(pass))), "HEX"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := sentinel.NewWatch()
			if err := w.AddSecret("the password", pass); err != nil {
				t.Fatal(err)
			}
			w.Add("logs", tc.text)
			got := w.Findings()
			if len(got) == 0 {
				t.Fatalf("%q: not found", tc.text)
			}
			spellings := map[string]bool{}
			for _, f := range got {
				spellings[f.Spelling] = true
				if strings.Contains(f.Excerpt, pass) || !strings.Contains(f.Excerpt, "<the password>") {
					t.Errorf("excerpt %q shows the value or lacks the label", f.Excerpt)
				}
			}
			if !spellings[tc.spelling] {
				t.Errorf("spellings found %v, want %s", spellings, tc.spelling)
			}
		})
	}
}

// TestLateSecretFoundInHistory: a secret learnt after the text was captured
// is found in it, and each finding is reported once.
func TestLateSecretFoundInHistory(t *testing.T) {
	w := sentinel.NewWatch()
	w.Add("events", "created instance; password "+pass)
	if len(w.Findings()) != 0 {
		t.Fatal("found a secret that was not added yet")
	}
	if err := w.AddSecret("late", pass); err != nil {
		t.Fatal(err)
	}
	w.Add("events", "again "+pass)
	want := []string{"events|late|plain"}
	var got []string
	for _, f := range w.Findings() {
		got = append(got, f.Source+"|"+f.Label+"|"+f.Spelling)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	if c := w.Captured()["events"]; c == 0 {
		t.Error("nothing captured")
	}
}

// TestShortSecretRefused: a value short enough to occur by chance is
// refused rather than looked for.
func TestShortSecretRefused(t *testing.T) {
	if err := sentinel.NewWatch().AddSecret("pin", "1234"); err == nil {
		t.Error("a 4-byte secret was accepted")
	}
}

// TestLoggerAndSpans: the logger (at its verbosity) and the span processor
// feed the watch, including span attributes and event attributes.
func TestLoggerAndSpans(t *testing.T) {
	w := sentinel.NewWatch()
	if err := w.AddSecret("pw", pass); err != nil {
		t.Fatal(err)
	}
	log := w.Logger(1)
	log.V(1).Info("visible", "value", []byte(pass))
	log.V(2).Info("too verbose", "other", pass)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(w.SpanProcessor()))
	_, sp := tp.Tracer("t").Start(context.Background(), "op")
	sp.AddEvent("ev", traceAttr("k", pass))
	sp.End()
	sources := map[string]bool{}
	for _, f := range w.Findings() {
		sources[f.Source] = true
	}
	if diff := cmp.Diff(map[string]bool{"logs": true, "spans": true}, sources); diff != "" {
		t.Errorf("sources with findings (-want +got):\n%s", diff)
	}
	if w.Contains("logs", "too verbose") {
		t.Error("a line above the logger's verbosity was captured")
	}
}

func traceAttr(k, v string) trace.EventOption {
	return trace.WithAttributes(attribute.String(k, v))
}
