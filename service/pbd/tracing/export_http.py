"""OTLP over HTTP (protobuf), what Triton's ``--trace-config opentelemetry,url=...`` means.

The exporter process already holds each batch as ExportTraceServiceRequest bytes
(``OtlpRequestEncoder``), so this exporter only POSTs them (``Content-Type:
application/x-protobuf``) with the standard library: no ``requests`` stack in the daemon's
environment, and no second encoding as the SDK's HTTP exporter would do. It honours the
``OTEL_EXPORTER_OTLP[_TRACES]_HEADERS``, ``_TIMEOUT`` (seconds, as the Python SDK reads it),
``_COMPRESSION`` (gzip) and ``_CERTIFICATE`` variables, and retries what the OTLP
specification calls retryable (429, 502, 503, 504, connection errors) with exponential
backoff within the timeout. Failures go to the ``pbd.tracing`` logger.
"""

from __future__ import annotations

import gzip
import logging
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from pbd.tracing.export import OtlpRequestEncoder

log = logging.getLogger("pbd.tracing")
DEFAULT_ENDPOINT = "http://localhost:4318/v1/traces"
DEFAULT_TIMEOUT_S = 10.0
_RETRYABLE = frozenset({429, 502, 503, 504})
_FIRST_BACKOFF_S = 1.0


def _env(environ: Mapping[str, str], name: str) -> str:
    """``OTEL_EXPORTER_OTLP_TRACES_<name>``, else ``OTEL_EXPORTER_OTLP_<name>``."""
    return (
        environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}")
        or environ.get(f"OTEL_EXPORTER_OTLP_{name}")
        or ""
    ).strip()


def http_endpoint(url: str | None, environ: Mapping[str, str]) -> str:
    """The URL spans are posted to: the ``url`` option as given (Triton's), else the
    traces endpoint as given, else the general endpoint with ``/v1/traces`` appended."""
    if url:
        return url
    if traces := environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip():
        return traces
    if general := environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
        return general.rstrip("/") + "/v1/traces"
    return DEFAULT_ENDPOINT


def parse_headers(text: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` (values URL-encoded) as the OTLP exporter variables write headers."""
    headers: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            headers[key.strip()] = urllib.parse.unquote(value.strip())
    return headers


class OtlpHttpSpanExporter(SpanExporter):
    def __init__(self, resource: Resource, url: str | None, environ: Mapping[str, str]) -> None:
        self.endpoint = http_endpoint(url, environ)
        self.headers = {
            **parse_headers(_env(environ, "HEADERS")),
            "Content-Type": "application/x-protobuf",
        }
        self.gzip = _env(environ, "COMPRESSION").lower() == "gzip"
        if self.gzip:
            self.headers["Content-Encoding"] = "gzip"
        self.timeout = float(_env(environ, "TIMEOUT") or DEFAULT_TIMEOUT_S)
        certificate = _env(environ, "CERTIFICATE")
        self.context = ssl.create_default_context(cafile=certificate or None)
        self.encoder = OtlpRequestEncoder(resource)
        self._shutdown = False

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        body = self.encoder.encode(spans)
        if self.gzip:
            body = gzip.compress(body)
        deadline = time.monotonic() + self.timeout
        backoff = _FIRST_BACKOFF_S
        while True:
            problem, retryable = self._post(body, deadline)
            if problem is None:
                return SpanExportResult.SUCCESS
            if not retryable or time.monotonic() + backoff >= deadline or self._shutdown:
                log.warning(
                    "could not export %d span(s) to %s: %s",
                    self.encoder.count(spans),
                    self.endpoint,
                    problem,
                )
                return SpanExportResult.FAILURE
            time.sleep(backoff)
            backoff *= 2

    def _post(self, body: bytes, deadline: float) -> tuple[str | None, bool]:
        """(what went wrong or None, whether to try again)."""
        request = urllib.request.Request(
            self.endpoint, data=body, headers=self.headers, method="POST"
        )
        timeout = max(deadline - time.monotonic(), 0.1)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.context) as reply:
                reply.read()
            return None, False
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code} {exc.reason}", exc.code in _RETRYABLE
        except (urllib.error.URLError, OSError) as exc:
            return str(getattr(exc, "reason", exc)), True

    def shutdown(self) -> None:
        self._shutdown = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
