package instrumented

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Span attribute keys.
const (
	attrProvider     = attribute.Key("egress.provider.name")
	attrProviderType = attribute.Key("egress.provider.type")
	attrInstanceID   = attribute.Key("egress.instance.id")
	attrInstanceName = attribute.Key("egress.instance.name")
	attrOwnerUID     = attribute.Key("egress.owner.uid")
	attrOutcome      = attribute.Key("egress.outcome")
	attrCount        = attribute.Key("egress.instance.count")
)

// Options are the observability sinks.
type Options struct {
	// Name and Type identify the entry in every signal.
	Name string
	Type string
	// Metrics records call durations and errors; nil records nothing.
	Metrics *metrics.Metrics
	// Log receives one line per call: V(1) for outcomes, V(2) for request
	// detail.
	Log logr.Logger
	// Tracer starts the spans; nil uses a no-op tracer.
	Tracer trace.Tracer
	// Deadline returns how long one call of op may take (the entry's
	// config.Deadlines); nil or zero sets none. A call past it returns a
	// provider.NewDeadline error.
	Deadline func(op provider.Op) time.Duration
}

// Wrap returns p with observability added. The result carries every
// optional interface's method and implements provider.Optional: callers ask
// provider.AsChecker and provider.AsSweeper, which answer for p.
func Wrap(p provider.Provider, o Options) provider.Provider {
	if o.Tracer == nil {
		o.Tracer = noop.NewTracerProvider().Tracer("")
	}
	return &wrapped{next: p, o: o, log: o.Log.WithValues("provider", o.Name)}
}

// The one wrapper type implements every optional interface; Supports tells
// the callers which ones the wrapped provider has.
var (
	_ provider.Optional = (*wrapped)(nil)
	_ provider.Checker  = (*wrapped)(nil)
	_ provider.Sweeper  = (*wrapped)(nil)

	_ provider.UnverifiedLister = (*wrapped)(nil)
)

type wrapped struct {
	next provider.Provider
	o    Options
	log  logr.Logger
}

// call runs one provider operation with its span, metrics and log line.
func (w *wrapped) call(ctx context.Context, op provider.Op, id provider.ID, attrs []attribute.KeyValue, fn func(context.Context) error) error {
	ctx, span := w.o.Tracer.Start(ctx, "provider."+string(op), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append([]attribute.KeyValue{attrProvider.String(w.o.Name), attrProviderType.String(w.o.Type)}, attrs...)...))
	defer span.End()
	start := time.Now()
	err := provider.Annotate(w.bounded(ctx, op, fn), w.o.Name, op, id)
	elapsed := time.Since(start)

	outcome := metrics.OutcomeOK
	if err != nil {
		outcome = string(provider.ClassOf(err))
	}
	span.SetAttributes(attrOutcome.String(outcome))
	if w.o.Metrics != nil {
		w.o.Metrics.ProviderCallDuration.WithLabelValues(w.o.Name, w.o.Type, string(op), outcome).Observe(elapsed.Seconds())
	}
	log := w.logger(ctx).WithValues("op", string(op), "duration", elapsed.Round(time.Millisecond).String())
	if id != "" {
		log = log.WithValues("instanceID", string(id))
	}
	switch {
	case err == nil:
		log.V(1).Info("provider call succeeded")
	case provider.IsInProgress(err):
		// Not a failure: the provider asks to be called again.
		log.V(1).Info("provider call in progress", "step", err.Error(), "retryAfter", provider.RetryAfterOf(err).String())
	default:
		if w.o.Metrics != nil {
			w.o.Metrics.ProviderCallErrors.WithLabelValues(w.o.Name, w.o.Type, string(op), outcome).Inc()
		}
		span.RecordError(err)
		span.SetStatus(codes.Error, outcome)
		log.V(1).Info("provider call failed", "class", outcome, "error", err.Error())
	}
	return err
}

// bounded runs fn under the operation's deadline. A call that fails once its
// own deadline passed (and not its caller's) fails with a deadline error,
// whatever the provider made of the cancelled context.
func (w *wrapped) bounded(ctx context.Context, op provider.Op, fn func(context.Context) error) error {
	var d time.Duration
	if w.o.Deadline != nil {
		d = w.o.Deadline(op)
	}
	if d <= 0 {
		return fn(ctx)
	}
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := fn(cctx)
	if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return provider.NewDeadline(d)
	}
	return err
}

// logger returns the caller's logger when the context carries one (the
// reconciler's, which names the Proxy and the reconcile), else the default.
func (w *wrapped) logger(ctx context.Context) logr.Logger {
	if l, err := logr.FromContext(ctx); err == nil {
		return l.WithValues("provider", w.o.Name)
	}
	return w.log
}

