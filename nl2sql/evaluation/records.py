"""Result records under benchmarks/ (never edited: a run writes a new file) and the published pages.

`benchmarks/<mode>/<database>/<YYYY-MM-DD>_<sha7>_<config>.json` holds the record format, the run's
mode, the engine's version and commit (and whether its tracked files had changes), the suite's name
and digest, the database's identity, the config, the headline metrics and slim per-case verdicts
(passed, and the run's codes and counts: status, error code, parse retries, refiner rounds, repairs,
warning codes, model calls, latency; never rows or answer text).
`publish` rebuilds docs/benchmarks.md and the README's results block from every record, reading no
clock, so the same records always give the same bytes.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nl2sql.evaluation.gate import GateResult

RECORD_SCHEMA = 1
README_START, README_END = "<!-- benchmarks:start -->", "<!-- benchmarks:end -->"


def engine_version() -> str:
    """The installed nl2sql-engine version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nl2sql-engine")
    except PackageNotFoundError:
        return "unknown"


def git_state() -> tuple[str, bool | None]:
    """(commit, dirty) of the repository the engine is installed from; ("unknown", None) without one."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, check=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return "unknown", None
    return commit, dirty


def build_record(report: Mapping[str, Any], config: str, *, note: str | None = None,
                 now: dt.datetime | None = None) -> dict[str, Any]:
    """The record of one config of a report."""
    from nl2sql.evaluation.gate import verdicts
    from nl2sql.evaluation.report import METRIC_KEYS, Board, headline

    commit, dirty = git_state()
    board = report["boards"][config]
    details = verdict_details(board)
    return {
        "schema": RECORD_SCHEMA, "kind": report["mode"],
        "recorded_at": (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "engine_version": engine_version(), "git_commit": commit, "git_dirty": dirty, "note": note,
        "dataset": {"name": report["suite"]["name"], "digest": report["suite"]["digest"]},
        "database": report["database"], "config": {"name": config, "models": report["settings"].get(
            "models", {}).get(config, {})},
        "metrics": {k: headline(Board.model_validate(board)).get(k) for k in METRIC_KEYS},
        "verdicts": [{"case": key, "passed": passed, **details.get(key, {})}
                     for key, passed in sorted(verdicts(report, config).items())],
    }


def verdict_details(board: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """`case_id/role` → the codes and counts a record keeps of its runs (status, error code, parse retries, refiner
    rounds, repairs, warning codes, model calls, latency; no rows, no answer text). With several passes: the
    first failing pass's status, error code and error details (else the first pass's), counts summed, warnings
    of every pass, the slowest latency. Keys a run did not measure (mode retrieval has no model calls) are left out."""
    from nl2sql.evaluation.report import DETAIL_KEYS

    runs: dict[str, list[Mapping[str, Any]]] = {}
    for r in board.get("records", []):
        runs.setdefault(f"{r['case_id']}/{r['role']}", []).append(r)
    out = {}
    for key, rs in runs.items():
        rs = sorted(rs, key=lambda r: r.get("pass_index", 0))
        shown = next((r for r in rs if r.get("error_code")), rs[0])
        detail: dict[str, Any] = {}
        for name in DETAIL_KEYS:
            values = [r.get(name) for r in rs if r.get(name) is not None]
            if name in ("status", "error_code", "error_details"):
                value = shown.get(name)
            elif name == "warnings":
                value = [code for r in rs for code in r.get("warnings") or []] if values else None
            elif name == "latency_s":
                value = max(values) if values else None
            else:
                value = sum(values) if values else None
            if value is not None and value != []:
                detail[name] = value
        out[key] = detail
    return out


def check_recordable(report: Mapping[str, Any], source: str) -> None:
    """A record stands for the whole suite: a run sliced with --case, --tag or --limit is not recorded (it would
    become the baseline that later runs are gated against, on its slice only)."""
    from nl2sql.errors import ConfigError, ConfigProblem

    selection = (report.get("suite") or {}).get("selection")
    if selection:
        raise ConfigError(ConfigProblem(source, "suite.selection", f"the report covers {selection.get('cases')} of "
                                        f"{selection.get('of')} cases (a sliced run), and a record stands for the "
                                        "whole suite", "run the suite without --case, --tag or --limit and publish "
                                        "that report"))


def record_path(root: Path, record: Mapping[str, Any]) -> Path:
    """Where a record goes: a new file, `-2`, `-3`… when the name is taken."""
    folder = root / record["kind"] / record["database"]["datasource_id"]
    stem = f"{record['recorded_at'][:10]}_{record['git_commit'][:7]}_{record['config']['name']}"
    path, n = folder / f"{stem}.json", 1
    while path.exists():
        n += 1
        path = folder / f"{stem}-{n}.json"
    return path


def write_records(report: Mapping[str, Any], root: Path, *, note: str | None = None) -> list[Path]:
    """Write one record per config of a report (never of a sliced run); returns the paths."""
    check_recordable(report, "report")
    paths = []
    for config in report["boards"]:
        record = build_record(report, config, note=note)
        path = record_path(root, record)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n")
        paths.append(path)
    return paths


def read_records(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every record under root (`MODE/DATABASE/*.json`), in path order; other JSON there (a benchmark's data or
    figures) is not a record."""
    found = [(p, json.loads(p.read_text())) for p in sorted(root.glob("*/*/*.json"))]
    return [(p, r) for p, r in found if isinstance(r, dict) and "kind" in r and "metrics" in r]


