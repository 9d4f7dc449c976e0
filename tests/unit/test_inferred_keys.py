"""Keys inferred where a database declares none (nl2sql.schema.inferred_keys): on a keyless copy of the demo's
chinook, the keys and references that names and data support, and nothing on the keyed original."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.retrieval.keyless import strip_keys
from nl2sql.datasources import adapter_class
from nl2sql.datasources.models import ColumnInfo, SchemaSnapshot, TableInfo
from nl2sql.demo import init_demo
from nl2sql.index.retrieve import RetrievedColumn, RetrievedSchema, RetrievedTable
from nl2sql.index.service import IndexService
from nl2sql.project import load_project
from nl2sql.schema.inferred_keys import infer_keys, with_inferred_keys
from nl2sql.schema.snapshot import fingerprint
from tests.support.index import build_demo_index

#: chinook's declared references that names give away (SupportRepId and ReportsTo name no table: not inferable)
NAMED = ["Album.ArtistId → Artist.ArtistId", "Invoice.CustomerId → Customer.CustomerId",
         "InvoiceLine.InvoiceId → Invoice.InvoiceId", "InvoiceLine.TrackId → Track.TrackId",
         "PlaylistTrack.PlaylistId → Playlist.PlaylistId", "PlaylistTrack.TrackId → Track.TrackId",
         "Track.AlbumId → Album.AlbumId", "Track.GenreId → Genre.GenreId", "Track.MediaTypeId → MediaType.MediaTypeId"]


def references(snapshot: SchemaSnapshot) -> list[str]:
    return sorted(f"{t.name}.{fk.columns[0]} → {fk.ref_table}.{fk.ref_columns[0]}" for t in snapshot.tables
                  for fk in t.foreign_keys)


def reflected_and_inferred(path: Path) -> tuple[SchemaSnapshot, SchemaSnapshot]:
    """(a SQLite database as reflected, with its inferred keys set)."""
    adapter = adapter_class("sqlite")("chinook", f"sqlite:///{path}")
    try:
        reflected = adapter.reflect()
        inferred = infer_keys(reflected, lambda t, cols, n: adapter.sample_columns(t, cols, sample_rows=n))
    finally:
        adapter.close()
    return reflected, reflected.model_copy(update={"inferred_keys": inferred})


@pytest.fixture(scope="module")
def keyless(chinook_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[SchemaSnapshot, SchemaSnapshot]:
    """(the keyless copy as reflected, with its inferred keys set)."""
    path = tmp_path_factory.mktemp("keyless") / "chinook.sqlite"
    strip_keys(chinook_path, path)
    return reflected_and_inferred(path)


def test_a_keyless_copy_gets_the_keys_names_and_data_support(keyless: tuple[SchemaSnapshot, SchemaSnapshot],
                                                             chinook_path: Path) -> None:
    reflected, inferred = keyless
    assert references(reflected) == [] and all(not t.primary_key for t in reflected.tables)
    keys = inferred.inferred_keys
    assert keys is not None
    # every table with a one-column key gets it back; PlaylistTrack's key is two columns, named by neither
    assert keys.primary_keys == {t: [f"{t}Id"] for t in ["Album", "Artist", "Customer", "Employee", "Genre",
                                                         "Invoice", "InvoiceLine", "MediaType", "Playlist", "Track"]}
    view = with_inferred_keys(inferred)
    assert references(view) == NAMED
    assert {fk.confidence for t in view.tables for fk in t.foreign_keys} == {1.0}
    assert view.table("Track").column("TrackId").primary_key  # type: ignore[union-attr]
    # what the database says is untouched: the fingerprint and the drift check compare the reflected keys
    assert fingerprint(inferred) == fingerprint(reflected)


def test_a_database_that_declares_its_keys_is_taken_at_its_word(chinook_path: Path) -> None:
    _, snapshot = reflected_and_inferred(chinook_path)
    keys = snapshot.inferred_keys
    assert keys is not None and keys.primary_keys == {} and keys.foreign_keys == {}
    assert with_inferred_keys(snapshot) == snapshot


def table(name: str, *columns: tuple[str, str]) -> TableInfo:
    return TableInfo(name=name, columns=[ColumnInfo(name=c, type=t) for c, t in columns])


@pytest.mark.parametrize(("case", "orders", "customers", "found"), [
    ("table_id names a table keyed id", [1, 2, 2], [1, 2, 3], ["orders.customer_id → customers.id"]),
    ("a value outside the key", [1, 2, 9], [1, 2, 3], []),
    ("a key with a repeated value is no key", [1, 2], [1, 1, 2], []),
    ("no values to judge", [None, None], [1, 2], []),
])
def test_a_reference_needs_its_name_a_key_and_its_values(case: str, orders: list, customers: list,
                                                         found: list[str]) -> None:
    tables = [table("orders", ("id", "INTEGER"), ("customer_id", "INTEGER")),
              table("customers", ("id", "INTEGER"), ("name", "TEXT"))]
    data = {"orders": pd.DataFrame({"id": range(len(orders)), "customer_id": orders}, dtype=object),
            "customers": pd.DataFrame({"id": customers, "name": ["x"] * len(customers)}, dtype=object)}
    snapshot = SchemaSnapshot(datasource_id="shop", dialect="sqlite", tables=tables)
    keys = infer_keys(snapshot, lambda t, cols, n: data[t.name][list(cols)].head(n))
    view = with_inferred_keys(snapshot.model_copy(update={"inferred_keys": keys}))
    assert references(view) == found, case


@pytest.mark.parametrize(("others", "found"), [
    ([], ["stay.home_id → rental_home.rental_home_id"]),  # the last word of one table's name
    (["holiday_home"], []),  # two tables end in "home": the name does not say which
    (["home"], ["stay.home_id → home.home_id"]),  # a table named exactly so comes first
])
def test_a_reference_may_name_a_table_by_the_last_words_of_its_name(others: list[str], found: list[str]) -> None:
    names = ["rental_home", *others]
    tables = [table("stay", ("stay_id", "INTEGER"), ("home_id", "INTEGER")),
              *(table(n, (f"{n}_id", "INTEGER"), ("city", "TEXT")) for n in names)]
    data = {"stay": pd.DataFrame({"stay_id": [1, 2, 3], "home_id": [1, 2, 2]}, dtype=object),
            **{n: pd.DataFrame({f"{n}_id": [1, 2, 3], "city": ["x"] * 3}, dtype=object) for n in names}}
    snapshot = SchemaSnapshot(datasource_id="rentals", dialect="sqlite", tables=tables)
    keys = infer_keys(snapshot, lambda t, cols, n: data[t.name][list(cols)].head(n))
    assert references(with_inferred_keys(snapshot.model_copy(update={"inferred_keys": keys}))) == found


def test_a_reference_may_name_its_role_before_the_table() -> None:
    tables = [table("match", ("match_id", "INTEGER"), ("home_team_id", "INTEGER"), ("away_team_id", "INTEGER")),
              table("team", ("team_id", "INTEGER"), ("name", "TEXT"))]
    data = {"match": pd.DataFrame({"match_id": [1, 2], "home_team_id": [1, 2], "away_team_id": [2, 9]}, dtype=object),
            "team": pd.DataFrame({"team_id": [1, 2, 3], "name": ["x"] * 3}, dtype=object)}
    snapshot = SchemaSnapshot(datasource_id="league", dialect="sqlite", tables=tables)
    keys = infer_keys(snapshot, lambda t, cols, n: data[t.name][list(cols)].head(n))
    # the away team 9 is no team's key: its values decide, as for any reference
    assert references(with_inferred_keys(snapshot.model_copy(update={"inferred_keys": keys}))) == [
        "match.home_team_id → team.team_id"]


def test_the_planner_is_shown_an_inferred_reference_as_likely() -> None:
    schema = RetrievedSchema("shop", [RetrievedTable("orders", 1.0, [
        RetrievedColumn("id", "INTEGER", False, True),
        RetrievedColumn("customer_id", "INTEGER", True, False, references="customers.id", likely=True)], 2, 3)], [])
    assert "customer_id (INTEGER; → customers.id (likely))" in schema.render()
    assert "customer_id INTEGER REFERENCES customers(id)  -- likely key (inferred, not declared)" in \
        schema.render_ddl("sqlite")


@pytest.fixture(scope="module")
def keyless_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A demo project whose chinook declares no key, pruning on (each question's columns chosen)."""
    target = tmp_path_factory.mktemp("keyless-demo")
    init_demo(target, env={})
    path = target / "data" / "chinook.sqlite"
    keyed = path.with_suffix(".keyed")
    path.rename(keyed)
    strip_keys(keyed, path)
    return target


