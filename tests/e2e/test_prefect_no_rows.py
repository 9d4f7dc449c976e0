"""Row values never reach Prefect: after questions asked through the installed `nl2sql`, Prefect's own database
(events, event resources, artifacts, artifact collections, logs, flow and task run states) holds none of them.

Prefect OSS has no login: whoever reaches its API reads what the engine puts there. The forwarder keeps the
streamed answer in process and strips free text from the events it forwards; artifacts hold rows only with
`settings.prefect.artifact_rows`; the lines the API log handler sends carry no exception messages.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nl2sql.demo import init_demo
from nl2sql.events.catalog import CATALOG, Event, spec
from nl2sql.events.prefect_events import FORWARDED_FIELDS, KEPT_IN_PROCESS, for_prefect, forwarded_whole
from nl2sql.events.prefect_logs import WithheldFormatter, withheld_traceback
from nl2sql.llm.fake import FakeLLMServer
from nl2sql.pipeline.result import QueryResult
from tests.support.ask import ModelScript

NL2SQL = Path(sys.executable).parent / "nl2sql"
URGENT = "How many urgent tickets are still open?"  # a verified query on support, no model
GERMANY = "Which customers live in Germany?"        # a verified query on chinook.Customer: names, cities, e-mails
#: Starts the fake synthesizer's answer: the streamed answer is found by it even when cut into pieces.
SENTINEL = "QXZ7ANSW"
#: The tables of Prefect's database where what the engine sends could land.
TABLES = ("events", "event_resources", "artifact", "artifact_collection", "log", "flow_run", "flow_run_state",
          "task_run", "task_run_state", "flow_run_input")


# --- the forwarder and the log guard, without a server ---------------------------------------------------


def test_every_catalog_event_is_either_forwarded_by_its_fields_or_kept_in_process() -> None:
    assert set(CATALOG) == set(FORWARDED_FIELDS) | KEPT_IN_PROCESS
    assert "answer.delta" in KEPT_IN_PROCESS and "answer.delta" not in FORWARDED_FIELDS
    for name, fields in FORWARDED_FIELDS.items():
        assert fields <= set(spec(name).model.model_fields), name


@pytest.mark.parametrize(("name", "data", "withheld"), [
    ("answer.delta", {"text": "leonie@example.de"}, {"text"}),
    ("run.failed", {"message": "could not convert 'leonie@example.de'", "code": "ValueError", "user_id": None,
                    "roles": ["support"]}, {"message"}),
    ("hook.decision", {"hook": "pii", "point": "execute.after", "decision": "deny",
                       "reason": "row 3 holds leonie@example.de", "sub_query_id": "sq1"}, {"reason"}),
    ("llm.parse_retry", {"node": "planner", "attempt": 1, "errors": ["where: 'leonie' is not a column"]},
     {"errors"}),
])
def test_free_text_that_may_quote_a_value_stays_in_process(name: str, data: dict, withheld: set[str]) -> None:
    payload = for_prefect(Event(name=name, data=spec(name).model(**data).model_dump(mode="json"), timestamp=0.0))
    if name in KEPT_IN_PROCESS:
        assert payload is None
        return
    assert payload is not None and not withheld & set(payload)
    assert "leonie" not in json.dumps(payload)
    assert not forwarded_whole(name)


def test_drift_is_forwarded_as_counts() -> None:
    data = {"datasource_id": "support", "changes": {"removed_columns": 1}, "impact": {"verified_queries": 1},
            "failed_expectations": 2}
    assert for_prefect(Event(name="schema.drifted", data=data, timestamp=0.0)) == data
    assert forwarded_whole("schema.drifted")


def test_result_shapes_and_steps_are_forwarded_whole() -> None:
    data = {"sub_query_id": "sq1", "datasource_id": "chinook", "columns": ["email"], "total_rows": 4,
            "truncated": False}
    assert for_prefect(Event(name="result.manifest", data=data, timestamp=0.0)) == data
    assert forwarded_whole("result.manifest") and forwarded_whole("node.finished") and forwarded_whole("llm.call")


def _failing(value: str) -> BaseException:
    try:
        try:
            int(value)
        except ValueError as exc:
            raise RuntimeError(f"combining {value!r} failed") from exc
    except RuntimeError as exc:
        return exc
    raise AssertionError("unreachable")


def test_log_lines_for_prefect_keep_exception_types_and_frames_not_messages() -> None:
    exc = _failing("leonie@example.de")
    record = logging.LogRecord("prefect.task_runs", logging.ERROR, __file__, 1, f"Task run failed with exception: "
                               f"{exc!r} - Retries are exhausted", None, (type(exc), exc, exc.__traceback__))
    formatter = WithheldFormatter()
    text = formatter.format(record)
    assert "leonie" not in text
    assert "RuntimeError(…)" in text and "ValueError: (message withheld from Prefect)" in text
    assert "_failing" in text and "int(value)" in text  # where it was raised still shows
    assert record.exc_info is not None and "leonie" in record.getMessage()  # the record itself is unchanged
    later = logging.LogRecord("prefect.task_runs", logging.INFO, __file__, 1, "Crash detected! %s",
                              (f"Execution was interrupted: {exc}",), None)
    assert "leonie" not in formatter.format(later)  # the message was seen with its exception a moment before
    state = logging.LogRecord("prefect.flow_runs", logging.INFO, __file__, 1,
                              "Finished in state Failed('Flow run encountered an exception: %s')", (str(exc),), None)
    assert "leonie" not in WithheldFormatter().format(state)
    assert "leonie" not in withheld_traceback(exc)


def test_the_log_observer_lines_reach_prefect_only_for_events_it_receives_whole() -> None:
    from nl2sql.events.prefect_logs import _EVENT_LINES

    def line(name: str) -> logging.LogRecord:
        record = logging.LogRecord("nl2sql.events", logging.INFO, __file__, 1, "%s", (name,), None)
        record.nl2sql_event = name
        return record

    assert not _EVENT_LINES.filter(line("answer.delta")) and not _EVENT_LINES.filter(line("hook.decision"))
    assert _EVENT_LINES.filter(line("node.finished"))
    assert _EVENT_LINES.filter(logging.LogRecord("prefect.flow_runs", logging.INFO, __file__, 1, "x", None, None))


# --- the acceptance test: the CLI, Prefect's temporary server, its SQLite file -------------------------------


@pytest.fixture(scope="module")
def project(fake: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo project (nl2sql.yaml: no model) and model.yaml beside it (the fake server as every node's model),
    one state folder, so one index serves both."""
    target = tmp_path_factory.mktemp("no-rows")
    config = init_demo(target, env={})
    raw = yaml.safe_load(config.read_text())
    # the demo shows answers in its own Prefect UI; a project's default keeps rows out, which is what is checked
    del raw["settings"]["prefect"]["artifact_rows"]
    config.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
    raw["llm"] = {"models": {"fake": {"provider": "openai", "model": "fake-model", "base_url": fake.base_url,
                                      "api_key": "fake-key"}}, "default": "fake"}
    (target / "model.yaml").write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
    return target


