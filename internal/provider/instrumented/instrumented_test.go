package instrumented_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/egress-proxies/egress-proxies-operator/internal/metrics"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider/instrumented"
	"github.com/egress-proxies/egress-proxies-operator/internal/testing/fakeprovider"
)

const (
	entryName = "lab"
	entryType = "fake"
)

// harness is a fake provider wrapped with in-memory sinks.
type harness struct {
	fake    *fakeprovider.Provider
	wrapped provider.Provider
	metrics *metrics.Metrics
	spans   *tracetest.SpanRecorder
	logs    *bytes.Buffer
}

// newHarness wraps inner (the fake itself when nil) with fresh metrics, a
// span recorder and a funcr logger at verbosity 2 writing into a buffer.
func newHarness(t *testing.T, inner func(*fakeprovider.Provider) provider.Provider) *harness {
	t.Helper()
	h := &harness{
		fake:  fakeprovider.New(func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) }),
		spans: tracetest.NewSpanRecorder(),
		logs:  &bytes.Buffer{},
	}
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h.metrics = m
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.WithoutCancel(t.Context())) })
	log := funcr.New(func(prefix, args string) { h.logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{Verbosity: 2})
	var p provider.Provider = h.fake
	if inner != nil {
		p = inner(h.fake)
	}
	h.wrapped = instrumented.Wrap(p, instrumented.Options{
		Name: entryName, Type: entryType, Metrics: m, Log: log, Tracer: tp.Tracer("test"),
	})
	return h
}

func request(name string) provider.Request {
	return provider.Request{
		OwnerUID: "uid-" + name, Owner: provider.ObjectRef{Namespace: "ns", Name: name},
		Name: name, Zone: "z1", MachineType: "small", Image: "debian-12",
	}
}