@pytest.mark.parametrize("infer", [True, False])
def test_retrieval_completes_a_join_on_an_inferred_key(keyless_demo: Path, infer: bool,
                                                      tmp_path: Path) -> None:
    config = load_project(keyless_demo / "nl2sql.yaml")
    settings = config.settings.model_copy(update={
        "retrieval": config.settings.retrieval.model_copy(update={"whole_schema_columns": 0}),
        "profile": config.settings.profile.model_copy(update={"infer_keys": infer})})
    config = config.model_copy(update={"settings": settings,
                                       "datasources": [d for d in config.datasources if d.id == "chinook"]})
    service = IndexService(config, store=build_demo_index(config, tmp_path / "state"))
    schema = service.retrieve_schema("How many tracks does each genre have?", "viewer", "chinook")
    track = next(t for t in schema.tables if t.name == "Track")
    genre_id = next((c for c in track.columns if c.name == "GenreId"), None)
    if infer:  # the key the join needs comes with the table, shown to the planner as likely
        assert genre_id is not None and genre_id.references == "Genre.GenreId" and genre_id.likely
        assert "Track.GenreId → Genre.GenreId (likely)" in schema.foreign_keys
    else:
        assert genre_id is None or genre_id.references is None
        assert schema.foreign_keys == []


NAMES = ["album", "artist", "genre", "track", "playlist", "home", "rental_home", "holiday_home"]


