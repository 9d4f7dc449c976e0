"""The SQL guard: only a single read-only SELECT may reach a database.

The statement is parsed with sqlglot in the datasource's dialect and refused when it is not
exactly one query (SELECT, or a set operation of SELECTs, optionally with CTEs), when any node
in it writes, locks, changes settings, reads files or catalogs, when it calls a function that is
not on the dialect's list of ordinary functions, or when it casts to a catalog type. The
connections are read-only as well, so a gap here still cannot write.

>>> guard_sql("SELECT Name FROM Artist", "sqlite").sql()
'SELECT Name FROM Artist'
>>> guard_sql("DELETE FROM Artist", "sqlite")
Traceback (most recent call last):
...
nl2sql.errors.SQLRejected: Only a single read-only SELECT is allowed; this statement is a DELETE. ...
>>> guard_sql("SELECT to_regclass('secrets') IS NOT NULL", "postgresql")
Traceback (most recent call last):
...
nl2sql.errors.SQLRejected: The function to_regclass() is not allowed: ...
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel, SqlglotError
from sqlglot.tokens import TokenType

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


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: The functions a statement may call, per sqlglot dialect: an allow-list, matched case-insensitively against the
#: name the dialect renders a function by (sqlglot reads `now()` as CURRENT_TIMESTAMP, SQLite's `substr` as
#: SUBSTRING). Chosen from each engine's own list of built-ins (SQLite 3.40's `PRAGMA function_list` and the
#: string and date functions of 3.41–3.44; DuckDB's `duckdb_functions()`; PostgreSQL 15's pg_proc) plus the SQL
#: syntax sqlglot renders as a call (CAST, EXTRACT, EXISTS, COALESCE): aggregates, window functions, string,
#: math, date and time, conditional, JSON readers and builders, arrays and lists — every function the plan
#: generator emits and the gold SQL of suites/*.yaml uses. Left out on purpose: whatever reads the catalog or
#: object comments (to_regclass, obj_description, has_*_privilege, pg_get_*, format_type, duckdb_*, pragma_*),
#: the server's settings, version or identity (current_setting, version, current_user, inet_server_addr,
#: sqlite_version, sqlite_compileoption_*), files or the network, or has side effects (sleeps, sequences, locks,
#: logs, extensions). Only built-ins: any other name could be a function of the database's own.
STANDARD_FUNCTIONS = _words(
    """
    count sum avg min max abs round ceil ceiling floor sqrt exp ln log10 power pi sign mod radians degrees random
    sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh trunc
    lower upper length replace substr substring trim ltrim rtrim format coalesce nullif cast
    row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value nth_value
    current_date current_time current_timestamp exists
    """
)
ALLOWED_FUNCTIONS: dict[str, frozenset[str]] = {
    "sqlite": STANDARD_FUNCTIONS | _words(
        """
        char concat concat_ws date datetime glob group_concat hex ifnull iif instr julianday like likelihood likely
        log log2 octet_length pow printf quote randomblob string_agg strftime time timediff total typeof unhex
        unicode unixepoch unlikely zeroblob
        json json_array json_array_length json_extract json_group_array json_group_object json_insert json_object
        json_patch json_quote json_remove json_replace json_set json_type json_valid
        """
    ),
    "duckdb": STANDARD_FUNCTIONS | _words(
        """
        any_value approx_count_distinct approx_quantile arbitrary arg_max arg_min argmax argmin array_agg bit_and
        bit_or bit_xor bool_and bool_or corr count_if count_star countif covar_pop covar_samp entropy favg first fsum
        geomean geometric_mean group_concat histogram kahan_sum kurtosis kurtosis_pop last list listagg mad max_by
        mean median min_by mode product quantile quantile_cont quantile_disc regr_avgx regr_avgy regr_count
        regr_intercept regr_r2 regr_slope regr_sxx regr_sxy regr_syy reservoir_quantile sem skewness stddev
        stddev_pop stddev_samp string_agg sumkahan var_pop var_samp variance wavg weighted_avg fill rank_dense
        cbrt cot even factorial fmod gamma gcd greatest greatest_common_divisor isfinite isinf isnan lcm least
        least_common_multiple lgamma log log2 nextafter pow round_even roundbankers signbit xor bit_count
        ascii bar base64 bit_length char_length character_length chr concat concat_ws contains damerau_levenshtein
        editdist3 ends_with format_bytes formatreadabledecimalsize formatreadablesize from_base64 from_hex hamming
        hash hex instr jaccard jaro_similarity jaro_winkler_similarity lcase left len levenshtein lpad md5
        octet_length ord overlay position prefix printf regexp_extract regexp_extract_all regexp_full_match
        regexp_matches regexp_replace regexp_split_to_array repeat reverse right rpad sha1 sha256 split split_part
        starts_with str_split string_split string_split_regex string_to_array strip_accents strlen strpos suffix
        to_base64 translate ucase unhex unicode url_decode url_encode
        age century date_add date_diff date_part date_sub date_trunc datediff datepart datesub datetrunc day dayname
        dayofmonth dayofweek dayofyear days_in_month decade epoch epoch_ms epoch_ns epoch_us era hour isodow isoyear
        julian last_day make_date make_time make_timestamp make_timestamptz microsecond millennium millisecond minute
        month monthname nanosecond now quarter second strftime strptime time_bucket timezone timezone_hour
        timezone_minute to_days to_hours to_microseconds to_milliseconds to_minutes to_months to_seconds
        to_timestamp to_weeks to_years today transaction_timestamp try_strptime week weekday weekofyear year yearweek
        extract if ifnull try_cast typeof gen_random_uuid uuid generate_series generate_subscripts range unnest
        array_append array_cat array_concat array_contains array_distinct array_extract array_filter array_has
        array_has_all array_has_any array_indexof array_length array_position array_prepend array_reverse
        array_reverse_sort array_slice array_sort array_to_string array_transform array_unique array_value cardinality
        flatten list_append list_avg list_cat list_concat list_contains list_count list_distinct list_element
        list_extract list_filter list_has list_has_all list_has_any list_indexof list_max list_min list_position
        list_prepend list_reverse list_reverse_sort list_slice list_sort list_sum list_transform list_unique
        list_value map map_entries map_extract map_from_entries map_keys map_values row struct_extract struct_insert
        struct_pack
        json json_array json_array_length json_contains json_exists json_extract json_extract_path
        json_extract_path_text json_extract_string json_group_array json_group_object json_keys json_merge_patch
        json_object json_pretty json_quote json_structure json_transform json_type json_valid json_value to_json
        from_json
        """
    ),
    "postgres": STANDARD_FUNCTIONS | _words(
        """
        array_agg bit_and bit_or bit_xor bool_and bool_or corr covar_pop covar_samp every json_agg json_object_agg
        jsonb_agg jsonb_object_agg mode percentile_cont percentile_disc regr_avgx regr_avgy regr_count
        regr_intercept regr_r2 regr_slope regr_sxx regr_sxy regr_syy stddev stddev_pop stddev_samp string_agg
        var_pop var_samp variance grouping
        acosd asind atan2d atand cbrt cosd cot cotd div factorial gcd lcm log min_scale pow scale sind tand
        trim_scale width_bucket greatest least num_nonnulls num_nulls
        ascii bit_length btrim char_length character_length chr concat concat_ws convert_from convert_to decode encode
        initcap left lpad md5 normalize octet_length overlay position quote_ident quote_literal quote_nullable
        regexp_count regexp_instr regexp_like regexp_match regexp_matches regexp_replace regexp_split_to_array
        regexp_split_to_table regexp_substr repeat reverse right rpad sha224 sha256 sha384 sha512 split_part
        starts_with string_to_array string_to_table strpos to_ascii to_hex translate unistr
        to_char to_date to_number to_timestamp age clock_timestamp date_bin date_part date_trunc extract isfinite
        justify_days justify_hours justify_interval localtime localtimestamp make_date make_interval make_time
        make_timestamp make_timestamptz now statement_timestamp timeofday transaction_timestamp timezone
        array_to_json json_array_elements json_array_elements_text json_array_length json_build_array
        json_build_object json_each json_each_text json_extract_path json_extract_path_text json_object
        json_object_keys json_strip_nulls json_typeof jsonb_array_elements jsonb_array_elements_text
        jsonb_array_length jsonb_build_array jsonb_build_object jsonb_each jsonb_each_text jsonb_extract_path
        jsonb_extract_path_text jsonb_insert jsonb_object jsonb_object_keys jsonb_path_exists jsonb_path_match
        jsonb_path_query jsonb_path_query_array jsonb_path_query_first jsonb_pretty jsonb_set jsonb_strip_nulls
        jsonb_typeof row_to_json to_json to_jsonb
        array_append array_cat array_dims array_fill array_length array_lower array_ndims array_position
        array_positions array_prepend array_remove array_replace array_to_string array_upper cardinality trim_array
        unnest generate_series generate_subscripts
        to_tsvector to_tsquery plainto_tsquery phraseto_tsquery websearch_to_tsquery ts_rank ts_rank_cd ts_headline
        setweight gen_random_uuid row pg_typeof pg_column_size pg_size_pretty pg_size_bytes
        """
    ),
}
#: A dialect without its own list (a plugin's, or none where a datasource's URL lives in a block) may call what
#: any list allows; the adapter guards the statement again, in its own dialect, before it runs.
ANY_DIALECT_FUNCTIONS = frozenset().union(*ALLOWED_FUNCTIONS.values())
#: PostgreSQL's identity keywords, which it reads as functions where sqlglot sees a column (`SELECT user`).
IDENTITY_KEYWORDS = _words("user current_user session_user current_role system_user current_catalog current_schema")
#: PostgreSQL's ordinary built-in types that sqlglot reads as user-defined (every other such name is refused).
POSTGRES_PLAIN_TYPES = _words("cidr macaddr macaddr8 varbit tsvector tsquery")
#: Built-in schemas a PostgreSQL function may be called through (`pg_catalog.lower(x)`).
FUNCTION_SCHEMAS = frozenset({"pg_catalog"})

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

#: A function's name as a token: a word, never a string or a number.
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
LITERAL_TOKENS = frozenset({TokenType.STRING, TokenType.NUMBER, TokenType.NATIONAL_STRING})

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


def allowed_functions(dialect: str) -> frozenset[str]:
    """The functions a statement in `dialect` may call (lower case; every list's where the dialect has none)."""
    return ALLOWED_FUNCTIONS.get(sqlglot_dialect(dialect), ANY_DIALECT_FUNCTIONS)


def _function_name(node: exp.Func, read: str) -> str | None:
    """The name the dialect `read` calls `node` by, in lower case; None where it renders as operator syntax.

    sqlglot parses many functions into typed nodes (exp.Sum, exp.TimeToStr, …) whose own names are sqlglot's,
    so the node is rendered back in the dialect: `NAME(…)` or a bare keyword (CURRENT_DATE) is a call of NAME;
    anything else (CASE …, `j -> 'k'`, `ARRAY[…]`, `x || y`) is syntax whose parts are checked on their own.
    """
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    dialect = Dialect.get_or_raise(read or None)
    try:
        text = node.sql(dialect=dialect, unsupported_level=ErrorLevel.IGNORE)
        # Behind SELECT, so that a leading keyword such as REPLACE is never read as a command taking the rest.
        tokens = dialect.tokenize("SELECT " + text)[1:]
    except SqlglotError:
        return node.sql_name().lower()  # a name no list holds: refused
    if not tokens:
        return None
    if len(tokens) == 1:
        if any(arg.sql(dialect=dialect) == text for arg in node.iter_expressions()):
            return None  # a conversion sqlglot adds and the dialect leaves out: the node renders as its argument
        if tokens[0].token_type in LITERAL_TOKENS:
            return node.sql_name().lower()  # folded into a constant (SQLite's CURRENT_SCHEMA is 'main'): refused
        return text.lower() if WORD.fullmatch(text) else None
    if not WORD.fullmatch(tokens[0].text) or tokens[1].token_type != TokenType.L_PAREN:
        return None
    depth = 0
    for index, token in enumerate(tokens[1:], start=1):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(token.token_type, 0)
        if depth == 0:
            return tokens[0].text.lower() if index == len(tokens) - 1 else None
    return None


def _display_name(node: exp.Func, read: str) -> str:
    return _function_name(node, read) or node.sql_name().lower()


def _parse_one(sql: str, dialect: str) -> exp.Expression:
    if not sql or not sql.strip():
        raise SQLRejected("The statement is empty.", fix=FIX)
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)  # sqlglot warns when it falls back to Command; we refuse those anyway
    try:
        statements = [s for s in sqlglot.parse(sql, read=sqlglot_dialect(dialect)) if s is not None]
    except RecursionError:  # sqlglot's parser recurses once per level of nesting
        raise SQLRejected("The statement nests expressions too deeply to be checked.",
                          fix="Write it with fewer levels of nested calls or parentheses (a CTE can hold a step).") from None
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
    read, allowed = sqlglot_dialect(dialect), allowed_functions(dialect)
    if not isinstance(tree, exp.Query):
        raise SQLRejected(f"Only a single read-only SELECT is allowed; this statement is a {_kind(tree)}.", fix=FIX)
    for node in tree.walk():
        if isinstance(node, FORBIDDEN_NODES):
            what = "SELECT … INTO" if isinstance(node, exp.Into) else _kind(node)
            if isinstance(node, exp.Lock):
                what = "a locking clause (FOR UPDATE/SHARE)"
            raise SQLRejected(f"Only a single read-only SELECT is allowed; this statement contains {what}.", fix=FIX)
        if isinstance(node, exp.Func):
            _check_function(node, read, allowed)
        if isinstance(node, exp.DataType):
            _check_type(node, read)
        if read == "postgres" and isinstance(node, exp.Column) and _is_identity_keyword(node):
            raise _function_refused(node.name.lower())
        if isinstance(node, exp.Lateral) and isinstance(node.this, exp.Func):
            _check_table_function(node.this, read)
        if isinstance(node, exp.Table):
            _check_table(node, read)
        if isinstance(node, exp.In) and (table := _in_table(node)) is not None:
            _check_table(table, read)
        if isinstance(node, exp.In) and isinstance(field := node.args.get("field"), exp.Func) \
                and not isinstance(field, exp.Unnest):
            _check_table_function(field, read)  # SQLite's `expr IN table_function(…)`
    return tree


