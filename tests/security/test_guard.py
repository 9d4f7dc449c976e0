"""The SQL guard: every statement of the hostile corpus is refused, ordinary read-only SELECTs are not.

The corpus lives in hostile_sql.yaml (one test per entry and dialect, named by the entry's id).
The benign list guards against false positives: a guard that refuses real questions gets bypassed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nl2sql.datasources.guard import TableRead, guard_sql, tables_read
from nl2sql.errors import SQLRejected

DIALECTS = ("sqlite", "duckdb", "postgresql")
ALL = DIALECTS
PG_DUCK = ("duckdb", "postgresql")
CORPUS = yaml.safe_load(Path(__file__).with_name("hostile_sql.yaml").read_text(encoding="utf-8"))
#: Table names used in the corpus: a refusal message must never repeat them.
CORPUS_TABLES = ("users", "salaries", "secrets", "staging", "audit_copy")


def _hostile_cases() -> list[pytest.param]:
    return [
        pytest.param(case["sql"], dialect, id=f"{case['id']}[{dialect}]")
        for case in CORPUS
        for dialect in case["dialects"]
    ]


def test_corpus_is_large_and_well_formed() -> None:
    assert len(CORPUS) >= 60
    ids = [case["id"] for case in CORPUS]
    assert len(ids) == len(set(ids)), "corpus ids must be unique"
    for case in CORPUS:
        assert set(case) == {"id", "dialects", "sql", "why"}, case["id"]
        assert case["dialects"], case["id"]
        assert set(case["dialects"]) <= set(DIALECTS), case["id"]
        assert isinstance(case["sql"], str), case["id"]
        assert case["why"].strip(), case["id"]


@pytest.mark.parametrize(("sql", "dialect"), _hostile_cases())
def test_guard_refuses_hostile_sql(sql: str, dialect: str) -> None:
    with pytest.raises(SQLRejected) as info:
        guard_sql(sql, dialect)
    message = info.value.message.lower()
    assert info.value.fix, "every refusal says how to fix the statement"
    assert not any(table in message for table in CORPUS_TABLES), "a refusal never names a table"


BENIGN: list[tuple[str, tuple[str, ...], str]] = [
    ("filter", ALL, "SELECT id, name FROM users WHERE id = 1"),
    ("join", ALL, "SELECT u.name, o.total FROM users u JOIN orders o ON o.user_id = u.id WHERE o.total > 10"),
    (
        "left_join_group_having",
        ALL,
        "SELECT u.name, COUNT(o.id) AS n FROM users u LEFT JOIN orders o ON o.user_id = u.id "
        "GROUP BY u.name HAVING COUNT(o.id) > 2 ORDER BY n DESC LIMIT 10 OFFSET 5",
    ),
    (
        "cte",
        ALL,
        "WITH big AS (SELECT user_id, SUM(total) AS spent FROM orders GROUP BY user_id) "
        "SELECT u.name, b.spent FROM users u JOIN big b ON b.user_id = u.id",
    ),
    (
        "cte_chain",
        ALL,
        "WITH a AS (SELECT id FROM users), b AS (SELECT id FROM a WHERE id > 1) SELECT COUNT(*) FROM b",
    ),
    (
        "recursive_cte",
        ALL,
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10) SELECT SUM(i) FROM n",
    ),
    (
        "window",
        ALL,
        "SELECT user_id, total, RANK() OVER (PARTITION BY user_id ORDER BY total DESC) AS r, "
        "SUM(total) OVER (ORDER BY created_at ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS rolling FROM orders",
    ),
    ("union_all", ALL, "SELECT name FROM users UNION ALL SELECT name FROM archived_users"),
    (
        "intersect_except",
        ALL,
        "SELECT id FROM users INTERSECT SELECT user_id FROM orders EXCEPT SELECT user_id FROM refunds",
    ),
    ("in_subquery", ALL, "SELECT name FROM users WHERE id IN (SELECT user_id FROM orders WHERE total > 100)"),
    (
        "exists_subquery",
        ALL,
        "SELECT name FROM users u WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.user_id = u.id)",
    ),
    (
        "scalar_subquery",
        ALL,
        "SELECT name, (SELECT MAX(total) FROM orders o WHERE o.user_id = u.id) FROM users u",
    ),
    ("derived_table", ALL, "SELECT s.n FROM (SELECT COUNT(*) AS n FROM orders) AS s"),
    (
        "like_percent",
        ALL,
        "SELECT name FROM users WHERE name LIKE '%drop%' OR email LIKE 'a\\_%' ESCAPE '\\'",
    ),
    (
        "case",
        ALL,
        "SELECT CASE WHEN total > 100 THEN 'big' WHEN total > 10 THEN 'medium' ELSE 'small' END AS size FROM orders",
    ),
    (
        "string_with_drop_table",
        ALL,
        "SELECT name FROM users WHERE note = 'DROP TABLE users; DELETE FROM orders; --'",
    ),
    ("string_with_punctuation", ALL, "SELECT 'a; b -- c /* d */ ''e''' AS s"),
    ("string_with_path", ALL, "SELECT name FROM files WHERE path = '/etc/passwd' OR path LIKE '%.csv'"),
    ("comment_with_keywords", ALL, "/* DELETE FROM users */ SELECT id FROM users -- ; DROP TABLE users"),
    ("trailing_semicolon", ALL, "SELECT COUNT(*) FROM users;"),
    (
        "keyword_like_names",
        ALL,
        "SELECT deleted_at, updated_by, drop_rate, insert_count FROM user_updates WHERE grant_id IS NOT NULL",
    ),
    ("distinct_count", ALL, "SELECT COUNT(DISTINCT user_id), AVG(total), MIN(created_at) FROM orders"),
    (
        "scalar_functions",
        ALL,
        "SELECT LOWER(name), UPPER(name), LENGTH(name), REPLACE(name, 'a', 'b'), SUBSTR(name, 1, 3), "
        "ROUND(total, 2), ABS(total), COALESCE(note, '') FROM users JOIN orders ON orders.user_id = users.id",
    ),
    (
        "between_in_list",
        ALL,
        "SELECT id FROM orders WHERE total BETWEEN 10 AND 20 AND status IN ('paid', 'sent')",
    ),
    ("cast_concat", ALL, "SELECT CAST(id AS TEXT) || ': ' || name AS label FROM users"),
    ("quoted_identifiers", ALL, 'SELECT "Name", "Composer" FROM "Track" WHERE "GenreId" = 1'),
    ("schema_qualified_main", ("sqlite", "duckdb"), "SELECT name FROM main.users"),
    (
        "schema_qualified_public",
        ("postgresql",),
        "SELECT u.name FROM public.users u JOIN sales.orders o ON o.user_id = u.id",
    ),
    (
        "sqlite_dates",
        ("sqlite",),
        "SELECT strftime('%Y-%m', created_at) AS month, COUNT(*) FROM orders "
        "WHERE created_at >= date('now', '-30 days') GROUP BY 1",
    ),
    (
        "date_trunc_interval",
        PG_DUCK,
        "SELECT date_trunc('month', created_at) AS month, COUNT(*) FROM orders "
        "WHERE created_at >= CURRENT_DATE - INTERVAL '30 days' GROUP BY 1 ORDER BY 1",
    ),
    ("extract", PG_DUCK, "SELECT EXTRACT(YEAR FROM created_at) AS y, SUM(total) FROM orders GROUP BY 1"),
    ("generate_series", PG_DUCK, "SELECT g FROM generate_series(1, 5) AS t(g)"),
    (
        "generate_series_join",
        ("postgresql",),
        "SELECT d::date AS day, COUNT(o.id) FROM generate_series(DATE '2024-01-01', DATE '2024-01-31', "
        "INTERVAL '1 day') AS d LEFT JOIN orders o ON o.created_at::date = d::date GROUP BY 1",
    ),
    ("unnest_pg", ("postgresql",), "SELECT x FROM unnest(ARRAY['a', 'b', 'c']) AS t(x)"),
    (
        "unnest_lateral_pg",
        ("postgresql",),
        "SELECT u.id, t.tag FROM users u CROSS JOIN LATERAL unnest(u.tags) AS t(tag)",
    ),
    (
        "lateral_subquery_pg",
        ("postgresql",),
        "SELECT u.name, l.total FROM users u, LATERAL (SELECT total FROM orders o WHERE o.user_id = u.id "
        "ORDER BY total DESC LIMIT 1) l",
    ),
    ("unnest_duckdb", ("duckdb",), "SELECT unnest([1, 2, 3]) AS x"),
    ("range_duckdb", ("duckdb",), "SELECT * FROM range(10)"),
    (
        "distinct_on_filter_pg",
        ("postgresql",),
        "SELECT DISTINCT ON (user_id) user_id, total, COUNT(*) FILTER (WHERE total > 10) OVER () FROM orders "
        "ORDER BY user_id, total DESC",
    ),
    (
        "qualify_duckdb",
        ("duckdb",),
        "SELECT user_id, total FROM orders QUALIFY ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY total DESC) = 1",
    ),
    (
        "pg_typeof_pg",
        ("postgresql",),
        "SELECT pg_typeof(total), pg_size_pretty(1024::bigint) FROM orders LIMIT 1",
    ),
    ("dollar_string_pg", ("postgresql",), "SELECT $$it's; DROP TABLE users$$ AS s"),
    ("nulls_last", PG_DUCK, "SELECT name FROM users ORDER BY last_login DESC NULLS LAST"),
    (
        "operators_led_by_literals",
        ALL,
        "SELECT 'a' || name, 2 * id FROM users WHERE 2 * (id + 1) IN (1, 2) OR 'x' = name AND 1 < id OR NOT 0 = id",
    ),
]

#: Ordinary functions a data team writes by hand, by dialect: the function allow-list must keep admitting them.
#: (name, dialect, sql) over t(a, b, s, d, j, l); test_function_allowlist.py runs each on its engine.
ORDINARY: list[tuple[str, str, str]] = [
    (
        "sqlite_strings",
        "sqlite",
        "SELECT lower(s), upper(s), length(s), substr(s, 1, 3), substring(s, 2), replace(s, 'a', 'b'), trim(s), "
        "ltrim(s, 'x'), rtrim(s), instr(s, 'a'), printf('%05.2f', b), format('%d items', a), hex(s), quote(s), "
        "unicode(s), char(65, 66), s || '-' || a, s LIKE 'a%', s GLOB 'a*', typeof(b), iif(a > 1, 'many', 'one'),"
        " ifnull(s, ''), coalesce(s, 'x'), nullif(s, '') FROM t",
    ),
    (
        "sqlite_math",
        "sqlite",
        "SELECT abs(b), round(b, 2), ceil(b), ceiling(b), floor(b), sqrt(abs(b)), power(b, 2), pow(b, 2), exp(1),"
        " ln(2), log(100), log10(100), log2(8), mod(a, 3), a % 3, pi(), sign(b), trunc(b), random(), "
        "radians(180), degrees(pi()), sin(1), cos(1), tan(1), atan2(1, 2), CAST(b AS INTEGER), CAST(a AS TEXT), "
        "CAST(s AS REAL), CAST(b AS NUMERIC) FROM t",
    ),
    (
        "sqlite_dates",
        "sqlite",
        "SELECT date(d), time(d), datetime(d, '+1 day'), julianday(d) - julianday('2009-01-01'), "
        "strftime('%Y-%m', d), unixepoch(d), CAST(strftime('%Y', d) AS INTEGER), date('now', 'start of month', "
        "'-1 month'), current_date, current_timestamp, current_time FROM t WHERE d >= date('now', '-30 days')",
    ),
    (
        "sqlite_aggregates",
        "sqlite",
        "SELECT s, count(*), count(DISTINCT a), sum(b), total(b), avg(b), min(b), max(b), group_concat(s, ', '), "
        "max(a, b), min(a, b) FROM t GROUP BY s HAVING count(*) > 1",
    ),
    (
        "sqlite_windows",
        "sqlite",
        "SELECT a, row_number() OVER (PARTITION BY s ORDER BY d), rank() OVER (ORDER BY a), dense_rank() OVER "
        "(ORDER BY a), percent_rank() OVER (ORDER BY a), cume_dist() OVER (ORDER BY a), ntile(4) OVER (ORDER BY "
        "a), lag(b) OVER (ORDER BY a), lead(b, 1, 0) OVER (ORDER BY a), first_value(b) OVER (ORDER BY a), "
        "last_value(b) OVER (ORDER BY a), nth_value(b, 2) OVER (ORDER BY a), sum(b) OVER (ORDER BY d ROWS BETWEEN"
        " 6 PRECEDING AND CURRENT ROW) FROM t",
    ),
    (
        "sqlite_json",
        "sqlite",
        "SELECT json_extract(j, '$.a'), j ->> '$.b', j -> '$.c', json_array_length(j, '$.list'), json_type(j), "
        "json_valid(j), json_object('k', a), json_array(a, b), json(j), json_quote(s) FROM t",
    ),
    (
        "sqlite_json_aggregates",
        "sqlite",
        "SELECT json_group_array(a), json_group_object(s, a) FROM t",
    ),
    (
        "duckdb_strings",
        "duckdb",
        "SELECT lower(s), upper(s), length(s), substr(s, 1, 3), substring(s, 2, 1), replace(s, 'a', 'b'), "
        "trim(s), lpad(s, 5, '0'), rpad(s, 5, ' '), left(s, 2), right(s, 2), reverse(s), repeat(s, 2), concat(s, "
        "a), concat_ws('-', s, a), split_part(s, ',', 1), string_split(s, ','), regexp_matches(s, '^a'), "
        "regexp_replace(s, '[0-9]', ''), regexp_extract(s, '([a-z]+)', 1), starts_with(s, 'a'), contains(s, 'b'),"
        " strpos(s, 'a'), position('a' IN s), md5(s), s ILIKE 'a%', format('{}-{}', s, a), printf('%d', a), "
        "levenshtein(s, 'abc'), s || '-' || a FROM t",
    ),
    (
        "duckdb_math",
        "duckdb",
        "SELECT abs(b), round(b, 2), ceil(b), floor(b), sqrt(abs(b)), cbrt(b), power(b, 2), pow(b, 2), exp(1), "
        "ln(2), log(100), log10(100), log2(8), mod(a, 3), pi(), sign(b), trunc(b), random(), greatest(a, b), "
        "least(a, b), isnan(b), a // 2, CAST(b AS INTEGER), b::VARCHAR, TRY_CAST(s AS INTEGER), CAST(s AS "
        "DECIMAL(10, 2)), CAST(d AS DATE) FROM t",
    ),
    (
        "duckdb_dates",
        "duckdb",
        "SELECT date_trunc('month', d), date_part('year', d), EXTRACT(YEAR FROM d), year(d), month(d), day(d), "
        "dayofweek(d), quarter(d), week(d), hour(d), strftime(d, '%Y-%m'), strptime('2024-01-01', '%Y-%m-%d'), "
        "date_diff('day', d, now()), datediff('month', d, current_date), d + INTERVAL 1 DAY, d - INTERVAL '30 "
        "days', age(d), make_date(2024, 1, 1), last_day(d), epoch(d), to_timestamp(0), current_date, "
        "current_timestamp, now(), today(), monthname(d), dayname(d), time_bucket(INTERVAL '1 week', d) FROM t",
    ),
    (
        "duckdb_aggregates",
        "duckdb",
        "SELECT s, count(*), count(DISTINCT a), sum(b), avg(b), min(b), max(b), median(b), mode(a), "
        "quantile_cont(b, 0.9), percentile_cont(0.5) WITHIN GROUP (ORDER BY b), stddev(b), variance(b), "
        "string_agg(s, ','), list(a), array_agg(a), arg_max(s, b), max_by(s, b), bool_or(a > 1), count_if(a > 1),"
        " approx_count_distinct(a), corr(a, b), any_value(s), first(s), sum(b) FILTER (WHERE a > 1) FROM t GROUP "
        "BY s",
    ),
    (
        "duckdb_windows",
        "duckdb",
        "SELECT a, row_number() OVER (PARTITION BY s ORDER BY d), rank() OVER (ORDER BY a), dense_rank() OVER "
        "(ORDER BY a), ntile(4) OVER (ORDER BY a), lag(b) OVER (ORDER BY a), lead(b) OVER (ORDER BY a), "
        "first_value(b) OVER (ORDER BY a), last_value(b) OVER (ORDER BY a), nth_value(b, 2) OVER (ORDER BY a), "
        "percent_rank() OVER (ORDER BY a), cume_dist() OVER (ORDER BY a), sum(b) OVER (ORDER BY d ROWS BETWEEN 6 "
        "PRECEDING AND CURRENT ROW) FROM t",
    ),
    (
        "duckdb_json_lists",
        "duckdb",
        "SELECT j ->> '$.a', j -> 'b', json_extract(j, '$.a'), json_extract_string(j, '$.a'), json_value(j, "
        "'$.a'), json_array_length(j), json_keys(j), json_type(j), json_valid(s), to_json(s), json_object('k', "
        "a), json_array(a, b), list_value(1, 2), [1, 2, 3], l[1], len(l), list_contains(l, 1), array_length(l), "
        "list_sort(l), list_distinct(l), array_to_string(l, ','), {'k': a}, struct_pack(k := a), map([1], ['a']) "
        "FROM t",
    ),
    (
        "duckdb_unnest",
        "duckdb",
        "SELECT unnest(l) AS x, generate_series(1, 3) AS g FROM t",
    ),
    (
        "duckdb_conditional",
        "duckdb",
        "SELECT CASE WHEN a > 1 THEN 'x' ELSE 'y' END, if(a > 1, 'x', 'y'), coalesce(s, ''), ifnull(s, ''), "
        "nullif(s, ''), a IS DISTINCT FROM 1, typeof(a) FROM t",
    ),
    (
        "postgresql_strings",
        "postgresql",
        "SELECT lower(s), upper(s), initcap(s), length(s), char_length(s), substr(s, 1, 3), substring(s FROM 2 "
        "FOR 3), substring(s, 2), replace(s, 'a', 'b'), trim(s), trim(BOTH 'x' FROM s), btrim(s), ltrim(s), "
        "rtrim(s), lpad(s, 5, '0'), rpad(s, 5), left(s, 2), right(s, 2), reverse(s), repeat(s, 2), concat(s, a), "
        "concat_ws('-', s, a), split_part(s, ',', 1), strpos(s, 'a'), position('a' IN s), regexp_replace(s, "
        "'[0-9]', '', 'g'), regexp_match(s, '^(a)'), string_to_array(s, ','), md5(s), s ILIKE 'a%', s ~ '^a', "
        "format('%s-%s', s, a), to_char(b, 'FM999.00'), quote_literal(s), translate(s, 'ab', 'cd'), s || '-' || a"
        " FROM t",
    ),
    (
        "postgresql_math",
        "postgresql",
        "SELECT abs(b), round(b, 2), round(f::numeric, 1), ceil(b), ceiling(b), floor(b), sqrt(f), cbrt(f), "
        "power(f, 2), exp(1), ln(2), log(100), log10(100), mod(a, 3), a % 3, div(7, 2), pi(), sign(b), trunc(b, "
        "1), random(), greatest(a, b), least(a, b), width_bucket(f, 0, 100, 10), CAST(b AS INTEGER), b::text, "
        "f::numeric(10, 2), s::int, a::bigint, d::date, '2024-01-01'::date, NULL::timestamp, s::varchar(20), "
        "CAST(a AS DOUBLE PRECISION), a::boolean, '{1,2}'::int[], '1 day'::interval, j::text, s::jsonb FROM t",
    ),
    (
        "postgresql_dates",
        "postgresql",
        "SELECT date_trunc('month', d), date_part('year', d), EXTRACT(YEAR FROM d), EXTRACT(EPOCH FROM d), "
        "to_char(d, 'YYYY-MM'), to_date('2024-01-01', 'YYYY-MM-DD'), to_timestamp(0), age(d), age(now(), d), "
        "now(), current_date, current_timestamp, localtimestamp, d + INTERVAL '1 day', d - INTERVAL '30 days', "
        "make_date(2024, 1, 1), date_bin('15 minutes', d, TIMESTAMP '2001-01-01'), justify_interval(INTERVAL '40 "
        "days'), current_date - d::date, d AT TIME ZONE 'UTC', clock_timestamp() FROM t WHERE d >= CURRENT_DATE -"
        " INTERVAL '30 days'",
    ),
    (
        "postgresql_aggregates",
        "postgresql",
        "SELECT s, count(*), count(DISTINCT a), sum(b), avg(b), min(b), max(b), string_agg(s, ', ' ORDER BY s), "
        "array_agg(a ORDER BY a), bool_and(a > 0), bool_or(a > 0), every(a > 0), stddev(f), stddev_samp(f), "
        "variance(f), corr(f, a), percentile_cont(0.5) WITHIN GROUP (ORDER BY f), percentile_disc(0.9) WITHIN "
        "GROUP (ORDER BY f), mode() WITHIN GROUP (ORDER BY a), count(*) FILTER (WHERE a > 1), json_agg(a), "
        "jsonb_object_agg(s, a), grouping(s) FROM t GROUP BY ROLLUP (s)",
    ),
    (
        "postgresql_windows",
        "postgresql",
        "SELECT a, row_number() OVER (PARTITION BY s ORDER BY d), rank() OVER (ORDER BY a), dense_rank() OVER "
        "(ORDER BY a), ntile(4) OVER (ORDER BY a), lag(b) OVER (ORDER BY a), lead(b, 1, 0) OVER (ORDER BY a), "
        "first_value(b) OVER (ORDER BY a), last_value(b) OVER (ORDER BY a), nth_value(b, 2) OVER (ORDER BY a), "
        "percent_rank() OVER (ORDER BY a), cume_dist() OVER (ORDER BY a), sum(b) OVER (PARTITION BY s ORDER BY d "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) FROM t",
    ),
    (
        "postgresql_json",
        "postgresql",
        "SELECT j ->> 'a', j -> 'b', j #>> '{a,b}', j @> '{\"a\": 1}', j ? 'a', jsonb_extract_path_text(j, 'a'), "
        "jsonb_array_length(j -> 'l'), jsonb_typeof(j), jsonb_build_object('k', a), jsonb_build_array(a, s), "
        "to_jsonb(s), row_to_json(t), jsonb_path_query_first(j, '$.a'), jsonb_set(j, '{a}', '1'), jsonb_pretty(j)"
        " FROM t",
    ),
    (
        "postgresql_arrays",
        "postgresql",
        "SELECT l[1], array_length(l, 1), cardinality(l), array_position(l, 2), array_to_string(l, ','), "
        "array_append(l, 4), unnest(l), 3 = ANY(l), ARRAY[1, 2], array_remove(l, 1), a > ALL (SELECT a FROM t) "
        "FROM t",
    ),
    (
        "postgresql_conditional_search",
        "postgresql",
        "SELECT CASE WHEN a > 1 THEN 'x' END, coalesce(s, ''), nullif(s, ''), greatest(1, 2), num_nulls(a, s), "
        "to_tsvector('english', s) @@ plainto_tsquery('english', 'music'), ts_rank(to_tsvector('english', s), "
        "to_tsquery('english', 'rock')), gen_random_uuid(), pg_typeof(a), s IS DISTINCT FROM 'x', "
        "generate_series(1, 3), pg_catalog.lower(s) FROM t",
    ),
]
BENIGN += [(name, (dialect,), sql) for name, dialect, sql in ORDINARY]


@pytest.mark.parametrize(
    ("sql", "dialect"),
    [pytest.param(sql, d, id=f"{name}[{d}]") for name, dialects, sql in BENIGN for d in dialects],
)
def test_guard_passes_benign_select(sql: str, dialect: str) -> None:
    tree = guard_sql(sql, dialect)
    assert tree is not None


def test_benign_list_is_broad() -> None:
    assert len(BENIGN) >= 20


def _reads(sql: str, dialect: str = "postgresql") -> list[TableRead]:
    return tables_read(guard_sql(sql, dialect))


def test_tables_read_excludes_cte_names_and_lists_each_table_once() -> None:
    sql = (
        "WITH big AS (SELECT user_id FROM orders WHERE total > 100), vip AS (SELECT * FROM big) "
        "SELECT u.name FROM users u JOIN vip ON vip.user_id = u.id JOIN orders o ON o.user_id = u.id"
    )
    reads = _reads(sql)
    assert len(reads) == 2
    assert set(reads) == {TableRead("orders"), TableRead("users")}


def test_tables_read_keeps_schema_and_catalog() -> None:
    sql = "SELECT * FROM sales.orders o JOIN public.users u ON u.id = o.user_id JOIN users x ON x.id = u.id"
    assert set(_reads(sql)) == {
        TableRead("orders", "sales"),
        TableRead("users", "public"),
        TableRead("users"),
    }
    assert _reads("SELECT * FROM warehouse.main.events", "duckdb") == [
        TableRead("events", "main", "warehouse")
    ]


def test_tables_read_keeps_a_qualified_name_that_matches_a_cte() -> None:
    assert _reads("WITH users AS (SELECT 1 AS id) SELECT * FROM public.users") == [
        TableRead("users", "public")
    ]


def test_tables_read_excludes_recursive_self_reference() -> None:
    sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT * FROM n"
    assert _reads(sql) == []


@pytest.mark.parametrize(
    ("sql", "dialect"),
    [
        # Without RECURSIVE, a CTE's own name inside its body is the real table (PostgreSQL, DuckDB).
        pytest.param(
            "WITH salaries AS (SELECT * FROM salaries) SELECT * FROM salaries", "postgresql", id="self"
        ),
        # DuckDB reads the real table from the non-recursive term even under WITH RECURSIVE.
        pytest.param(
            "WITH RECURSIVE salaries AS (SELECT * FROM salaries UNION SELECT * FROM salaries) "
            "SELECT * FROM salaries",
            "duckdb",
            id="recursive-left-term",
        ),
        # A CTE inside a subquery is not visible outside it.
        pytest.param(
            "SELECT * FROM salaries WHERE EXISTS (WITH salaries AS (SELECT 1) SELECT * FROM salaries)",
            "postgresql",
            id="nested-shadow",
        ),
        # A CTE only sees the CTEs before it.
        pytest.param(
            "WITH a AS (SELECT * FROM salaries), salaries AS (SELECT 1) SELECT * FROM a",
            "duckdb",
            id="forward-reference",
        ),
        # PostgreSQL folds SALARIES to salaries, which is not the quoted "SALARIES".
        pytest.param('WITH "SALARIES" AS (SELECT 1) SELECT * FROM SALARIES', "postgresql", id="quoted-case"),
    ],
)
def test_a_cte_never_hides_a_real_table(sql: str, dialect: str) -> None:
    names = [read.name.lower() for read in _reads(sql, dialect)]
    assert "salaries" in names
