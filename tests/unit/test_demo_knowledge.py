"""The demo project's curated knowledge: sample questions and verified queries that run on its databases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlglot
import yaml
from sqlglot import exp

from nl2sql.config import Config
from nl2sql.config.models import ParameterConfig, VerifiedQueryConfig
from nl2sql.datasources import DatasourceCatalog
from nl2sql.datasources.models import SchemaSnapshot
from nl2sql.demo import CONFIG_TEMPLATE
from nl2sql.policies.scope import scope
from nl2sql.verified import bind_parameters, coerce_value

#: Values each parameter is also tried with, besides its default: (datasource, parameter) → values.
EXAMPLES: dict[tuple[str, str], list[Any]] = {
    ("chinook", "top_n"): [3, 10],
    ("chinook", "country"): ["Brazil", "United Kingdom"],
    ("chinook", "year"): [2007, 2010],
    ("chinook", "genre"): ["Rock", "Bossa Nova"],
    ("chinook", "artist"): ["AC/DC", "Iron Maiden"],
    ("support", "priority"): ["high", "low"],
    ("support", "year"): [2010],
    ("webanalytics", "device"): ["desktop", "tablet"],
}


def _template_queries() -> list[tuple[str, int, str]]:
    """(datasource id, index, question) of every verified query in the packaged template (for test ids)."""
    raw = yaml.safe_load(CONFIG_TEMPLATE.read_text())
    return [(ds["id"], i, vq["question"]) for ds in raw["datasources"]
            for i, vq in enumerate(ds.get("verified_queries") or [])]


QUERIES = _template_queries()
QUERY_IDS = [f"{ds}-{i}" for ds, i, _ in QUERIES]


@pytest.fixture(scope="module")
def catalog(demo_config: Config) -> Iterator[DatasourceCatalog]:
    with DatasourceCatalog(demo_config) as opened:
        yield opened


@pytest.fixture(scope="module")
def snapshots(catalog: DatasourceCatalog) -> dict[str, SchemaSnapshot]:
    return {ds_id: catalog.get(ds_id).reflect() for ds_id in catalog.ids}


def _query(config: Config, ds_id: str, index: int) -> VerifiedQueryConfig:
    return config.datasource(ds_id).verified_queries[index]


def _values_to_try(ds_id: str, vq: VerifiedQueryConfig) -> list[dict[str, Any]]:
    """One binding with every default (an example where there is none), then one per example value."""
    first = {}
    for name, param in vq.parameters.items():
        examples = EXAMPLES.get((ds_id, name), [])
        assert param.default is not None or examples, f"parameter {name} has neither a default nor an example"
        first[name] = param.default if param.default is not None else examples[0]
    tries = [first]
    for name in vq.parameters:
        tries += [{**first, name: value} for value in EXAMPLES.get((ds_id, name), [])]
    return tries


def _split_column(param: ParameterConfig) -> tuple[str, str]:
    assert param.column and param.column.count(".") == 1, f"column {param.column!r} is not Table.Column"
    table, column = param.column.split(".")
    return table, column


def _tables(sql: str, dialect: str) -> set[str]:
    return {t.name for t in sqlglot.parse_one(sql, read=dialect).find_all(exp.Table)}


# --- how much is curated -------------------------------------------------------------------------


def test_template_is_what_the_demo_writes(demo_config: Config) -> None:
    written = [(ds.id, i, vq.question) for ds in demo_config.datasources for i, vq in enumerate(ds.verified_queries)]
    assert written == QUERIES


def test_enough_verified_queries_and_sample_questions(demo_config: Config) -> None:
    queries = [(ds.id, vq) for ds in demo_config.datasources for vq in ds.verified_queries]
    assert len(queries) >= 10
    assert sum(1 for _, vq in queries if vq.parameters) >= 5
    per_datasource = {ds.id: len(ds.verified_queries) for ds in demo_config.datasources}
    assert per_datasource["chinook"] >= 6
    assert per_datasource["support"] >= 3
    assert per_datasource["webanalytics"] >= 3
    for ds in demo_config.datasources:
        assert len(ds.sample_questions) >= 8, ds.id
        assert len(set(ds.sample_questions)) == len(ds.sample_questions), ds.id


def test_questions_are_distinct(demo_config: Config) -> None:
    questions = [vq.question.lower() for ds in demo_config.datasources for vq in ds.verified_queries]
    assert len(set(questions)) == len(questions)


def test_examples_name_declared_parameters(demo_config: Config) -> None:
    declared = {(ds.id, name) for ds in demo_config.datasources for vq in ds.verified_queries for name in vq.parameters}
    assert set(EXAMPLES) <= declared


def test_roles_see_the_queries_they_should(demo_config: Config, catalog: DatasourceCatalog) -> None:
    """The viewer (catalog only) may run some chinook verified query, and is refused one that reads Invoice."""
    viewer = scope(demo_config.policies, "viewer", "chinook")
    dialect = catalog.get("chinook").dialect
    tables = [_tables(vq.sql, dialect) for vq in demo_config.datasource("chinook").verified_queries]
    assert any(all(viewer.allows(t) for t in used) for used in tables)
    assert any("Invoice" in used and not viewer.allows("Invoice") for used in tables)


# --- every verified query runs ------------------------------------------------------------------


@pytest.mark.parametrize(("ds_id", "index", "question"), QUERIES, ids=QUERY_IDS)
def test_verified_query_runs_with_rows(demo_config: Config, catalog: DatasourceCatalog,
                                      ds_id: str, index: int, question: str) -> None:
    vq = _query(demo_config, ds_id, index)
    adapter = catalog.get(ds_id)
    for values in _values_to_try(ds_id, vq):
        typed = {name: coerce_value(name, value, vq.parameters[name]) for name, value in values.items()}
        sql = bind_parameters(vq.sql, adapter.name, typed)
        result = adapter.execute(sql, row_limit=50, timeout_s=30)
        assert result.row_count >= 1, f"{question} with {typed} returned no rows"
        names = [c.name for c in result.columns]
        assert len(set(names)) == len(names), f"{question}: duplicate output columns {names}"


@pytest.mark.parametrize(("ds_id", "index", "question"), QUERIES, ids=QUERY_IDS)
def test_verified_query_is_ordered(demo_config: Config, catalog: DatasourceCatalog,
                                   ds_id: str, index: int, question: str) -> None:
    """Results come in a fixed order: an ORDER BY, unless the query is one aggregate row (no GROUP BY)."""
    tree = sqlglot.parse_one(_query(demo_config, ds_id, index).sql, read=catalog.get(ds_id).dialect)
    assert isinstance(tree, exp.Select), f"{question}: not a single SELECT"
    one_row = not tree.args.get("group") and all(e.find(exp.AggFunc) for e in tree.expressions)
    assert one_row or tree.args.get("order"), f"{question}: no ORDER BY"


@pytest.mark.parametrize(("ds_id", "index", "question"), QUERIES, ids=QUERY_IDS)
def test_column_parameters_name_real_columns_and_values(demo_config: Config, catalog: DatasourceCatalog,
                                                        snapshots: dict[str, SchemaSnapshot],
                                                        ds_id: str, index: int, question: str) -> None:
    vq = _query(demo_config, ds_id, index)
    adapter = catalog.get(ds_id)
    for name, param in vq.parameters.items():
        if param.column is None:
            continue
        assert param.type == "text", f"{name}: a column parameter takes text"
        table_name, column_name = _split_column(param)
        table = snapshots[ds_id].table(table_name)
        assert table is not None and table.name == table_name, f"{param.column}: no table {table_name}"
        column = table.column(column_name)
        assert column is not None and column.name == column_name, f"{param.column}: no column {column_name}"
        values = ([param.default] if param.default is not None else []) + EXAMPLES.get((ds_id, name), [])
        assert values
        for value in values:
            probe = (
                sqlglot.select(exp.Count(this=exp.Star()))
                .from_(exp.Table(this=exp.to_identifier(table_name, quoted=True)))
                .where(exp.column(column_name, quoted=True).eq(exp.Placeholder(this="value")))
                .sql(dialect=adapter.dialect)
            )
            sql = bind_parameters(probe, adapter.name, {"value": value})
            count = int(adapter.execute(sql, row_limit=1, timeout_s=30).frame.iloc[0, 0])
            assert count >= 1, f"{value!r} is not a value of {param.column}"