def _function_refused(name: str) -> SQLRejected:
    return SQLRejected(
        f"The function {name}() is not allowed: only ordinary functions may be called, none that reads the "
        "catalog, the server's settings or identity, or files, or that has side effects.",
        fix=f"Rewrite it without {name}(), using aggregates, window, string, math, date and time, conditional "
        "or JSON functions.",
    )


def _check_function(node: exp.Func, read: str, allowed: frozenset[str]) -> None:
    """A function call is allowed only by its rendered name, and on PostgreSQL only unqualified or through
    pg_catalog (`public.lower(x)` calls a function of the database's own, not the built-in)."""
    name = _function_name(node, read)
    if name is not None and name not in allowed:
        raise _function_refused(name)
    parent = node.parent
    if read == "postgres" and isinstance(parent, exp.Dot) and parent.expression is node:
        schema = parent.this
        if not (isinstance(schema, exp.Identifier) and schema.name.lower() in FUNCTION_SCHEMAS):
            raise SQLRejected(
                f"The function {_display_name(node, read)}() may not be called through a schema.",
                fix="Call built-in functions by their plain name.",
            )


def _check_type(node: exp.DataType, read: str) -> None:
    """Casts to object-identifier types look names up in the catalog (`'secrets'::regclass` fails only for a
    table that does not exist); on PostgreSQL every table's name is also a type (`NULL::secrets`), so a cast
    there may name built-in types only."""
    if isinstance(node, exp.ObjectIdentifier):
        raise SQLRejected(
            f"Casts to {node.sql(dialect=read).upper()} are not allowed: object-identifier types look names up in "
            "the system catalog.",
            fix="Compare names as text, or cast to an ordinary type (text, integer, numeric, date, timestamp, …).",
        )
    if read == "postgres" and node.this == exp.DataType.Type.USERDEFINED \
            and node.sql(dialect=read).lower() not in POSTGRES_PLAIN_TYPES:
        raise SQLRejected(
            "Casts to types other than PostgreSQL's built-in types are not allowed (a table's name is a type too).",
            fix="Cast to a built-in type (text, integer, numeric, date, timestamp, …) or compare with a text value.",
        )


