"""Scorers: what each run of a case is judged on, a registry of them, and the five built-ins.

A scorer takes a `CaseRun` (one case, one role, what the engine returned) and gives a `Score`:
passed True or False, or None when it does not apply to the run. The built-ins (`result_match`,
`outcome`, `faithfulness`, `retrieval_recall`, `routing`) are registered exactly as a plugin's
entry point (group `nl2sql.scorers`) would be.

`result_match` scores twice: strict is the execution match of `compare.rows_match` (the same
columns in the same order, the same rows); lenient lets every gold column be answered by a distinct
column of the result wherever it sits, under a column cap, with no constant column standing in for a
gold one, and with gold date labels (2009, 2013-02) matching a date that starts with them.

>>> sorted(SCORERS)
['faithfulness', 'outcome', 'result_match', 'retrieval_recall', 'routing']
>>> lenient_match([["Rock", 12]], [[12, "Rock", 1]])
True
>>> lenient_match([["2009"], ["2010"]], [["2009-01-01"], ["2010-01-01"]])
True
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from nl2sql.datasources.compare import TOLERANCE, canonical_value, rows_match, values_match
from nl2sql.errors import GENERIC_REFUSAL, UnknownNameError
from nl2sql.evaluation.faithfulness import check_faithfulness
from nl2sql.evaluation.suite import EvalCase

if TYPE_CHECKING:
    from nl2sql.pipeline.result import QueryResult

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "nl2sql.scorers"
SECURITY_VIOLATION = "SECURITY_VIOLATION"
QUESTION_NOT_ANSWERABLE = "QUESTION_NOT_ANSWERABLE"

_DATE_LABEL = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


@dataclass
class CaseRun:
    """One run of one case for one role."""

    case: EvalCase
    role: str
    result: QueryResult | None = None
    retrieval: dict | None = None
    latency_s: float | None = None
    error: str | None = None
    #: The code of an engine fault that ended the run (an exception, not a result).
    error_code: str | None = None
    #: What the run's trace counted: model calls, parse retries, refiner rounds.
    trace_counts: dict[str, int] = field(default_factory=dict)


@dataclass
class Score:
    """One scorer's verdict on one run: passed (None when it does not apply) and what it saw."""

    name: str
    passed: bool | None
    detail: dict = field(default_factory=dict)


Scorer = Callable[[CaseRun], Score]


# --- row comparison: strict and lenient -------------------------------------------------------------


def _label_match(gold: Any, predicted: Any, tolerance: float = TOLERANCE) -> bool:
    """A value match, or a gold YYYY / YYYY-MM / YYYY-MM-DD string label that a longer predicted date starts with."""
    if values_match(gold, predicted, tolerance=tolerance):
        return True
    if not isinstance(gold, str) or not _DATE_LABEL.match(gold):
        return False
    text = canonical_value(predicted)
    if not isinstance(text, str) or not _ISO_DATE.match(text):
        return False
    return len(text) > len(gold) and text.startswith(gold) and text[len(gold)] in "- T"


def _perfect_matching(n: int, ok: Callable[[int, int], bool]) -> bool:
    """Whether n left items can each be paired with a distinct one of n right items (Kuhn's augmenting paths)."""
    adjacency = [[j for j in range(n) if ok(i, j)] for i in range(n)]
    if any(not a for a in adjacency):
        return False
    match_left, match_right = [-1] * n, [-1] * n
    for root in range(n):
        seen = [False] * n
        parent: dict[int, int] = {}
        stack = [(root, iter(adjacency[root]))]
        free = -1
        while stack and free < 0:
            left, candidates = stack[-1]
            for right in candidates:
                if seen[right]:
                    continue
                seen[right] = True
                parent[right] = left
                if match_right[right] < 0:
                    free = right
                else:
                    stack.append((match_right[right], iter(adjacency[match_right[right]])))
                break
            else:
                stack.pop()
        if free < 0:
            return False
        right = free
        while True:
            left = parent[right]
            previous = match_left[left]
            match_left[left], match_right[right] = right, left
            if left == root:
                break
            right = previous
    return True


