"""The observers of the engine's events: building them from config, log, audit and otel."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nl2sql.config.models import Config
from nl2sql.errors import ConfigError
from nl2sql.events import AUDIT_EVENTS, EventBus
from nl2sql.events.catalog import Event
from nl2sql.observers import (
    AuditObserver,
    LogObserver,
    OtelObserver,
    build_observers,
    close_observers,
    observer_class,
    subscribe_observers,
)


def make_config(tmp_path: Path, observers: list[dict[str, Any]] | None = None, **storage: Any) -> Config:
    data: dict[str, Any] = {
        "datasources": [{"id": "shop", "url": "sqlite:///shop.sqlite"}],
        "policies": {"roles": {"analyst": {"allow": ["shop"]}}, "default_role": "analyst"},
        "storage": {"state_dir": str(tmp_path / "state"), **storage},
    }
    if observers is not None:
        data["observers"] = observers
    return Config.model_validate(data)


def audit_observer(tmp_path: Path, **options: Any) -> AuditObserver:
    config = make_config(tmp_path, [{"use": "audit", "options": options}])
    (observer,) = build_observers(config)
    assert isinstance(observer, AuditObserver)
    return observer


def publish_run(bus: EventBus) -> None:
    bus.publish("run.started", question="How many albums?", roles=["analyst"])
    bus.publish("node.started", node="planner")
    bus.publish("node.finished", node="planner", duration_ms=12.5)
    bus.publish("llm.call", node="planner", model="m1", provider="openai", ok=True,
                input_tokens=100, output_tokens=20, latency_ms=40.0)
    bus.publish("llm.call", node="planner", model="m1", provider="openai", ok=False, latency_ms=5.0)
    bus.publish("run.finished", status="success", duration_ms=250.0)


def read_lines(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines()]


# --- building ----------------------------------------------------------------------------------


def test_default_config_builds_log_then_audit(tmp_path: Path) -> None:
    observers = build_observers(make_config(tmp_path))
    try:
        assert [type(o) for o in observers] == [LogObserver, AuditObserver]
        audit = observers[1]
        assert isinstance(audit, AuditObserver)
        assert audit.folder == (tmp_path / "state" / "audit").resolve()
        assert audit.max_age_days == 30
    finally:
        close_observers(observers)


def test_builtins_are_registered() -> None:
    assert observer_class("log") is LogObserver
    assert observer_class("audit") is AuditObserver
    assert observer_class("otel") is OtelObserver


def test_unknown_observer_is_a_config_error_with_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_observers(make_config(tmp_path, [{"use": "audi"}]))
    (problem,) = info.value.problems
    assert problem.key == "observers[0].use"
    assert "unknown observer 'audi'" in problem.message
    assert problem.fix == "did you mean 'audit'?"


def test_bad_options_are_all_reported_at_once(tmp_path: Path) -> None:
    config = make_config(tmp_path, [
        {"use": "log", "options": {"level": "LOUD"}},
        {"use": "audit", "options": {"max_age_dayz": 3}},
        {"use": "audit", "options": {"max_age_days": 0}},
        {"use": "nope"},
    ])
    with pytest.raises(ConfigError) as info:
        build_observers(config)
    keys = [p.key for p in info.value.problems]
    assert keys == [
        "observers[0].options.level",
        "observers[1].options.max_age_dayz",
        "observers[2].options.max_age_days",
        "observers[3].use",
    ]
    assert all(p.fix for p in info.value.problems)
    assert info.value.problems[1].fix == "did you mean 'max_age_days'?"
    assert "DEBUG" in str(info.value.problems[0].fix)


def test_a_built_observer_is_closed_when_a_later_one_fails(tmp_path: Path, monkeypatch) -> None:
    closed: list[str] = []
    monkeypatch.setattr(AuditObserver, "close", lambda self: closed.append("audit"))

    def broken(cls, options, *, config):
        raise ConfigError("no SDK")

    monkeypatch.setattr(OtelObserver, "from_options", classmethod(broken))
    with pytest.raises(ConfigError) as info:
        build_observers(make_config(tmp_path, [{"use": "audit"}, {"use": "otel"}]))
    assert closed == ["audit"]
    assert info.value.problems[0].key == "observers[1].use"


def test_subscribe_observers_fails_open_and_unsubscribes(tmp_path: Path) -> None:
    class Broken:
        def on_event(self, event: Event) -> None:
            raise RuntimeError("boom")

        def close(self) -> None:
            pass

    class Recorder:
        def __init__(self) -> None:
            self.names: list[str] = []

        def on_event(self, event: Event) -> None:
            self.names.append(event.name)

        def close(self) -> None:
            pass

    class OnlyFinished(Recorder):
        events = frozenset({"run.finished"})

    recorder, only = Recorder(), OnlyFinished()
    bus = EventBus(trace_id="t1")
    unsubscribe = subscribe_observers(bus, [Broken(), recorder, only])
    bus.publish("run.started", question="q", roles=["admin"])
    bus.publish("run.finished", status="success", duration_ms=1.0)
    assert recorder.names == ["run.started", "run.finished"]
    assert only.names == ["run.finished"]
    unsubscribe()
    bus.publish("run.started", question="q", roles=["admin"])
    assert recorder.names == ["run.started", "run.finished"]


# --- log ---------------------------------------------------------------------------------------


def test_log_levels_and_line_shape(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (observer,) = build_observers(make_config(tmp_path, [{"use": "log", "options": {"level": "debug"}}]))
    bus = EventBus(trace_id="t1")
    subscribe_observers(bus, [observer])
    with caplog.at_level(logging.DEBUG, logger="nl2sql.events"):
        publish_run(bus)
        bus.publish("run.failed", message="broke", code="INTERNAL")
    records = [r for r in caplog.records if r.name == "nl2sql.events"]
    levels = {r.getMessage().split()[0]: r.levelno for r in records}
    assert levels["node.started"] == logging.DEBUG
    assert levels["run.finished"] == logging.INFO
    assert levels["run.started"] == logging.INFO
    assert levels["run.failed"] == logging.WARNING
    started = next(r.getMessage() for r in records if r.getMessage().startswith("run.started"))
    assert started == 'run.started trace=t1 question="How many albums?" roles=["analyst"] execute=true'


def test_log_level_info_skips_debug_events(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (observer,) = build_observers(make_config(tmp_path, [{"use": "log"}]))
    assert "node.started" not in observer.events
    bus = EventBus(trace_id="t1")
    subscribe_observers(bus, [observer])
    with caplog.at_level(logging.DEBUG, logger="nl2sql.events"):
        publish_run(bus)
    names = [r.getMessage().split()[0] for r in caplog.records if r.name == "nl2sql.events"]
    assert "node.started" not in names
    assert "run.finished" in names


# --- audit -------------------------------------------------------------------------------------


def test_audit_writes_only_audited_events_to_the_day_file(tmp_path: Path) -> None:
    observer = audit_observer(tmp_path)
    bus = EventBus(trace_id="t1")
    subscribe_observers(bus, [observer])
    publish_run(bus)
    direct = EventBus(trace_id="t2")
    direct.subscribe(observer.on_event)  # everything, so the observer's own filter is tested too
    direct.publish("node.started", node="planner")
    direct.publish("policy.decision", decision="deny", step="resolver", roles=["analyst"], rule="no access")
    observer.close()

    lines = read_lines(observer.folder)
    assert [line["name"] for line in lines] == ["run.started", "run.finished", "policy.decision"]
    assert {line["name"] for line in lines} <= AUDIT_EVENTS
    first = lines[0]
    assert first["trace_id"] == "t1"
    assert first["data"]["question"] == "How many albums?"
    stamp = datetime.fromisoformat(first["timestamp"])
    assert stamp.utcoffset() is not None and stamp.utcoffset().total_seconds() == 0
    (path,) = observer.folder.glob("*.jsonl")
    assert path.name == f"{stamp.strftime('%Y-%m-%d')}.jsonl"
    if os.name == "posix":
        assert path.stat().st_mode & 0o777 == 0o600


def test_audit_day_file_is_the_events_utc_day(tmp_path: Path) -> None:
    observer = audit_observer(tmp_path)
    late = datetime(2025, 3, 1, 23, 59, 59, tzinfo=UTC).timestamp()
    observer.on_event(Event(name="run.started", data={"question": "q", "roles": []}, trace_id="a", timestamp=late))
    observer.on_event(Event(name="run.finished", data={"status": "success", "duration_ms": 1.0},
                            trace_id="a", timestamp=late + 2))
    observer.close()
    assert sorted(p.name for p in observer.folder.iterdir()) == ["2025-03-01.jsonl", "2025-03-02.jsonl"]


def test_close_flushes_everything(tmp_path: Path) -> None:
    observer = audit_observer(tmp_path)
    bus = EventBus(trace_id="t1")
    subscribe_observers(bus, [observer])
    for i in range(500):
        bus.publish("run.started", question=f"q{i}", roles=["analyst"])
    observer.close()
    lines = read_lines(observer.folder)
    assert len(lines) == 500
    assert [line["data"]["question"] for line in lines] == [f"q{i}" for i in range(500)]
    assert observer.dropped == 0


def test_close_is_idempotent(tmp_path: Path) -> None:
    observer = audit_observer(tmp_path)
    observer.close()  # never started
    observer.close()
    other = audit_observer(tmp_path)
    EventBus(trace_id="t").subscribe(other.on_event)
    other.on_event(Event(name="run.started", data={"question": "q", "roles": []}, timestamp=1e9))
    other.close()
    other.close()
    assert len(read_lines(other.folder)) == 1


def test_the_atexit_hook_flushes_a_process_that_never_closes(tmp_path: Path) -> None:
    observer = audit_observer(tmp_path)
    for i in range(50):
        observer.on_event(Event(name="run.started", data={"question": f"q{i}", "roles": []}, timestamp=1e9))
    hook = observer._atexit
    assert hook is not None
    hook()  # what atexit runs; it holds the observer only weakly
    assert observer._atexit is None  # close unregistered it
    assert len(read_lines(observer.folder)) == 50


def test_bounded_queue_drops_count_and_warn_once(tmp_path: Path, monkeypatch, caplog) -> None:
    monkeypatch.setattr(AuditObserver, "MAX_QUEUE", 3)
    observer = audit_observer(tmp_path)
    release, entered = threading.Event(), threading.Event()
    original = AuditObserver._write_batch

    def blocked(self, batch):
        entered.set()
        release.wait(10)
        original(self, batch)

    monkeypatch.setattr(AuditObserver, "_write_batch", blocked)
    bus = EventBus(trace_id="t1")
    subscribe_observers(bus, [observer])
    with caplog.at_level(logging.WARNING):
        bus.publish("run.started", question="q0", roles=[])
        assert entered.wait(5)  # the writer holds line 0 and waits; the queue holds 3 more
        for i in range(1, 10):
            bus.publish("run.started", question=f"q{i}", roles=[])
    assert observer.dropped == 6
    warnings = [r for r in caplog.records if "audit queue is full" in r.getMessage()]
    assert len(warnings) == 1
    release.set()
    observer.close()
    assert [line["data"]["question"] for line in read_lines(observer.folder)] == ["q0", "q1", "q2", "q3"]


def test_purge_deletes_old_day_files_and_keeps_recent_ones(tmp_path: Path) -> None:
    folder = tmp_path / "audit"
    folder.mkdir()
    for day in ("2025-01-01", "2025-03-01", "2025-03-09", "2025-03-10"):
        (folder / f"{day}.jsonl").write_text("{}\n")
    (folder / "notes.txt").write_text("kept")
    observer = AuditObserver(folder, max_age_days=8)  # on 2025-03-10, anything before 2025-03-02 goes
    assert observer.purge(now=datetime(2025, 3, 10, 12, tzinfo=UTC)) == 2
    assert sorted(p.name for p in folder.iterdir()) == ["2025-03-09.jsonl", "2025-03-10.jsonl", "notes.txt"]
    assert AuditObserver(folder, max_age_days=1).purge(now=datetime(2025, 3, 10, tzinfo=UTC)) == 0


def test_purge_runs_when_built(tmp_path: Path) -> None:
    folder = tmp_path / "custom"
    folder.mkdir()
    (folder / "2000-01-01.jsonl").write_text("{}\n")
    today = datetime.now(tz=UTC).strftime("%Y-%m-%d")
    (folder / f"{today}.jsonl").write_text("{}\n")
    config = make_config(tmp_path, [{"use": "audit", "options": {"folder": str(folder), "max_age_days": 90}}])
    (observer,) = build_observers(config)
    assert isinstance(observer, AuditObserver)
    assert observer.max_age_days == 90
    assert [p.name for p in folder.iterdir()] == [f"{today}.jsonl"]
    observer.close()


# --- otel --------------------------------------------------------------------------------------


def test_otel_without_the_sdk_names_the_extra(tmp_path: Path, monkeypatch) -> None:
    for name in [n for n in sys.modules if n.startswith("opentelemetry.sdk.")] + ["opentelemetry.sdk"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if the extra were not installed
    with pytest.raises(ConfigError) as info:
        build_observers(make_config(tmp_path, [{"use": "log"}, {"use": "otel"}]))
    (problem,) = info.value.problems
    assert problem.key == "observers[1].use"
    assert 'pip install "nl2sql-engine[otel]"' in str(info.value)


def _metric_points(observer: OtelObserver) -> dict[str, list[Any]]:
    data = observer.metric_reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


def test_otel_records_a_run_span_and_token_usage(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace

    before = trace.get_tracer_provider()
    (observer,) = build_observers(make_config(tmp_path, [{"use": "otel"}]))
    assert isinstance(observer, OtelObserver)
    try:
        bus = EventBus(trace_id="t1")
        subscribe_observers(bus, [observer])
        publish_run(bus)
        failed = EventBus(trace_id="t2")
        subscribe_observers(failed, [observer])
        failed.publish("run.started", question="q", roles=["admin"])
        failed.publish("run.failed", message="broke", code="INTERNAL")

        spans = observer.span_exporter.get_finished_spans()
        runs = [s for s in spans if s.name == "nl2sql.run"]
        assert [s.attributes["nl2sql.trace_id"] for s in runs] == ["t1", "t2"]
        assert runs[0].attributes["nl2sql.status"] == "success"
        assert runs[1].status.status_code == trace.StatusCode.ERROR
        (node,) = [s for s in spans if s.name == "nl2sql.node"]
        assert node.parent is not None and node.parent.span_id == runs[0].context.span_id
        assert node.attributes["nl2sql.node"] == "planner"

        points = _metric_points(observer)
        tokens = {(p.attributes["node"], p.attributes["model"], p.attributes["kind"]): p.value
                  for p in points["nl2sql.token.usage"]}
        assert tokens == {("planner", "m1", "input"): 100, ("planner", "m1", "output"): 20}
        runs_by_status = {p.attributes["status"]: p.value for p in points["nl2sql.runs"]}
        assert runs_by_status == {"success": 1, "failed": 1}
        durations = {p.attributes["status"]: p.sum for p in points["nl2sql.run.duration_ms"]}
        assert durations["success"] == 250.0
    finally:
        observer.close()
        observer.close()
    assert trace.get_tracer_provider() is before


def test_otel_with_an_endpoint_needs_an_exporter(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    try:
        import opentelemetry.exporter.otlp  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("an OTLP exporter is installed")
    config = make_config(tmp_path, [{"use": "otel", "options": {"endpoint": "http://collector:4317"}}])
    with pytest.raises(ConfigError) as info:
        build_observers(config)
    assert info.value.problems[0].key == "observers[0].options.endpoint"
    assert "opentelemetry-exporter-otlp" in str(info.value.problems[0].fix)
