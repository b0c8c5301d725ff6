// Package tracing sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables. Tracing is off unless an exporter is asked for, so a
// default deployment sends nothing anywhere.
package tracing