def _same_multiset(gold: Sequence[Any], predicted: Sequence[Any], eq: Callable[[Any, Any], bool]) -> bool:
    if len(gold) != len(predicted):
        return False
    return _perfect_matching(len(gold), lambda i, j: eq(gold[i], predicted[j]))


def _constant(values: Sequence[Any]) -> bool:
    return len({repr(canonical_value(v)) for v in values}) <= 1


def lenient_match(gold: Sequence[Sequence[Any]], predicted: Sequence[Sequence[Any]], *,
                  order_matters: bool = False, tolerance: float = TOLERANCE) -> bool:
    """Whether every gold column is answered by a distinct result column, rows lined up (strict passes too).

    >>> lenient_match([["a"], ["b"]], [["a", 1], ["b", 1]])  # the extra column is constant: allowed
    True
    >>> lenient_match([["a", 1], ["b", 1]], [["a", 1], ["b", 1]])  # constant gold column: only strict passes it
    True
    """
    if rows_match(gold, predicted, order_matters=order_matters, tolerance=tolerance):
        return True
    if len(gold) != len(predicted) or not gold:
        return False
    width = len(gold[0])
    widths = {len(r) for r in predicted}
    if len(widths) != 1 or any(len(r) != width for r in gold):
        return False
    available = widths.pop()
    if available > max(2 * width, width + 2):
        return False  # the column cap: a SELECT * does not pass by carrying the gold columns
    gold_cols = [[r[i] for r in gold] for i in range(width)]
    pred_cols = [[r[j] for r in predicted] for j in range(available)]

    def eq(g: Any, p: Any) -> bool:
        return _label_match(g, p, tolerance)

    usable = [j for j in range(available) if len(predicted) == 1 or not _constant(pred_cols[j])]
    candidates = [[j for j in usable if _same_multiset(gold_cols[i], pred_cols[j], eq)] for i in range(width)]
    if any(not c for c in candidates):
        return False

    def rows_line_up(assignment: list[int]) -> bool:
        projected = [[row[j] for j in assignment] for row in predicted]

        def row_eq(a: Sequence[Any], b: Sequence[Any]) -> bool:
            return all(eq(x, y) for x, y in zip(a, b, strict=True))

        if order_matters:
            return all(row_eq(g, p) for g, p in zip(gold, projected, strict=True))
        return _same_multiset(gold, projected, row_eq)

    def assign(i: int, chosen: list[int]) -> bool:
        if i == width:
            return rows_line_up(chosen)
        return any(assign(i + 1, [*chosen, j]) for j in candidates[i] if j not in chosen)

    return assign(0, [])


# --- reading a result -------------------------------------------------------------------------------


def _predicted(result: QueryResult) -> tuple[list[list[Any]] | None, str | None]:
    """The rows result_match reads, or None and why there are none."""
    if result.status != "success":
        return None, f"status {result.status}"
    if result.combined is not None:
        return [list(r) for r in result.combined.rows], None
    answered = [sq for sq in result.sub_queries if sq.error is None]
    if len(answered) != 1:
        return None, f"{len(answered)} result sets and no combined result"
    return [list(r) for r in answered[0].rows], None


def _gold(rows: list[dict[str, Any]]) -> list[list[Any]]:
    return [list(row.values()) for row in rows]


def strict_rows_match(case: EvalCase, rows: Sequence[Sequence[Any]]) -> bool:
    """Whether rows match one of the case's accepted answers as `result_match` reads strictly: for a statement
    run outside an eval (a benchmark's baseline, a replayed statement)."""
    return any(rows_match(_gold(gold), rows, order_matters=case.order_matters) for gold in case.gold_rows())


def _all_errors(result: QueryResult) -> list[Any]:
    return [*result.errors, *(sq.error for sq in result.sub_queries if sq.error is not None)]


