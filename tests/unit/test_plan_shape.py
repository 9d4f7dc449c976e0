"""The shape of an answer (nl2sql.plan.shape): a ranking's measure, a list's key, ties broken on a key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nl2sql.config import Config
from nl2sql.datasources import adapter_class
from nl2sql.datasources.models import SchemaSnapshot
from nl2sql.plan import PlanModel, generate_sql, validate_plan
from nl2sql.plan.shape import shape_answer
from nl2sql.policies import scope


@pytest.fixture(scope="module")
def snapshot(chinook_path: Path) -> SchemaSnapshot:
    return adapter_class("sqlite")("chinook", f"sqlite:///{chinook_path}").reflect()


def col(table: str | None, column: str) -> dict:
    return {"kind": "column", "table": table, "column": column}


def agg(func: str, arg: dict | None = None) -> dict:
    return {"kind": "aggregate", "func": func, "arg": arg}


def shaped(snapshot: SchemaSnapshot, demo_config: Config, select: list[dict], table: str = "Track", alias: str = "t",
           rules: tuple[str, ...] = ("measure", "key"), repeating: frozenset[tuple[str, str]] = frozenset(),
           question: str = "", role: str = "analyst", **rest: Any) -> tuple[str, list[str]]:
    """The SQL of the validated, shaped plan and the aliases added."""
    caller = scope(demo_config.policies, role, "chinook")
    items = [e if "expr" in e else {"expr": e} for e in select]  # an item with its alias, or a bare expression
    data = {"select": items, "from": {"table": table, "alias": alias}, **rest}
    validated = validate_plan(PlanModel.model_validate(data), snapshot, caller)
    readable = {t.name: t for t in snapshot.tables if caller.allows(t.name, t.schema_name)}
    plan, added = shape_answer(validated.plan, {t.name: t for t in validated.tables}, list(rules), repeating,
                               readable=readable, question=question)
    plan = validate_plan(plan, snapshot, caller).plan  # what the engine adds always validates here
    return generate_sql(plan, "sqlite"), added


def test_a_ranking_shows_what_it_ranks_by(snapshot: SchemaSnapshot, demo_config: Config) -> None:
    # "Which composer has written the most tracks?"
    sql, added = shaped(snapshot, demo_config, [col("t", "Composer")], group_by=[col("t", "Composer")],
                        order_by=[{"expr": agg("count"), "direction": "desc"}], limit=1)
    assert added == ["count"]
    assert sql.startswith("SELECT t.Composer, COUNT(*) AS count FROM Track AS t")


def test_a_filter_on_an_aggregate_shows_the_aggregate(snapshot: SchemaSnapshot, demo_config: Config) -> None:
    # "Which albums have more than 25 tracks?"
    having = {"kind": "compare", "op": ">", "left": agg("count", col("t", "TrackId")),
              "right": {"kind": "literal", "value": 25}}
    sql, added = shaped(snapshot, demo_config, [col("a", "Title")], table="Album", alias="a",
                        joins=[{"type": "inner", "table": {"table": "Track", "alias": "t"},
                                "on": [{"left": col("t", "AlbumId"), "right": col("a", "AlbumId")}]}],
                        group_by=[col("a", "AlbumId"), col("a", "Title")], having=having)
    assert added == ["count_track_id"]  # grouped: no key is added, the groups read by their title
    assert "SELECT a.Title, COUNT(t.TrackId) AS count_track_id" in sql


def test_a_computed_order_key_is_shown_and_a_plain_one_only_with_a_limit(snapshot: SchemaSnapshot,
                                                                        demo_config: Config) -> None:
    length = {"kind": "function", "name": "length", "args": [col("t", "Name")]}
    _, added = shaped(snapshot, demo_config, [col("t", "TrackId"), col("t", "Name")],
                      order_by=[{"expr": length, "direction": "desc"}], limit=5)
    assert added == ["length_name"]
    # ordered by a column, all rows: an order, not a ranking
    _, added = shaped(snapshot, demo_config, [col("t", "TrackId"), col("t", "Name")],
                      order_by=[{"expr": col("t", "Milliseconds"), "direction": "desc"}])
    assert added == []
    # the ten longest: the length is what ranks them
    _, added = shaped(snapshot, demo_config, [col("t", "TrackId"), col("t", "Name")],
                      order_by=[{"expr": col("t", "Milliseconds"), "direction": "desc"},
                                {"expr": col("t", "TrackId"), "direction": "asc"}], limit=10)
    assert added == ["milliseconds"]  # the tie-breaker is not a measure


@pytest.mark.parametrize("select, order_key", [
    ([col("t", "Composer"), agg("count", col("t", "TrackId"))], agg("count")),  # any count shows a count
    ([col("t", "Composer"), {"kind": "function", "name": "round", "args": [agg("avg", col("t", "Milliseconds")),
                                                                           {"kind": "literal", "value": 1}]}],
     agg("avg", col("t", "Milliseconds"))),  # computed inside a larger expression
    ([col("t", "Composer"), agg("avg", col("t", "Milliseconds"))],
     {"kind": "arithmetic", "op": "/", "left": agg("avg", col("t", "Milliseconds")),
      "right": {"kind": "literal", "value": 60000}}),  # a part of the order key is the measure
])
def test_a_measure_shown_already_is_not_added_again(select: list[dict], order_key: dict, snapshot: SchemaSnapshot,
                                                    demo_config: Config) -> None:
    _, added = shaped(snapshot, demo_config, select, group_by=[col("t", "Composer")],
                      order_by=[{"expr": order_key, "direction": "desc"}], limit=3)
    assert added == []


def test_an_output_alias_or_a_distinct_plan_is_left_alone(snapshot: SchemaSnapshot, demo_config: Config) -> None:
    count = {"expr": agg("count"), "alias": "tracks"}
    plan = {"select": [{"expr": col("t", "Composer")}, count], "from": {"table": "Track", "alias": "t"},
            "group_by": [col("t", "Composer")], "order_by": [{"expr": col(None, "tracks"), "direction": "desc"}],
            "limit": 3}
    assert shape_answer(PlanModel.model_validate(plan), {}, ["measure", "key"])[1] == []
    _, added = shaped(snapshot, demo_config, [col("t", "Composer")], distinct=True,
                      order_by=[{"expr": col("t", "Milliseconds"), "direction": "desc"}], limit=3)
    assert added == []


def test_a_distinct_over_rows_already_one_per_group_does_not_stop_the_shape(snapshot: SchemaSnapshot,
                                                                            demo_config: Config) -> None:
    # "Who are the five customers who spent the most?" as SELECT DISTINCT c.CustomerId, … GROUP BY c.CustomerId
    sql, added = shaped(snapshot, demo_config, [col("c", "CustomerId"), col("c", "LastName")], table="Customer",
                        alias="c", distinct=True,
                        joins=[{"type": "inner", "table": {"table": "Invoice", "alias": "i"},
                                "on": [{"left": col("i", "CustomerId"), "right": col("c", "CustomerId")}]}],
                        group_by=[col("c", "CustomerId")],
                        order_by=[{"expr": agg("sum", col("i", "Total")), "direction": "desc"}], limit=5)
    assert added == ["sum_total"]
    assert sql.startswith("SELECT DISTINCT c.CustomerId, c.LastName, SUM(i.Total) AS sum_total FROM Customer AS c")


def test_a_list_of_one_tables_rows_carries_its_key_first(snapshot: SchemaSnapshot, demo_config: Config) -> None:
    # "Which tracks have a name starting with 'Symphony'?"
    where = {"kind": "like", "expr": col("t", "Name"), "pattern": "Symphony%"}
    sql, added = shaped(snapshot, demo_config, [col("t", "Name")], where=where)
    assert added == ["track_id"] and sql.startswith("SELECT t.TrackId AS track_id, t.Name FROM Track AS t")


def test_a_list_of_the_joined_tables_rows_carries_its_key(snapshot: SchemaSnapshot, demo_config: Config) -> None:
    # the tracks of one genre, planned from Genre: each track meets one genre, so the rows are tracks
    track = {"type": "inner", "table": {"table": "Track", "alias": "t"},
             "on": [{"left": col("g", "GenreId"), "right": col("t", "GenreId")}]}
    where = {"kind": "compare", "op": "=", "left": col("g", "Name"), "right": {"kind": "literal", "value": "Opera"}}
    sql, added = shaped(snapshot, demo_config, [col("t", "Name")], table="Genre", alias="g", joins=[track],
                        where=where, rules=("key",))
    assert added == ["track_id"] and sql.startswith("SELECT t.TrackId AS track_id, t.Name FROM Genre AS g")


def test_a_grouped_plan_gets_no_key(snapshot: SchemaSnapshot, demo_config: Config) -> None:
    # "How many tracks does each genre have?" grouped by the genre's key reads by the genre's name
    genre = {"type": "inner", "table": {"table": "Genre", "alias": "g"},
             "on": [{"left": col("g", "GenreId"), "right": col("t", "GenreId")}]}
    _, added = shaped(snapshot, demo_config, [col("g", "Name"), agg("count")], joins=[genre],
                      group_by=[col("g", "GenreId"), col("g", "Name")], rules=("key",))
    assert added == []


@pytest.fixture(scope="module")
def repeating(chinook_path: Path, snapshot: SchemaSnapshot) -> set[tuple[str, str]]:
    """The chinook columns whose profiled values repeat, read back from the column entries an index build writes."""
    from nl2sql.index.chunks import EntryTable, column_entry, repeating_columns

    adapter = adapter_class("sqlite")("chinook", f"sqlite:///{chinook_path}")
    tables = {t.name: t for t in snapshot.tables}
    entries = [column_entry("chinook", tables[p.table], p.column, p.type, p)
               for p in adapter.profile(snapshot, tables=["Playlist", "Genre", "Customer"])]
    return repeating_columns(EntryTable.of(entries))


def test_the_profile_says_which_labels_repeat(repeating: set[tuple[str, str]]) -> None:
    assert ("playlist", "name") in repeating  # two playlists are called "Music"
    assert ("genre", "name") not in repeating and ("playlist", "playlistid") not in repeating
    assert ("customer", "country") in repeating and ("customer", "email") not in repeating


def test_a_group_whose_label_repeats_shows_its_key(snapshot: SchemaSnapshot, demo_config: Config,
                                                  repeating: set[tuple[str, str]]) -> None:
    # "How many tracks does each playlist hold?": two rows named "Music" need the key to tell them apart
    link = {"type": "inner", "table": {"table": "PlaylistTrack", "alias": "pt"},
            "on": [{"left": col("pt", "PlaylistId"), "right": col("p", "PlaylistId")}]}
    sql, added = shaped(snapshot, demo_config, [col("p", "Name"), agg("count")], table="Playlist", alias="p",
                        joins=[link], group_by=[col("p", "PlaylistId"), col("p", "Name")], rules=("key",),
                        repeating=frozenset(repeating))
    assert added == ["playlist_id"]
    assert sql.startswith("SELECT p.PlaylistId AS playlist_id, p.Name, COUNT(*) FROM Playlist AS p")
    # the same question grouped by the name alone has no key to show; genres' names do not repeat
    _, added = shaped(snapshot, demo_config, [col("p", "Name"), agg("count")], table="Playlist", alias="p",
                      joins=[link], group_by=[col("p", "Name")], rules=("key",), repeating=frozenset(repeating))
    assert added == []
    genre = {"type": "inner", "table": {"table": "Genre", "alias": "g"},
             "on": [{"left": col("g", "GenreId"), "right": col("t", "GenreId")}]}
    _, added = shaped(snapshot, demo_config, [agg("count"), col("g", "Name")], joins=[genre],
                      group_by=[col("g", "GenreId"), col("g", "Name")], rules=("key",), repeating=frozenset(repeating))
    assert added == []


def test_a_grouped_plan_that_shows_only_aggregates_shows_its_groups_first(snapshot: SchemaSnapshot,
                                                                         demo_config: Config) -> None:
    # "What is the average unit price of the tracks of each media type?" with no column saying which media type
    sql, added = shaped(snapshot, demo_config, [agg("avg", col("t", "UnitPrice"))], group_by=[col("t", "MediaTypeId")],
                        rules=("groups", "key"))
    assert added == ["media_type_id"]
    assert sql.startswith("SELECT t.MediaTypeId AS media_type_id, AVG(t.UnitPrice) FROM Track AS t GROUP BY")


@pytest.mark.parametrize("select", [[col("g", "Name"), agg("count")], [agg("count"), col("g", "Name")]])
def test_a_grouped_plan_with_a_plain_column_keeps_its_labels(select: list[dict], snapshot: SchemaSnapshot,
                                                             demo_config: Config) -> None:
    # grouped by the genre's key, labelled by its name: nothing to add, wherever the label sits
    genre = {"type": "inner", "table": {"table": "Genre", "alias": "g"},
             "on": [{"left": col("g", "GenreId"), "right": col("t", "GenreId")}]}
    _, added = shaped(snapshot, demo_config, select, joins=[genre], group_by=[col("g", "GenreId")],
                      rules=("groups",))
    assert added == []


def test_a_ranking_cut_by_limit_breaks_its_ties_on_a_key(snapshot: SchemaSnapshot, demo_config: Config) -> None:
    # the ten longest tracks: two tracks of one length at the cut would make the cut the database's choice
    ties = ("ties",)
    sql, added = shaped(snapshot, demo_config, [col("t", "TrackId"), col("t", "Name"), col("t", "Milliseconds")],
                        order_by=[{"expr": col("t", "Milliseconds"), "direction": "desc"}], limit=10, offset=10,
                        rules=ties)
    assert added == ["ties broken on t.TrackId"] and "ORDER BY t.Milliseconds DESC, t.TrackId" in sql
    # grouped: on the group keys, after the measure
    sql, added = shaped(snapshot, demo_config, [col("t", "Composer"), agg("count")], group_by=[col("t", "Composer")],
                        order_by=[{"expr": agg("count"), "direction": "desc"}], limit=3, rules=ties)
    assert added == ["ties broken on t.Composer"] and "ORDER BY COUNT(*) DESC, t.Composer" in sql
    # no cut, or a key already in the order: nothing
    assert shaped(snapshot, demo_config, [col("t", "TrackId")], rules=ties,
                  order_by=[{"expr": col("t", "Milliseconds"), "direction": "desc"}])[1] == []
    assert shaped(snapshot, demo_config, [col("t", "TrackId")], limit=3, rules=ties,
                  order_by=[{"expr": col("t", "TrackId"), "direction": "desc"}])[1] == []


@pytest.mark.parametrize("rest", [
    {"group_by": [col("t", "Composer")]},  # grouped by a name: rows are groups, not the table's rows
    {"distinct": True},
    {"select": [col("t", "TrackId"), col("t", "Name")]},  # the key is there
    {"select": [col("a", "Title")], "joins": [{"type": "inner", "table": {"table": "Album", "alias": "a"},
                                               "on": [{"left": col("a", "AlbumId"), "right": col("t", "AlbumId")}]}]},
])
def test_no_key_is_added_where_the_rows_are_not_a_list_of_the_from_table(rest: dict, snapshot: SchemaSnapshot,
                                                                         demo_config: Config) -> None:
    select = rest.pop("select", [col("t", "Composer")])
    assert shaped(snapshot, demo_config, select, **rest)[1] == []


def test_a_composite_key_is_not_added(snapshot: SchemaSnapshot, demo_config: Config) -> None:
    _, added = shaped(snapshot, demo_config, [col("pt", "TrackId")], table="PlaylistTrack", alias="pt")
    assert added == []


def test_the_rules_are_chosen_one_by_one(snapshot: SchemaSnapshot, demo_config: Config) -> None:
    args = dict(group_by=[col("t", "Composer")], order_by=[{"expr": agg("count"), "direction": "desc"}], limit=1)
    assert shaped(snapshot, demo_config, [col("t", "Composer")], rules=("key",), **args)[1] == []
    assert shaped(snapshot, demo_config, [col("t", "Composer")], rules=("ties",), **args)[1] == [
        "ties broken on t.Composer"]
    assert shaped(snapshot, demo_config, [col("t", "Name")], rules=("measure",))[1] == []
    assert shaped(snapshot, demo_config, [col("t", "Name")], rules=())[1] == []
    assert shaped(snapshot, demo_config, [agg("count")], group_by=[col("t", "GenreId")], rules=("key", "ties"))[1] == []


def join(table: str, alias: str, left: dict, right: dict) -> dict:
    return {"type": "inner", "table": {"table": table, "alias": alias}, "on": [{"left": left, "right": right}]}


def test_a_list_whose_rows_a_join_repeats_shows_each_once(snapshot: SchemaSnapshot, demo_config: Config) -> None:
    # "Which artists have an album?": one row per album without DISTINCT
    sql, added = shaped(snapshot, demo_config, [col("ar", "Name")], table="Artist", alias="ar", rules=("distinct",),
                        joins=[join("Album", "al", col("al", "ArtistId"), col("ar", "ArtistId"))])
    assert added == ["DISTINCT: a join repeats the rows shown"] and sql.startswith("SELECT DISTINCT ar.Name")
    # through two tables: the artists with a track in the Classical genre
    classical = {"kind": "compare", "op": "=", "left": col("g", "Name"), "right": {"kind": "literal",
                                                                                    "value": "Classical"}}
    sql, added = shaped(snapshot, demo_config, [col("ar", "Name")], table="Artist", alias="ar", rules=("distinct",),
                        joins=[join("Album", "al", col("al", "ArtistId"), col("ar", "ArtistId")),
                               join("Track", "t", col("t", "AlbumId"), col("al", "AlbumId")),
                               join("Genre", "g", col("g", "GenreId"), col("t", "GenreId"))], where=classical)
    assert sql.startswith("SELECT DISTINCT ar.Name")


@pytest.mark.parametrize("select, table, alias, joins, rest", [
    # each track meets one album: the tracks' rows are not repeated
    ([col("t", "Name")], "Track", "t", [join("Album", "al", col("al", "AlbumId"), col("t", "AlbumId"))], {}),
    # the many side is shown: one row per track, as asked
    ([col("al", "Title"), col("t", "Name")], "Album", "al",
     [join("Track", "t", col("t", "AlbumId"), col("al", "AlbumId"))], {}),
    # ordered by what is not shown: a DISTINCT list could not be ordered by it everywhere
    ([col("ar", "Name")], "Artist", "ar", [join("Album", "al", col("al", "ArtistId"), col("ar", "ArtistId"))],
     {"order_by": [{"expr": col("al", "Title"), "direction": "asc"}]}),
    # grouped: a count per artist is what the join is for
    ([col("ar", "Name"), agg("count")], "Artist", "ar",
     [join("Album", "al", col("al", "ArtistId"), col("ar", "ArtistId"))], {"group_by": [col("ar", "Name")]}),
])
def test_a_list_at_the_grain_it_shows_is_left_alone(snapshot: SchemaSnapshot, demo_config: Config, select: list,
                                                    table: str, alias: str, joins: list, rest: dict) -> None:
    sql, added = shaped(snapshot, demo_config, select, table=table, alias=alias, rules=("distinct",), joins=joins,
                        **rest)
    assert added == [] and "DISTINCT" not in sql


def test_an_id_standing_for_a_row_is_shown_as_its_name(snapshot: SchemaSnapshot, demo_config: Config) -> None:
    # "Which albums have more than 25 tracks?" planned over Track alone, grouped by the album's id
    having = {"kind": "compare", "op": ">", "left": agg("count"), "right": {"kind": "literal", "value": 25}}
    sql, added = shaped(snapshot, demo_config, [col("t", "AlbumId")], rules=("names",), group_by=[col("t", "AlbumId")],
                        having=having, question="Which albums have more than 25 tracks?")
    assert added == ["Album.Title for t.AlbumId"]
    assert sql.startswith("SELECT Album.Title FROM Track AS t LEFT JOIN Album ON Album.AlbumId = t.AlbumId")
    assert "GROUP BY t.AlbumId, Album.Title" in sql
    # a customer is named by a first and a last name; the table already joined on the key is read, not joined again
    sql, added = shaped(snapshot, demo_config, [col("i", "CustomerId"), agg("count")], table="Invoice", alias="i",
                        rules=("names",), joins=[join("Customer", "c", col("c", "CustomerId"), col("i", "CustomerId"))],
                        group_by=[col("i", "CustomerId")], question="How many invoices has each customer?")
    assert added == ["c.FirstName and c.LastName for i.CustomerId"]
    assert sql.startswith("SELECT c.FirstName, c.LastName, COUNT(*)") and sql.count("JOIN") == 1


@pytest.mark.parametrize("select, question, role, rest", [
    # the question asks for ids
    ([col("t", "AlbumId")], "Which album ids have more than 25 tracks?", "analyst", {"group_by": [col("t", "AlbumId")]}),
    # the album is shown already
    ([col("t", "AlbumId"), col("al", "Title")], "Which albums are there?", "analyst",
     {"joins": [join("Album", "al", col("al", "AlbumId"), col("t", "AlbumId"))]}),
    # a key, not a foreign key
    ([col("t", "TrackId")], "Which tracks are there?", "analyst", {}),
    # labelled as an id by the plan
    ([{"expr": col("t", "AlbumId"), "alias": "album_id"}], "Which albums have tracks?", "analyst", {}),
    # Employee, which a support rep's id names, is not readable to the analyst
    ([col("c", "SupportRepId")], "Who looks after each customer?", "analyst", {"table": "Customer", "alias": "c"}),
])
def test_an_id_is_kept_where_its_name_is_not_wanted_or_not_readable(snapshot: SchemaSnapshot, demo_config: Config,
                                                                    select: list, question: str, role: str,
                                                                    rest: dict) -> None:
    rest = {"table": "Track", "alias": "t", **rest}
    assert shaped(snapshot, demo_config, select, rules=("names",), question=question, role=role, **rest)[1] == []
