"""The typed plan's coverage of real gold SQL: a round trip over Spider 1.0 dev's 972 gold statements.

For each gold statement (benchmarks/data/spider_dev/dev_gold.json, SQLite SQL): `plan_from_sql` reads it into a
plan (`unsupported` when the plan language cannot say it: kind = the construct), `validate_plan` checks it against
the database's schema as the project's SQLite adapter reflects it, with an admin's scope (`invalid`: kind = the
first issue code), `generate_sql` renders it in the target dialect, and the generated statement and the gold are
run and their results compared:

- `same`: the same rows. A multiset compare, in order only when the gold has a top-level ORDER BY; an integral
  float or decimal equal to the integer (3.0 = Decimal('3') = 3, exactly), other floats and decimals rounded to 6
  significant digits, dates and timestamps as ISO text ('2018-03-09 19:03:21', as SQLite stores them), booleans
  as 0/1; text is never equal to a number.
- `differs`: kind `columns` (a different number of columns), `row count`, `values` (same count, other rows) or
  `order` (the same rows in another order, where the gold orders them). Ties in the gold's ORDER BY, and LIMIT
  over ties, can make a correct statement read as `order` or `values`.
- `fails`: the generated statement fails on the database; kind = the error's first words (quoted names and
  literals replaced by …). A gold statement that fails itself is `gold fails` (all 972 run on SQLite today; the
  gold is only run for statements that reach generation).
- `error`: the engine raised something other than its documented errors (a bug to look at).

`read` = same + differs + fails (the plan language said it and the validator took it).

Dialects (`--dialect`): `sqlite` runs the generated SQL on the vendored file itself. `duckdb` and `postgres` run
it on copies of the 19 databases that this script makes on each run (the gold still runs on SQLite: the
reference). DuckDB: one file per database in a temporary folder (DuckDB's sqlite scanner is an extension it
downloads, and there is no network), opened read-only to run. PostgreSQL (`--pg-url`, default the loopback server's
`test` database): one schema per database, `spider_<db_id>`, dropped and re-created on each run; statements run
with that schema as search_path, in read-only transactions. Copies keep the tables, columns (names exact, quoted),
and rows, no keys or constraints (results only need the rows). Declared SQLite types are mapped as: INT/INTEGER/
BIGINT/… → BIGINT (SQLite's integers are 64-bit); REAL/FLOAT(…)/DOUBLE → DOUBLE; DECIMAL/NUMERIC(p,s) →
DECIMAL(p,s) (DOUBLE without a precision); CHAR(n)/VARCHAR(n) → VARCHAR(n) (no CHAR: PostgreSQL pads it); TEXT,
CLOB and no type → TEXT (an untyped column holding only integers → BIGINT); DATETIME/TIMESTAMP → TIMESTAMP, DATE →
DATE; BOOL/BOOLEAN → BOOLEAN. A column keeps the mapped type only when every value fits it (integers for
integers, numbers for floats and decimals, text for text within the length, 'YYYY-MM-DD[ HH:MM:SS]' text for
dates, 0/1 for booleans); otherwise it is TEXT, its values as text (e.g. Spider's BOOL columns of 'T'/'F').

    .venv/bin/python benchmarks/plan/coverage.py [--dialect sqlite|duckdb|postgres] [--limit N] [--out FILE]
                                                 [--show KIND] [--pg-url URL]

Prints the figures (counts and % of all statements, then counts by kind per outcome) and writes them as JSON
(default coverage.json beside this file for sqlite, coverage_<dialect>.json for the others): totals, kinds and
per statement id + outcome + kind, so two runs can be diffed. `--show KIND` (a kind or an outcome) prints those
statements with the gold and the generated SQL. tests/plan/test_spider_round_trip.py holds the sqlite figures.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import decimal
import json
import re
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import sqlglot
from sqlglot import exp

from nl2sql.config.models import PoliciesConfig
from nl2sql.datasources import SchemaSnapshot, adapter_class
from nl2sql.errors import PlanUnsupported, SecurityViolation
from nl2sql.plan import PlanValidationError, generate_sql, plan_from_sql, validate_plan
from nl2sql.policies import Scope, scope

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = ROOT / "benchmarks" / "data" / "spider_dev"
GOLD = DATA / "dev_gold.json"
DATABASES = DATA / "database"
DIALECTS = ("sqlite", "duckdb", "postgres")
#: Outcomes in the order the summary lists them (`read` is the sum of the first three).
OUTCOMES = ("same", "differs", "fails", "unsupported", "invalid", "error", "gold fails")
READ = ("same", "differs", "fails")
TIMEOUT_S = 10.0
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
SIGNIFICANT_DIGITS = 6


# --- data ----------------------------------------------------------------------------------------


def load_gold(path: Path = GOLD) -> list[dict[str, Any]]:
    """The gold statements: `{"id", "db_id", "question", "query"}` in dev.json's order."""
    return json.loads(path.read_text())


