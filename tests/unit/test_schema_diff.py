"""The schema diff: what changed between two snapshots, empty exactly when the fingerprints match, cut to a scope."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nl2sql.datasources.models import ColumnInfo, ForeignKey, SchemaSnapshot, TableInfo
from nl2sql.schema.snapshot import changed_tables, diff_snapshots, fingerprint

TABLES = ["tickets", "agents", "customers"]
COLUMNS = ["id", "name", "agent_id", "status"]


@st.composite
def tables(draw: st.DrawFn, name: str) -> TableInfo:
    names = draw(st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=4, unique=True))
    columns = [ColumnInfo(name=c, type=draw(st.sampled_from(["INTEGER", "TEXT"])), nullable=draw(st.booleans()))
               for c in names]
    primary_key = draw(st.lists(st.sampled_from(names), max_size=2, unique=True))
    foreign_keys = [ForeignKey(columns=[c], ref_table=draw(st.sampled_from(TABLES)), ref_columns=["id"])
                    for c in draw(st.lists(st.sampled_from(names), max_size=2))]
    return TableInfo(name=name, columns=columns, primary_key=primary_key, foreign_keys=foreign_keys)


@st.composite
def snapshots(draw: st.DrawFn) -> SchemaSnapshot:
    names = draw(st.lists(st.sampled_from(TABLES), max_size=3, unique=True))
    return SchemaSnapshot(datasource_id="support", dialect="sqlite", tables=[draw(tables(n)) for n in names])


@settings(max_examples=400, deadline=None)
@given(snapshots(), snapshots())
def test_the_diff_is_empty_exactly_when_the_fingerprints_match(before: SchemaSnapshot, after: SchemaSnapshot) -> None:
    assert diff_snapshots(before, after).empty == (fingerprint(before) == fingerprint(after))
    assert diff_snapshots(after, after).empty


@settings(max_examples=300, deadline=None)
@given(snapshots(), snapshots(), st.lists(st.sampled_from(TABLES), unique=True))
def test_changed_tables_are_those_whose_shape_or_row_count_differs(before: SchemaSnapshot, after: SchemaSnapshot,
                                                                   carried: list[str]) -> None:
    # some tables carried over as reflection carries them: copies sharing the previous table's lists
    old = {t.name: t for t in before.tables}
    after = after.model_copy(update={"tables": [old[t.name].model_copy() if t.name in carried and t.name in old else t
                                                for t in after.tables]})
    expected = [t.name for t in after.tables
                if t.name not in old or fingerprint(_alone(old[t.name])) != fingerprint(_alone(t))]
    assert changed_tables(before, after) == expected
    assert diff_snapshots(before, after).empty == (fingerprint(before) == fingerprint(after))
    counted = after.model_copy(update={"tables": [t.model_copy(update={"row_count": 7}) for t in after.tables]})
    assert changed_tables(after, counted) == [t.name for t in after.tables]  # a row count alone is a change


def _alone(table: TableInfo) -> SchemaSnapshot:
    return SchemaSnapshot(datasource_id="support", dialect="sqlite", tables=[table])


@settings(max_examples=200, deadline=None)
@given(snapshots(), snapshots())
def test_the_diff_reversed_swaps_added_and_removed(before: SchemaSnapshot, after: SchemaSnapshot) -> None:
    forward, backward = diff_snapshots(before, after), diff_snapshots(after, before)
    assert (forward.added_tables, forward.added_columns, forward.added_foreign_keys) == (
        backward.removed_tables, backward.removed_columns, backward.removed_foreign_keys)
    assert forward.changed_tables() == backward.changed_tables()


def _support(**changes: object) -> SchemaSnapshot:
    tickets = TableInfo(name="tickets", primary_key=["id"], columns=[
        ColumnInfo(name="id", type="INTEGER", nullable=False), ColumnInfo(name="status", type="TEXT"),
        ColumnInfo(name="agent_id", type="INTEGER")],
        foreign_keys=[ForeignKey(columns=["agent_id"], ref_table="agents", ref_columns=["id"])])
    agents = TableInfo(name="agents", primary_key=["id"], columns=[ColumnInfo(name="id", type="INTEGER"),
                                                                   ColumnInfo(name="salary", type="REAL")])
    tables = {"tickets": tickets, "agents": agents}
    for name, table in changes.items():
        tables[name] = table  # type: ignore[assignment]
    return SchemaSnapshot(datasource_id="support", dialect="sqlite", tables=[t for t in tables.values() if t])


def test_each_kind_of_change_is_named() -> None:
    before = _support()
    tickets = before.tables[0].model_copy(deep=True)
    tickets.columns[1] = ColumnInfo(name="state", type="TEXT")  # renamed: one dropped, one added
    tickets.columns[2] = ColumnInfo(name="agent_id", type="BIGINT", nullable=False)
    tickets.primary_key = ["id", "agent_id"]
    tickets.foreign_keys = []
    after = _support(tickets=tickets, agents=None,
                     queues=TableInfo(name="queues", columns=[ColumnInfo(name="id", type="INTEGER")]))
    diff = diff_snapshots(before, after)
    assert diff.added_tables == ["queues"] and diff.removed_tables == ["agents"]
    assert diff.added_columns == ["tickets.state"] and diff.removed_columns == ["tickets.status"]
    assert [(r.table, r.before, r.after, r.type) for r in diff.renamed_columns] == [("tickets", "status", "state", "TEXT")]
    assert [(c.column, c.before, c.after) for c in diff.changed_columns] == [("agent_id", "INTEGER", "BIGINT NOT NULL")]
    assert [(k.before, k.after) for k in diff.changed_primary_keys] == [(["id"], ["id", "agent_id"])]
    assert diff.removed_foreign_keys == ["tickets(agent_id) -> agents(id)"]
    assert diff.changed_tables() == ["agents", "queues", "tickets"]
    assert diff.counts()["removed_foreign_keys"] == 1
    assert diff.summary() == ("1 table added, 1 table dropped, 1 column renamed, 1 column changed, "
                              "1 primary key changed, 1 foreign key dropped")


def test_a_rename_needs_one_column_of_the_type_dropped_and_one_added() -> None:
    before = _support()
    tickets = before.tables[0].model_copy(deep=True)
    tickets.columns[1] = ColumnInfo(name="state", type="INTEGER")  # another type: dropped and added, not renamed
    tickets.columns.append(ColumnInfo(name="notes", type="TEXT"))
    tickets.columns.append(ColumnInfo(name="memo", type="TEXT"))  # two TEXT columns added: which one is a guess
    diff = diff_snapshots(before, _support(tickets=tickets))
    assert diff.renamed_columns == []
    assert diff.summary() == "3 columns added, 1 column dropped"
    assert diff_snapshots(_support(tickets=tickets), before).summary() == "1 column added, 3 columns dropped"


def test_a_scope_sees_only_its_tables() -> None:
    before = _support()
    agents = before.tables[1].model_copy(deep=True)
    agents.columns = agents.columns[:1]  # salary dropped, in a table the caller may not read
    drift = diff_snapshots(before, _support(agents=agents))
    assert not drift.empty
    assert drift.scoped(lambda table: table != "agents").empty
    # a foreign key to a denied table is not shown either: its text names that table
    tickets = before.tables[0].model_copy(deep=True)
    tickets.foreign_keys = []
    drift = diff_snapshots(before, _support(tickets=tickets))
    assert drift.removed_foreign_keys and drift.scoped(lambda table: table != "agents").empty
    assert drift.scoped(lambda table: True) == drift