def cli(home: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed `nl2sql` in its own process, Prefect's home (and so its temporary server's database) in
    `home`, Prefect's INFO lines sent to its API."""
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_LOGGING_LEVEL": "INFO", "DO_NOT_TRACK": "1",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    done = subprocess.run([str(NL2SQL), "-c", str(config), *args], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def needles(result: QueryResult) -> set[str]:
    """What would show a row value: every text value of some length (not in the question, which Prefect holds
    as the run's parameter and name), each row as table cells, each value beside its column, the answer."""
    found: set[str] = set()
    blocks = [(sq.columns, sq.rows) for sq in result.sub_queries]
    if result.combined is not None:
        blocks.append((result.combined.columns, result.combined.rows))
    texts: set[str] = set()
    for columns, rows in blocks:
        for row in rows:
            cells = ["" if v is None else str(v) for v in row]
            if len(cells) > 1:  # one bare cell ("| 4 |") is also any small count in any table
                found |= {"| " + " | ".join(cells) + " |", " | ".join(cells)}
            for column, value, cell in zip(columns, row, cells, strict=True):
                found |= {f"{column} {cell}", f"{column}: {cell}", f'"{column}": {json.dumps(value)}'}
                if len(cell) >= 4 and cell.lower() not in result.question.lower():
                    texts.add(cell)
    answer = result.answer.content or ""
    if answer:
        found.add(answer)
        found |= {line for line in answer.splitlines() if any(t in line for t in texts)}
    return found | texts


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif value is not None:
        yield str(value)


def prefect_text(db: Path) -> dict[str, str]:
    """Every value of each table of interest as one text per table: as stored, and JSON values' strings decoded
    (so an escaped `K\\u00f6hler` or a `\\n` inside an answer is found too)."""
    with sqlite3.connect(db) as conn:
        present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        out = {}
        for table in TABLES:
            assert table in present, f"Prefect's database has no table {table}"
            parts: list[str] = []
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                for v in row:
                    if v is None:
                        continue
                    text = v.decode(errors="replace") if isinstance(v, bytes) else str(v)
                    parts.append(text)
                    with contextlib.suppress(ValueError):
                        parts.extend(_leaves(json.loads(text)))
            out[table] = "\n".join(parts)
    return out


def events_of(db: Path, trace_id: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute(
            "SELECT e.event FROM events e JOIN event_resources r ON r.event_id = e.id "
            "WHERE r.resource_id = ? AND e.event LIKE 'nl2sql.%'", (f"prefect.flow-run.{trace_id}",))]