def database_path(db_id: str) -> Path:
    """The vendored SQLite file of a Spider database."""
    return DATABASES / db_id / f"{db_id}.sqlite"


def reflect(db_id: str) -> SchemaSnapshot:
    """The schema snapshot of a Spider database, reflected by the project's SQLite adapter."""
    adapter = adapter_class("sqlite")(db_id, f"sqlite:///{database_path(db_id)}")
    try:
        return adapter.reflect()
    finally:
        adapter.close()


def full_scope(db_id: str) -> Scope:
    """An admin's scope over the database: every table readable."""
    policies = PoliciesConfig.model_validate({"roles": {"admin": {}}, "default_role": "admin"})
    return scope(policies, "admin", db_id)


# --- results and their comparison -------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """A statement's result: its number of columns and its rows."""

    width: int
    rows: list[tuple[Any, ...]]


def normalize(value: Any) -> Any:
    """A cell as compared: floats to 6 significant digits, integral numbers as ints, dates as ISO text."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, decimal.Decimal):  # PostgreSQL's SUM of integers: exact, as SQLite's integer is
        value = int(value) if value.is_finite() and value == value.to_integral_value() else float(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return repr(value)
        if value.is_integer():  # exact: rounding a large integral float would merge distinct integers
            return int(value)
        value = float(f"{value:.{SIGNIFICANT_DIGITS}g}")
        return int(value) if value.is_integer() else value
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return value


def _normal_rows(result: Result) -> list[tuple[Any, ...]]:
    return [tuple(normalize(v) for v in row) for row in result.rows]


def compare(gold: Result, got: Result, *, ordered: bool) -> str | None:
    """None when the results are the same, else how they differ: columns, row count, values or order."""
    if gold.width != got.width:
        return "columns"
    if len(gold.rows) != len(got.rows):
        return "row count"
    expected, actual = _normal_rows(gold), _normal_rows(got)
    if Counter(expected) != Counter(actual):
        return "values"
    if ordered and expected != actual:
        return "order"
    return None


def has_top_level_order(sql: str) -> bool:
    """Whether a (SQLite) statement orders its result: an ORDER BY on the outermost query."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.SqlglotError:
        return False
    while isinstance(tree, exp.Subquery):
        tree = tree.this
    return tree.args.get("order") is not None


def error_kind(exc: BaseException) -> str:
    """A database error's first words, with quoted names and literals replaced by … (so errors group)."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    text = re.sub(r'"[^"]*"|\'[^\']*\'', "…", text)
    prefix = ""
    heading = re.match(r"([A-Z]\w* Error): ", text)  # DuckDB's "Binder Error: …"
    if heading:
        prefix, text = heading.group(0), text[heading.end():]
    # what follows a colon names the statement's own columns and values, except PostgreSQL's operand types
    head, _, tail = text.partition(": ")
    text = text if re.fullmatch(r"[a-z ]+ \S+ [a-z ]+", tail) else head
    words = text.split()
    return prefix + " ".join(words[:12]) + (" …" if len(words) > 12 else "")


# --- where statements run --------------------------------------------------------------------


def run_sqlite(path: Path, sql: str, timeout_s: float = TIMEOUT_S) -> Result:
    """Run one statement on a SQLite file opened read-only, interrupted after `timeout_s`."""
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    try:
        deadline = time.monotonic() + timeout_s
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        cursor = conn.execute(sql)
        rows = cursor.fetchall()
        return Result(len(cursor.description or ()), rows)
    finally:
        conn.close()


class Target:
    """Where the generated SQL runs: `run(db_id, sql)` → Result, or the database's exception."""

    dialect = "sqlite"
    #: columns copied as TEXT because a value did not fit their declared type: "db.table.column DECLARED"
    fallbacks: tuple[str, ...] = ()

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, db_id: str, sql: str) -> Result:
        """Run a generated statement on the database `db_id`."""
        return run_sqlite(database_path(db_id), sql)

    def close(self) -> None:
        """Release connections and copies."""