def _is_identity_keyword(node: exp.Column) -> bool:
    """PostgreSQL reads an unquoted, unqualified `user` or `current_role` as a function, never as a column."""
    return not node.table and isinstance(node.this, exp.Identifier) and not node.this.quoted \
        and node.name.lower() in IDENTITY_KEYWORDS


def _in_table(node: exp.In) -> exp.Table | None:
    """The table of SQLite's `expr IN table` form, which sqlglot parses as a column: `1 IN Employee` reads the
    table Employee (and `1 IN main.Employee` the table in schema main)."""
    field = node.args.get("field")
    if not isinstance(field, exp.Column) or not isinstance(field.this, exp.Identifier):
        return None
    return exp.Table(this=field.this.copy(), db=field.args["table"].copy() if field.args.get("table") else None)


def _check_table_function(source: exp.Func, read: str) -> None:
    """Table functions (in FROM, JOIN or LATERAL) may only compute values, never read or run anything."""
    if not isinstance(source, SAFE_TABLE_FUNCTIONS):
        raise SQLRejected(f"Table functions such as {_display_name(source, read)}() are not allowed in FROM.",
                          fix=FIX)


def _check_table(node: exp.Table, read: str) -> None:
    source = node.this
    if isinstance(source, exp.Func):
        _check_table_function(source, read)
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