def _order(path: Path, record: Mapping[str, Any]) -> tuple[str, int]:
    """Records in the order they were written: by time, then by their `-N` suffix."""
    stem = path.stem
    tail = stem.rsplit("-", 1)[1] if "-" in stem.rsplit("_", 1)[-1] else "1"
    return record["recorded_at"], int(tail) if tail.isdigit() else 1


def record_verdicts(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record in the shape the gate reads."""
    return {**record, "mode": record["kind"], "verdicts": [
        {"case_id": v["case"].rsplit("/", 1)[0], "role": v["case"].rsplit("/", 1)[1], "passed": v["passed"]}
        for v in record["verdicts"]]}


def newest_comparable(root: Path, report: Mapping[str, Any]) -> tuple[Path, dict[str, Any]] | None:
    """The newest record comparable with the report (same mode, suite digest, schema fingerprint)."""
    from nl2sql.evaluation.gate import identity

    wanted = identity(report)
    found = [(p, r) for p, r in read_records(root) if identity(record_verdicts(r)) == wanted]
    found.sort(key=lambda pr: _order(*pr))
    return (found[-1][0], record_verdicts(found[-1][1])) if found else None


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def benchmarks_page(root: Path) -> str:
    """docs/benchmarks.md from every record (deterministic)."""
    lines = ["# Benchmarks", "", "Generated by `nl2sql eval publish` from the records under `benchmarks/`; do not "
             "edit by hand.", ""]
    by_kind: dict[str, list[tuple[Path, dict]]] = {}
    for path, record in read_records(root):
        by_kind.setdefault(record["kind"], []).append((path, record))
    for kind in sorted(by_kind):
        lines += [f"## Mode {kind}", "", "| recorded | database | config | commit | cases | runs | strict | lenient "
                  "| table recall | column recall | columns sent | routing top-1 |", "|" + "---|" * 12]
        for _path, r in sorted(by_kind[kind], key=lambda pr: _order(*pr)):
            m = r["metrics"]
            lines.append(f"| {r['recorded_at'][:10]} | {r['database']['datasource_id']} | {r['config']['name']} | "
                         f"{r['git_commit'][:7]}{'+' if r.get('git_dirty') else ''} | {m['cases']} | {m['runs']} | "
                         f"{_pct(m['execution_accuracy'])} | {_pct(m['lenient_accuracy'])} | "
                         f"{_pct(m['table_recall'])} | {_pct(m['column_recall'])} | "
                         f"{m['columns_sent'] if m['columns_sent'] is not None else '–'} | {_pct(m['routing_top1'])} |")
        lines.append("")
    return "\n".join(lines)


def readme_block(root: Path) -> str:
    """The README's results: the newest record of each mode and database."""
    newest: dict[tuple[str, str], dict] = {}
    for _path, r in sorted(read_records(root), key=lambda pr: _order(*pr)):
        newest[(r["kind"], r["database"]["datasource_id"])] = r
    lines = [README_START, "| mode | database | strict | lenient | table recall | column recall | routing top-1 | "
             "recorded |", "|---|---|---|---|---|---|---|---|"]
    for (kind, database), r in sorted(newest.items()):
        m = r["metrics"]
        lines.append(f"| {kind} | {database} | {_pct(m['execution_accuracy'])} | {_pct(m['lenient_accuracy'])} | "
                     f"{_pct(m['table_recall'])} | {_pct(m['column_recall'])} | {_pct(m['routing_top1'])} | "
                     f"{r['recorded_at'][:10]} |")
    lines.append(README_END)
    return "\n".join(lines)


def publish(root: Path, docs_page: Path, readme: Path) -> None:
    """Rewrite docs/benchmarks.md and the README's results block from the records."""
    docs_page.write_text(benchmarks_page(root) + "\n")
    text = readme.read_text()
    if README_START in text and README_END in text:
        head, rest = text.split(README_START, 1)
        tail = rest.split(README_END, 1)[1]
        readme.write_text(head + readme_block(root) + tail)
    else:
        readme.write_text(text.rstrip("\n") + "\n\n## Results\n\n" + readme_block(root) + "\n")


def gate_against(report: Mapping[str, Any], baseline: Path, *, max_regressions: int = 0,
                 alpha: float = 0.05) -> GateResult:
    """The gate against a baseline file (a report or a record) or a folder of records (its newest record
    comparable with the run; none is a series break)."""
    from nl2sql.evaluation.gate import EXIT_USAGE, GateResult, run_gate

    if baseline.is_dir():
        found = newest_comparable(baseline, report)
        if found is None:
            return GateResult(exit_code=EXIT_USAGE, baseline=str(baseline), reason=(
                "no comparable record (same mode, suite digest and schema fingerprint): a series break. Record "
                "this run with `nl2sql eval publish REPORT`."))
        where, base = found
    else:
        where, base = baseline, json.loads(baseline.read_text(encoding="utf-8"))
        base = record_verdicts(base) if "verdicts" in base else base
    result = run_gate(report, base, max_regressions=max_regressions, alpha=alpha)
    result.baseline = str(where)
    return result