@dataclass(frozen=True)
class ColumnCopy:
    """A column as copied: its name, the type it is created with, and how a SQLite value is written."""

    name: str
    type: str
    convert: Callable[[Any], Any]
    #: the declared type whose mapping a value did not fit (the column is TEXT instead), else None
    fell_back_from: str | None = None


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}( \d{2}:\d{2}(:\d{2}(\.\d+)?)?)?")


def _text(value: Any) -> Any:
    return None if value is None else str(value)


def _same(value: Any) -> Any:
    return value


# one Python type per column, so the loader infers it whatever the first rows hold (a decimal goes as its text)
def _float(value: Any) -> Any:
    return None if value is None else float(value)


def _bool(value: Any) -> Any:
    return None if value is None else bool(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fits(values: Sequence[Any], check: Callable[[Any], bool]) -> bool:
    return all(check(v) for v in values if v is not None)


def column_copy(name: str, declared: str, values: Sequence[Any], dialect: str) -> ColumnCopy:
    """The type a SQLite column is copied with in `dialect` (module docstring), TEXT when a value does not fit."""
    decl = declared.upper().strip()
    size = re.search(r"\((\d+)\s*(?:,\s*(\d+))?\)", decl)
    double = "DOUBLE PRECISION" if dialect == "postgres" else "DOUBLE"

    def typed(type_: str, check: Callable[[Any], bool], convert: Callable[[Any], Any] = _same) -> ColumnCopy:
        if _fits(values, check):
            return ColumnCopy(name, type_, convert)
        return ColumnCopy(name, "TEXT", _text, fell_back_from=declared or "(none)")

    if "INT" in decl:
        return typed("BIGINT", _is_int)
    if any(k in decl for k in ("REAL", "FLOA", "DOUB")):
        return typed(double, _is_number, _float)
    if any(k in decl for k in ("DEC", "NUMERIC")):
        if size and size.group(2) is not None and int(size.group(1)) <= 38:
            precision, scale = int(size.group(1)), int(size.group(2))
            bound = 10 ** (precision - scale)
            return typed(f"DECIMAL({precision},{scale})", lambda v: _is_number(v) and abs(v) < bound, _text)
        return typed(double, _is_number, _float)
    if "BOOL" in decl:
        return typed("BOOLEAN", lambda v: v in (0, 1) and not isinstance(v, float), _bool)
    if "DATETIME" in decl or "TIMESTAMP" in decl:
        return typed("TIMESTAMP", lambda v: isinstance(v, str) and bool(_TIMESTAMP.fullmatch(v)))
    if decl == "DATE":
        return typed("DATE", lambda v: isinstance(v, str) and bool(_DATE.fullmatch(v)))
    if any(k in decl for k in ("CHAR", "CLOB", "TEXT")):
        if size and "CHAR" in decl:
            length = int(size.group(1))
            return typed(f"VARCHAR({length})", lambda v: isinstance(v, str) and len(v) <= length)
        return typed("TEXT", lambda v: isinstance(v, str))
    if not decl and values and _fits(values, _is_int):
        return ColumnCopy(name, "BIGINT", _same)
    return typed("TEXT", lambda v: isinstance(v, str))


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sqlite_tables(path: Path) -> Iterator[tuple[str, list[tuple[str, str]], list[tuple[Any, ...]]]]:
    """Each user table of a SQLite file: its name, its (column, declared type) pairs and its rows."""
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    try:
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        for table in names:
            columns = [(r[1], r[2] or "") for r in conn.execute(f"PRAGMA table_info({_quote(table)})")]
            yield table, columns, conn.execute(f"SELECT * FROM {_quote(table)}").fetchall()
    finally:
        conn.close()


def table_copies(path: Path, dialect: str) -> Iterator[tuple[str, list[ColumnCopy], list[tuple[Any, ...]]]]:
    """Each table of a SQLite file as copied into `dialect`: name, column copies, and rows converted."""
    for table, columns, rows in sqlite_tables(path):
        copies = [column_copy(name, declared, [row[i] for row in rows], dialect)
                  for i, (name, declared) in enumerate(columns)]
        yield table, copies, [tuple(c.convert(v) for c, v in zip(copies, row, strict=True)) for row in rows]


def create_table_sql(table: str, columns: Sequence[ColumnCopy], schema: str | None = None) -> str:
    """CREATE TABLE with every name quoted as written."""
    name = f"{_quote(schema)}.{_quote(table)}" if schema else _quote(table)
    return f"CREATE TABLE {name} ({', '.join(f'{_quote(c.name)} {c.type}' for c in columns)})"


class DuckDBTarget(Target):
    """DuckDB copies of the Spider databases, one file each in a temporary folder, run read-only."""

    dialect = "duckdb"

    def __init__(self, db_ids: Iterable[str], timeout_s: float = TIMEOUT_S) -> None:
        import duckdb
        import pandas as pd

        self.timeout_s = timeout_s
        self._folder = tempfile.TemporaryDirectory(prefix="spider_duckdb_")
        self._connections: dict[str, Any] = {}
        for db_id in sorted(set(db_ids)):
            file = Path(self._folder.name) / f"{db_id}.duckdb"
            conn = duckdb.connect(str(file))
            for table, columns, rows in table_copies(database_path(db_id), "duckdb"):
                self.fallbacks += tuple(f"{db_id}.{table}.{c.name} {c.fell_back_from}" for c in columns
                                        if c.fell_back_from)
                conn.execute(create_table_sql(table, columns))
                if rows:  # through a DataFrame of Python objects: executemany takes seconds per thousand rows
                    frame = pd.DataFrame(rows, columns=[f"c{i}" for i in range(len(columns))], dtype=object)
                    conn.register("spider_rows", frame)
                    conn.execute(f"INSERT INTO {_quote(table)} SELECT * FROM spider_rows")
                    conn.unregister("spider_rows")
            conn.close()
            self._connections[db_id] = duckdb.connect(str(file), read_only=True)

    def run(self, db_id: str, sql: str) -> Result:
        """Run a generated statement on the DuckDB copy, interrupted after the time limit."""
        conn = self._connections[db_id]
        timer = threading.Timer(self.timeout_s, conn.interrupt)
        timer.start()
        try:
            cursor = conn.execute(sql)
            rows = cursor.fetchall()
            return Result(len(cursor.description or ()), rows)
        finally:
            timer.cancel()

    def close(self) -> None:
        """Close the connections and remove the copies."""
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        self._folder.cleanup()


class PostgresTarget(Target):
    """PostgreSQL copies of the Spider databases, one schema `spider_<db_id>` each, re-created on each run."""

    dialect = "postgres"

    def __init__(self, db_ids: Iterable[str], url: str = PG_URL, timeout_s: float = TIMEOUT_S) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        for db_id in sorted(set(db_ids)):
            schema = f"spider_{db_id}"
            self.conn.execute(f"DROP SCHEMA IF EXISTS {_quote(schema)} CASCADE")
            self.conn.execute(f"CREATE SCHEMA {_quote(schema)}")
            for table, columns, rows in table_copies(database_path(db_id), "postgres"):
                self.fallbacks += tuple(f"{db_id}.{table}.{c.name} {c.fell_back_from}" for c in columns
                                        if c.fell_back_from)
                self.conn.execute(create_table_sql(table, columns, schema))
                names = ", ".join(_quote(c.name) for c in columns)
                with self.conn.cursor().copy(
                        f"COPY {_quote(schema)}.{_quote(table)} ({names}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
        self.conn.execute(f"SET statement_timeout = {int(timeout_s * 1000)}")
        self.conn.execute("SET default_transaction_read_only = on")

    def run(self, db_id: str, sql: str) -> Result:
        """Run a generated statement with the copy's schema as search_path, in a read-only transaction."""
        self.conn.execute(f"SET search_path TO {_quote(f'spider_{db_id}')}")
        with self.conn.cursor() as cursor:
            cursor.execute(sql)  # no parameters: psycopg leaves a % in LIKE patterns as it is
            rows = cursor.fetchall() if cursor.description else []
            return Result(len(cursor.description or ()), rows)

    def close(self) -> None:
        """Close the connection (the schemas stay, for a look at them; the next run re-creates them)."""
        self.conn.close()


def make_target(dialect: str, db_ids: Iterable[str], *, pg_url: str = PG_URL) -> Target:
    """The place generated SQL runs for `dialect`, its copies made."""
    if dialect == "sqlite":
        return Target()
    if dialect == "duckdb":
        return DuckDBTarget(db_ids)
    if dialect == "postgres":
        return PostgresTarget(db_ids, pg_url)
    raise ValueError(f"unknown dialect {dialect!r}: one of {', '.join(DIALECTS)}")


# --- the round trip ------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One gold statement's round trip: outcome and kind, and what to debug it with."""

    id: int
    db_id: str
    outcome: str
    kind: str | None = None
    gold: str = ""
    generated: str | None = None
    detail: str | None = None
    #: how many rows the gold returned (None: not run); a `same` over no rows is weak evidence
    gold_rows: int | None = None


@dataclass
class RoundTrip:
    """The round trip of gold statements into one dialect; each database is reflected once."""

    dialect: str = "sqlite"
    target: Target = field(default_factory=Target)
    _snapshots: dict[str, SchemaSnapshot] = field(default_factory=dict)
    _scopes: dict[str, Scope] = field(default_factory=dict)

    def snapshot(self, db_id: str) -> SchemaSnapshot:
        """The database's snapshot, reflected once."""
        if db_id not in self._snapshots:
            self._snapshots[db_id] = reflect(db_id)
            self._scopes[db_id] = full_scope(db_id)
        return self._snapshots[db_id]

    def one(self, item: dict[str, Any]) -> Outcome:
        """The round trip of one gold statement."""
        db_id, gold = item["db_id"], item["query"]
        out = Outcome(item["id"], db_id, "error", gold=gold)
        snapshot = self.snapshot(db_id)
        try:
            plan = plan_from_sql(gold, "sqlite", snapshot.column_names())
        except PlanUnsupported as exc:
            out.outcome, out.kind, out.detail = "unsupported", exc.construct, str(exc)
            return out
        except Exception as exc:  # the engine's bug, not a construct it lacks: counted apart
            out.kind, out.detail = f"read: {type(exc).__name__}", str(exc)
            return out
        try:
            validated = validate_plan(plan, snapshot, self._scopes[db_id])
        except PlanValidationError as exc:
            out.outcome, out.kind, out.detail = "invalid", exc.codes[0], str(exc)
            return out
        except SecurityViolation as exc:
            out.outcome, out.kind, out.detail = "invalid", exc.code, str(exc)
            return out
        except Exception as exc:
            out.kind, out.detail = f"validate: {type(exc).__name__}", str(exc)
            return out
        try:
            out.generated = generate_sql(validated.plan, self.dialect, schemas=validated.schemas)
        except Exception as exc:
            out.kind, out.detail = f"generate: {type(exc).__name__}", str(exc)
            return out
        try:
            expected = run_sqlite(database_path(db_id), gold)
        except sqlite3.Error as exc:
            out.outcome, out.kind, out.detail = "gold fails", error_kind(exc), str(exc)
            return out
        out.gold_rows = len(expected.rows)
        try:
            got = self.target.run(db_id, out.generated)
        except Exception as exc:  # each driver has its own error classes; any of them is the statement failing
            out.outcome, out.kind, out.detail = "fails", error_kind(exc), str(exc)
            return out
        out.kind = compare(expected, got, ordered=has_top_level_order(gold))
        out.outcome = "same" if out.kind is None else "differs"
        return out

    def run(self, items: Iterable[dict[str, Any]]) -> list[Outcome]:
        """The round trip of each gold statement, in order."""
        return [self.one(item) for item in items]


def figures(outcomes: Sequence[Outcome], dialect: str, fallbacks: Sequence[str] = ()) -> dict[str, Any]:
    """The totals, the counts by kind per outcome (most frequent first) and each statement's outcome; for a copy,
    the columns it made TEXT."""
    counts = Counter(o.outcome for o in outcomes)
    totals = {"statements": len(outcomes), "read": sum(counts[k] for k in READ)}
    totals |= {k: counts[k] for k in OUTCOMES}
    totals["same_empty"] = sum(o.outcome == "same" and o.gold_rows == 0 for o in outcomes)
    kinds: dict[str, dict[str, int]] = {}
    for name in OUTCOMES:
        by_kind = Counter(o.kind for o in outcomes if o.outcome == name and o.kind is not None)
        if by_kind:
            kinds[name] = dict(sorted(by_kind.items(), key=lambda kv: (-kv[1], kv[0])))
    report: dict[str, Any] = {"dialect": dialect, "sqlglot": sqlglot.__version__, "totals": totals, "kinds": kinds}
    if dialect != "sqlite":
        report["text_fallbacks"] = list(fallbacks)
    report["statements"] = [{"id": o.id, "outcome": o.outcome, "kind": o.kind} for o in outcomes]
    return report


def summary(report: dict[str, Any]) -> str:
    """The figures as text: counts and % of all statements, then counts by kind per outcome."""
    totals = report["totals"]
    n = totals["statements"] or 1
    lines = [f"Spider dev gold round trip, dialect {report['dialect']}: {totals['statements']} statements"]
    for name in ("read", *OUTCOMES):
        if name in READ or name == "read" or totals[name]:
            lines.append(f"  {name:<12}{totals[name]:>5}  {100 * totals[name] / n:5.1f}%")
        if name == "same":
            lines[-1] += f"  ({totals['same_empty']} of them over a gold of no rows)"
    for name, by_kind in report["kinds"].items():
        lines.append(f"{name} by kind:")
        lines += [f"  {count:>5}  {kind}" for kind, count in by_kind.items()]
    if report.get("text_fallbacks"):
        lines.append("copied as TEXT, a value not fitting the declared type: " + ", ".join(report["text_fallbacks"]))
    return "\n".join(lines)


def show(outcomes: Sequence[Outcome], kind: str) -> str:
    """The statements of a kind (or of an outcome): gold, generated SQL and the error."""
    chosen = [o for o in outcomes if kind in (o.kind, o.outcome)]
    blocks = [f"{len(chosen)} statements of {kind!r}"]
    for o in chosen:
        block = [f"#{o.id} {o.db_id} {o.outcome} {o.kind or ''}".rstrip(), f"  gold:      {o.gold}"]
        if o.generated is not None:
            block.append(f"  generated: {o.generated}")
        if o.detail and o.outcome not in ("same", "differs"):
            lines = o.detail.strip().splitlines()  # DuckDB lists every candidate function: the head says it
            block.append("  detail:    " + "\n             ".join(lines[:3] + (["…"] if len(lines) > 3 else [])))
        blocks.append("\n".join(block))
    return "\n\n".join(blocks)


def dump(report: dict[str, Any]) -> str:
    """The figures as JSON text, one statement a line (so two runs diff line by line)."""
    head = json.dumps({k: v for k, v in report.items() if k != "statements"}, indent=1, ensure_ascii=False)
    rows = ",\n".join("  " + json.dumps(s, ensure_ascii=False) for s in report["statements"])
    return head[:-2] + ',\n "statements": [\n' + rows + "\n ]\n}\n"


def default_out(dialect: str) -> Path:
    """Where a run's figures go by default."""
    return HERE / ("coverage.json" if dialect == "sqlite" else f"coverage_{dialect}.json")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the round trip, print the figures, write them as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dialect", choices=DIALECTS, default="sqlite")
    parser.add_argument("--limit", type=int, default=None, help="only the first N statements")
    parser.add_argument("--out", type=Path, default=None,
                        help="the JSON figures (default: by dialect, beside this script; none with --limit)")
    parser.add_argument("--show", metavar="KIND", default=None, help="print the statements of a kind or outcome")
    parser.add_argument("--pg-url", default=PG_URL, help="PostgreSQL server and database for the copies")
    args = parser.parse_args(argv)
    items = load_gold()[: args.limit]
    started = time.perf_counter()
    with make_target(args.dialect, {i["db_id"] for i in items}, pg_url=args.pg_url) as target:
        copied = time.perf_counter()
        outcomes = RoundTrip(args.dialect, target).run(items)
    finished = time.perf_counter()
    report = figures(outcomes, args.dialect, target.fallbacks)
    # a partial run never replaces the recorded figures (the test reads them)
    out = args.out or (None if args.limit is not None else default_out(args.dialect))
    if out is not None:
        out.write_text(dump(report))
    print(summary(report))
    if args.show:
        print("\n" + show(outcomes, args.show))
    setup = f"copies {copied - started:.1f} s, " if args.dialect != "sqlite" else ""
    written = f"figures in {out}" if out else "figures not written (--limit without --out)"
    print(f"\n{setup}round trip {finished - copied:.1f} s; {written}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):  # `| head`
        sys.exit(main())