// mustCreate creates an instance on the fake directly, bypassing the
// wrapper, so that the setup leaves no span, metric or log.
func mustCreate(ctx context.Context, t *testing.T, h *harness, name string) provider.ID {
	t.Helper()
	id, err := h.fake.Create(ctx, request(name))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// spanSummary is what the tests compare of a span.
type spanSummary struct {
	Name       string
	Kind       trace.SpanKind
	Attributes map[string]string
	StatusCode codes.Code
	Events     []string
}

func summarize(s sdktrace.ReadOnlySpan) spanSummary {
	out := spanSummary{Name: s.Name(), Kind: s.SpanKind(), Attributes: map[string]string{}, StatusCode: s.Status().Code}
	for _, kv := range s.Attributes() {
		out.Attributes[string(kv.Key)] = kv.Value.String()
	}
	for _, e := range s.Events() {
		out.Events = append(out.Events, e.Name)
	}
	return out
}

func TestSpans(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		reason string
		// run calls the wrapped provider once; setup may prepare the fake.
		run  func(t *testing.T, h *harness)
		want spanSummary
	}{
		{
			name:   "create ok",
			reason: "Create's span names the instance and its owner, never the user-data",
			run: func(t *testing.T, h *harness) {
				if _, err := h.wrapped.Create(ctx, request("p1")); err != nil {
					t.Fatal(err)
				}
			},
			want: spanSummary{Name: "provider.create", Kind: trace.SpanKindClient, Attributes: map[string]string{
				"egress.provider.name": entryName, "egress.provider.type": entryType, "egress.outcome": "ok",
				"egress.instance.name": "p1", "egress.owner.uid": "uid-p1",
			}},
		},
		{
			name:   "create in progress",
			reason: "InProgress is not a failure: outcome InProgress, but no error status and no exception event",
			run: func(t *testing.T, h *harness) {
				h.fake.FailNext(provider.OpCreate, 1, provider.NewInProgress("waiting for clone task", time.Second))
				if _, err := h.wrapped.Create(ctx, request("p1")); !provider.IsInProgress(err) {
					t.Fatalf("Create() error = %v, want InProgress", err)
				}
			},
			want: spanSummary{Name: "provider.create", Kind: trace.SpanKindClient, Attributes: map[string]string{
				"egress.provider.name": entryName, "egress.provider.type": entryType, "egress.outcome": "InProgress",
				"egress.instance.name": "p1", "egress.owner.uid": "uid-p1",
			}},
		},
		{
			name:   "get ok",
			reason: "Get's span names the instance ID",
			run: func(t *testing.T, h *harness) {
				id := mustCreate(ctx, t, h, "p1")
				if _, err := h.wrapped.Get(ctx, id); err != nil {
					t.Fatal(err)
				}
			},
			want: spanSummary{Name: "provider.get", Kind: trace.SpanKindClient, Attributes: map[string]string{
				"egress.provider.name": entryName, "egress.provider.type": entryType, "egress.outcome": "ok",
				"egress.instance.id": "fake/101",
			}},
		},
		{
			name:   "get not found",
			reason: "a failure sets the error status and records the error as an event, with its class as outcome",
			run: func(t *testing.T, h *harness) {
				if _, err := h.wrapped.Get(ctx, "fake/999"); !provider.IsNotFound(err) {
					t.Fatalf("Get() error = %v, want NotFound", err)
				}
			},
			want: spanSummary{Name: "provider.get", Kind: trace.SpanKindClient, Attributes: map[string]string{
				"egress.provider.name": entryName, "egress.provider.type": entryType, "egress.outcome": "NotFound",
				"egress.instance.id": "fake/999",
			}, StatusCode: codes.Error, Events: []string{"exception"}},
		},
		{
			name:   "delete ok",
			reason: "Delete's span names the instance ID",
			run: func(t *testing.T, h *harness) {
				id := mustCreate(ctx, t, h, "p1")
				if err := h.wrapped.Delete(ctx, id); err != nil {
					t.Fatal(err)
				}
			},
			want: spanSummary{Name: "provider.delete", Kind: trace.SpanKindClient, Attributes: map[string]string{
				"egress.provider.name": entryName, "egress.provider.type": entryType, "egress.outcome": "ok",
				"egress.instance.id": "fake/101",
			}},
		},
		{
			name:   "list ok",
			reason: "ListByTag's span counts the instances listed",
			run: func(t *testing.T, h *harness) {
				mustCreate(ctx, t, h, "p1")
				mustCreate(ctx, t, h, "p2")
				if _, err := h.wrapped.ListByTag(ctx); err != nil {
					t.Fatal(err)
				}
			},
			want: spanSummary{Name: "provider.list", Kind: trace.SpanKindClient, Attributes: map[string]string{
				"egress.provider.name": entryName, "egress.provider.type": entryType, "egress.outcome": "ok",
				"egress.instance.count": "2",
			}},
		},
		{
			name:   "check",
			reason: "Check's span counts the targets and the unhealthy ones",
			run: func(t *testing.T, h *harness) {
				h.fake.Verdicts = []provider.Verdict{
					{Target: "n1", Healthy: true, Reason: "Reachable"},
					{Target: "n2", Healthy: false, Reason: "Unreachable"},
				}
				c, ok := provider.AsChecker(h.wrapped)
				if !ok {
					t.Fatal("wrapped fake is not a provider.Checker")
				}
				if diff := cmp.Diff(h.fake.Verdicts, c.Check(ctx)); diff != "" {
					t.Errorf("Check() mismatch (-want +got):\n%s", diff)
				}
			},
			want: spanSummary{Name: "provider.check", Kind: trace.SpanKindClient, Attributes: map[string]string{
				"egress.provider.name": entryName, "egress.provider.type": entryType, "egress.outcome": "ok",
				"egress.instance.count": "2", "egress.targets.unhealthy": "1",
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			tc.run(t, h)
			ended := h.spans.Ended()
			got := make([]spanSummary, 0, len(ended))
			for _, s := range ended {
				got = append(got, summarize(s))
			}
			if diff := cmp.Diff([]spanSummary{tc.want}, got); diff != "" {
				t.Errorf("spans mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			if started := len(h.spans.Started()); started != len(ended) {
				t.Errorf("%d spans started, %d ended: a span was left open", started, len(ended))
			}
		})
	}
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		reason string
		// call makes one failing call through the wrapper.
		call    func(t *testing.T, h *harness) error
		wantMsg string
		// wantErrors are the labels (operation, class) of the error counter
		// series with their values; the duration histogram always gets one
		// series, labelled with wantOutcome.
		wantErrors  map[[2]string]float64
		wantOutcome [2]string
	}{
		{
			name:   "get not found",
			reason: "the error names provider, operation and ID, and is counted under its class",
			call: func(_ *testing.T, h *harness) error {
				_, err := h.wrapped.Get(ctx, "fake/999")
				return err
			},
			wantMsg:     `provider "lab": get "fake/999": no instance fake/999`,
			wantErrors:  map[[2]string]float64{{"get", "NotFound"}: 1},
			wantOutcome: [2]string{"get", "NotFound"},
		},
		{
			name:   "delete transient",
			reason: "an injected Transient error is annotated with the ID passed in",
			call: func(t *testing.T, h *harness) error {
				id := mustCreate(ctx, t, h, "p1")
				h.fake.FailNext(provider.OpDelete, 1, provider.NewTransient(errors.New("api busy")))
				return h.wrapped.Delete(ctx, id)
			},
			wantMsg:     `provider "lab": delete "fake/101": api busy`,
			wantErrors:  map[[2]string]float64{{"delete", "Transient"}: 1},
			wantOutcome: [2]string{"delete", "Transient"},
		},
		{
			name:   "create permanent",
			reason: "Create has no ID yet; the class label is Permanent",
			call: func(_ *testing.T, h *harness) error {
				h.fake.FailNext(provider.OpCreate, 1, provider.NewPermanent(errors.New("quota exceeded"), "raise the quota"))
				_, err := h.wrapped.Create(ctx, request("p1"))
				return err
			},
			wantMsg:     `provider "lab": create: quota exceeded`,
			wantErrors:  map[[2]string]float64{{"create", "Permanent"}: 1},
			wantOutcome: [2]string{"create", "Permanent"},
		},
		{
			name:   "list unclassified",
			reason: "a plain error from a provider is classified Transient in the error and in the metric",
			call: func(_ *testing.T, h *harness) error {
				h.fake.FailNext(provider.OpListByTag, 1, errors.New("boom"))
				_, err := h.wrapped.ListByTag(ctx)
				return err
			},
			wantMsg:     `provider "lab": list: boom`,
			wantErrors:  map[[2]string]float64{{"list", "Transient"}: 1},
			wantOutcome: [2]string{"list", "Transient"},
		},
		{
			name:   "create in progress",
			reason: "InProgress is a notice, not a failure: no error series at all, but the duration is observed under its outcome",
			call: func(_ *testing.T, h *harness) error {
				h.fake.FailNext(provider.OpCreate, 1, provider.NewInProgress("waiting for clone task", 5*time.Second))
				_, err := h.wrapped.Create(ctx, request("p1"))
				return err
			},
			wantMsg:     `provider "lab": create: waiting for clone task`,
			wantErrors:  map[[2]string]float64{},
			wantOutcome: [2]string{"create", "InProgress"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			err := tc.call(t, h)
			if err == nil {
				t.Fatalf("call succeeded, want an error (%s)", tc.reason)
			}
			if diff := cmp.Diff(tc.wantMsg, err.Error()); diff != "" {
				t.Errorf("error mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			// Count the series before reading them: WithLabelValues creates
			// the series it is asked for.
			if diff := cmp.Diff(len(tc.wantErrors), testutil.CollectAndCount(h.metrics.ProviderCallErrors)); diff != "" {
				t.Errorf("error counter series mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(1, testutil.CollectAndCount(h.metrics.ProviderCallDuration)); diff != "" {
				t.Errorf("duration histogram series mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			got := map[[2]string]float64{}
			for labels := range tc.wantErrors {
				got[labels] = testutil.ToFloat64(h.metrics.ProviderCallErrors.WithLabelValues(entryName, entryType, labels[0], labels[1]))
			}
			if diff := cmp.Diff(tc.wantErrors, got); diff != "" {
				t.Errorf("error counter mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			// The histogram series with the expected labels must be the one
			// that exists: asking for it must not add a second one.
			h.metrics.ProviderCallDuration.WithLabelValues(entryName, entryType, tc.wantOutcome[0], tc.wantOutcome[1])
			if diff := cmp.Diff(1, testutil.CollectAndCount(h.metrics.ProviderCallDuration)); diff != "" {
				t.Errorf("duration histogram has no series for %v (-want +got) (%s):\n%s", tc.wantOutcome, tc.reason, diff)
			}
		})
	}
}

func TestErrorKeepsClassAndDetails(t *testing.T) {
	tests := []struct {
		name           string
		reason         string
		inject         error
		wantClass      provider.Class
		wantAction     string
		wantRetryAfter time.Duration
	}{
		{
			name:       "permanent action",
			reason:     "the administrator action must reach the Proxy status through the wrapper",
			inject:     provider.NewPermanent(errors.New("missing template"), "add template 9000"),
			wantClass:  provider.ClassPermanent,
			wantAction: "add template 9000",
		},
		{
			name:           "in-progress delay",
			reason:         "the requeue delay must survive the wrapper, or the operator polls at once",
			inject:         provider.NewInProgress("waiting", 7*time.Second),
			wantClass:      provider.ClassInProgress,
			wantRetryAfter: 7 * time.Second,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.fake.FailNext(provider.OpCreate, 1, tc.inject)
			_, err := h.wrapped.Create(t.Context(), request("p1"))
			type details struct {
				Class      provider.Class
				Action     string
				RetryAfter time.Duration
			}
			want := details{tc.wantClass, tc.wantAction, tc.wantRetryAfter}
			got := details{provider.ClassOf(err), provider.ActionOf(err), provider.RetryAfterOf(err)}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("error details mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
		})
	}
}

// providerOnly hides the fake's Check method: embedding the interface
// exposes only the Provider methods.
type providerOnly struct {
	provider.Provider
}

func TestCheckerOnlyWhenWrappedIsChecker(t *testing.T) {
	tests := []struct {
		name    string
		reason  string
		inner   func(*fakeprovider.Provider) provider.Provider
		checker bool
	}{
		{
			name:    "checker",
			reason:  "a provider that checks its health keeps doing so through the wrapper",
			inner:   nil,
			checker: true,
		},
		{
			name:    "provider only",
			reason:  "a wrapper that always had Check would report health for a provider that cannot check",
			inner:   func(f *fakeprovider.Provider) provider.Provider { return providerOnly{f} },
			checker: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.inner)
			_, got := provider.AsChecker(h.wrapped)
			if diff := cmp.Diff(tc.checker, got); diff != "" {
				t.Errorf("provider.AsChecker mismatch (-want +got) (%s):\n%s", tc.reason, diff)
			}
			// The wrapper must still forward the Provider methods.
			if _, err := h.wrapped.ListByTag(context.Background()); err != nil {
				t.Errorf("ListByTag() error = %v", err)
			}
			if diff := cmp.Diff(1, h.fake.CallCount(provider.OpListByTag)); diff != "" {
				t.Errorf("ListByTag calls on the wrapped provider mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// spanText is everything a span exports, as text.
func spanText(s sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\n", s.Name(), s.Status().Code, s.Status().Description)
	for _, kv := range s.Attributes() {
		fmt.Fprintf(&b, "attr %s=%s\n", kv.Key, kv.Value.String())
	}
	for _, e := range s.Events() {
		fmt.Fprintf(&b, "event %s\n", e.Name)
		for _, kv := range e.Attributes {
			fmt.Fprintf(&b, "  attr %s=%s\n", kv.Key, kv.Value.String())
		}
	}
	for _, l := range s.Links() {
		for _, kv := range l.Attributes {
			fmt.Fprintf(&b, "link attr %s=%s\n", kv.Key, kv.Value.String())
		}
	}
	return b.String()
}

func TestUserDataNeverLeaks(t *testing.T) {
	const sentinel = "S3NTINEL-c41f9e"
	userData := "#cloud-config\nwrite_files:\n- content: |\n    BasicAuth crawler " + sentinel + "\n"
	req := request("p1")
	req.UserData = provider.NewSensitive([]byte(userData))
	req.Proxy = provider.ProxySettings{
		Port:                3128,
		Credentials:         &provider.SecretRef{Namespace: "ns", Name: "p1-creds", UsernameKey: "username", PasswordKey: "password"},
		AllowedSourceRanges: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8::/32")},
	}
	tests := []struct {
		name    string
		reason  string
		inject  error
		wantErr bool
	}{
		{
			name:   "success",
			reason: "the V(2) request line and the span attributes of a successful create hold no user-data",
		},
		{
			name:    "permanent failure",
			reason:  "the failure path adds the error to the log, the span status and an exception event",
			inject:  provider.NewPermanent(errors.New("quota exceeded"), "raise the quota"),
			wantErr: true,
		},
		{
			name:    "transient failure",
			reason:  "an unclassified error takes the same path with another class",
			inject:  errors.New("connection reset"),
			wantErr: true,
		},
		{
			name:    "in progress",
			reason:  "the in-progress path logs the step text",
			inject:  provider.NewInProgress("waiting for clone task", time.Second),
			wantErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			if tc.inject != nil {
				h.fake.FailNext(provider.OpCreate, 1, tc.inject)
			}
			_, err := h.wrapped.Create(context.Background(), req)
			if diff := cmp.Diff(tc.wantErr, err != nil); diff != "" {
				t.Fatalf("Create() error = %v: mismatch (-want +got) (%s):\n%s", err, tc.reason, diff)
			}
			if err != nil && strings.Contains(err.Error(), sentinel) {
				t.Errorf("error text holds the user-data (%s): %v", tc.reason, err)
			}

			logs := h.logs.String()
			// The leak checks below only mean something if the lines that
			// could leak were written.
			for _, line := range []string{`"msg"="create requested"`, `"userDataBytes"=` + strconv.Itoa(len(userData)), `"port"=3128`} {
				if !strings.Contains(logs, line) {
					t.Errorf("logs lack %s, so the leak check proves nothing:\n%s", line, logs)
				}
			}
			if strings.Contains(logs, sentinel) {
				t.Errorf("logs hold the user-data (%s):\n%s", tc.reason, logs)
			}

			ended := h.spans.Ended()
			if diff := cmp.Diff(1, len(ended)); diff != "" {
				t.Fatalf("spans mismatch (-want +got):\n%s", diff)
			}
			if text := spanText(ended[0]); strings.Contains(text, sentinel) {
				t.Errorf("span holds the user-data (%s):\n%s", tc.reason, text)
			}
		})
	}
}

func TestLogLines(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		reason string
		call   func(h *harness)
		// want are fragments of the log output; notWant must not appear.
		want    []string
		notWant []string
	}{
		{
			name:   "success",
			reason: "each call logs its outcome at V(1) with the provider and operation",
			call: func(h *harness) {
				_, _ = h.wrapped.ListByTag(ctx)
			},
			want: []string{`"msg"="provider call succeeded"`, `"provider"="lab"`, `"op"="list"`},
		},
		{
			name:   "failure",
			reason: "a failure logs the class and the annotated error, with the instance ID",
			call: func(h *harness) {
				_, _ = h.wrapped.Get(ctx, "fake/999")
			},
			want: []string{
				`"msg"="provider call failed"`, `"instanceID"="fake/999"`, `"class"="NotFound"`,
				`"error"="provider \"lab\": get \"fake/999\": no instance fake/999"`,
			},
		},
		{
			name:   "in progress",
			reason: "an in-progress call is logged as such, with the delay, and not as a failure",
			call: func(h *harness) {
				h.fake.FailNext(provider.OpDelete, 1, provider.NewInProgress("stopping", 3*time.Second))
				_ = h.wrapped.Delete(ctx, "fake/1")
			},
			want:    []string{`"msg"="provider call in progress"`, `"step"="provider \"lab\": delete \"fake/1\": stopping"`, `"retryAfter"="3s"`},
			notWant: []string{"provider call failed"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			tc.call(h)
			logs := h.logs.String()
			for _, frag := range tc.want {
				if !strings.Contains(logs, frag) {
					t.Errorf("logs lack %s (%s):\n%s", frag, tc.reason, logs)
				}
			}
			for _, frag := range tc.notWant {
				if strings.Contains(logs, frag) {
					t.Errorf("logs hold %s (%s):\n%s", frag, tc.reason, logs)
				}
			}
		})
	}
}

// sweeper adds provider.Sweeper to a provider, counting sweeps.
type sweeper struct {
	provider.Provider
	sweeps *int
}

func (s sweeper) Sweep(context.Context) (int, error) { *s.sweeps++; return 3, nil }

// checkingSweeper is the fake (a Checker) with Sweep added.
type checkingSweeper struct {
	*fakeprovider.Provider
	sweeper
}

func TestSweeperOnlyWhenWrappedIsSweeper(t *testing.T) {
	var sweeps int
	tests := []struct {
		name             string
		reason           string
		inner            func(*fakeprovider.Provider) provider.Provider
		checker, sweeper bool
	}{
		{name: "checker, not sweeper", reason: "garbage collection must not sweep a provider that leaves nothing behind",
			inner: nil, checker: true},
		{name: "sweeper and checker", reason: "a provider that leaves seeds behind keeps being swept through the wrapper",
			inner: func(f *fakeprovider.Provider) provider.Provider {
				return checkingSweeper{f, sweeper{sweeps: &sweeps}}
			}, checker: true, sweeper: true},
		{name: "sweeper only", reason: "sweeping does not make a provider check its health",
			inner: func(f *fakeprovider.Provider) provider.Provider { return sweeper{providerOnly{f}, &sweeps} }, sweeper: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.inner)
			_, checks := provider.AsChecker(h.wrapped)
			s, sweeps := provider.AsSweeper(h.wrapped)
			if diff := cmp.Diff([]bool{tc.checker, tc.sweeper}, []bool{checks, sweeps}); diff != "" {
				t.Fatalf("[AsChecker AsSweeper] (-want +got) (%s):\n%s", tc.reason, diff)
			}
			if !sweeps {
				// The one wrapper type has Sweep anyway: called by mistake,
				// it must not reach the provider nor claim a removal.
				n, err := h.wrapped.(provider.Sweeper).Sweep(context.Background()) //nolint:errcheck // the one wrapper type always has Sweep; the point is calling it by mistake.
				if n != 0 || !provider.IsPermanent(err) {
					t.Errorf("Sweep of a provider that does not sweep = %d, %v; want 0 and a Permanent error", n, err)
				}
				return
			}
			if n, err := s.Sweep(context.Background()); n != 3 || err != nil {
				t.Errorf("Sweep through the wrapper = %d, %v; want the wrapped provider's 3, nil", n, err)
			}
		})
	}
	if sweeps != 2 {
		t.Errorf("wrapped Sweep called %d times, want 2", sweeps)
	}
}
