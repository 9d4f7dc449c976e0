"""The SQL guard: every statement of the hostile corpus is refused, ordinary read-only SELECTs are not.

The corpus lives in hostile_sql.yaml (one test per entry and dialect, named by the entry's id).
The benign list guards against false positives: a guard that refuses real questions gets bypassed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nl2sql.datasources.guard import FORBIDDEN_FUNCTIONS, TableRead, guard_sql, tables_read
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


@pytest.mark.parametrize("function", sorted(FORBIDDEN_FUNCTIONS))
def test_every_denied_function_is_refused_in_every_dialect(function: str) -> None:
    # sqlglot turns some names into typed functions; the guard must still recognise them.
    for dialect in DIALECTS:
        with pytest.raises(SQLRejected):
            guard_sql(f"SELECT {function}('x')", dialect)


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
]


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
