"""The rule that a column two of whose values a question names is named by them, measured where it fires.

A question that sets two categories side by side by their values ("urgent" and "low" tickets, "mobile" and
"desktop" visitors) names the column they are values of without its name; routing counts that column as named
(`route.COMPARED_VALUES_POINTS`, the points of naming a column). Each set of questions is routed with the rule and
without it, as the ask flow routes (the project's routing settings, role admin), and for each question the script
records which databases the rule gave points to:

- right only: the question's database and no other (the rule is evidence for the right answer);
- wrong only: another database and not the question's (evidence against it);
- both: the question's database and another; none: no database (no two values of one column named).

with top-1 either way and the mean margin of the question's database over the best other one.

The sets: `compared_values.yaml` (24 questions over the demo, written from its profiled values and frozen before
anything was measured), the demo's routing suite `suites/routing.yaml` (its figure as the eval gate counts it), and
with `--beds`, the generated `compared_questions` of the wide test bed's seeds (benchmarks/perf/schemas.py: 160 a
seed, databases built as `wide_bed.py` builds them).

Writes compared_values.json beside this file with the commit.

    .venv/bin/python benchmarks/routing/compared_values.py [--beds 42 7 99] [--state DIR] [--quiet]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent / "retrieval")]

from chinook_quality import build as build_demo  # noqa: E402
from wide_bed import build_bed, commit, first_right, load_schemas, log, route_on_bed, routing  # noqa: E402

from nl2sql.index.embed import Embedder  # noqa: E402
from nl2sql.index.retrieve import Retriever  # noqa: E402
from nl2sql.index.service import IndexService  # noqa: E402
from nl2sql.index.store import StateStore  # noqa: E402

FROZEN = HERE / "compared_values.yaml"
SUITE = ROOT / "suites" / "routing.yaml"
OUTPUT = HERE / "compared_values.json"


def where_it_fires(cases: Sequence[tuple[str, list[str]]], routed: Callable[[str], Any]) -> dict[str, Any]:
    """Route each (question, databases) with the rule and without it: top-1 both ways, who the rule gave points to,
    the mean margin of the question's first database, and the questions whose first pick the rule changed."""
    fires = {"right only": 0, "wrong only": 0, "both": 0, "none": 0}
    top1 = {"with": 0, "without": 0}
    margin = {"with": 0.0, "without": 0.0}
    changed = []
    for question, wanted in cases:
        with_rule = routed(question)
        with mock.patch.object(routing, "COMPARED_VALUES_POINTS", 0.0):
            without = routed(question)
        before = {c.datasource_id: c.evidence.get("lexical", 0.0) for c in without.candidates}
        given = {c.datasource_id for c in with_rule.candidates if c.evidence.get("lexical", 0.0) > before[c.datasource_id]}
        right, wrong = bool(given & set(wanted)), bool(given - set(wanted))
        fires["both" if right and wrong else "right only" if right else "wrong only" if wrong else "none"] += 1
        for name, result in (("with", with_rule), ("without", without)):
            top1[name] += first_right(wanted, result.picks)
            scores = {c.datasource_id: c.score for c in result.candidates}
            others = [s for ds, s in scores.items() if ds not in wanted]
            margin[name] += scores.get(wanted[0], 0.0) - max(others, default=0.0)
        if with_rule.picks[:1] != without.picks[:1]:
            changed.append({"question": question, "wanted": wanted, "with": with_rule.picks, "without": without.picks})
    n = len(cases) or 1
    return {"cases": len(cases), "top1_with": round(top1["with"] / n, 4), "top1_without": round(top1["without"] / n, 4),
            "fires": fires, "margin_with": round(margin["with"] / n, 4), "margin_without": round(margin["without"] / n, 4),
            "changed": changed}


def demo_sets(work: Path) -> dict[str, Any]:
    """The frozen demo set and the routing suite, on a fresh demo build."""
    config, retriever = build_demo(work)
    service = IndexService(config, retriever.store, retriever)

    def cases_of(path: Path) -> list[tuple[str, list[str]]]:
        return [(c["question"], c["datasources"]) for c in yaml.safe_load(path.read_text())["cases"]]

    def routed(question: str) -> Any:
        return service.route(question, "admin")

    report = {"compared_values.yaml": where_it_fires(cases_of(FROZEN), routed),
              "suites/routing.yaml": where_it_fires(cases_of(SUITE), routed)}
    retriever.store.close()
    return report


def bed_set(seed: int, state: Path | None, work: Path, quiet: bool) -> dict[str, Any]:
    """The wide bed's generated comparison questions for one seed."""
    schemas = load_schemas()
    store = StateStore(state / f"seed{seed}" if state else work / f"state{seed}")
    embedder = Embedder(threads=2)
    bed, _ = build_bed(store, embedder, work, quiet, seed)
    retriever = Retriever(store, embedder)
    ids = [db.name for db in bed]
    cases = [(q, [db]) for q, db in schemas.compared_questions(bed, seed)]
    report = where_it_fires(cases, lambda question: route_on_bed(retriever, question, ids))
    store.close()
    return report


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run, print the figures, write the JSON; the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beds", type=int, nargs="*", default=[], help="wide-bed seeds whose questions to add")
    parser.add_argument("--state", type=Path, help="keep the beds' state folders here (embedding cache)")
    parser.add_argument("--out", type=Path, default=OUTPUT)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"commit": commit(), "points": routing.COMPARED_VALUES_POINTS}
    with tempfile.TemporaryDirectory(prefix="nl2sql-compared-") as tmp:
        report["sets"] = demo_sets(Path(tmp) / "demo")
        for seed in args.beds:
            log(args.quiet, f"wide bed, seed {seed}")
            report["sets"][f"wide bed seed {seed}"] = bed_set(seed, args.state, Path(tmp), args.quiet)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for name, figures in report["sets"].items():
        fires = ", ".join(f"{k} {v}" for k, v in figures["fires"].items())
        print(f"{name}: {figures['cases']} questions, top-1 {figures['top1_without']:.1%} without the rule, "
              f"{figures['top1_with']:.1%} with it; it gives points to: {fires}; mean margin "
              f"{figures['margin_without']:+.4f} → {figures['margin_with']:+.4f}")
        for case in figures["changed"]:
            print(f"  changed: {case['question']} → {case['with'][:2]} (was {case['without'][:2]}, "
                  f"wanted {case['wanted']})")
    return report


if __name__ == "__main__":
    main()
