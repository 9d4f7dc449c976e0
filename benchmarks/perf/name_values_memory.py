"""What a build's name values cost a serving process: the entries' metadata and the matching index built from it.

Name values (docs/index.md, "Entries") are kept in column entries' metadata (held as JSON text by the live build's
`EntryTable`) and indexed by `SchemaFacts.of` for matching. This makes `--values` values (100,000 by default, the
default `profile.max_name_values_total`) spread over columns of 500 values, one column a table, in two ways:

- new words: every value two random words, each seen once (the worst case: nothing is shared);
- pooled words: first and last names drawn from pools of 2,000 each (people's names repeat their words);

and traces (tracemalloc) what the entry table and the facts built from it allocate, against the same tables with
no name values, in the same process. Prints megabytes and bytes a value; writes name_values_memory.json beside
this file.

    .venv/bin/python benchmarks/perf/name_values_memory.py [--values N]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import string
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from nl2sql.datasources.models import ColumnInfo, SchemaSnapshot, TableInfo
from nl2sql.index.chunks import Entry, EntryTable
from nl2sql.index.retrieve import SchemaFacts

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "name_values_memory.json"
PER_COLUMN = 500


def random_word(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 9))).capitalize()


def build(values: list[str] | None, tables: int) -> tuple[SchemaSnapshot, list[Entry]]:
    """A snapshot of `tables` tables with a `name` column each, and its column entries (name values, or none)."""
    snapshot = SchemaSnapshot(datasource_id="bench", dialect="sqlite", tables=[
        TableInfo(name=f"table_{t}", columns=[ColumnInfo(name="name", type="TEXT")], row_count=PER_COLUMN)
        for t in range(tables)])
    entries = []
    for t in range(tables):
        meta = {"type": "TEXT", "distinct": PER_COLUMN, "sampled_rows": PER_COLUMN, "samples": []}
        if values is not None:
            meta["names"] = values[t * PER_COLUMN:(t + 1) * PER_COLUMN]
        entries.append(Entry(id=f"c{t}", datasource_id="bench", kind="column", text=f"name of table {t}, text.",
                             table=f"table_{t}", column="name", tables=[f"table_{t}"], metadata=meta))
    return snapshot, entries


def traced(make: Callable[[], object]) -> tuple[int, object]:
    """Bytes `make`'s result still holds once made (the entries table and facts of a build)."""
    gc.collect()
    tracemalloc.start()
    result = make()
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return held, result


def measure(values: list[str]) -> dict[str, float]:
    tables = len(values) // PER_COLUMN
    with_names = build(values, tables)
    without = build(None, tables)

    def serve(built: tuple[SchemaSnapshot, list[Entry]]) -> Callable[[], object]:
        snapshot, entries = built
        return lambda: (table := EntryTable.of(entries), SchemaFacts.of(snapshot, table))

    held_with, (_, facts) = traced(serve(with_names))
    held_without, _ = traced(serve(without))
    assert sum(len(v) for v in facts.names.values()) == len(values)  # every value indexed
    extra = held_with - held_without
    return {"values": len(values), "tables": tables, "extra_mb": round(extra / 1e6, 1),
            "bytes_per_value": round(extra / len(values)), "json_bytes_per_value": round(
                len(json.dumps(values)) / len(values))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=100_000)
    args = parser.parse_args()
    rng = random.Random(7)
    n = args.values - args.values % PER_COLUMN
    new_words = [f"{random_word(rng)} {random_word(rng)}" for _ in range(n)]
    firsts, lasts = [random_word(rng) for _ in range(2000)], [random_word(rng) for _ in range(2000)]
    pooled = [f"{rng.choice(firsts)} {rng.choice(lasts)}" for _ in range(n)]
    report = {"new words": measure(new_words), "pooled words": measure(pooled)}
    for name, r in report.items():
        print(f"{name:13s} {r['values']:,} values in {r['tables']} tables: {r['extra_mb']} MB held "
              f"({r['bytes_per_value']} bytes a value; {r['json_bytes_per_value']} as JSON)")
    OUTPUT.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(HERE.parents[1])}", file=sys.stderr)


if __name__ == "__main__":
    main()
