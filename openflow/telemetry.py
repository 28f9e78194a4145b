"""Traces and metrics through OpenTelemetry, and the worker's Prometheus endpoint.

Tracing turns on when a standard OTLP variable is set (`OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; the exporter reads the rest of `OTEL_EXPORTER_OTLP_*` and
`OTEL_SERVICE_NAME` itself). The client then carries Temporal's `OpenTelemetryPlugin`, so a run's
spans join the caller's trace, and workers built on that client trace workflows and activities.
The tracer provider is the contrib's replay-safe one: spans made in workflow code get the same ids
on a replay and are ended only when not replaying, so a restarted worker neither repeats nor
drops them.

Prompt and completion text stays out of spans unless `OPENFLOW_TRACE_CONTENT=1`; keys never
enter them (spans carry only the attributes set here).

Metrics go through the Temporal runtime's meter (`activity.metric_meter()`,
`workflow.metric_meter()`, both replay-safe): Prometheus text on `--metrics-port`, or OTLP when
`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` (else `OTEL_EXPORTER_OTLP_ENDPOINT`) is set. Telemetry
never blocks or fails a run: exports happen off the run's path and a failing endpoint is
logged once.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from openflow.settings import runtime_settings

logger = logging.getLogger(__name__)

TRACES_ENV = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
METRICS_ENV = ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
CONTENT_ENV = "OPENFLOW_TRACE_CONTENT"
TRACER_NAME = "openflow"

_lock = threading.Lock()
_enabled = False
_processors: set[int] = set()

__all__ = [
    "CONTENT_ENV",
    "content_enabled",
    "client_plugins",
    "count",
    "enabled",
    "install",
    "joined_trace",
    "runtime",
    "span",
    "tracing_configured",
]


def tracing_configured(env: Mapping[str, str] | None = None) -> bool:
    """Whether a standard OTLP variable asks for traces."""
    env = os.environ if env is None else env
    return any(env.get(name, "").strip() for name in TRACES_ENV)


def content_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether prompt and completion text may go into spans."""
    return runtime_settings(env, only=("trace_content",)).trace_content


def enabled() -> bool:
    """Whether this process traces (a provider is installed)."""
    return _enabled


def install(processor: Any | None = None) -> bool:
    """Install the replay-safe tracer provider once per process; True when tracing is on.

    `processor` (a span processor) replaces the OTLP exporter: what tests and embedders use.
    """
    global _enabled
    with _lock:
        if _enabled:
            if processor is not None and id(processor) not in _processors:
                _processors.add(id(processor))
                _provider().add_span_processor(processor)
            return True
        if processor is None and not tracing_configured():
            return False
        try:
            from opentelemetry import trace
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from temporalio.contrib.opentelemetry import create_tracer_provider
        except ImportError:
            logger.warning("tracing is off: install opentelemetry-sdk to export traces")
            return False
        service = os.environ.get("OTEL_SERVICE_NAME") or "openflow"
        provider = create_tracer_provider(resource=Resource.create({"service.name": service}))
        if processor is None:
            processor = BatchSpanProcessor(_otlp_exporter())
        provider.add_span_processor(processor)
        _processors.add(id(processor))
        trace.set_tracer_provider(provider)
        _enabled = True
        return True


def _provider() -> Any:
    from opentelemetry import trace

    return trace.get_tracer_provider()


def _otlp_exporter() -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # The exporter logs every failed batch; ours says it once (see _LogOnce).
    logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter").setLevel(
        logging.CRITICAL
    )
    return _LogOnce(OTLPSpanExporter())


