package provider_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// classification is everything the classifiers say about one error.
type classification struct {
	Class       provider.Class
	Transient   bool
	Permanent   bool
	NotFound    bool
	InProgress  bool
	Refused     bool
	Action      string
	RetryAfter  time.Duration
	IsCauseKept bool
}

var errCause = errors.New("boom")

func classify(err error) classification {
	return classification{
		Class:       provider.ClassOf(err),
		Transient:   provider.IsTransient(err),
		Permanent:   provider.IsPermanent(err),
		NotFound:    provider.IsNotFound(err),
		InProgress:  provider.IsInProgress(err),
		Refused:     provider.IsRefused(err),
		Action:      provider.ActionOf(err),
		RetryAfter:  provider.RetryAfterOf(err),
		IsCauseKept: errors.Is(err, errCause),
	}
}

func TestClassification(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		err    error
		want   classification
	}{
		{
			name:   "nil",
			reason: "no error has no class, and is none of the kinds",
			err:    nil,
			want:   classification{},
		},
		{
			name:   "plain error",
			reason: "an unclassified failure is assumed to pass by itself: retried, never latched as Failed",
			err:    errCause,
			want:   classification{Class: provider.ClassTransient, Transient: true, IsCauseKept: true},
		},
		{
			name:   "NewTransient",
			reason: "the constructor's class, with the cause still reachable with errors.Is",
			err:    provider.NewTransient(errCause),
			want:   classification{Class: provider.ClassTransient, Transient: true, IsCauseKept: true},
		},
		{
			name:   "NewPermanent",
			reason: "a Permanent error carries the administrator's action to the Proxy status",
			err:    provider.NewPermanent(errCause, "grant VM.Clone"),
			want:   classification{Class: provider.ClassPermanent, Permanent: true, Action: "grant VM.Clone", IsCauseKept: true},
		},
		{
			name:   "NewNotFound",
			reason: "NotFound from Get makes the operator replace the instance; it must not read as Transient",
			err:    provider.NewNotFound(errCause),
			want:   classification{Class: provider.ClassNotFound, NotFound: true, IsCauseKept: true},
		},
		{
			name:   "NewInProgress",
			reason: "InProgress carries the delay before the next call",
			err:    provider.NewInProgress("waiting for clone task", 7*time.Second),
			want:   classification{Class: provider.ClassInProgress, InProgress: true, RetryAfter: 7 * time.Second},
		},
		{
			name:   "NewRefused",
			reason: "a refused read is retried like any Transient error, and carries the advice for when it lasts",
			err:    fmt.Errorf("reading VM list: %w", provider.NewRefused(errCause, "check the token")),
			want:   classification{Class: provider.ClassTransient, Transient: true, Refused: true, Action: "check the token", IsCauseKept: true},
		},
		{
			name:   "Permanent around Refused",
			reason: "the operator latches a refused create by wrapping it in a Permanent error: the outer class wins and it is no longer a mere refusal",
			err:    provider.NewPermanent(provider.NewRefused(errCause, "grant VM.Clone"), "grant VM.Clone"),
			want:   classification{Class: provider.ClassPermanent, Permanent: true, Action: "grant VM.Clone", IsCauseKept: true},
		},
		{
			name:   "wrapped Permanent",
			reason: "a provider that adds context with %w must not lose the class, action or cause",
			err:    fmt.Errorf("cloning template: %w", provider.NewPermanent(errCause, "add the template")),
			want:   classification{Class: provider.ClassPermanent, Permanent: true, Action: "add the template", IsCauseKept: true},
		},
		{
			name:   "wrapped InProgress",
			reason: "the delay survives wrapping too",
			err:    fmt.Errorf("step: %w", provider.NewInProgress("resizing disk", time.Minute)),
			want:   classification{Class: provider.ClassInProgress, InProgress: true, RetryAfter: time.Minute},
		},
		{
			name:   "wrapped NotFound",
			reason: "wrapping a NotFound must not make the operator believe the instance may still exist",
			err:    fmt.Errorf("listing: %w", provider.NewNotFound(errCause)),
			want:   classification{Class: provider.ClassNotFound, NotFound: true, IsCauseKept: true},
		},
		{
			name:   "*Error without a class",
			reason: "a hand-built *Error that forgot its class is Transient, like any unclassified error",
			err:    &provider.Error{Err: errCause},
			want:   classification{Class: provider.ClassTransient, Transient: true, IsCauseKept: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, classify(tc.err)); diff != "" {
				t.Errorf("classification mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestAnnotate(t *testing.T) {
	annotated := provider.Annotate(provider.NewPermanent(errCause, "fix it"), "first", provider.OpGet, "n/1")
	tests := []struct {
		name    string
		reason  string
		err     error
		op      provider.Op
		id      provider.ID
		wantMsg string
		want    classification
		// wantSame says Annotate must return err itself.
		wantSame bool
		// wantFields are Provider, Op and ID of the resulting *Error.
		wantFields []string
	}{
		{
			name:       "bare Transient",
			reason:     "the decorator names entry, operation and instance; the cause is printed once",
			err:        provider.NewTransient(errCause),
			op:         provider.OpCreate,
			id:         "pve1/104",
			wantMsg:    `provider "lab": create "pve1/104": boom`,
			want:       classification{Class: provider.ClassTransient, Transient: true, IsCauseKept: true},
			wantFields: []string{"lab", "create", "pve1/104"},
		},
		{
			name:       "bare Permanent keeps its action",
			reason:     "the administrator's action must survive annotation to reach the Proxy status",
			err:        provider.NewPermanent(errCause, "grant VM.Clone"),
			op:         provider.OpCreate,
			id:         "pve1/104",
			wantMsg:    `provider "lab": create "pve1/104": boom`,
			want:       classification{Class: provider.ClassPermanent, Permanent: true, Action: "grant VM.Clone", IsCauseKept: true},
			wantFields: []string{"lab", "create", "pve1/104"},
		},
		{
			name:       "bare Refused keeps its reason",
			reason:     "losing the reason would make a refused read look like any outage, and a refused create would not latch",
			err:        provider.NewRefused(errCause, "check the token"),
			op:         provider.OpGet,
			id:         "pve1/104",
			wantMsg:    `provider "lab": get "pve1/104": boom`,
			want:       classification{Class: provider.ClassTransient, Transient: true, Refused: true, Action: "check the token", IsCauseKept: true},
			wantFields: []string{"lab", "get", "pve1/104"},
		},
		{
			name:       "bare InProgress keeps its delay",
			reason:     "losing RetryAfter would make the operator requeue at once, hammering the API",
			err:        provider.NewInProgress("waiting for clone task", 5*time.Second),
			op:         provider.OpCreate,
			wantMsg:    `provider "lab": create: waiting for clone task`,
			want:       classification{Class: provider.ClassInProgress, InProgress: true, RetryAfter: 5 * time.Second},
			wantFields: []string{"lab", "create", ""},
		},
		{
			name:       "plain error becomes Transient",
			reason:     "an unclassified error from a provider is classified on the way out",
			err:        errCause,
			op:         provider.OpDelete,
			id:         "pve1/104",
			wantMsg:    `provider "lab": delete "pve1/104": boom`,
			want:       classification{Class: provider.ClassTransient, Transient: true, IsCauseKept: true},
			wantFields: []string{"lab", "delete", "pve1/104"},
		},
		{
			name:       "provider's own op and ID win",
			reason:     "a provider that knows the instance (Create found it) names it better than the decorator can",
			err:        &provider.Error{Class: provider.ClassNotFound, Op: provider.OpGet, ID: "pve2/200", Err: errCause},
			op:         provider.OpCreate,
			wantMsg:    `provider "lab": get "pve2/200": boom`,
			want:       classification{Class: provider.ClassNotFound, NotFound: true, IsCauseKept: true},
			wantFields: []string{"lab", "get", "pve2/200"},
		},
		{
			name:       "wrapped *Error keeps its class",
			reason:     "context added with %w stays in the message, and the class, action and cause are kept",
			err:        fmt.Errorf("cloning: %w", provider.NewPermanent(errCause, "add the template")),
			op:         provider.OpCreate,
			id:         "pve1/104",
			wantMsg:    `provider "lab": create "pve1/104": cloning: boom`,
			want:       classification{Class: provider.ClassPermanent, Permanent: true, Action: "add the template", IsCauseKept: true},
			wantFields: []string{"lab", "create", "pve1/104"},
		},
		{
			name:       "already annotated",
			reason:     "annotating twice (nested decorators, retries) must not repeat the prefix",
			err:        annotated,
			op:         provider.OpCreate,
			id:         "other/1",
			wantMsg:    `provider "first": get "n/1": boom`,
			want:       classification{Class: provider.ClassPermanent, Permanent: true, Action: "fix it", IsCauseKept: true},
			wantSame:   true,
			wantFields: []string{"first", "get", "n/1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := provider.Annotate(tc.err, "lab", tc.op, tc.id)
			if got == nil {
				t.Fatalf("Annotate() = nil (%s)", tc.reason)
			}
			if diff := cmp.Diff(tc.wantMsg, got.Error()); diff != "" {
				t.Errorf("message mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.want, classify(got)); diff != "" {
				t.Errorf("classification mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			var pe *provider.Error
			if !errors.As(got, &pe) {
				t.Fatalf("Annotate() = %T, want a *provider.Error in the chain (%s)", got, tc.reason)
			}
			if diff := cmp.Diff(tc.wantFields, []string{pe.Provider, string(pe.Op), string(pe.ID)}); diff != "" {
				t.Errorf("Provider, Op, ID mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			if tc.wantSame && got != tc.err { //nolint:errorlint // identity is what is tested: the same error value comes back.
				t.Errorf("Annotate() returned a new error %v, want the argument itself (%s)", got, tc.reason)
			}
		})
	}
}

func TestAnnotateNil(t *testing.T) {
	// A nil error must stay nil: a typed nil *Error in an error interface
	// would make every successful call look failed.
	if err := provider.Annotate(nil, "lab", provider.OpGet, "x"); err != nil {
		t.Errorf("Annotate(nil) = %#v, want nil", err)
	}
}

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		err    *provider.Error
		want   string
	}{
		{
			name:   "everything",
			reason: "the documented form: provider, op with quoted ID, cause",
			err:    &provider.Error{Provider: "lab", Op: provider.OpCreate, ID: "pve1/104", Err: errCause},
			want:   `provider "lab": create "pve1/104": boom`,
		},
		{
			name:   "no ID",
			reason: "operations without an instance (list, check) print no empty quotes",
			err:    &provider.Error{Provider: "lab", Op: provider.OpListByTag, Err: errCause},
			want:   `provider "lab": list: boom`,
		},
		{
			name:   "bare",
			reason: "a provider's own error prints only its cause, so that annotation can add the prefix once",
			err:    &provider.Error{Class: provider.ClassTransient, Err: errCause},
			want:   "boom",
		},
		{
			name:   "no cause",
			reason: "a nil cause must not panic",
			err:    &provider.Error{Provider: "lab"},
			want:   `provider "lab": unknown error`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.err.Error()); diff != "" {
				t.Errorf("Error() mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
}
