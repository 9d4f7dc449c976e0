"""Routing on the extended wide test bed: 44 databases, eight of them siblings of another, five without keys.

Builds every database of `make_extended_bed` (benchmarks/perf/schemas.py) into a fresh state folder, with its
description and sample questions as the demo's are, the keyless ones written without PRIMARY KEY or REFERENCES,
then routes with the engine's defaults (`RoutingSettings()`, `route` as the ask flow calls it):

- the frozen suite `wide_frozen.yaml` (80 questions written before any routing was measured on this bed): top-1
  scored as the eval's `routing` scorer does (the first pick is a database the case names, and for a two-database
  case both are shortlisted), shortlist hit, how often the first pick is the case's sibling, and the cross-database
  cases with both databases in the picks;
- the template questions the generator writes for each database (held out from its sample questions): top-1 on
  all 44, and on the sixteen databases of the sibling pairs;
- 160 questions about two databases chosen at random (`cross_questions`: an entity's everyday name from each,
  "Put our donors side by side with the educators"): top-1 as above (both databases shortlisted); and 160 about
  one database with a joining word in them (`joined_questions`: "Group the donors by channel and count them"):
  top-1, and how many were given a pair of databases; and 160 setting two categories of an entity side by side by
  their values (`compared_questions`: "Are urgent tickets closed faster than low ones?"): top-1;
- ablations: the same questions routed with one signal of the evidence strategy taken out at a time (`ABLATIONS`).

`--seed` builds the bed from another seed (other sizes, columns, rows and generated questions; the frozen suite is
written for seed 42 and is routed only there): the beds routing changes are tried on before the frozen suite.

Writes wide_bed.json beside this file with the commit.

    .venv/bin/python benchmarks/routing/wide_bed.py [--seed 42] [--no-ablations] [--state DIR] [--out FILE] [--quiet]
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "perf"))

from index_wide import load_schemas, log, percentiles, timed  # noqa: E402

from nl2sql.config.models import ProfileSettings, RoutingSettings  # noqa: E402
from nl2sql.datasources import adapter_class  # noqa: E402
from nl2sql.index.build import build_datasource  # noqa: E402
from nl2sql.index.embed import Embedder  # noqa: E402
from nl2sql.index.retrieve import Retriever, ScopeView  # noqa: E402
from nl2sql.index.route import route  # noqa: E402
from nl2sql.index.store import StateStore  # noqa: E402

routing = importlib.import_module("nl2sql.index.route")  # the module (the package exports its function)

SUITE = HERE / "wide_frozen.yaml"
FROZEN_SEED = 42
NO_ENTRIES = property(lambda _view: np.array([], dtype=np.int64))
#: Each ablation: what it takes out of the evidence strategy, as patches of the routing module's weights.
ABLATIONS: dict[str, Callable[[], list[Any]]] = {
    "no names or values (lexical weight 0)": lambda: [mock.patch.object(routing, "LEXICAL_WEIGHT", 0.0)],
    "no profiled values": lambda: [mock.patch.object(routing, "value_terms", lambda _value: frozenset())],
    "no BM25": lambda: [mock.patch.object(routing, "BM25_WEIGHT", 0.0)],
    "no description in the dense evidence": lambda: [mock.patch.object(ScopeView, "description_ids", NO_ENTRIES)],
    "dense only": lambda: [mock.patch.object(routing, "LEXICAL_WEIGHT", 0.0), mock.patch.object(routing, "BM25_WEIGHT",
                                                                                                0.0)],
    "no dense (lexical and BM25 only)": lambda: [mock.patch.object(routing, "DENSE_WEIGHT", 0.0)],
    "no pairs of parts": lambda: [mock.patch.object(routing, "MAX_PART_CUTS", 0)],
    "no column named by two of its values": lambda: [mock.patch.object(routing, "COMPARED_VALUES_POINTS", 0.0)],
}


@contextmanager
def ablated(name: str) -> Iterator[None]:
    """Routing with the named ablation's patches applied."""
    with ExitStack() as stack:
        for patch in ABLATIONS[name]():
            stack.enter_context(patch)
        yield


