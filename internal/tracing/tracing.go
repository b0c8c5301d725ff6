package tracing

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ServiceName is the default service.name; OTEL_SERVICE_NAME overrides it.
const ServiceName = "egress-proxies-operator"

// Enabled reports whether the environment asks for traces: OTEL_TRACES_EXPORTER
// is otlp, or an OTLP endpoint is set, and the SDK is not disabled.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(getenv("OTEL_TRACES_EXPORTER")) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs a tracer provider as the global one and returns a tracer and
// a shutdown function that flushes pending spans. When tracing is not enabled
// it returns a no-op tracer and a no-op shutdown. Only the OTLP over HTTP
// protocol is supported (OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf, the
// default); the exporter reads its endpoint, headers and TLS settings from the
// standard variables itself.
func Setup(ctx context.Context, getenv func(string) string, version string) (trace.Tracer, func(context.Context) error, error) {
	if !Enabled(getenv) {
		return noop.NewTracerProvider().Tracer(ServiceName), func(context.Context) error { return nil }, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(v); p != "" && p != "http/protobuf" {
			return nil, nil, fmt.Errorf("%s=%s is not supported: use http/protobuf", v, p)
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the OTLP trace exporter: %w", err)
	}
	// Attributes from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES come
	// last, so that they win over the defaults.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(ServiceName), semconv.ServiceVersion(version)),
		resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("building the trace resource: %w", err)
	}
	// The SDK reads OTEL_TRACES_SAMPLER and OTEL_BSP_* itself.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Tracer(ServiceName), tp.Shutdown, nil
}
