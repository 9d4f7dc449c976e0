"""What profiling a table's text columns costs with and without the values of many-valued columns.

(The name values of a column of at most `profile.max_name_values` distinct values are one more grouping, in a
statement of their own.)

A text column of more than `profile.low_cardinality` distinct values gets sample values when its frequent
values make up `profile.dominant_share` of its rows (docs/index.md, "Entries"); finding out takes one more
grouping per such column in the statement that already groups the columns of few values. This builds one
table of `--rows` rows (200,000 by default) whose text columns are of each kind:

- `subject`: 20 recurring subjects in 70% of the rows, the rest each once (gets sample values);
- `body`: 12 recurring sentences in 60% of the rows (gets sample values);
- `city`: 500 values, evenly spread (no sample values: its 20 most frequent make up 4% of the rows; name values);
- `email`: one value a row (never asked: too many distinct values);
- `status`: 4 values (a column of few values: asked either way);

in SQLite, DuckDB and (when a server answers on loopback) PostgreSQL, and profiles it `--repeat` times in three
ways, in turn, in the same process (`CONFIGURATIONS`): the columns of few values only (`dominant_share` 1,
`max_name_values` 0); with the frequent values of many-valued columns (0.5, 0); and with name values too (the
defaults: `city`, of 500 values, keeps them). Prints the median seconds of each and its ratio to the first;
writes profile_text.json beside this file.

    .venv/bin/python benchmarks/perf/profile_text.py [--rows N] [--repeat K] [--no-postgres]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nl2sql.datasources import Adapter, adapter_class

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "profile_text.json"
DDL = "CREATE TABLE events (id INTEGER, subject VARCHAR, body VARCHAR, city VARCHAR, email VARCHAR, status VARCHAR)"


def rows_of(n: int, seed: int = 7) -> list[tuple[Any, ...]]:
    """`n` rows of the table, the same for a seed."""
    rng = random.Random(seed)
    subjects = [f"Recurring problem number {i}" for i in range(20)]
    bodies = [f"The same sentence a customer writes, variant {i}." for i in range(12)]
    out = []
    for i in range(n):
        subject = rng.choice(subjects) if rng.random() < 0.70 else f"Problem with order #{i}"
        body = rng.choice(bodies) if rng.random() < 0.60 else f"A message written once, about item {i}."
        out.append((i, subject, body, f"City {rng.randrange(500)}", f"person{i}@example.com",
                    ("open", "pending", "solved", "closed")[rng.randrange(4)]))
    return out


def sqlite_table(path: Path, rows: list[tuple[Any, ...]]) -> Adapter:
    con = sqlite3.connect(path)
    con.execute(DDL)
    con.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    return adapter_class("sqlite")("events", f"sqlite:///{path}")


def duckdb_table(path: Path, rows: list[tuple[Any, ...]]) -> Adapter:
    import duckdb
    import pandas as pd

    con = duckdb.connect(str(path))
    frame = pd.DataFrame(rows, columns=["id", "subject", "body", "city", "email", "status"])
    con.execute(DDL)
    con.register("frame", frame)
    con.execute("INSERT INTO events SELECT * FROM frame")
    con.close()
    return adapter_class("duckdb")("events", f"duckdb:///{path}")


#: name → (dominant_share, max_name_values); the first is the baseline of the ratios.
CONFIGURATIONS: dict[str, tuple[float, int]] = {"few values only": (1.0, 0), "+ frequent values": (0.5, 0),
                                                "+ name values (defaults)": (0.5, 1000)}


def measure(adapter: Adapter, repeat: int) -> dict[str, Any]:
    """Median seconds of `profile_table` in each configuration, in turn, and the columns each gives values."""
    table = adapter.reflect().table("events")
    times: dict[str, list[float]] = {name: [] for name in CONFIGURATIONS}
    out: dict[str, Any] = {}
    for _ in range(repeat):
        for name, (share, names) in CONFIGURATIONS.items():
            started = time.perf_counter()
            profiles = adapter.profile_table(table, dominant_share=share, max_name_values=names)
            times[name].append(time.perf_counter() - started)
            out[name] = {"sampled": [p.column for p in profiles if p.sample_values],
                         "named": [p.column for p in profiles if p.name_values]}
    base = statistics.median(times[next(iter(CONFIGURATIONS))])
    for name, found in times.items():
        out[name].update(seconds=round(statistics.median(found), 4), ratio=round(statistics.median(found) / base, 2))
    return out


def postgres(rows: list[tuple[Any, ...]], repeat: int) -> dict[str, Any]:
    """The same table in a scratch PostgreSQL database (index_wide.py's helpers), or why it was skipped."""
    spec = importlib.util.spec_from_file_location("index_wide", HERE / "index_wide.py")
    wide = sys.modules["index_wide"] = importlib.util.module_from_spec(spec)  # its dataclasses look it up
    spec.loader.exec_module(wide)
    if reason := wide.postgres_unavailable():
        return {"skipped": reason}
    import psycopg

    with wide.pg_database("nl2sql_bench_profile") as (admin_url, reader_url):
        with psycopg.connect(admin_url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            conn.execute(DDL)
            with conn.cursor().copy("COPY events FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            reader = reader_url.split("/")[-1] + "_reader"
            conn.execute(f'GRANT SELECT ON events TO "{reader}"')
        adapter = adapter_class("postgresql")("events", reader_url)
        try:
            return measure(adapter, repeat)
        finally:
            adapter.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    rows = rows_of(args.rows)
    report: dict[str, Any] = {"rows": args.rows, "repeat": args.repeat}
    with tempfile.TemporaryDirectory() as tmp:
        makers: dict[str, Callable[[], Adapter]] = {
            "sqlite": lambda: sqlite_table(Path(tmp) / "events.sqlite", rows),
            "duckdb": lambda: duckdb_table(Path(tmp) / "events.duckdb", rows),
        }
        for name, make in makers.items():
            adapter = make()
            try:
                report[name] = measure(adapter, args.repeat)
            finally:
                adapter.close()
    report["postgresql"] = {"skipped": "--no-postgres"} if args.no_postgres else postgres(rows, args.repeat)
    for name in ("sqlite", "duckdb", "postgresql"):
        r = report[name]
        if "skipped" in r:
            print(f"{name:11s} skipped: {r['skipped']}")
        else:
            for config, m in r.items():
                print(f"{name:11s} {config:26s} {m['seconds']:.3f} s (×{m['ratio']}); sample values: "
                      f"{', '.join(m['sampled'])}; name values: {', '.join(m['named']) or '-'}")
    OUTPUT.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(HERE.parents[1])}", file=sys.stderr)


if __name__ == "__main__":
    main()
