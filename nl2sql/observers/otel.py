"""The OpenTelemetry observer: run metrics, token usage and a span per run, on its own providers.

Needs the `otel` extra (`pip install "nl2sql-engine[otel]"`); OpenTelemetry is imported only here,
and only when the observer is built. It never sets the global tracer or meter provider.

Metrics: `nl2sql.runs` (a counter, attribute `status`), `nl2sql.run.duration_ms` (a histogram,
attribute `status`) and `nl2sql.token.usage` (a counter from `llm.call`, attributes `node`,
`model`, `kind` = input | output; a count the provider did not report is skipped). Traces: a span
`nl2sql.run` per run, opened at `run.started` and ended at `run.finished` / `run.failed` (keyed
by trace_id), with a child span `nl2sql.node` per `node.finished`. With no `endpoint` everything
stays in memory (`metric_reader`, `span_exporter`); with one, the OTLP exporters send it (gRPC
when `opentelemetry-exporter-otlp-proto-grpc` is installed, else HTTP).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from nl2sql.errors import ConfigError, ConfigProblem
from nl2sql.events.catalog import Event

if TYPE_CHECKING:
    from nl2sql.config.models import Config

log = logging.getLogger(__name__)

INSTALL_FIX = 'pip install "nl2sql-engine[otel]"'
EXPORTER_FIX = "pip install opentelemetry-exporter-otlp (or leave endpoint unset to keep telemetry in memory)"
#: Runs whose span is open at most; past it the oldest is ended (a run that never finished).
MAX_OPEN_RUNS = 10_000
#: Seconds `close` waits for the providers to flush and shut down.
CLOSE_TIMEOUT_S = 5.0


class OtelOptions(BaseModel):
    """Options of the otel observer."""

    model_config = ConfigDict(extra="forbid")

    metrics: bool = True
    traces: bool = True
    endpoint: str | None = None


def _require_sdk() -> None:
    try:
        import opentelemetry.sdk.metrics
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise ConfigError(ConfigProblem(
            "", "", f"the otel observer needs the OpenTelemetry SDK, which is not installed ({exc})", INSTALL_FIX
        )) from exc


def _otlp_exporters(endpoint: str) -> tuple[Any, Any]:
    """The OTLP span and metric exporters for an endpoint (gRPC if installed, else HTTP)."""
    try:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=endpoint), OTLPMetricExporter(endpoint=endpoint)
    except ImportError:
        pass
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HTTPMetricExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HTTPSpanExporter
    except ImportError as exc:
        raise ConfigError(ConfigProblem(
            "", "endpoint", "sending to an endpoint needs an OTLP exporter, which is not installed", EXPORTER_FIX
        )) from exc
    base = endpoint.rstrip("/")
    return HTTPSpanExporter(endpoint=f"{base}/v1/traces"), HTTPMetricExporter(endpoint=f"{base}/v1/metrics")


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


class OtelObserver:
    """Records run metrics, token usage and run/node spans on its own Meter- and TracerProvider."""

    options_model = OtelOptions
    #: The events it reads.
    events = frozenset({"run.started", "run.finished", "run.failed", "node.finished", "llm.call"})

    def __init__(self, *, metrics: bool = True, traces: bool = True, endpoint: str | None = None) -> None:
        _require_sdk()
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader, PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        span_exporter, metric_exporter = _otlp_exporters(endpoint) if endpoint else (None, None)
        resource = Resource.create({"service.name": "nl2sql-engine"})
        self.endpoint = endpoint
        self.metric_reader: Any = None
        self.span_exporter: Any = None
        self.meter_provider: Any = None
        self.tracer_provider: Any = None
        if metrics:
            self.metric_reader = (
                PeriodicExportingMetricReader(metric_exporter) if metric_exporter is not None
                else InMemoryMetricReader()
            )
            self.meter_provider = MeterProvider(metric_readers=[self.metric_reader], resource=resource,
                                                shutdown_on_exit=False)
            meter = self.meter_provider.get_meter("nl2sql")
            self._runs = meter.create_counter("nl2sql.runs", unit="{run}", description="Finished runs by status.")
            self._duration = meter.create_histogram("nl2sql.run.duration_ms", unit="ms",
                                                    description="How long a run took.")
            self._tokens = meter.create_counter("nl2sql.token.usage", unit="{token}",
                                                description="Model tokens by node, model and kind.")
        if traces:
            self.tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
            if span_exporter is not None:
                self.tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
            else:
                self.span_exporter = InMemorySpanExporter()
                self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.span_exporter))
            self._tracer = self.tracer_provider.get_tracer("nl2sql")
        self._lock = threading.Lock()
        #: Open runs by trace_id: (the run's span, its start time in seconds).
        self._runs_open: dict[str | None, tuple[Any, float]] = {}
        self._closed = False

    @classmethod
    def from_options(cls, options: BaseModel, *, config: Config) -> OtelObserver:
        """Build from validated `OtelOptions` (ConfigError naming the extra when the SDK is missing)."""
        assert isinstance(options, OtelOptions)
        _require_sdk()
        return cls(metrics=options.metrics, traces=options.traces, endpoint=options.endpoint)

    # --- events --------------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        with self._lock:
            if self._closed:
                return
            handler = getattr(self, "_on_" + event.name.replace(".", "_"), None)
            if handler is not None:
                handler(event, event.data)

    def _on_run_started(self, event: Event, data: dict) -> None:
        span = None
        if self.tracer_provider is not None:
            attributes = {"nl2sql.trace_id": event.trace_id or "", "nl2sql.execute": bool(data.get("execute", True))}
            if data.get("datasource_id"):
                attributes["nl2sql.datasource_id"] = data["datasource_id"]
            span = self._tracer.start_span("nl2sql.run", attributes=attributes, start_time=_ns(event.timestamp))
        previous = self._runs_open.pop(event.trace_id, None)
        if previous is not None and previous[0] is not None:
            previous[0].set_attribute("nl2sql.status", "abandoned")
            previous[0].end(end_time=_ns(event.timestamp))
        self._runs_open[event.trace_id] = (span, event.timestamp)
        while len(self._runs_open) > MAX_OPEN_RUNS:
            oldest = next(iter(self._runs_open))
            old_span, _ = self._runs_open.pop(oldest)
            if old_span is not None:
                old_span.set_attribute("nl2sql.status", "abandoned")
                old_span.end()

    def _on_run_finished(self, event: Event, data: dict) -> None:
        self._end_run(event, data["status"], data.get("duration_ms"), error=data["status"] == "error",
                      attributes={"nl2sql.llm_calls": data.get("llm_calls", 0),
                                  "nl2sql.error_codes": list(data.get("error_codes") or []),
                                  **({"nl2sql.cost_usd": data["cost_usd"]} if data.get("cost_usd") is not None
                                     else {})})

    def _on_run_failed(self, event: Event, data: dict) -> None:
        self._end_run(event, "failed", None, error=True, attributes={"nl2sql.error_code": data.get("code", "")})

    def _end_run(self, event: Event, status: str, duration_ms: float | None, *, error: bool,
                 attributes: dict[str, Any]) -> None:
        span, started = self._runs_open.pop(event.trace_id, (None, None))
        if duration_ms is None and started is not None:
            duration_ms = max(0.0, (event.timestamp - started) * 1000)
        if self.meter_provider is not None:
            self._runs.add(1, {"status": status})
            if duration_ms is not None:
                self._duration.record(duration_ms, {"status": status})
        if span is not None:
            from opentelemetry.trace import Status, StatusCode

            span.set_attribute("nl2sql.status", status)
            span.set_attributes(attributes)
            if error:
                span.set_status(Status(StatusCode.ERROR, status))
            span.end(end_time=_ns(event.timestamp))

    def _on_node_finished(self, event: Event, data: dict) -> None:
        if self.tracer_provider is None:
            return
        run_span, _ = self._runs_open.get(event.trace_id, (None, None))
        if run_span is None:
            return
        from opentelemetry.trace import Status, StatusCode, set_span_in_context

        end = _ns(event.timestamp)
        start = end - int(float(data.get("duration_ms") or 0.0) * 1_000_000)
        attributes: dict[str, Any] = {"nl2sql.node": data["node"], "nl2sql.ok": bool(data.get("ok", True))}
        if data.get("sub_query_id"):
            attributes["nl2sql.sub_query_id"] = data["sub_query_id"]
        if data.get("error_code"):
            attributes["nl2sql.error_code"] = data["error_code"]
        span = self._tracer.start_span("nl2sql.node", context=set_span_in_context(run_span),
                                       attributes=attributes, start_time=start)
        if not data.get("ok", True):
            span.set_status(Status(StatusCode.ERROR, data.get("error_code") or "error"))
        span.end(end_time=end)

    def _on_llm_call(self, event: Event, data: dict) -> None:
        if self.meter_provider is None:
            return
        for kind in ("input", "output"):
            count = data.get(f"{kind}_tokens")
            if count is not None:
                self._tokens.add(count, {"node": data["node"], "model": data["model"], "kind": kind})

    # --- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """End open run spans and shut both providers down, waiting at most CLOSE_TIMEOUT_S. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for span, _ in self._runs_open.values():
                if span is not None:
                    span.set_attribute("nl2sql.status", "open_at_close")
                    span.end()
            self._runs_open.clear()

        def shutdown() -> None:
            millis = int(CLOSE_TIMEOUT_S * 1000)
            for provider in (self.tracer_provider, self.meter_provider):
                if provider is None:
                    continue
                try:
                    provider.force_flush(timeout_millis=millis)
                    if provider is self.meter_provider:
                        provider.shutdown(timeout_millis=millis)
                    else:
                        provider.shutdown()
                except Exception:
                    log.exception("shutting down the OpenTelemetry provider failed")

        worker = threading.Thread(target=shutdown, name="nl2sql-otel-shutdown", daemon=True)
        worker.start()
        worker.join(timeout=CLOSE_TIMEOUT_S)
        if worker.is_alive():
            log.warning("the OpenTelemetry providers did not shut down within %.0f s", CLOSE_TIMEOUT_S)