@pytest.mark.prefect
@pytest.mark.slow
def test_no_row_value_of_an_answer_reaches_prefects_database(project: Path, fake: FakeLLMServer,
                                                             tmp_path: Path) -> None:
    script = ModelScript(fake)
    script.fake.respond_with("text", lambda body: f"{SENTINEL} The customers are: "
                             + body["messages"][-1]["content"].split("Result:", 1)[-1])
    home = tmp_path / "prefect-home"
    home.mkdir()
    started = time.monotonic()
    cli(home, project / "nl2sql.yaml", "index", "build")
    results = [QueryResult.model_validate(json.loads(cli(home, project / config, "ask", question, "--role",
                                                         "support", "--json").stdout))
               for config, question in (("nl2sql.yaml", URGENT), ("model.yaml", GERMANY))]
    urgent, germany = results
    assert urgent.status == "success" and urgent.sub_queries[0].source == "verified" and urgent.llm_calls == 0
    assert germany.status == "success" and germany.sub_queries[0].rows and SENTINEL in germany.answer.content
    emails = [row[germany.sub_queries[0].columns.index("email")] for row in germany.sub_queries[0].rows]
    assert emails and all("@" in e for e in emails)
    db = home / "prefect.db"
    deadline = time.monotonic() + 30  # the server stores events in batches; the CLI drained them before exit
    while not all("nl2sql.run.finished" in events_of(db, r.trace_id) for r in results):
        assert time.monotonic() < deadline, "the runs' events never reached Prefect's database"
        time.sleep(1)
    text = prefect_text(db)
    # the search looks where the values would be: events, artifacts and logs of these runs are there
    assert "nl2sql.result.manifest" in events_of(db, germany.trace_id)
    assert all(f"answer-{r.trace_id}" in text["artifact"] for r in results)
    assert "Finished in state Completed" in text["log"]
    for result in results:
        leaks = {(needle, table) for needle in needles(result) | {SENTINEL} for table, body in text.items()
                 if needle in body}
        assert not leaks, f"row values of {result.question!r} in Prefect's database: {sorted(leaks)[:10]}"
    with sqlite3.connect(db) as conn:
        keys = {r[0] for r in conn.execute("SELECT key FROM artifact WHERE key IS NOT NULL")}
    assert "answer" not in keys
    print(f"asked and searched in {time.monotonic() - started:.1f} s")


def test_the_needles_find_the_rows_an_artifact_would_show() -> None:
    """The search terms are sound: the artifact with rows on holds them, the default one none."""
    from nl2sql.flows.ask import artifact_key, result_markdown

    result = QueryResult.model_validate({
        "trace_id": "6F1C-x", "question": GERMANY, "status": "success",
        "answer": {"summary": "Four.", "content": f"{SENTINEL} Leonie Köhler (leonie@example.de) lives in Stuttgart."},
        "sub_queries": [{"id": "sq1", "datasource_id": "chinook", "question": GERMANY, "source": "verified",
                         "sql": "SELECT FirstName, Email FROM Customer WHERE Country = 'Germany'",
                         "columns": ["first_name", "email"], "rows": [["Leonie", "leonie@example.de"]],
                         "total_rows": 1}],
        "warnings": [{"code": "TRUNCATED", "step": "executor", "message": "only 'leonie@example.de' shown"}],
        "usage": {}, "llm_calls": 1, "duration_ms": 1.0})
    with_rows, without = result_markdown(result, rows=True), result_markdown(result)
    assert {n for n in needles(result) if n in with_rows} >= {"leonie@example.de", "Leonie", SENTINEL + " Leonie"
                                                              " Köhler (leonie@example.de) lives in Stuttgart."}
    assert not {n for n in needles(result) if n in without} and "leonie" not in without.lower()
    assert "1 row" in without and "first_name, email" in without and "TRUNCATED" in without
    assert "**Answer:**" in with_rows and "kept out of Prefect" in without
    assert artifact_key("answer", "6F1C-x") == "answer-6f1c-x"


def test_eval_artifacts_show_failures_by_ids_and_score_names_only() -> None:
    from nl2sql.evaluation.report import DETAIL_KEYS, CaseRecord, build_report
    from nl2sql.flows.evals import without_details

    failed = CaseRecord(case_id="support_007", role="support", config="default", pass_index=0, tags=[],
                        outcome="allowed", status="error", latency_s=0.1, answer="leonie@example.de",
                        error="The statement failed on datasource 'chinook': could not convert 'leonie@example.de'",
                        scores={"result_match": {"passed": False, "detail": {"expected": [["leonie@example.de"]]}},
                                "outcome": {"passed": True, "detail": {}}})
    report = build_report("plans", suite={"name": "support.yaml"}, database={}, settings={}, records=[failed],
                          planned={"default": 1})
    assert "leonie" in report.markdown()  # what the CLI prints, and the artifacts with settings.prefect.artifact_rows
    shown = without_details(report)
    assert "leonie" not in shown.markdown() and "| support_007 | support | result_match |" in shown.markdown()
    failure = shown.boards["default"].failures[0]
    assert {k: failure[k] for k in ("case_id", "role", "pass", "why")} == {
        "case_id": "support_007", "role": "support", "pass": 0, "why": "result_match"}
    assert set(failure) - {"case_id", "role", "pass", "why"} <= set(DETAIL_KEYS)  # codes and counts only
    assert "leonie" not in json.dumps(shown.boards["default"].model_dump(mode="json"), default=str)
