"""The SQL guard: only a single read-only SELECT may reach a database.

The statement is parsed with sqlglot in the datasource's dialect and refused when it is not
exactly one query (SELECT, or a set operation of SELECTs, optionally with CTEs), or when any
node in it writes, locks, changes settings, reads files or catalogs, or calls a function with
side effects. The connections are read-only as well, so a gap here still cannot write.

>>> guard_sql("SELECT Name FROM Artist", "sqlite").sql()
'SELECT Name FROM Artist'
>>> guard_sql("DELETE FROM Artist", "sqlite")
Traceback (most recent call last):
...
nl2sql.errors.SQLRejected: Only a single read-only SELECT is allowed; this statement is a DELETE. ...
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from nl2sql.errors import SQLRejected

FIX = "Rewrite it as one SELECT statement that only reads data."

#: Nodes that write, lock, run commands or change the session: refused anywhere in the tree.
FORBIDDEN_NODES: tuple[type[exp.Expression], ...] = (
    exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Create, exp.Drop, exp.Alter, exp.TruncateTable,
    exp.Command, exp.Pragma, exp.Attach, exp.Detach, exp.Copy, exp.Set, exp.Use, exp.Transaction,
    exp.Commit, exp.Rollback, exp.Into, exp.Lock, exp.Grant, exp.Revoke, exp.LoadData, exp.Cache,
    exp.Uncache, exp.Refresh, exp.Describe, exp.Analyze, exp.Install, exp.Summarize, exp.Kill,
    exp.Export, exp.Comment, exp.Show, exp.Execute, exp.Declare,
)  # fmt: skip

#: Functions with side effects, or that read files, the network, settings or run SQL text.
FORBIDDEN_FUNCTIONS = frozenset(
    """
    pg_sleep pg_sleep_for pg_sleep_until pg_read_file pg_read_binary_file pg_ls_dir pg_stat_file
    pg_terminate_backend pg_cancel_backend pg_reload_conf pg_rotate_logfile pg_switch_wal
    pg_create_restore_point pg_logical_emit_message pg_notify pg_promote pg_file_write
    set_config setval nextval currval lastval txid_current pg_current_xact_id
    lo_import lo_export lo_unlink lo_create lo_from_bytea lo_put lo_open lo_write
    dblink dblink_exec dblink_connect dblink_send_query query_to_xml query_to_xml_and_xmlschema
    cursor_to_xml database_to_xml table_to_xml schema_to_xml ts_stat ts_rewrite gin_clean_pending_list
    load_extension readfile writefile edit fts3_tokenizer
    read_csv read_csv_auto read_parquet parquet_scan read_json read_json_auto read_json_objects
    read_ndjson read_ndjson_auto read_text read_blob read_xlsx glob sniff_csv query query_table
    getenv current_setting sqlite_dbpage dbstat zipfile sqlar_compress json_execute_serialized_sql
    """.split()  # noqa: SIM905 (a word list reads better than 70 quoted strings)
)
#: Every `pg_*` function is refused (server administration: replication slots, statistics resets,
#: config reloads, backups, file access — several of which act even inside a READ ONLY transaction),
#: except the few in SAFE_PG_FUNCTIONS. The `*_to_xml*` family and `ts_stat` run SQL text.
FORBIDDEN_FUNCTION_PREFIXES = (
    "pg_", "dblink", "lo_", "read_", "txid_", "brin_", "binary_upgrade_",
    "query_to_xml", "cursor_to_xml", "table_to_xml", "schema_to_xml", "database_to_xml",
)  # fmt: skip
SAFE_PG_FUNCTIONS = frozenset({"pg_typeof", "pg_column_size", "pg_size_pretty", "pg_size_bytes"})

#: Catalog schemas and tables that would reveal names a role may not see.
CATALOG_SCHEMAS = frozenset({"information_schema", "pg_catalog", "pg_toast", "system", "temp"})
#: SQLite's table-valued pragmas and dbstat read as bare table names (`FROM pragma_table_info`, `IN dbstat`).
CATALOG_TABLE = re.compile(r"^(sqlite_|pg_|duckdb_|pragma_)|^dbstat$", re.IGNORECASE)
#: Paths, URLs, globs, and names with a file extension anywhere (DuckDB also reads `x.csv?query`, `x.csv.gz`).
FILE_LIKE = re.compile(
    r"[/\\:?*]|\.(csv|tsv|tbl|parquet|json|ndjson|jsonl|txt|gz|zst|xlsx?|db|ddb|duckdb|sqlite3?|avro|arrow|ipc|orc|xml)\b",
    re.I,
)

#: Table functions that only compute values (no I/O): allowed in FROM.
SAFE_TABLE_FUNCTIONS = (exp.Unnest, exp.GenerateSeries, exp.ExplodingGenerateSeries)

#: sqlglot dialect names, keyed by the adapter's dialect.
SQLGLOT_DIALECTS = {"postgresql": "postgres", "sqlite": "sqlite", "duckdb": "duckdb", "mysql": "mysql"}


@dataclass(frozen=True)
class TableRead:
    """A table a statement reads: its name and, when written, its schema (and catalog)."""

    name: str
    schema: str | None = None
    catalog: str | None = None


def sqlglot_dialect(dialect: str) -> str:
    """The sqlglot name of an adapter dialect (`postgresql` → `postgres`)."""
    return SQLGLOT_DIALECTS.get(dialect, dialect)


def _kind(node: exp.Expression) -> str:
    return type(node).__name__.upper()


def _function_name(node: exp.Func) -> str:
    return (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()


def _parse_one(sql: str, dialect: str) -> exp.Expression:
    if not sql or not sql.strip():
        raise SQLRejected("The statement is empty.", fix=FIX)
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)  # sqlglot warns when it falls back to Command; we refuse those anyway
    try:
        statements = [s for s in sqlglot.parse(sql, read=sqlglot_dialect(dialect)) if s is not None]
    except SqlglotError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "syntax error"
        raise SQLRejected(f"The statement could not be parsed as {dialect} SQL: {first}", fix=FIX) from exc
    finally:
        logger.setLevel(level)
    if not statements:
        raise SQLRejected("The statement is empty.", fix=FIX)
    if len(statements) > 1:
        raise SQLRejected(f"Only one statement may run at a time; this text holds {len(statements)}.", fix=FIX)
    return statements[0]


def guard_sql(sql: str, dialect: str) -> exp.Expression:
    """Parse `sql` and return its tree if it is a single read-only query; else raise SQLRejected."""
    tree = _parse_one(sql, dialect)
    if not isinstance(tree, exp.Query):
        raise SQLRejected(f"Only a single read-only SELECT is allowed; this statement is a {_kind(tree)}.", fix=FIX)
    for node in tree.walk():
        if isinstance(node, FORBIDDEN_NODES):
            what = "SELECT … INTO" if isinstance(node, exp.Into) else _kind(node)
            if isinstance(node, exp.Lock):
                what = "a locking clause (FOR UPDATE/SHARE)"
            raise SQLRejected(f"Only a single read-only SELECT is allowed; this statement contains {what}.", fix=FIX)
        if isinstance(node, exp.Func):
            name = _function_name(node)
            if _forbidden_function(name):
                raise SQLRejected(
                    f"The function {name}() is not allowed: it has side effects or reads outside data.", fix=FIX
                )
        if isinstance(node, exp.Lateral) and isinstance(node.this, exp.Func):
            _check_table_function(node.this)
        if isinstance(node, exp.Table):
            _check_table(node)
        if isinstance(node, exp.In) and (table := _in_table(node)) is not None:
            _check_table(table)
        if isinstance(node, exp.In) and isinstance(field := node.args.get("field"), exp.Func) \
                and not isinstance(field, exp.Unnest):
            _check_table_function(field)  # SQLite's `expr IN table_function(…)`
    return tree


def _in_table(node: exp.In) -> exp.Table | None:
    """The table of SQLite's `expr IN table` form, which sqlglot parses as a column: `1 IN Employee` reads the
    table Employee (and `1 IN main.Employee` the table in schema main)."""
    field = node.args.get("field")
    if not isinstance(field, exp.Column) or not isinstance(field.this, exp.Identifier):
        return None
    return exp.Table(this=field.this.copy(), db=field.args["table"].copy() if field.args.get("table") else None)


def _forbidden_function(name: str) -> bool:
    if name in SAFE_PG_FUNCTIONS:
        return False
    return name in FORBIDDEN_FUNCTIONS or name.startswith(FORBIDDEN_FUNCTION_PREFIXES)


def _check_table_function(source: exp.Func) -> None:
    """Table functions (in FROM, JOIN or LATERAL) may only compute values, never read or run anything."""
    if not isinstance(source, SAFE_TABLE_FUNCTIONS):
        raise SQLRejected(f"Table functions such as {_function_name(source)}() are not allowed in FROM.", fix=FIX)


def _check_table(node: exp.Table) -> None:
    source = node.this
    if isinstance(source, exp.Func):
        _check_table_function(source)
    if not isinstance(source, exp.Identifier | exp.Func):
        raise SQLRejected("Only tables may be read in FROM.", fix=FIX)
    if isinstance(source, exp.Identifier):
        if FILE_LIKE.search(node.name):
            raise SQLRejected("Reading files is not allowed; only the datasource's tables can be read.", fix=FIX)
        if node.db.lower() in CATALOG_SCHEMAS or node.catalog.lower() in CATALOG_SCHEMAS or CATALOG_TABLE.match(node.name):
            raise SQLRejected(
                "System catalogs are not readable here.", fix="Use `nl2sql schema DATASOURCE` to see the tables you may read."
            )


def tables_read(tree: exp.Expression) -> list[TableRead]:
    """The tables a guarded statement reads, each once, without references to CTEs.

    A name counts as a CTE only where that CTE is surely in scope; when unsure it counts as a
    table, so a CTE can never hide a real table from the scope check (`WITH salaries AS
    (SELECT * FROM salaries) …` reads the table `salaries`).
    """
    out: list[TableRead] = []
    for node in tree.find_all(exp.Table):
        if not isinstance(node.this, exp.Identifier):
            continue
        if not node.db and not node.catalog and _refers_to_cte(node):
            continue
        read = TableRead(node.name, node.db or None, node.catalog or None)
        if read not in out:
            out.append(read)
    for node in tree.find_all(exp.In):  # `x IN table` (a CTE's name there counts as a table: never hidden)
        if (table := _in_table(node)) is not None and (read := TableRead(table.name, table.db or None)) not in out:
            out.append(read)
    return out


def _same_name(a: exp.Identifier, b: exp.Identifier) -> bool:
    """Surely one name in every dialect: the same spelling and the same quoting (case rules differ)."""
    return a.this == b.this and bool(a.quoted) == bool(b.quoted)


def _cte_names(ctes: list[exp.Expression], table: exp.Table) -> bool:
    return any(
        isinstance(alias := cte.args.get("alias"), exp.TableAlias)
        and isinstance(alias.this, exp.Identifier)
        and _same_name(alias.this, table.this)
        for cte in ctes
    )


def _refers_to_cte(table: exp.Table) -> bool:
    """Whether the unqualified `table` names a CTE visible where it stands.

    Visible: every CTE of a WITH whose query body holds the reference; inside a CTE's own body,
    only the CTEs before it, and itself only from the recursive term (right of the UNION) of a
    WITH RECURSIVE (DuckDB reads the real table elsewhere, PostgreSQL does without RECURSIVE).
    """
    child: exp.Expression = table
    parent = table.parent
    while parent is not None:
        if isinstance(parent, exp.With):
            ctes = list(parent.expressions)
            index = next((i for i, cte in enumerate(ctes) if cte is child), None)
            if index is not None:
                if _cte_names(ctes[:index], table):
                    return True
                body = child.this
                if (
                    parent.args.get("recursive")
                    and isinstance(body, exp.SetOperation)
                    and _within(table, body.expression)
                    and _cte_names([child], table)
                ):
                    return True
        else:
            with_ = parent.args.get("with_")
            if isinstance(with_, exp.With) and with_ is not child and _cte_names(with_.expressions, table):
                return True
        child, parent = parent, parent.parent
    return False


def _within(node: exp.Expression | None, ancestor: exp.Expression | None) -> bool:
    while node is not None:
        if node is ancestor:
            return True
        node = node.parent
    return False