def commit() -> str:
    """The checkout's commit, with +changes when tracked files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def build_bed(store: StateStore, embedder: Embedder, work: Path, quiet: bool, seed: int = FROZEN_SEED
              ) -> tuple[list[Any], float]:
    """Every database of the extended bed, written to SQLite and indexed; the databases and the build time."""
    schemas = load_schemas()
    bed = schemas.make_extended_bed(seed)
    started = time.perf_counter()
    for db in bed:
        path = schemas.write_sqlite(db.tables, work / f"{db.name}.sqlite", keys=db.keys)
        adapter = adapter_class("sqlite")(db.name, f"sqlite:///{path}")
        build_datasource(adapter, store, embedder, profile=ProfileSettings(), sample_questions=db.sample_questions,
                         description=db.description)
        adapter.close()
    log(quiet, f"built {len(bed)} databases")
    return bed, time.perf_counter() - started


def everything(_datasource: str, _table: str) -> bool:
    """The bed has no policies: every table of every database is readable."""
    return True


def route_on_bed(retriever: Retriever, question: str, ids: Sequence[str], query: np.ndarray | None = None) -> Any:
    """Routing as the ask flow calls it, with the engine's defaults (`RoutingSettings()`), over every database."""
    settings = RoutingSettings()
    return route(retriever, question, ids, everything, strategy=settings.strategy, floor_ratio=settings.floor_ratio,
                 limit=settings.shortlist, vote_k=settings.vote_k, rrf_k=settings.rrf_k, query=query,
                 pairs=settings.pairs, close_call=settings.close_call)


def first_right(wanted: Sequence[str], picks: Sequence[str]) -> bool:
    """Top-1 as the eval's routing scorer counts it (a two-database case: both in the picks)."""
    return bool(picks) and picks[0] in wanted and (len(wanted) < 2 or all(d in picks for d in wanted))


def score(cases: Sequence[dict[str, Any]], routings: Sequence[Any]) -> dict[str, Any]:
    """Top-1 as the eval's routing scorer counts it, shortlist hit, sibling confusions, cross-database pairs."""
    top1 = hit = sibling = cross = cross_both = 0
    misses = []
    for case, routed in zip(cases, routings, strict=True):
        wanted, picks = case["databases"], list(routed.picks)
        both = all(d in picks for d in wanted)
        first = first_right(wanted, picks)
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