def _has_rows(result: QueryResult) -> bool:
    if result.combined is not None and result.combined.rows:
        return True
    return any(sq.rows for sq in result.sub_queries)


def _expected(run: CaseRun) -> str | None:
    case = run.case
    if run.role in case.outcome:
        return case.outcome[run.role]
    if not case.outcome and case.answerable:
        return "allowed"
    return None


def _got(result: QueryResult) -> str:
    codes = {e.code for e in _all_errors(result)}
    if result.status == "success":
        return "allowed"
    if SECURITY_VIOLATION in codes:
        return "refused"
    if QUESTION_NOT_ANSWERABLE in codes:
        return "unanswerable"
    return result.status


# --- the built-ins ----------------------------------------------------------------------------------


def result_match(run: CaseRun) -> Score:
    """Strict and lenient execution match against rows or any alternative (passed = strict); allowed runs only."""
    name = "result_match"
    if _expected(run) != "allowed" or run.case.kind != "answer":
        return Score(name, None, {"reason": "the case's outcome for this role is not allowed"})
    golds = ([("rows", run.case.rows)] if run.case.rows is not None else []) + [
        (f"alt_rows[{i}]", alt) for i, alt in enumerate(run.case.alt_rows)
    ]
    if not golds:
        return Score(name, None, {"strict": False, "lenient": False, "matched": None,
                                  "reason": "the case has no gold rows: run `nl2sql eval regenerate`"})
    if run.result is None:
        if run.error is None:
            return Score(name, None, {"reason": "no result in this mode"})
        return Score(name, False, {"strict": False, "lenient": False, "matched": None, "reason": run.error})
    predicted, why = _predicted(run.result)
    if predicted is None:
        return Score(name, False, {"strict": False, "lenient": False, "matched": None, "reason": why})
    order = run.case.order_matters
    strict_hit = lenient_hit = None
    for label, rows in golds:
        gold = _gold(rows)
        if strict_hit is None and rows_match(gold, predicted, order_matters=order):
            strict_hit = label
        if lenient_hit is None and lenient_match(gold, predicted, order_matters=order):
            lenient_hit = label
    return Score(name, strict_hit is not None,
                 {"strict": strict_hit is not None, "lenient": lenient_hit is not None,
                  "matched": strict_hit or lenient_hit})


def outcome(run: CaseRun) -> Score:
    """Whether the run ended the way the case expects for the role: allowed, refused or unanswerable."""
    name = "outcome"
    expected = _expected(run)
    if expected is None:
        return Score(name, None, {"expected": None, "got": None, "reason": "the case has no outcome for this role"})
    if run.result is None:
        if run.error is None:
            return Score(name, None, {"expected": expected, "got": None, "reason": "no result in this mode"})
        return Score(name, False, {"expected": expected, "got": "fault", "reason": run.error})
    result = run.result
    got = _got(result)
    detail: dict[str, Any] = {"expected": expected, "got": got}
    errors = _all_errors(result)
    if expected == "allowed":
        passed = result.status == "success"
    elif expected == "refused":
        security = [e for e in errors if e.code == SECURITY_VIOLATION]
        generic = bool(security) and all(e.message == GENERIC_REFUSAL for e in security)
        passed = result.status == "error" and generic and not _has_rows(result)
        if security and not generic:
            detail["reason"] = "the refusal is not the generic message (it may name what was refused)"
    else:
        passed = (result.status == "error" and any(e.code == QUESTION_NOT_ANSWERABLE for e in errors)
                  and not _has_rows(result))
    if not passed and expected != "allowed" and _has_rows(result):
        detail["reason"] = "rows were returned"
    return Score(name, passed, detail)


