"""What skipping the answerability check and the decomposer costs: for each threshold of
`settings.routing.ask_models_above` (and `ask_models_named`), how many questions still get those model calls and how many that need two
datasources would go to one alone.

Routes each case of the suites as the engine does (the demo project, indexed afresh unless --project; the first role
each case names), with no model: a question gets the calls when routing picks more than one datasource and the
second pick scores at least the threshold's share of the first, or the question names enough of it (or a two-part question's parts went to two
datasources, `routing.pairs`). A case whose gold names two or more datasources and that would not get them is
counted as lost (it is answered from routing's first pick alone); a case that needs one and gets them pays two model
calls (about 10 s and 65 s on 2 cores with the local 1.5B model, docs/models.md) that the flow's own rules mostly
overrule (benchmarks/routing/model_check.routing.json: the check moved no first pick to the right one).

    .venv/bin/python benchmarks/routing/model_skips.py [--suite suites/routing.yaml --suite suites/chinook.yaml]
        [--project DIR]

Writes benchmarks/routing/model_skips.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from nl2sql.evaluation.suite import load_suite
from nl2sql.index.route import RouteCandidate, Routing
from nl2sql.index.service import IndexService
from nl2sql.pipeline.steps import models_needed
from nl2sql.project import load_project

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
THRESHOLDS = (0.0, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 1.0)
NAMED = (None, 1.0, 2.0, 3.0)  # None: the share alone


def routed(index: IndexService, question: str, role: str) -> dict[str, Any]:
    """Routing's picks, the second pick's share of the first's score, and whether a pair was found."""
    routing = index.route(question, [role])
    by_id = {c.datasource_id: c for c in routing.candidates}
    picks = list(routing.picks)
    two = len(picks) > 1 and by_id[picks[0]].score > 0
    return {"picks": picks, "second_share": round(by_id[picks[1]].score / by_id[picks[0]].score, 4) if two else None,
            "second_named": by_id[picks[1]].evidence.get("lexical", 0.0) if two else None,
            "pair": list(routing.pair) if routing.pair else None}


def asked(record: dict[str, Any], threshold: float, named: float | None) -> bool:
    """Whether the question gets the model calls at these thresholds, as the flow decides (`models_needed`)."""
    candidates = [RouteCandidate(ds, 1.0, 1.0, {}, {}, {}) if i == 0 else
                  RouteCandidate(ds, record["second_share"] or 0.0, 0.0, {}, {}, {"lexical": record["second_named"] or 0.0})
                  for i, ds in enumerate(record["picks"][:2])]
    routing = Routing(record["picks"], candidates, {}, "evidence", {}, pair=record["pair"])
    return models_needed(routing, threshold, float("inf") if named is None else named)


def table(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per pair of thresholds: questions asked, two-datasource questions kept and lost, one-datasource ones asked."""
    rows = []
    for named, threshold in ((n, t) for n in NAMED for t in THRESHOLDS):
        got = [asked(r, threshold, named) for r in records]
        rows.append({"threshold": threshold, "named": named, "asked": sum(got),
                     "needs_two_asked": sum(g for g, r in zip(got, records, strict=True) if len(r["wanted"]) > 1),
                     "needs_two_lost": sum(not g for g, r in zip(got, records, strict=True) if len(r["wanted"]) > 1),
                     "needs_one_asked": sum(g for g, r in zip(got, records, strict=True) if len(r["wanted"]) == 1)})
    return rows


def main() -> None:
    """Route the suites' cases and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", action="append", type=Path)
    parser.add_argument("--project", type=Path)
    args = parser.parse_args()
    suites = args.suite or [ROOT / "suites/routing.yaml", ROOT / "suites/chinook.yaml"]
    with tempfile.TemporaryDirectory(prefix="nl2sql-model-skips-") as tmp:
        project = args.project or Path(tmp) / "demo"
        if not args.project:
            for command in (["init", "--demo", str(project), "--force"],
                            ["-c", str(project / "nl2sql.yaml"), "index", "build"]):
                subprocess.run([str(Path(sys.executable).parent / "nl2sql"), *command], check=True,
                               capture_output=True)
        index = IndexService(load_project(project / "nl2sql.yaml"))
        records = []
        for suite in suites:
            for case in load_suite(suite).cases:
                role = next(iter(case.outcome), "admin")
                if case.outcome and case.outcome[role] == "refused":
                    continue
                records.append({"id": case.id, "role": role, "wanted": case.datasources}
                               | routed(index, case.question, role))
    out = {"suites": [str(s.relative_to(ROOT)) if s.is_absolute() else str(s) for s in suites],
           "questions": len(records), "needs_two": sum(len(r["wanted"]) > 1 for r in records),
           "thresholds": table(records), "records": records}
    (HERE / "model_skips.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"{out['questions']} questions, {out['needs_two']} need two datasources")
    print("share | named | asked | needs two: asked, lost | needs one: asked")
    for row in out["thresholds"]:
        print(f"{row['threshold']:>5} | {row['named'] or '—':>5} | {row['asked']:>5} | {row['needs_two_asked']:>5}, "
              f"{row['needs_two_lost']:>4} | {row['needs_one_asked']:>5}")


if __name__ == "__main__":
    main()
