"""Routing on the extended wide test bed: 44 databases, eight of them siblings of another, five without keys.

Builds every database of `make_extended_bed` (benchmarks/perf/schemas.py) into a fresh state folder, with its
description and sample questions as the demo's are, the keyless ones written without PRIMARY KEY or REFERENCES,
then routes with the engine's defaults (`RoutingSettings()`, `route` as the ask flow calls it):

- the frozen suite `wide_frozen.yaml` (80 questions written before any routing was measured on this bed): top-1
  scored as the eval's `routing` scorer does (the first pick is a database the case names, and for a two-database
  case both are shortlisted), shortlist hit, how often the first pick is the case's sibling, and the cross-database
  cases with both databases in the picks;
- the template questions the generator writes for each database (held out from its sample questions): top-1 on
  all 44, and on the sixteen databases of the sibling pairs.

Writes wide_bed.json beside this file with the commit.

    .venv/bin/python benchmarks/routing/wide_bed.py [--state DIR] [--out FILE] [--quiet]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "perf"))

from index_wide import load_schemas, log, percentiles, timed  # noqa: E402

from nl2sql.config.models import ProfileSettings, RoutingSettings  # noqa: E402
from nl2sql.datasources import adapter_class  # noqa: E402
from nl2sql.index.build import build_datasource  # noqa: E402
from nl2sql.index.embed import Embedder  # noqa: E402
from nl2sql.index.retrieve import Retriever  # noqa: E402
from nl2sql.index.route import route  # noqa: E402
from nl2sql.index.store import StateStore  # noqa: E402

SUITE = HERE / "wide_frozen.yaml"


def commit() -> str:
    """The checkout's commit, with +changes when tracked files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def build_bed(store: StateStore, embedder: Embedder, work: Path, quiet: bool) -> tuple[list[Any], float]:
    """Every database of the extended bed, written to SQLite and indexed; the databases and the build time."""
    schemas = load_schemas()
    bed = schemas.make_extended_bed()
    started = time.perf_counter()
    for db in bed:
        path = schemas.write_sqlite(db.tables, work / f"{db.name}.sqlite", keys=db.keys)
        adapter = adapter_class("sqlite")(db.name, f"sqlite:///{path}")
        build_datasource(adapter, store, embedder, profile=ProfileSettings(), sample_questions=db.sample_questions,
                         description=db.description)
        adapter.close()
    log(quiet, f"built {len(bed)} databases")
    return bed, time.perf_counter() - started


def score(cases: Sequence[dict[str, Any]], routings: Sequence[Any]) -> dict[str, Any]:
    """Top-1 as the eval's routing scorer counts it, shortlist hit, sibling confusions, cross-database pairs."""
    top1 = hit = sibling = cross = cross_both = 0
    misses = []
    for case, routing in zip(cases, routings, strict=True):
        wanted, picks = case["databases"], list(routing.picks)
        both = all(d in picks for d in wanted)
        first = bool(picks) and picks[0] in wanted and (len(wanted) < 2 or both)
        top1 += first
        hit += both
        sibling += bool(picks) and picks[0] == case.get("sibling")
        if len(wanted) > 1:
            cross += 1
            cross_both += both
        if not first:
            misses.append({"id": case["id"], "question": case["question"], "wanted": wanted, "picks": picks})
    n = len(cases)
    return {"cases": n, "top1": round(top1 / n, 4), "shortlist_hit": round(hit / n, 4),
            "first_pick_is_sibling": sibling, "cross_database": cross,
            "cross_both_picked": round(cross_both / cross, 4) if cross else None, "misses": misses}


def run(state: Path | None, quiet: bool) -> dict[str, Any]:
    """Build, route, score; the report."""
    suite = yaml.safe_load(SUITE.read_text())["cases"]
    with tempfile.TemporaryDirectory(prefix="nl2sql-wide-bed-") as tmp:
        work = Path(tmp)
        store = StateStore(state or work / "state")
        embedder = Embedder(threads=2)
        bed, build_s = build_bed(store, embedder, work, quiet)
        ids = [db.name for db in bed]
        retriever = Retriever(store, embedder)
        for ds in ids:
            retriever.live(ds)
        settings = RoutingSettings()

        def routed(question: str) -> Any:
            return route(retriever, question, ids, lambda _d, _t: True, strategy=settings.strategy,
                         floor_ratio=settings.floor_ratio, limit=settings.shortlist, vote_k=settings.vote_k,
                         rrf_k=settings.rrf_k)

        latency: list[float] = []
        frozen = []
        for case in suite:
            routing, seconds = timed(lambda q=case["question"]: routed(q))
            frozen.append(routing)
            latency.append(seconds)
        schemas = load_schemas()
        pairs = set(schemas.SIBLING_OF) | set(schemas.SIBLING_OF.values())
        template_cases = [{"id": f"{db.name}:{i}", "question": q, "databases": [db.name],
                           "sibling": schemas.SIBLING_OF.get(db.name)
                           or next((s for s, d in schemas.SIBLING_OF.items() if d == db.name), None)}
                          for db in bed for i, q in enumerate(db.test_questions)]
        template = [routed(case["question"]) for case in template_cases]
        paired = [(c, r) for c, r in zip(template_cases, template, strict=True) if c["databases"][0] in pairs]
        report = {
            "commit": commit(), "suite": str(SUITE.relative_to(HERE.parent.parent)),
            "databases": len(bed), "siblings": len(schemas.SIBLINGS), "keyless": sorted(schemas.KEYLESS),
            "tables": sum(len(db.tables) for db in bed), "build_s": round(build_s, 1),
            "settings": {"strategy": settings.strategy, "floor_ratio": settings.floor_ratio,
                         "shortlist": settings.shortlist},
            "frozen": score(suite, frozen), "frozen_latency": percentiles(latency),
            "template_all": score(template_cases, template),  # its misses are what tuning may look at
            "template_sibling_pairs": {k: v for k, v in score([c for c, _ in paired], [r for _, r in paired]).items()
                                       if k != "misses"},
        }
        store.close()
    return report


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run, print the figures, write the JSON; the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", type=Path, help="reuse this state folder (embedding cache) instead of a fresh one")
    parser.add_argument("--out", type=Path, default=HERE / "wide_bed.json")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    report = run(args.state, args.quiet)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    frozen = report["frozen"]
    print(f"frozen suite: top-1 {frozen['top1']:.1%} of {frozen['cases']}, shortlist {frozen['shortlist_hit']:.1%}, "
          f"first pick the sibling {frozen['first_pick_is_sibling']}, cross-database both picked "
          f"{frozen['cross_both_picked']:.1%} of {frozen['cross_database']}")
    for name in ("template_all", "template_sibling_pairs"):
        figures = report[name]
        print(f"{name}: top-1 {figures['top1']:.1%} of {figures['cases']}, first pick the sibling "
              f"{figures['first_pick_is_sibling']}")
    for miss in frozen["misses"]:
        print(f"  miss {miss['id']}: {miss['question']} → {miss['picks']} (wanted {miss['wanted']})")
    return report


if __name__ == "__main__":
    main()
