"""OpenTelemetry tracing: trace settings (the trace extension), the provider and exporter
(``OTEL_*``), and the spans of one request. See docs/observability.md."""
