"""Reports of an eval run: a board per model config (accuracies with 95% Wilson intervals, by tag, pass^k,
cost, tokens, latency, determinism, faithfulness, recall, routing) and the headline `metrics`.

`metrics` always has the keys of the case format's contract (null where a mode does not measure one):
cases, runs, execution_accuracy, lenient_accuracy, table_recall, column_recall, tables_sent,
columns_sent, routing_top1, routing_shortlist, cost_usd, latency_p50_s, latency_p95_s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from nl2sql.evaluation.stats import wilson_interval

#: A warning code ending so marks a plan the validator repaired rather than refused (none is emitted yet: the
#: count stays 0 until one is).
REPAIR_SUFFIX = "_REPAIRED"
#: The per-case detail a record keeps (codes and counts, never rows or answer text).
DETAIL_KEYS = ("status", "error_code", "error_details", "parse_retries", "refiner_rounds", "repairs", "warnings",
               "llm_calls", "latency_s")

METRIC_KEYS = ("cases", "runs", "execution_accuracy", "lenient_accuracy", "table_recall", "column_recall",
               "tables_sent", "columns_sent", "routing_top1", "routing_shortlist", "cost_usd", "latency_p50_s",
               "latency_p95_s")


@dataclass
class CaseRecord:
    """One run's verdict, slim enough for records (no rows)."""

    case_id: str
    role: str
    config: str
    pass_index: int
    tags: list[str]
    outcome: str
    status: str | None
    scores: dict[str, dict[str, Any]]
    latency_s: float
    cost_usd: float | None = None
    tokens: dict[str, int | None] = field(default_factory=dict)
    sql: list[str] = field(default_factory=list)
    rows_digest: str | None = None
    answer: str | None = None
    error: str | None = None
    #: The code of the error a failed run ended with (its first run error, else its first sub-query error).
    error_code: str | None = None
    #: What exactly failed, as codes: a plan's problem codes, or the construct the plan language lacks.
    error_details: list[str] = field(default_factory=list)
    #: Structured answers asked again because they did not validate (`llm.parse_retry` events).
    parse_retries: int | None = None
    #: Rounds of the refiner (each after a validation or database error).
    refiner_rounds: int | None = None
    #: Warnings whose code marks a validator repair (see REPAIR_SUFFIX).
    repairs: int | None = None
    #: The codes of the run's warnings, in order.
    warnings: list[str] = field(default_factory=list)
    #: Model calls made (failed ones included).
    llm_calls: int | None = None
    #: Seconds from the question to the SQL that answered, and to its rows (None: no rows were read).
    time_to_sql_s: float | None = None
    time_to_rows_s: float | None = None
    #: Seconds the run waited for its models (what settings.pipeline.timeout_s does not count).
    model_s: float | None = None

    @property
    def passed(self) -> bool:
        """Execution accuracy: every applicable accuracy score passed (result_match strict, outcome, recall, routing)."""
        verdicts = [s["passed"] for name, s in self.scores.items() if name != "faithfulness" and s["passed"] is not None]
        return bool(verdicts) and all(verdicts)

    @property
    def lenient_passed(self) -> bool:
        """As `passed`, with result_match read leniently."""
        verdicts = []
        for name, s in self.scores.items():
            if name == "faithfulness" or s["passed"] is None:
                continue
            verdicts.append(s["detail"].get("lenient", s["passed"]) if name == "result_match" else s["passed"])
        return bool(verdicts) and all(verdicts)


def _share(hits: int, n: int) -> float | None:
    return round(hits / n, 4) if n else None


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 4)


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


class Board(BaseModel):
    """One model config's results."""

    config: str
    planned_runs: int
    runs: int
    cases: int
    execution_accuracy: float | None
    execution_interval: list[float] | None
    lenient_accuracy: float | None
    lenient_interval: list[float] | None
    by_tag: dict[str, dict[str, Any]] = Field(default_factory=dict)
    pass_k: dict[str, float | None] | None = None
    determinism: float | None = None
    cost_usd: float | None = None
    tokens: dict[str, int] = Field(default_factory=dict)
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    faithfulness: dict[str, Any] | None = None
    retrieval: dict[str, Any] | None = None
    routing: dict[str, Any] | None = None
    failures: list[dict[str, Any]] = Field(default_factory=list)
    records: list[dict[str, Any]] = Field(default_factory=list)


