"""The adapters against real databases: reflect, profile, execute with a row limit and a timeout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nl2sql.datasources import Adapter, adapter_class
from nl2sql.datasources.models import TableInfo
from nl2sql.errors import DatasourceError, QueryTimeout, SQLRejected, UnknownNameError

#: A statement that runs for a long time on each engine (for the timeout tests).
ENDLESS = {
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c",
    "duckdb": "SELECT COUNT(*) FROM range(100000000000) a",
    "postgresql": "SELECT COUNT(*) FROM generate_series(1, 10000000000)",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def chinook(request: pytest.FixtureRequest, chinook_path: Path) -> Adapter:
    """Chinook behind the SQLite adapter and (copied) behind the PostgreSQL one."""
    if request.param == "sqlite":
        adapter = adapter_class("sqlite")("chinook", f"sqlite:///{chinook_path}")
    else:
        adapter = adapter_class("postgresql")("chinook", request.getfixturevalue("postgres_chinook_url"))
    yield adapter
    adapter.close()


@pytest.fixture
def webanalytics(demo_dir: Path) -> Adapter:
    adapter = adapter_class("duckdb")("webanalytics", "duckdb:///data/webanalytics.duckdb", base_dir=demo_dir)
    yield adapter
    adapter.close()


def test_reflect_chinook(chinook: Adapter) -> None:
    snapshot = chinook.reflect()
    counts = {t.name: t.row_count for t in snapshot.tables}
    assert counts == {
        "Album": 347, "Artist": 275, "Customer": 59, "Employee": 8, "Genre": 25, "Invoice": 412,
        "InvoiceLine": 2240, "MediaType": 5, "Playlist": 18, "PlaylistTrack": 8715, "Track": 3503,
    }
    track = snapshot.table("Track")
    assert track is not None and track.primary_key == ["TrackId"]
    assert [c.name for c in track.columns][:3] == ["TrackId", "Name", "AlbumId"]
    assert {fk.ref_table for fk in track.foreign_keys} == {"Album", "Genre", "MediaType"}
    assert not track.column("Name").nullable and track.column("Composer").nullable
    assert snapshot.table("track") is track  # case-insensitive lookup keeps the reflected case


def test_reflect_duckdb_keys_and_types(webanalytics: Adapter) -> None:
    snapshot = webanalytics.reflect()
    assert {t.name for t in snapshot.tables} == {"campaigns", "visitors", "sessions", "page_views", "web_orders"}
    orders = snapshot.table("web_orders")
    assert orders.primary_key == ["order_id"]
    assert orders.column("amount").type == "DECIMAL(10,2)"
    assert [(fk.columns, fk.ref_table) for fk in orders.foreign_keys] == [(["session_id"], "sessions")]
    assert all(t.row_count and t.row_count > 0 for t in snapshot.tables)


def test_profile_values_and_bounds(chinook: Adapter) -> None:
    snapshot = chinook.reflect()
    profiles = {(p.table, p.column): p for p in chinook.profile(snapshot, tables=["Customer", "Track"])}
    company = profiles[("Customer", "Company")]
    assert company.null_share == pytest.approx(49 / 59)
    country = profiles[("Customer", "Country")]
    assert country.distinct_count == 24 and country.sample_values[0] == "USA"
    assert profiles[("Track", "Milliseconds")].sample_values == []  # numbers get no sample values
    # 59 last names, one a customer: too many for sample values, kept as name values
    last = profiles[("Customer", "LastName")]
    assert last.sample_values == [] and len(last.name_values) == 59 and "Gonçalves" in last.name_values
    assert profiles[("Track", "Name")].name_values == []  # 3,257 distinct names: beyond profile.max_name_values
    bounded = chinook.profile(snapshot, tables=["Track"], sample_rows=500)
    assert {p.sampled_rows for p in bounded} == {500}


def test_profile_bounds_keep_the_database_types(chinook: Adapter) -> None:
    # every column of InvoiceLine is numeric: read through a one-row DataFrame, its integers came back as floats
    line = {p.column: p for p in chinook.profile_table(chinook.reflect().table("InvoiceLine"))}
    assert (line["InvoiceId"].min, line["InvoiceId"].max) == ("1", "412")
    assert (line["UnitPrice"].min, line["UnitPrice"].max) == ("0.99", "1.99")


def test_execute_row_limit_and_metadata(chinook: Adapter) -> None:
    sql = 'SELECT "Name", "Milliseconds" FROM "Track" ORDER BY "TrackId"'
    result = chinook.execute(sql, row_limit=10)
    assert result.truncated and result.row_count == 10
    assert [c.name for c in result.columns] == ["Name", "Milliseconds"]
    assert result.frame.iloc[0]["Name"] == "For Those About To Rock (We Salute You)"
    exact = chinook.execute('SELECT COUNT(*) AS n FROM "Genre"', row_limit=10)
    assert not exact.truncated and int(exact.frame.iloc[0]["n"]) == 25


@pytest.mark.parametrize("dialect", ["sqlite", "duckdb", "postgresql"])
def test_timeout_cancels(dialect: str, request: pytest.FixtureRequest, chinook_path: Path, demo_dir: Path) -> None:
    if dialect == "sqlite":
        adapter = adapter_class("sqlite")("x", f"sqlite:///{chinook_path}")
    elif dialect == "duckdb":
        adapter = adapter_class("duckdb")("x", "duckdb:///data/webanalytics.duckdb", base_dir=demo_dir)
    else:
        adapter = adapter_class("postgresql")("x", request.getfixturevalue("postgres_chinook_url"))
    with pytest.raises(QueryTimeout, match=r"ran longer than 0\.3 s"):
        adapter.execute(ENDLESS[dialect], timeout_s=0.3)
    assert adapter.execute("SELECT 1 AS one", timeout_s=5).frame.iloc[0, 0] == 1  # the connection still works
    adapter.close()


def test_database_error_is_datasource_error(chinook: Adapter) -> None:
    with pytest.raises(DatasourceError, match="datasource 'chinook'") as info:
        chinook.execute('SELECT Amount FROM "Invoice"')
    assert info.value.code == "DATASOURCE_ERROR"


def test_execute_runs_the_guard(chinook: Adapter) -> None:
    with pytest.raises(SQLRejected):
        chinook.execute('DELETE FROM "Invoice"')


def test_unknown_adapter_suggests() -> None:
    with pytest.raises(UnknownNameError, match="Did you mean 'postgresql'"):
        adapter_class("postgress")


def test_missing_file_is_clear(tmp_path: Path) -> None:
    adapter = adapter_class("sqlite")("x", "sqlite:///nope.sqlite", base_dir=tmp_path)
    with pytest.raises(DatasourceError, match="Database file not found"):
        adapter.execute("SELECT 1")
    assert not (tmp_path / "nope.sqlite").exists()  # read-only open never creates a file


def _many_valued_table(dialect: str, path: Path) -> Adapter:
    """A `tickets` table of 156 rows: `subject` has 60 distinct values, four of which make up 100 rows;
    `reference` is unique per row; `city` has 78 values, each twice; `status` has three."""
    subjects = ["Player crashes"] * 40 + ["Track skips"] * 30 + ["Refund late"] * 20 + ["Card declined"] * 10
    subjects += [f"Invoice #{i}" for i in range(56)]
    rows = [(s, f"REF-{i}", f"City {i // 2}", ("open", "closed", "pending")[i % 3]) for i, s in enumerate(subjects)]
    ddl = "CREATE TABLE tickets (subject VARCHAR, reference VARCHAR, city VARCHAR, status VARCHAR)"
    if dialect == "sqlite":
        import sqlite3
        con = sqlite3.connect(path)
        con.execute(ddl)
        con.executemany("INSERT INTO tickets VALUES (?, ?, ?, ?)", rows)
        con.commit()
    else:
        import duckdb
        con = duckdb.connect(str(path))
        con.execute(ddl)
        con.executemany("INSERT INTO tickets VALUES (?, ?, ?, ?)", rows)
    con.close()
    return adapter_class(dialect)("desk", f"{dialect}:///{path}")


@pytest.fixture(params=["sqlite", "duckdb"])
def many_valued(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Adapter, TableInfo]]:
    """`_many_valued_table` behind the SQLite and the DuckDB adapter, with its reflected table."""
    adapter = _many_valued_table(request.param, tmp_path / f"desk.{request.param}")
    yield adapter, adapter.reflect().table("tickets")
    adapter.close()


def test_a_many_valued_text_column_whose_frequent_values_make_up_most_rows_gets_them(
        many_valued: tuple[Adapter, TableInfo]) -> None:
    adapter, table = many_valued
    profiles = {p.column: p for p in adapter.profile_table(table)}
    # the four recurring subjects (100 of 156 rows), most frequent first; the invoice numbers found once are not
    assert profiles["subject"].sample_values == ["Player crashes", "Track skips", "Refund late", "Card declined"]
    assert profiles["subject"].distinct_count == 60
    assert profiles["reference"].sample_values == []  # every value once: too many to make up half the rows
    assert profiles["city"].sample_values == []  # the 20 most frequent make up 40 of 156 rows
    assert sorted(profiles["status"].sample_values) == ["closed", "open", "pending"]  # few values: all of them
    never = {p.column: p for p in adapter.profile_table(table, dominant_share=1.0)}
    assert never["subject"].sample_values == [] and never["status"].sample_values == profiles["status"].sample_values


def test_a_many_valued_column_with_no_sample_values_keeps_its_values_as_name_values(
        many_valued: tuple[Adapter, TableInfo]) -> None:
    adapter, table = many_valued
    profiles = {p.column: p for p in adapter.profile_table(table)}
    assert sorted(profiles["city"].name_values) == sorted({f"City {i // 2}" for i in range(156)})  # all 78
    assert len(profiles["reference"].name_values) == 156
    # a column with sample values has no name values, and one with few values is all sample values
    assert profiles["subject"].name_values == [] and profiles["status"].name_values == []
    capped = {p.column: p for p in adapter.profile_table(table, max_name_values=77)}
    assert capped["city"].name_values == capped["reference"].name_values == []  # more values than the bound
    # asked for up to 77 values, the subjects' most frequent still make their sample values
    assert capped["subject"].sample_values == profiles["subject"].sample_values
    off = {p.column: p for p in adapter.profile_table(table, max_name_values=0)}
    assert all(not p.name_values for p in off.values()) and off["subject"].sample_values
    # what is left of a build's budget: the cities' 78 fit in 80 (the subjects, which get sample values, use none of
    # it; the 156 references do not fit and are not asked), not in 77
    fits = {p.column: p for p in adapter.profile_table(table, name_values_left=80)}
    assert len(fits["city"].name_values) == 78 and fits["reference"].name_values == []
    assert fits["subject"].sample_values == profiles["subject"].sample_values
    assert all(not p.name_values for p in adapter.profile_table(table, name_values_left=77))


def test_the_support_desks_ticket_subjects_are_profiled(demo_dir: Path) -> None:
    adapter = adapter_class("sqlite")("support", "sqlite:///data/support.sqlite", base_dir=demo_dir)
    tickets = {p.column: p for p in adapter.profile_table(adapter.reflect().table("tickets"))}
    assert tickets["subject"].distinct_count > 50  # beyond profile.low_cardinality
    assert "Player crashes on startup" in tickets["subject"].sample_values
    assert tickets["subject"].sample_values[:2] == ["Player crashes on startup", "Track skips halfway through"]
    adapter.close()