func (w *wrapped) Create(ctx context.Context, req provider.Request) (provider.ID, error) {
	// Request detail at V(2): names only. UserData is a provider.Sensitive
	// and would print as [redacted], but its length is all that is useful.
	w.logger(ctx).V(2).Info("create requested", "name", req.Name, "owner", req.Owner.String(), "ownerUID", req.OwnerUID,
		"zone", req.Zone, "machineType", req.MachineType, "image", req.Image, "userDataBytes", req.UserData.Len(), "port", req.Proxy.Port)
	var id provider.ID
	err := w.call(ctx, provider.OpCreate, "", []attribute.KeyValue{attrInstanceName.String(req.Name), attrOwnerUID.String(req.OwnerUID)},
		func(ctx context.Context) error {
			var err error
			id, err = w.next.Create(ctx, req)
			return err
		})
	return id, err
}

func (w *wrapped) Get(ctx context.Context, id provider.ID) (provider.Instance, error) {
	var inst provider.Instance
	err := w.call(ctx, provider.OpGet, id, []attribute.KeyValue{attrInstanceID.String(string(id))},
		func(ctx context.Context) error {
			var err error
			inst, err = w.next.Get(ctx, id)
			return err
		})
	return inst, err
}

func (w *wrapped) Delete(ctx context.Context, id provider.ID) error {
	return w.call(ctx, provider.OpDelete, id, []attribute.KeyValue{attrInstanceID.String(string(id))},
		func(ctx context.Context) error { return w.next.Delete(ctx, id) })
}

func (w *wrapped) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	var out []provider.Instance
	err := w.call(ctx, provider.OpListByTag, "", nil, func(ctx context.Context) error {
		var err error
		out, err = w.next.ListByTag(ctx)
		trace.SpanFromContext(ctx).SetAttributes(attrCount.Int(len(out)))
		return err
	})
	return out, err
}

// Supports implements provider.Optional: it answers for the wrapped
// provider, through any decorator of its own.
func (w *wrapped) Supports(op provider.Op) bool {
	switch op {
	case provider.OpCheck:
		_, ok := provider.AsChecker(w.next)
		return ok
	case provider.OpSweep:
		_, ok := provider.AsSweeper(w.next)
		return ok
	case provider.OpUnverified:
		_, ok := provider.AsUnverifiedLister(w.next)
		return ok
	case provider.OpCreate, provider.OpGet, provider.OpDelete, provider.OpListByTag:
		// The contract's own operations: not optional.
		return false
	}
	return false
}

// Check implements provider.Checker. For a provider without a Checker it
// returns no verdicts and makes no call (provider.AsChecker says false for
// it, so the operator does not ask).
func (w *wrapped) Check(ctx context.Context) []provider.Verdict {
	checker, ok := provider.AsChecker(w.next)
	if !ok {
		return nil
	}
	var out []provider.Verdict
	_ = w.call(ctx, provider.OpCheck, "", nil, func(ctx context.Context) error {
		out = checker.Check(ctx)
		unhealthy := 0
		for _, v := range out {
			if !v.Healthy {
				unhealthy++
			}
		}
		trace.SpanFromContext(ctx).SetAttributes(attrCount.Int(len(out)), attribute.Int("egress.targets.unhealthy", unhealthy))
		return nil
	})
	return out
}

// errNoSweep answers a Sweep of a provider that has nothing to sweep.
var errNoSweep = errors.New("this provider type leaves nothing to sweep")

// Sweep implements provider.Sweeper. For a provider without a Sweeper it
// removes nothing and says so with a Permanent error (provider.AsSweeper
// says false for it, so the operator does not ask).
func (w *wrapped) Sweep(ctx context.Context) (int, error) {
	sweeper, ok := provider.AsSweeper(w.next)
	if !ok {
		return 0, provider.Annotate(provider.NewPermanent(errNoSweep, "call Sweep only where provider.AsSweeper says true"), w.o.Name, provider.OpSweep, "")
	}
	var n int
	err := w.call(ctx, provider.OpSweep, "", nil, func(ctx context.Context) error {
		var err error
		n, err = sweeper.Sweep(ctx)
		trace.SpanFromContext(ctx).SetAttributes(attrCount.Int(n))
		return err
	})
	return n, err
}

// Unverified implements provider.UnverifiedLister: no call, so no span or
// metric; nil for a provider that does not report them.
func (w *wrapped) Unverified() []provider.Instance {
	l, ok := provider.AsUnverifiedLister(w.next)
	if !ok {
		return nil
	}
	return l.Unverified()
}