def faithfulness(run: CaseRun) -> Score:
    """Whether the written answer's numbers and names are supported by the rows returned (answered runs only)."""
    name = "faithfulness"
    result = run.result
    if result is None or result.status != "success":
        return Score(name, None, {})
    answer = f"{result.answer.summary}\n{result.answer.content}"
    if not answer.strip():
        return Score(name, None, {})
    sets: list[tuple[list[str], list[list[Any]]]] = []
    if result.combined is not None:
        sets.append((result.combined.columns, result.combined.rows))
    sets.extend((sq.columns, sq.rows) for sq in result.sub_queries if sq.error is None)
    columns, rows = sets[0] if sets else ([], [])
    questions = dict.fromkeys(q for q in (run.case.question, result.question) if q)
    verdict = check_faithfulness(answer, "\n".join(questions), columns, rows, more=sets[1:])
    return Score(name, verdict.faithful, asdict(verdict))


def _sent(needed: str, sent: set[str]) -> bool:
    key = needed.casefold()
    return key in sent or any(s.endswith("." + key) for s in sent)


def retrieval_recall(run: CaseRun) -> Score:
    """Table and column recall of what the schema retriever sent (answer cases the role may read)."""
    name = "retrieval_recall"
    if run.retrieval is None or run.case.kind != "answer" or _expected(run) != "allowed":
        return Score(name, None, {})
    tables_sent = list(run.retrieval.get("tables_sent") or [])
    columns_sent = list(run.retrieval.get("columns_sent") or [])
    sent_tables = {t.casefold() for t in tables_sent}
    sent_columns = {c.casefold() for c in columns_sent}
    tables = list(dict.fromkeys(run.case.tables))
    columns = list(dict.fromkeys(run.case.columns))
    missed_tables = [t for t in tables if not _sent(t, sent_tables)]
    missed_columns = [c for c in columns if not _sent(c, sent_columns)]
    table_recall = 1.0 - len(missed_tables) / len(tables) if tables else 1.0
    column_recall = 1.0 - len(missed_columns) / len(columns) if columns else 1.0
    return Score(name, table_recall == 1.0 and column_recall == 1.0,
                 {"table_recall": table_recall, "column_recall": column_recall, "missed_tables": missed_tables,
                  "missed_columns": missed_columns, "tables_sent": tables_sent, "columns_sent": columns_sent})


def routing(run: CaseRun) -> Score:
    """Whether the router's first pick is a datasource the case names (all of them shortlisted for a multi-source case)."""
    name = "routing"
    if run.retrieval is None or "picks" not in run.retrieval:
        return Score(name, None, {})
    picks = list(run.retrieval.get("picks") or [])
    shortlisted = list(run.retrieval.get("shortlist", picks) or [])
    wanted = run.case.datasources
    shortlist = all(d in shortlisted for d in wanted)
    top1 = bool(picks) and picks[0] in wanted and (len(wanted) < 2 or shortlist)
    return Score(name, top1, {"top1": top1, "shortlist": shortlist, "picks": picks})


# --- the registry -----------------------------------------------------------------------------------

SCORERS: dict[str, Scorer] = {
    "result_match": result_match,
    "outcome": outcome,
    "faithfulness": faithfulness,
    "retrieval_recall": retrieval_recall,
    "routing": routing,
}


def scorer(name: str) -> Scorer:
    """A registered scorer (built-in or from the `nl2sql.scorers` entry point group)."""
    if name not in SCORERS:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name == name:
                SCORERS[name] = ep.load()
                break
    if name not in SCORERS:
        known = set(SCORERS) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
        raise UnknownNameError("scorer", name, known)
    return SCORERS[name]


def score_run(run: CaseRun, names: Sequence[str]) -> dict[str, Score]:
    """Score one run with the named scorers, in order; a scorer that raises fails the run with the error."""
    functions = {n: scorer(n) for n in names}
    scores: dict[str, Score] = {}
    for n, function in functions.items():
        try:
            score = function(run)
        except Exception as exc:
            log.exception("scorer %s failed on case %s (role %s)", n, run.case.id, run.role)
            score = Score(n, False, {"error": f"{type(exc).__name__}: {exc}"})
        scores[n] = score
    return scores
