"""Answer-shape rules measured without a model: a benchmark record's statements shaped again and re-scored.

The shape rules (`settings.pipeline.planner.answer_shape`, nl2sql/plan/shape.py) rewrite a validated plan after
the model has written it and change no model call before it, so one rule's ablation needs no second run: each
engine statement of a record (`benchmarks/models/NAME.json`, written by run.py) is read back into a plan, the
rules asked for are applied as the planner step applies them (then validated again), the statement is run
read-only and its rows scored against the case's gold rows with the eval's strict comparison. Cases with no
statement, or more than one, keep their verdict.

    .venv/bin/python benchmarks/models/replay_shape.py spider200 --rules distinct
    .venv/bin/python benchmarks/models/replay_shape.py after-chinook66-cut --rules distinct

It prints the cases each rule set turns right and wrong, and the strict figure before and after. It measures a
rule added to what the run had; a rule the run already had is measured by the run without it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

from nl2sql.config.models import AnswerShapeRule
from nl2sql.datasources.connect import DatasourceCatalog
from nl2sql.demo import init_demo
from nl2sql.errors import NL2SQLError
from nl2sql.evaluation.scorers import strict_rows_match
from nl2sql.evaluation.suite import EvalCase, load_suite
from nl2sql.plan.from_sql import plan_from_sql
from nl2sql.plan.generate import generate_sql
from nl2sql.plan.shape import shape_answer
from nl2sql.plan.validate import validate_plan
from nl2sql.policies import scope
from nl2sql.project import load_project

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from spider import spider_project, spider_suite  # noqa: E402  (beside this script)


def main() -> None:
    """Replay one record with more shape rules and print what changed."""
    args = _args()
    record = json.loads((HERE / f"{args.record}.json").read_text())
    rules = cast(list[AnswerShapeRule], args.rules.split(","))
    with tempfile.TemporaryDirectory(prefix="nl2sql-replay-") as folder:
        config_path, suite_path = _project(record, Path(folder))
        config = load_project(config_path)
        cases = {c.id: c for c in load_suite(suite_path).cases}
        engine = record["systems"]["engine"]
        before = after = 0
        changed: list[str] = []
        with DatasourceCatalog(config) as catalog:
            snapshots: dict[str, Any] = {}
            for r in engine["records"]:
                passed = bool(r["passed"])
                before += passed
                verdict = passed
                if r["outcome"] == "allowed" and len(r["sql"]) == 1 and r["case_id"] in cases:
                    case = cases[r["case_id"]]
                    ds = r.get("datasource") or case.datasources[0]
                    if ds not in snapshots:
                        snapshots[ds] = catalog.get(ds).reflect()
                    reshaped = _reshaped(r["sql"][0], snapshots[ds], config, ds, r["role"], rules, case.question)
                    if reshaped is not None:
                        verdict = _scored(catalog, ds, reshaped, case, config.settings.pipeline.row_limit)
                        if verdict != passed:
                            changed.append(f"{r['case_id']}: {'right' if verdict else 'wrong'} with {args.rules}"
                                           f"\n    {reshaped}")
                after += verdict
        total = len(engine["records"])
        print(f"{args.record} (commit {record['commit'][:7]}): strict {before}/{total} as run, {after}/{total} "
              f"with {args.rules} added")
        print("\n".join(changed) or "no verdict changed")


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("record", help="A record's name: benchmarks/models/NAME.json")
    parser.add_argument("--rules", required=True, help="Shape rules to add, comma-separated (e.g. distinct).")
    return parser.parse_args()


def _project(record: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    """The record's project and suite, written into `folder`: Spider's databases and draw, or the demo and the
    record's suite."""
    spider = record["settings"].get("spider")
    if spider:
        return spider_project(folder / "project"), spider_suite(folder / "spider.yaml", spider,
                                                                record["settings"]["seed"])
    return init_demo(folder / "project", env={}), ROOT / record["suite"]


def _reshaped(sql: str, snapshot: Any, config: Any, datasource: str, role: str,
              rules: list[AnswerShapeRule], question: str = "") -> str | None:
    """The statement with the rules applied and validated again (None: unchanged, or no longer valid)."""
    caller = scope(config.policies, [role], datasource)
    try:
        validated = validate_plan(plan_from_sql(sql, snapshot.dialect, snapshot.column_names()), snapshot, caller)
        readable = {t.name: t for t in snapshot.tables if caller.allows(t.name, t.schema_name)}
        shaped, added = shape_answer(validated.plan, {t.name: t for t in validated.tables}, rules,
                                     readable=readable, question=question)
        if not added:
            return None
        reshaped = validate_plan(shaped, snapshot, caller)
        return generate_sql(reshaped.plan, snapshot.dialect, schemas=reshaped.schemas)
    except NL2SQLError:
        return None


def _scored(catalog: DatasourceCatalog, datasource: str, sql: str, case: EvalCase, row_limit: int) -> bool:
    """Whether the statement's rows match one of the case's gold answers (strict: same columns, same rows)."""
    try:
        result = catalog.get(datasource).execute(sql, row_limit=row_limit)
    except NL2SQLError:
        return False
    return strict_rows_match(case, [list(row) for row in result.plain_frame().values.tolist()])


if __name__ == "__main__":
    main()