class EvalReport(BaseModel):
    """An eval run's report (JSON with `--out`; the records under benchmarks/ are built from it)."""

    mode: str
    suite: dict[str, Any]
    database: dict[str, Any]
    settings: dict[str, Any] = Field(default_factory=dict)
    boards: dict[str, Board]
    stopped: str | None = None
    metrics: dict[str, Any]

    def markdown(self) -> str:
        """The boards as markdown tables (the flow's artifact, the CLI's summary)."""
        lines = [f"# Eval: mode {self.mode}, {self.suite['name']}", ""]
        if self.stopped:
            lines += [f"**Stopped early:** {self.stopped}", ""]
        lines += ["| config | runs | strict | lenient | table recall | column recall | columns sent | routing top-1 "
                  "| cost | p50 s |", "|---|---|---|---|---|---|---|---|---|---|"]
        for b in self.boards.values():
            r, ro = b.retrieval or {}, b.routing or {}
            lines.append(f"| {b.config} | {b.runs}/{b.planned_runs} | {_pct(b.execution_accuracy, b.execution_interval)} "
                         f"| {_pct(b.lenient_accuracy, b.lenient_interval)} | {_pct(r.get('table_recall'))} "
                         f"| {_pct(r.get('column_recall'))} | {r.get('columns_sent', '–')} | {_pct(ro.get('top1'))} "
                         f"| {'–' if b.cost_usd is None else f'${b.cost_usd:.4f}'} | {b.latency_p50_s or '–'} |")
        for b in self.boards.values():
            if b.failures:
                lines += ["", f"## Failures ({b.config})", "",
                          "| case | role | why | error | parse retries | refiner rounds | repairs | warnings | calls "
                          "| s |", "|---|---|---|---|---|---|---|---|---|---|"]
                lines += [f"| {f['case_id']} | {f['role']} | {_cell(f['why'])} | {_cell(_error_cell(f))} "
                          f"| {_cell(f.get('parse_retries'))} | {_cell(f.get('refiner_rounds'))} "
                          f"| {_cell(f.get('repairs'))} | {_cell(', '.join(f.get('warnings') or []) or None)} "
                          f"| {_cell(f.get('llm_calls'))} | {_cell(f.get('latency_s'))} |" for f in b.failures]
        return "\n".join(lines) + "\n"


def _error_cell(failure: dict[str, Any]) -> str | None:
    """A failure's error code, with what exactly failed: `PLAN_INVALID (UNKNOWN_COLUMN, GROUP_BY_MISMATCH)`."""
    code, details = failure.get("error_code"), failure.get("error_details") or []
    return f"{code} ({', '.join(details)})" if code and details else code


def _cell(value: Any) -> str:
    """A markdown table cell: '–' for nothing, pipes escaped."""
    return "–" if value is None or value == "" else str(value).replace("|", "\\|").replace("\n", " ")


def _pct(value: float | None, interval: list[float] | None = None) -> str:
    if value is None:
        return "–"
    text = f"{100 * value:.1f}%"
    return text + (f" [{100 * interval[0]:.1f}–{100 * interval[1]:.1f}]" if interval else "")


def _why(record: CaseRecord) -> str:
    failed = [name for name, s in record.scores.items() if s["passed"] is False]
    detail = record.error or ""
    if "outcome" in failed:
        got = record.scores["outcome"]["detail"].get("got")
        code = f" {record.error_code}" if record.error_code and got in ("error", "stopped") else ""
        detail = detail or f"expected {record.outcome}, got {got}{code}"
    if "retrieval_recall" in failed:
        d = record.scores["retrieval_recall"]["detail"]
        detail = "missed " + ", ".join(d.get("missed_tables", []) + d.get("missed_columns", []))
    if "routing" in failed:
        detail = (detail + "; " if detail else "") + f"routed to {record.scores['routing']['detail'].get('picks')}"
    return f"{', '.join(failed) or 'no score'}: {detail}".strip(": ")


def failure_detail(record: CaseRecord) -> dict[str, Any]:
    """A run's codes and counts (no rows, no answer text), as the failures table and the records show them."""
    return {key: getattr(record, key) for key in DETAIL_KEYS if key != "status"}