@st.composite
def keyless_databases(draw: st.DrawFn) -> tuple[list[TableInfo], dict[str, pd.DataFrame]]:
    """Keyless tables whose columns name each other (`id`, `<table>_id`, `<other>_id`), with values that make
    some of those keys and references hold and others not."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=5, unique=True))
    tables, data = [], {}
    for name in names:
        own = draw(st.sampled_from(["id", f"{name}_id"]))
        others = draw(st.lists(st.sampled_from([f"{n}_id" for n in NAMES if n != name] + ["id", "lead_album_id",
                                                                                            "home_track_id"]),
                               max_size=3, unique=True))
        columns = [own, *[c for c in others if c != own]]
        rows = draw(st.integers(1, 4))
        frame = {c: draw(st.lists(st.integers(0, 4), min_size=rows, max_size=rows)) for c in columns}
        tables.append(table(name, *((c, "INTEGER") for c in columns)))
        data[name] = pd.DataFrame(frame, dtype=object)
    return tables, data


@settings(max_examples=300, deadline=None)
@given(keyless_databases(), keyless_databases(), st.data())
def test_inferring_again_after_a_change_equals_inferring_from_scratch(
        first: tuple[list[TableInfo], dict[str, pd.DataFrame]], second: tuple[list[TableInfo], dict[str, pd.DataFrame]],
        draw: st.DataObject) -> None:
    # the database after the change: some tables as they were (same columns, same values), the others as drawn
    kept = draw.draw(st.lists(st.sampled_from([t.name for t in first[0]]), unique=True))
    old_tables, old_data = first
    new_tables = [t for t in old_tables if t.name in kept] + [t for t in second[0] if t.name not in kept]
    new_data = {n: old_data[n] for n in kept} | {n: f for n, f in second[1].items() if n not in kept}

    def sampler(data: dict[str, pd.DataFrame]):
        return lambda t, cols, n: data[t.name][list(cols)].head(n)

    before = SchemaSnapshot(datasource_id="db", dialect="sqlite", tables=old_tables)
    before = before.model_copy(update={"inferred_keys": infer_keys(before, sampler(old_data))})
    after = SchemaSnapshot(datasource_id="db", dialect="sqlite", tables=new_tables)
    changed = [t.name for t in new_tables if t.name not in kept]
    again = infer_keys(after, sampler(new_data), previous=before, changed=changed)
    assert again == infer_keys(after, sampler(new_data))
