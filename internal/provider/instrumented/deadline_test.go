package instrumented_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/instrumented"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

func TestEveryCallHasADeadline(t *testing.T) {
	// Long enough that a loaded machine's scheduler does not decide it, short
	// enough that the test does not wait long: the hung fake returns only
	// once its context is done, so the test's time is the deadline's.
	const deadline = 200 * time.Millisecond
	tests := []struct {
		name   string
		reason string
		op     provider.Op
		call   func(context.Context, provider.Provider) error
	}{
		{name: "create", reason: "a hung clone must not hold the worker for good", op: provider.OpCreate,
			call: func(ctx context.Context, p provider.Provider) error {
				_, err := p.Create(ctx, provider.Request{OwnerUID: "u", Name: "n"})
				return err
			}},
		{name: "get", reason: "every resync of every Proxy calls Get", op: provider.OpGet,
			call: func(ctx context.Context, p provider.Provider) error { _, err := p.Get(ctx, "fake/1"); return err }},
		{name: "delete", reason: "a hung delete must leave the finalizer retryable", op: provider.OpDelete,
			call: func(ctx context.Context, p provider.Provider) error { return p.Delete(ctx, "fake/1") }},
		{name: "list", reason: "garbage collection lists every entry", op: provider.OpListByTag,
			call: func(ctx context.Context, p provider.Provider) error { _, err := p.ListByTag(ctx); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeprovider.New(nil)
			f.SetHung(true)
			var asked []provider.Op
			w := instrumented.Wrap(f, instrumented.Options{Name: entryName, Type: entryType,
				Deadline: func(op provider.Op) time.Duration {
					asked = append(asked, op)
					return deadline
				}})
			// The caller's own deadline is far later: only the decorator's
			// can end the call in time (and the caller's ends it, as a
			// failure of this test, when the decorator sets none).
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := tc.call(ctx, w)
			if !provider.IsDeadline(err) || !provider.IsTransient(err) {
				t.Fatalf("error = %v (class %s, reason %s), want Transient with reason Deadline (%s)",
					err, provider.ClassOf(err), provider.ReasonOf(err), tc.reason)
			}
			for _, want := range []string{`provider "lab"`, string(tc.op), "deadline of 200ms"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q: the message must say which entry and operation hung", err, want)
				}
			}
			if diff := cmp.Diff([]provider.Op{tc.op}, asked); diff != "" {
				t.Errorf("deadline asked for (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCallersCancellationIsNotADeadline(t *testing.T) {
	f := fakeprovider.New(nil)
	f.SetHung(true)
	w := instrumented.Wrap(f, instrumented.Options{Name: entryName, Type: entryType,
		Deadline: func(provider.Op) time.Duration { return time.Hour }})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := w.Get(ctx, "fake/1")
	if provider.IsDeadline(err) || !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v: a call its caller cancelled (the operator stopping) must not be reported as a hung provider", err)
	}
}