def run(state: Path | None, quiet: bool, *, seed: int = FROZEN_SEED, ablations: bool = True) -> dict[str, Any]:
    """Build, route, score; the report."""
    suite = yaml.safe_load(SUITE.read_text())["cases"] if seed == FROZEN_SEED else []
    with tempfile.TemporaryDirectory(prefix="nl2sql-wide-bed-") as tmp:
        work = Path(tmp)
        store = StateStore(state or work / "state")
        embedder = Embedder(threads=2)
        bed, build_s = build_bed(store, embedder, work, quiet, seed)
        ids = [db.name for db in bed]
        retriever = Retriever(store, embedder)
        for ds in ids:
            retriever.live(ds)
        settings = RoutingSettings()

        def routed(question: str) -> Any:
            return route_on_bed(retriever, question, ids, query=queries[question])

        schemas = load_schemas()
        pairs = set(schemas.SIBLING_OF) | set(schemas.SIBLING_OF.values())
        template_cases = [{"id": f"{db.name}:{i}", "question": q, "databases": [db.name],
                           "sibling": schemas.SIBLING_OF.get(db.name)
                           or next((s for s, d in schemas.SIBLING_OF.items() if d == db.name), None)}
                          for db in bed for i, q in enumerate(db.test_questions)]
        cross_cases = [{"id": f"cross:{i}", "question": q, "databases": [a, b]}
                       for i, (q, a, b) in enumerate(schemas.cross_questions(bed, seed))]
        joined_cases = [{"id": f"joined:{i}", "question": q, "databases": [db]}
                        for i, (q, db) in enumerate(schemas.joined_questions(bed, seed))]
        compared_cases = [{"id": f"compared:{i}", "question": q, "databases": [db]}
                          for i, (q, db) in enumerate(schemas.compared_questions(bed, seed))]
        questions = [c["question"] for c in [*suite, *template_cases, *cross_cases, *joined_cases, *compared_cases]]
        latency: list[float] = []
        queries: dict[str, Any] = {}
        for question in questions:  # the latency of a whole routing, the question's embedding included
            query, seconds = timed(lambda q=question: retriever.embed(q))
            queries[question] = query
            _, routing_s = timed(lambda q=question: routed(q))
            latency.append(seconds + routing_s)

        def scored(cases: list[dict[str, Any]]) -> dict[str, Any]:
            return score(cases, [routed(case["question"]) for case in cases]) if cases else {}

        paired = [c for c in template_cases if c["databases"][0] in pairs]
        joined_routings = [routed(c["question"]) for c in joined_cases]  # scored, and counted for pairs given
        report: dict[str, Any] = {
            "commit": commit(), "seed": seed, "suite": str(SUITE.relative_to(HERE.parent.parent)) if suite else None,
            "databases": len(bed), "siblings": len(schemas.SIBLINGS), "keyless": sorted(schemas.KEYLESS),
            "tables": sum(len(db.tables) for db in bed), "build_s": round(build_s, 1),
            "settings": {"strategy": settings.strategy, "floor_ratio": settings.floor_ratio,
                         "shortlist": settings.shortlist},
            "frozen": scored(suite), "latency": percentiles(latency),
            "template_all": scored(template_cases),  # its misses are what tuning may look at
            "template_sibling_pairs": {k: v for k, v in scored(paired).items() if k != "misses"},
            "template_cross": {k: v for k, v in scored(cross_cases).items() if k != "misses"},
            "template_joined": {k: v for k, v in score(joined_cases, joined_routings).items() if k != "misses"}
            | {"paired": sum(bool(r.pair) for r in joined_routings)},
            "template_compared": {k: v for k, v in scored(compared_cases).items() if k != "misses"},
        }
        report["ablations"] = {}
        for name in ABLATIONS if ablations else ():
            with ablated(name):
                report["ablations"][name] = {
                    part: {k: v for k, v in scored(cases).items() if k in ("top1", "cross_both_picked")}
                    for part, cases in (("frozen", suite), ("template_all", template_cases),
                                        ("template_cross", cross_cases), ("template_joined", joined_cases),
                                        ("template_compared", compared_cases)) if cases}
            log(quiet, f"ablation: {name}")
        store.close()
    return report


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run, print the figures, write the JSON; the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=FROZEN_SEED, help="the bed's seed (the frozen suite: 42 only)")
    parser.add_argument("--no-ablations", dest="ablations", action="store_false")
    parser.add_argument("--state", type=Path, help="reuse this state folder (embedding cache) instead of a fresh one")
    parser.add_argument("--out", type=Path, help="where the report goes (wide_bed.json beside this file for seed 42, "
                                                 "wide_bed.seed<N>.json for another)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    report = run(args.state, args.quiet, seed=args.seed, ablations=args.ablations)
    out = args.out or HERE / ("wide_bed.json" if args.seed == FROZEN_SEED else f"wide_bed.seed{args.seed}.json")
    out.write_text(json.dumps(report, indent=2) + "\n")
    frozen = report["frozen"]
    if frozen:
        print(f"frozen suite: top-1 {frozen['top1']:.1%} of {frozen['cases']}, shortlist "
              f"{frozen['shortlist_hit']:.1%}, first pick the sibling {frozen['first_pick_is_sibling']}, "
              f"cross-database both picked {frozen['cross_both_picked']:.1%} of {frozen['cross_database']}")
    for name in ("template_all", "template_sibling_pairs"):
        figures = report[name]
        print(f"{name}: top-1 {figures['top1']:.1%} of {figures['cases']}, first pick the sibling "
              f"{figures['first_pick_is_sibling']}")
    cross = report["template_cross"]
    print(f"template_cross: top-1 {cross['top1']:.1%} of {cross['cases']}, both picked {cross['cross_both_picked']:.1%}")
    joined = report["template_joined"]
    print(f"template_joined: top-1 {joined['top1']:.1%} of {joined['cases']}, given a pair {joined['paired']}")
    compared = report["template_compared"]
    print(f"template_compared: top-1 {compared['top1']:.1%} of {compared['cases']}")
    for name, parts in report["ablations"].items():
        print(f"  {name}: " + ", ".join(f"{part} top-1 {figures['top1']:.1%}" for part, figures in parts.items()))
    for miss in frozen.get("misses", []):
        print(f"  miss {miss['id']}: {miss['question']} → {miss['picks']} (wanted {miss['wanted']})")
    return report


if __name__ == "__main__":
    main()
