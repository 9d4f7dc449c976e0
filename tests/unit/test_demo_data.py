"""Tests of the deterministic demo-database generators (support: SQLite, webanalytics: DuckDB)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from nl2sql.demo import chinook_customers, support, webanalytics

# Pinned outputs of the default seeds: update deliberately when the generators change.
SUPPORT_COUNTS = {"agents": 12, "tickets": 1500, "ticket_messages": 4572, "satisfaction_surveys": 745}
SUPPORT_CONTENT_DIGEST = "596c28b47383b58ce23c797c44e8b0ce494402108bdda05f7e85650d3350cf3a"
SUPPORT_FILE_SHA256 = "20865dec8836c9f8ab933f1fd481ccbbba2127ff9e44e8657104b55ca190f924"
SUPPORT_FILE_SQLITE_VERSION = "3.40.1"  # the file bytes depend on the SQLite library version
WEB_COUNTS = {"campaigns": 8, "visitors": 3000, "sessions": 9158, "page_views": 28359, "web_orders": 1013}
WEB_CONTENT_DIGEST = "93022a05c32c0bc8c23625580b2e33d9877e4b93e4257e11843c0e53430f3be2"

SUPPORT_TIMES = [("agents", "hired_on"), ("tickets", "opened_at"), ("tickets", "closed_at"),
                 ("ticket_messages", "sent_at"), ("satisfaction_surveys", "answered_at")]
WEB_TIMES = [("campaigns", "started_on"), ("campaigns", "ended_on"), ("visitors", "first_seen"),
             ("sessions", "started_at"), ("page_views", "viewed_at"), ("web_orders", "ordered_at")]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def customers() -> list[tuple[int, str]]:
    return chinook_customers()


@pytest.fixture(scope="module")
def support_dbs(tmp_path_factory: pytest.TempPathFactory, customers: list[tuple[int, str]]) -> dict:
    """Two databases from the default seed; the second overwrites one made from another seed."""
    folder = tmp_path_factory.mktemp("support")
    first, second = folder / "first.sqlite", folder / "second.sqlite"
    support.write_support(first, customers)
    support.write_support(second, customers, seed=7)
    other_digest = support.content_digest(second)
    support.write_support(second, customers)
    return {"first": first, "second": second, "other_digest": other_digest}


@pytest.fixture(scope="module")
def web_dbs(tmp_path_factory: pytest.TempPathFactory, customers: list[tuple[int, str]]) -> dict:
    """Two databases from the default seed; the second overwrites one made from another seed."""
    folder = tmp_path_factory.mktemp("webanalytics")
    first, second = folder / "first.duckdb", folder / "second.duckdb"
    webanalytics.write_webanalytics(first, customers)
    webanalytics.write_webanalytics(second, customers, seed=7)
    other_digest = webanalytics.content_digest(second)
    webanalytics.write_webanalytics(second, customers)
    return {"first": first, "second": second, "other_digest": other_digest}


@pytest.fixture(scope="module")
def sq(support_dbs: dict) -> Iterator[sqlite3.Connection]:
    con = sqlite3.connect(support_dbs["first"].as_uri() + "?mode=ro", uri=True)
    yield con
    con.close()


@pytest.fixture(scope="module")
def dk(web_dbs: dict) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect(str(web_dbs["first"]), read_only=True)
    yield con
    con.close()


def one(con: sqlite3.Connection | duckdb.DuckDBPyConnection, sql: str) -> object:
    return con.execute(sql).fetchone()[0]


# --- support (SQLite) -------------------------------------------------------------------


def test_support_is_byte_identical_for_the_same_seed(support_dbs: dict) -> None:
    assert support_dbs["first"].read_bytes() == support_dbs["second"].read_bytes()
    assert support.content_digest(support_dbs["first"]) == support.content_digest(support_dbs["second"])
    assert support_dbs["other_digest"] != support.content_digest(support_dbs["first"])


def test_support_pinned_counts_and_digest(sq: sqlite3.Connection, support_dbs: dict) -> None:
    counts = {table: one(sq, f"SELECT count(*) FROM {table}") for table in SUPPORT_COUNTS}
    assert counts == SUPPORT_COUNTS
    assert support.content_digest(support_dbs["first"]) == SUPPORT_CONTENT_DIGEST


@pytest.mark.skipif(sqlite3.sqlite_version != SUPPORT_FILE_SQLITE_VERSION,
                    reason="file bytes were pinned with another SQLite library version")
def test_support_pinned_file_sha256(support_dbs: dict) -> None:
    assert _sha256(support_dbs["first"]) == SUPPORT_FILE_SHA256


def test_support_schema_declares_keys(sq: sqlite3.Connection) -> None:
    fks = {(t, r[3], r[2], r[4]) for t in SUPPORT_COUNTS
           for r in sq.execute(f"PRAGMA foreign_key_list({t})")}
    assert fks == {("tickets", "agent_id", "agents", "agent_id"),
                   ("ticket_messages", "ticket_id", "tickets", "ticket_id"),
                   ("satisfaction_surveys", "ticket_id", "tickets", "ticket_id")}
    for table in SUPPORT_COUNTS:
        assert [r[1] for r in sq.execute(f"PRAGMA table_info({table})") if r[5]] != []
    assert one(sq, "PRAGMA journal_mode") == "delete"
    assert one(sq, "PRAGMA page_size") == 4096


def test_support_referential_integrity(sq: sqlite3.Connection, customers: list[tuple[int, str]]) -> None:
    assert sq.execute("PRAGMA foreign_key_check").fetchall() == []
    orphans = """
        SELECT (SELECT count(*) FROM tickets t LEFT JOIN agents a USING (agent_id)
                WHERE t.agent_id IS NOT NULL AND a.agent_id IS NULL)
             + (SELECT count(*) FROM ticket_messages m LEFT JOIN tickets t USING (ticket_id)
                WHERE t.ticket_id IS NULL)
             + (SELECT count(*) FROM satisfaction_surveys s LEFT JOIN tickets t USING (ticket_id)
                WHERE t.ticket_id IS NULL)"""
    assert one(sq, orphans) == 0
    used = {r[0] for r in sq.execute("SELECT DISTINCT customer_id FROM tickets")}
    assert used <= {cid for cid, _ in customers}


@pytest.mark.parametrize(("table", "column"), SUPPORT_TIMES)
def test_support_times_within_2010_2011(sq: sqlite3.Connection, table: str, column: str) -> None:
    low = "2008-01-01" if table == "agents" else "2010-01-01"
    bad = one(sq, f"SELECT count(*) FROM {table} WHERE {column} IS NOT NULL AND NOT "
                  f"({column} >= '{low}' AND {column} <= '2011-12-31 23:59:59')")
    assert bad == 0


def test_support_ticket_lifecycle(sq: sqlite3.Connection) -> None:
    checks = {
        "closed before opened": "SELECT count(*) FROM tickets WHERE closed_at <= opened_at",
        "closed_at vs status": "SELECT count(*) FROM tickets WHERE (closed_at IS NULL) "
                               "<> (status IN ('open', 'pending'))",
        "message outside ticket": "SELECT count(*) FROM ticket_messages m JOIN tickets t USING (ticket_id) "
                                  "WHERE m.sent_at <= t.opened_at OR m.sent_at >= t.closed_at",
        "survey of unsolved": "SELECT count(*) FROM satisfaction_surveys s JOIN tickets t USING (ticket_id) "
                              "WHERE t.status NOT IN ('solved', 'closed') OR s.answered_at <= t.closed_at",
        "agent not hired yet": "SELECT count(*) FROM tickets t JOIN agents a USING (agent_id) "
                               "WHERE a.hired_on > t.opened_at",
        "ticket without message": "SELECT count(*) FROM tickets WHERE ticket_id NOT IN "
                                  "(SELECT ticket_id FROM ticket_messages)",
        "several surveys": "SELECT count(*) FROM (SELECT ticket_id FROM satisfaction_surveys "
                           "GROUP BY ticket_id HAVING count(*) > 1)",
    }
    assert {name: one(sq, sql) for name, sql in checks.items()} == dict.fromkeys(checks, 0)


def test_support_distributions(sq: sqlite3.Connection) -> None:
    urgent_open = one(sq, "SELECT count(*) FROM tickets WHERE priority = 'urgent' AND status IN ('open', 'pending')")
    assert 15 <= urgent_open <= 30
    late = one(sq, "SELECT count(*) FROM tickets WHERE status IN ('open', 'pending') AND opened_at >= '2011-09-01'")
    assert late > 0.75 * one(sq, "SELECT count(*) FROM tickets WHERE status IN ('open', 'pending')")
    categories = [r[0] for r in sq.execute("SELECT category FROM tickets GROUP BY 1 ORDER BY count(*) DESC")]
    assert set(categories[:2]) == {"billing", "playback"} and categories[-1] == "catalog"
    scores = sq.execute("SELECT a.name, avg(s.score) FROM satisfaction_surveys s JOIN tickets t USING (ticket_id) "
                        "JOIN agents a USING (agent_id) GROUP BY a.name ORDER BY 2").fetchall()
    assert scores[1][1] - scores[0][1] > 0.5 and scores[-1][1] - scores[-2][1] > 0.3
    months = [r[0] for r in sq.execute("SELECT count(*) FROM tickets GROUP BY substr(opened_at, 1, 7)")]
    assert len(months) == 24 and max(months) > 2 * min(months)


# --- webanalytics (DuckDB) --------------------------------------------------------------


def test_web_is_reproducible_for_the_same_seed(web_dbs: dict) -> None:
    first = webanalytics.content_digest(web_dbs["first"])
    assert first == webanalytics.content_digest(web_dbs["second"])
    assert web_dbs["other_digest"] != first


def test_web_pinned_counts_and_digest(dk: duckdb.DuckDBPyConnection, web_dbs: dict) -> None:
    counts = {table: one(dk, f"SELECT count(*) FROM {table}") for table in WEB_COUNTS}
    assert counts == WEB_COUNTS
    assert webanalytics.content_digest(web_dbs["first"]) == WEB_CONTENT_DIGEST


def test_web_schema_declares_keys(dk: duckdb.DuckDBPyConnection) -> None:
    rows = dk.execute("SELECT table_name, constraint_type, constraint_column_names FROM duckdb_constraints() "
                      "WHERE constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY')").fetchall()
    keys = {(t, kind, tuple(cols)) for t, kind, cols in rows}
    assert {(t, "PRIMARY KEY") for t, kind, _ in keys if kind == "PRIMARY KEY"} == {
        (t, "PRIMARY KEY") for t in WEB_COUNTS}
    assert {(t, cols) for t, kind, cols in keys if kind == "FOREIGN KEY"} == {
        ("sessions", ("visitor_id",)), ("sessions", ("utm_campaign",)),
        ("page_views", ("session_id",)), ("web_orders", ("session_id",))}


def test_web_referential_integrity(dk: duckdb.DuckDBPyConnection, customers: list[tuple[int, str]]) -> None:
    checks = {
        "session without visitor": "SELECT count(*) FROM sessions s ANTI JOIN visitors v USING (visitor_id)",
        "unknown campaign": "SELECT count(*) FROM sessions s WHERE utm_campaign IS NOT NULL AND utm_campaign "
                            "NOT IN (SELECT campaign_id FROM campaigns)",
        "view without session": "SELECT count(*) FROM page_views p ANTI JOIN sessions s USING (session_id)",
        "order without session": "SELECT count(*) FROM web_orders o ANTI JOIN sessions s USING (session_id)",
        "order of another customer": "SELECT count(*) FROM web_orders o JOIN sessions s USING (session_id) "
                                     "JOIN visitors v USING (visitor_id) "
                                     "WHERE v.customer_id IS DISTINCT FROM o.customer_id",
        "session without views": "SELECT count(*) FROM sessions ANTI JOIN page_views USING (session_id)",
    }
    assert {name: one(dk, sql) for name, sql in checks.items()} == dict.fromkeys(checks, 0)
    country = dict(customers)
    known = dk.execute("SELECT DISTINCT customer_id, country FROM visitors WHERE customer_id IS NOT NULL").fetchall()
    assert all(country[cid] == c for cid, c in known)
    ordered = {r[0] for r in dk.execute("SELECT DISTINCT customer_id FROM web_orders").fetchall()}
    assert ordered <= set(country)
    assert 0.5 <= one(dk, "SELECT avg(CASE WHEN customer_id IS NULL THEN 1 ELSE 0 END) FROM visitors") <= 0.7


@pytest.mark.parametrize(("table", "column"), WEB_TIMES)
def test_web_times_within_2010_2011(dk: duckdb.DuckDBPyConnection, table: str, column: str) -> None:
    bad = one(dk, f"SELECT count(*) FROM {table} WHERE NOT ({column} >= DATE '2010-01-01' "
                  f"AND {column} <= TIMESTAMP '2011-12-31 23:59:59')")
    assert bad == 0


def test_web_events_within_their_session(dk: duckdb.DuckDBPyConnection) -> None:
    end = "s.started_at + to_seconds(s.duration_s)"
    checks = {
        "session ends after 2011": f"SELECT count(*) FROM sessions s WHERE {end} > TIMESTAMP '2011-12-31 23:59:59'",
        "view outside session": "SELECT count(*) FROM page_views p JOIN sessions s USING (session_id) WHERE "
                                f"p.viewed_at < s.started_at OR p.viewed_at + to_seconds(p.seconds_on_page) > {end}",
        "order outside session": "SELECT count(*) FROM web_orders o JOIN sessions s USING (session_id) "
                                 f"WHERE o.ordered_at < s.started_at OR o.ordered_at > {end}",
        "campaign session out of window": "SELECT count(*) FROM sessions s JOIN campaigns c "
                                          "ON s.utm_campaign = c.campaign_id "
                                          "WHERE CAST(s.started_at AS DATE) NOT BETWEEN c.started_on AND c.ended_on",
        "session before first seen": "SELECT count(*) FROM sessions s JOIN visitors v USING (visitor_id) "
                                     "WHERE CAST(s.started_at AS DATE) < v.first_seen",
        "non-positive amount": "SELECT count(*) FROM web_orders WHERE amount <= 0 OR items < 1",
    }
    assert {name: one(dk, sql) for name, sql in checks.items()} == dict.fromkeys(checks, 0)


def test_web_distributions(dk: duckdb.DuckDBPyConnection) -> None:
    bounce = one(dk, "SELECT avg(CASE WHEN n = 1 THEN 1 ELSE 0 END) FROM "
                     "(SELECT count(*) AS n FROM page_views GROUP BY session_id)")
    assert 0.2 <= bounce <= 0.3
    coupons = one(dk, "SELECT avg(CASE WHEN coupon_code IS NULL THEN 0 ELSE 1 END) FROM web_orders")
    assert 0.1 <= coupons <= 0.2
    per_campaign = dk.execute(
        "SELECT c.campaign_id, c.budget_usd, count(o.order_id) AS n FROM campaigns c "
        "LEFT JOIN sessions s ON s.utm_campaign = c.campaign_id LEFT JOIN web_orders o USING (session_id) "
        "GROUP BY ALL ORDER BY n DESC").fetchall()
    total = sum(n for _, _, n in per_campaign)
    assert per_campaign[0][2] > total / 2  # one campaign brings most campaign orders
    biggest_budget = max(per_campaign, key=lambda r: r[1])
    assert biggest_budget[2] <= 2 and biggest_budget[0] != per_campaign[0][0]
    referrers = [r[0] for r in dk.execute("SELECT referrer FROM sessions GROUP BY 1 ORDER BY count(*) DESC").fetchall()]
    assert referrers[0] == "search" and referrers[-1] == "email"