class _LogOnce:
    """A span exporter that reports an unreachable endpoint once instead of per batch."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._warned = False

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self._inner.export(spans)
        except Exception as exc:  # an exporter must never take the worker down
            result = SpanExportResult.FAILURE
            reason = type(exc).__name__
        else:
            reason = "the endpoint refused or did not answer"
        if result != SpanExportResult.SUCCESS and not self._warned:
            self._warned = True
            endpoint = next((os.environ[n] for n in TRACES_ENV if os.environ.get(n)), "")
            logger.warning(
                "traces could not be exported to %r (%s); runs go on, spans are dropped",
                endpoint,
                reason,
            )
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self._inner.force_flush(timeout_millis))


def client_plugins() -> list[Any]:
    """The plugins every Temporal client carries: tracing when it is on, else none."""
    if not install():
        return []
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin

    # Without the contrib's own Temporal spans: its workflow span is ended again when a worker
    # evicts a run it still holds, so a restart would export it twice. Ours (the run, its nodes
    # and pauses, `openflow.workflows.tracing`) are ended once, by events.
    return [OpenTelemetryPlugin(add_temporal_spans=False)]


@contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None, kind: str = "internal") -> Any:
    """A span under the current one when tracing is on; else a stand-in that records nothing."""
    if not _enabled:
        yield _NoSpan()
        return
    from opentelemetry import trace

    tracer = trace.get_tracer(TRACER_NAME)
    span_kind = trace.SpanKind.CLIENT if kind == "client" else trace.SpanKind.INTERNAL
    with tracer.start_as_current_span(
        name, kind=span_kind, attributes=_clean(attributes or {})
    ) as current:
        yield _Span(current)


class _NoSpan:
    def set(self, attributes: Mapping[str, Any]) -> None:
        """Nothing records."""

    def error(self, message: str) -> None:
        """Nothing records."""


class _Span:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def set(self, attributes: Mapping[str, Any]) -> None:
        self._inner.set_attributes(_clean(attributes))

    def error(self, message: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._inner.set_status(Status(StatusCode.ERROR, message[:200]))


@contextmanager
def joined_trace(headers: Mapping[str, str]) -> Iterator[None]:
    """Within this, what starts joins the trace a W3C `traceparent` header names (if tracing is
    on and the header is there)."""
    if not _enabled or "traceparent" not in headers:
        yield
        return
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {k: headers[k] for k in ("traceparent", "tracestate") if k in headers}
    token = context.attach(TraceContextTextMapPropagator().extract(carrier))
    try:
        yield
    finally:
        context.detach(token)


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """OpenTelemetry takes str, bool, int, float and sequences of them; None means leave out."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            out[key] = value
        elif isinstance(value, (list, tuple)):
            out[key] = [str(v) for v in value]
        else:
            out[key] = str(value)
    return out


# --- metrics --------------------------------------------------------------------------------

_INSTRUMENTS: dict[tuple[int, str], Any] = {}


def count(meter: Any, name: str, value: float, attributes: Mapping[str, str] | None = None) -> None:
    """Add to one of our counters (or record into one of our histograms) on a Temporal meter.

    A failure here is only logged: metrics never fail a run.
    """
    if value <= 0:
        return
    try:
        key = (id(meter), name)
        instrument = _INSTRUMENTS.get(key)
        if instrument is None:
            kind, description, unit = METRICS[name]
            if kind == "histogram_float":
                instrument = meter.create_histogram_float(name, description, unit)
            elif kind == "histogram":
                instrument = meter.create_histogram(name, description, unit)
            else:
                instrument = meter.create_counter(name, description, unit)
            if len(_INSTRUMENTS) > 1024:
                _INSTRUMENTS.clear()
            _INSTRUMENTS[key] = instrument
        labels = dict(attributes or {})
        if hasattr(instrument, "add"):
            instrument.add(int(value), labels)
        else:
            instrument.record(
                value if METRICS[name][0] == "histogram_float" else int(value), labels
            )
    except Exception:  # metrics never fail a run
        logger.debug("metric %s not recorded", name, exc_info=True)


#: Our metrics: name -> (instrument, description, unit). A histogram's `_sum` is the total.
METRICS: dict[str, tuple[str, str, str]] = {
    "openflow_model_turns": ("counter", "model calls, by provider, model and outcome", ""),
    "openflow_tokens": ("counter", "tokens, by kind (input, output, cached, cache_write)", ""),
    "openflow_estimated_cost_usd": ("histogram_float", "estimated cost per model call", "USD"),
    "openflow_tool_calls": ("counter", "tool calls, by tool and outcome", ""),
    "openflow_retries": ("counter", "retries, by what (model, tool)", ""),
    "openflow_pause_wait_ms": ("histogram", "time nodes waited on people, by pause kind", "ms"),
}


def runtime(metrics_port: int | None = None, host: str = "0.0.0.0") -> Any | None:
    """A Temporal runtime exporting metrics (Prometheus on `metrics_port`, OTLP when set up).

    None when neither is asked for: the default runtime.
    """
    from temporalio.runtime import (
        OpenTelemetryConfig,
        PrometheusConfig,
        Runtime,
        TelemetryConfig,
    )

    otlp = next((os.environ[n] for n in METRICS_ENV if os.environ.get(n, "").strip()), "")
    if metrics_port is None and not otlp:
        return None
    metrics: Any
    if metrics_port is not None:
        metrics = PrometheusConfig(
            bind_address=f"{host}:{metrics_port}", counters_total_suffix=True
        )
    else:
        protocol = os.environ.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") or os.environ.get(
            "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
        )
        http = protocol.startswith("http")
        url = otlp
        if http and not os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
            url = otlp.rstrip("/") + "/v1/metrics"
        metrics = OpenTelemetryConfig(url=url, http=http)
    return Runtime(telemetry=TelemetryConfig(metrics=metrics))