def build_board(config: str, records: Sequence[CaseRecord], planned_runs: int) -> Board:
    """Aggregate one config's records."""
    runs = len(records)
    strict = sum(r.passed for r in records)
    lenient = sum(r.lenient_passed for r in records)
    by_tag: dict[str, list[CaseRecord]] = defaultdict(list)
    for r in records:
        for tag in r.tags:
            by_tag[tag].append(r)
    by_case: dict[tuple[str, str], list[CaseRecord]] = defaultdict(list)
    for r in records:
        by_case[(r.case_id, r.role)].append(r)
    passes = max((r.pass_index for r in records), default=0) + 1
    pass_k = determinism = None
    if passes > 1:
        pass_k = {"strict": _share(sum(all(x.passed for x in rs) for rs in by_case.values()), len(by_case)),
                  "lenient": _share(sum(all(x.lenient_passed for x in rs) for rs in by_case.values()), len(by_case))}
        determinism = _share(sum(len({x.rows_digest for x in rs}) == 1 for rs in by_case.values()), len(by_case))
    costs = [r.cost_usd for r in records if r.cost_usd is not None]
    faithful = [r for r in records if r.scores.get("faithfulness", {}).get("passed") is not None]
    recall = [r.scores["retrieval_recall"]["detail"] for r in records
              if r.scores.get("retrieval_recall", {}).get("passed") is not None]
    routed = [r.scores["routing"]["detail"] for r in records if r.scores.get("routing", {}).get("passed") is not None]
    board = Board(
        config=config, planned_runs=planned_runs, runs=runs, cases=len({r.case_id for r in records}),
        execution_accuracy=_share(strict, runs),
        execution_interval=[round(x, 4) for x in wilson_interval(strict, runs)] if runs else None,
        lenient_accuracy=_share(lenient, runs), lenient_interval=[round(x, 4) for x in wilson_interval(lenient, runs)]
        if runs else None,
        by_tag={t: {"runs": len(rs), "accuracy": _share(sum(x.passed for x in rs), len(rs))}
                for t, rs in sorted(by_tag.items())},
        pass_k=pass_k, determinism=determinism, cost_usd=round(sum(costs), 6) if costs else None,
        tokens={"input": sum(r.tokens.get("input") or 0 for r in records),
                "output": sum(r.tokens.get("output") or 0 for r in records)},
        latency_p50_s=_percentile([r.latency_s for r in records], 0.5),
        latency_p95_s=_percentile([r.latency_s for r in records], 0.95),
        failures=[{"case_id": r.case_id, "role": r.role, "pass": r.pass_index, "why": _why(r), **failure_detail(r)}
                  for r in records if not r.passed],
        records=[asdict(r) for r in records])
    if faithful:
        unfaithful = [{"case_id": r.case_id, "role": r.role, "answer": r.answer,
                       **{k: r.scores["faithfulness"]["detail"].get(k) for k in ("unsupported_numbers",
                                                                                "unsupported_entities")}}
                      for r in faithful if not r.scores["faithfulness"]["passed"]]
        board.faithfulness = {"rate": _share(len(faithful) - len(unfaithful), len(faithful)),
                              "answers": len(faithful), "unfaithful": unfaithful}
    if recall:
        board.retrieval = {
            "table_recall": _mean([d["table_recall"] for d in recall]),
            "column_recall": _mean([d["column_recall"] for d in recall]),
            "tables_sent": _mean([len(d["tables_sent"]) for d in recall]),
            "columns_sent": _mean([len(d["columns_sent"]) for d in recall]),
            "perfect_tables": sum(d["table_recall"] == 1.0 for d in recall),
            "perfect_columns": sum(d["column_recall"] == 1.0 for d in recall), "runs": len(recall)}
    if routed:
        board.routing = {"top1": _share(sum(bool(d["top1"]) for d in routed), len(routed)),
                         "shortlist": _share(sum(bool(d["shortlist"]) for d in routed), len(routed)),
                         "runs": len(routed)}
    return board


def headline(board: Board) -> dict[str, Any]:
    """The contract's `metrics` from a board."""
    r, ro = board.retrieval or {}, board.routing or {}
    return {"cases": board.cases, "runs": board.runs, "execution_accuracy": board.execution_accuracy,
            "lenient_accuracy": board.lenient_accuracy, "table_recall": r.get("table_recall"),
            "column_recall": r.get("column_recall"), "tables_sent": r.get("tables_sent"),
            "columns_sent": r.get("columns_sent"), "routing_top1": ro.get("top1"),
            "routing_shortlist": ro.get("shortlist"), "cost_usd": board.cost_usd,
            "latency_p50_s": board.latency_p50_s, "latency_p95_s": board.latency_p95_s}


def build_report(mode: str, *, suite: dict[str, Any], database: dict[str, Any], settings: dict[str, Any],
                 records: Sequence[CaseRecord], planned: dict[str, int], stopped: str | None = None) -> EvalReport:
    """The report of a run: a board per config (in the order planned), metrics from the first."""
    boards = {name: build_board(name, [r for r in records if r.config == name], count)
              for name, count in planned.items()}
    first = next(iter(boards.values()))
    return EvalReport(mode=mode, suite=suite, database=database, settings=settings, boards=boards, stopped=stopped,
                      metrics={k: headline(first).get(k) for k in METRIC_KEYS})
