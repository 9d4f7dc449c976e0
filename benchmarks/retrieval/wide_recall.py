"""Schema retrieval on the extended wide test bed: table and column recall, and what is sent, by database size.

Builds the 44 databases of `make_extended_bed` as benchmarks/routing/wide_bed.py does (five of them without declared
keys, which the build infers), then, for each held-out question the generator wrote about a database (8 each;
`written_pool` knows what each reads: the entity's table, the columns its slots name, and for a parent the key
joining them), asks `Retriever.schema_for` what the planner would see, pruned as a wide schema is
(`whole_schema_columns: 0`), with the engine's retrieval settings (`--set` overrides them):

- table recall: gold tables sent / gold tables; column recall: gold columns sent (table and column) / gold columns;
- tables and columns sent on average;
- all databases, those without declared keys, and small (≤ 12 tables) against big ones.

Chinook's own figures are benchmarks/retrieval/chinook_quality.py's (hand-written questions) and keyless.py's (the
suite); this bed is where a change to what retrieval sends is also tried on 44 other schemas, from 3 to 60 tables.

    .venv/bin/python benchmarks/retrieval/wide_recall.py [--seed 42] [--set key=value ...] [--state DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "routing"))
sys.path.insert(0, str(HERE.parent / "perf"))

from chinook_quality import parse_overrides  # noqa: E402
from index_wide import load_schemas  # noqa: E402
from wide_bed import FROZEN_SEED, build_bed, commit, everything  # noqa: E402

from nl2sql.config.models import RetrievalSettings  # noqa: E402
from nl2sql.index.embed import Embedder  # noqa: E402
from nl2sql.index.retrieve import Retriever  # noqa: E402
from nl2sql.index.store import StateStore  # noqa: E402

SMALL = 12  # tables: a database up to this size is "small"


def measured(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Recall and sizes over some questions' results."""
    if not results:
        return {}
    total = len(results)
    return {
        "questions": total,
        "table_recall": round(sum(r["tables_hit"] for r in results) / sum(r["tables"] for r in results), 4),
        "column_recall": round(sum(r["columns_hit"] for r in results) / max(sum(r["columns"] for r in results), 1), 4),
        "tables_sent": round(sum(r["tables_sent"] for r in results) / total, 2),
        "columns_sent": round(sum(r["columns_sent"] for r in results) / total, 2),
    }


def run(state: Path | None, seed: int, overrides: dict[str, Any], quiet: bool) -> dict[str, Any]:
    """Build (or reuse) the bed, retrieve for every held-out question; the report."""
    schemas = load_schemas()
    settings = {**RetrievalSettings().model_dump(), "whole_schema_columns": 0, **overrides}
    with tempfile.TemporaryDirectory(prefix="nl2sql-wide-recall-") as tmp:
        store = StateStore(state or Path(tmp) / "state")
        embedder = Embedder(threads=2)
        bed, _ = build_bed(store, embedder, Path(tmp), quiet, seed)
        retriever = Retriever(store, embedder)
        results = []
        for db in bed:
            allows = functools.partial(everything, db.name)  # every table of the bed is readable
            written = {w.text: w for w in schemas.written_pool(db.tables, seed, db.name)}
            for question in db.test_questions:
                gold = written[question]
                schema = retriever.schema_for(question, db.name, allows, **settings)
                sent = set(schema.table_names())
                sent_columns = {f"{t.name}.{c.name}" for t in schema.tables for c in t.columns}
                results.append({"database": db.name, "keyless": not db.keys, "small": len(db.tables) <= SMALL,
                                "question": question, "tables": len(gold.tables),
                                "tables_hit": len(gold.tables & sent), "columns": len(gold.columns),
                                "columns_hit": len(gold.columns & sent_columns), "tables_sent": len(sent),
                                "columns_sent": schema.column_count,
                                "missing": sorted((gold.tables - sent) | (gold.columns - sent_columns))})
        store.close()
    return {
        "commit": commit(), "seed": seed, "databases": len(bed), "settings": settings,
        "all": measured(results),
        "keyless": measured([r for r in results if r["keyless"]]),
        f"small (≤ {SMALL} tables)": measured([r for r in results if r["small"]]),
        f"big (> {SMALL} tables)": measured([r for r in results if not r["small"]]),
        "misses": [{k: r[k] for k in ("database", "question", "missing")} for r in results if r["missing"]],
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run, print the figures, write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=FROZEN_SEED, help="the bed's seed")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="schema_for keyword arguments over the engine's retrieval settings")
    parser.add_argument("--state", type=Path, help="reuse this state folder (embedding cache) instead of a fresh one")
    parser.add_argument("--out", type=Path, help="where the report goes (wide_recall.json beside this file for seed "
                        "42, wide_recall.seed<N>.json otherwise)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    report = run(args.state, args.seed, parse_overrides(args.set), args.quiet)
    for part, figures in report.items():
        if isinstance(figures, dict) and "table_recall" in figures:
            print(f"{part:<20} {figures['questions']:>4} questions: tables {figures['table_recall']:.2%}, columns "
                  f"{figures['column_recall']:.2%}; sent {figures['tables_sent']} tables, "
                  f"{figures['columns_sent']} columns")
    out = args.out or HERE / ("wide_recall.json" if args.seed == FROZEN_SEED else f"wide_recall.seed{args.seed}.json")
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return report


if __name__ == "__main__":
    main()
