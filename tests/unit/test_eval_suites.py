"""The evaluation suites: suites/chinook.yaml (hand-written gold answers over Chinook) and suites/routing.yaml.

The Chinook suite is checked against the database and the demo policy: every table and column exists,
`tables` is what the sql reads, every outcome follows from the roles' scopes, every gold plan validates
and returns the case's rows, and the committed file is exactly what `regenerate` writes. A pinned digest
of the gold data makes any change to a question, a statement, its rows or a plan a deliberate one: after
reviewing such a change, regenerate the file and update GOLD_DIGEST.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from nl2sql.config import Config
from nl2sql.datasources import Adapter, DatasourceCatalog, SchemaSnapshot, guard_sql, tables_read
from nl2sql.datasources.compare import rows_match
from nl2sql.errors import ConfigError
from nl2sql.evaluation.regenerate import plain_value, regenerate
from nl2sql.evaluation.suite import CHINOOK_TAGS, EvalCase, EvalSuite, load_suite
from nl2sql.plan import PlanModel, generate_sql, validate_plan
from nl2sql.policies import scope

SUITES = Path(__file__).resolve().parents[2] / "suites"
CHINOOK_SUITE = SUITES / "chinook.yaml"
ROUTING_SUITE = SUITES / "routing.yaml"
DEMO_ROLES = ("admin", "analyst", "viewer", "support")
DEMO_DATASOURCES = ("chinook", "support", "webanalytics")
#: SHA-256 of the canonical JSON of the gold data (see gold_digest); update it only after reviewing a change.
GOLD_DIGEST = "5474458aa6d3d2ad6a33e5ac08effa550fcdc2ce790b48ed8f30efd41a98a9b3"


@pytest.fixture(scope="module")
def suite() -> EvalSuite:
    return load_suite(CHINOOK_SUITE)


@pytest.fixture(scope="module")
def chinook(demo_config: Config) -> Iterator[Adapter]:
    with DatasourceCatalog(demo_config) as catalog:
        yield catalog.get("chinook")


@pytest.fixture(scope="module")
def snapshot(chinook: Adapter) -> SchemaSnapshot:
    return chinook.reflect()


def answerable(suite: EvalSuite) -> list[EvalCase]:
    return [c for c in suite.cases if c.answerable]


def as_tuples(rows: list[dict]) -> list[tuple]:
    return [tuple(row.values()) for row in rows]


def read_tables(sql: str) -> set[str]:
    return {t.name for t in tables_read(guard_sql(sql, "sqlite"))}


def gold_digest(suite: EvalSuite) -> str:
    """SHA-256 of the gold data of every case, as canonical JSON (sorted keys, no spaces, UTF-8)."""
    data = [
        {"question": c.question, "sql": c.sql, "rows": c.rows, "alt_rows": c.alt_rows, "outcome": c.outcome,
         "tables": c.tables, "columns": c.columns, "plan": c.plan}
        for c in suite.cases
    ]
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- the Chinook suite -------------------------------------------------------------------------------


def test_chinook_suite_loads_with_enough_approved_hand_cases(suite: EvalSuite) -> None:
    assert len(suite.cases) >= 50
    ids = [c.id for c in suite.cases]
    assert len(ids) == len(set(ids))
    for case in suite.cases:
        assert (case.kind, case.status, case.origin, case.datasources) == ("answer", "approved", "hand", ["chinook"])
    assert len(suite.select()) == len(suite.cases)


def test_every_tag_is_covered_and_known(suite: EvalSuite) -> None:
    used = {tag for c in suite.cases for tag in c.tags}
    assert set(CHINOOK_TAGS) <= used, f"uncovered tags: {sorted(set(CHINOOK_TAGS) - used)}"
    assert used <= set(CHINOOK_TAGS), f"unknown tags: {sorted(used - set(CHINOOK_TAGS))}"


def test_paraphrase_groups_share_one_result(suite: EvalSuite) -> None:
    groups: dict[str, list[EvalCase]] = defaultdict(list)
    for case in suite.cases:
        assert (case.paraphrase_group is not None) == ("paraphrase" in case.tags), case.id
        if case.paraphrase_group:
            groups[case.paraphrase_group].append(case)
    assert len(groups) >= 2
    for name, cases in groups.items():
        assert len(cases) >= 2, name
        assert len({c.question for c in cases}) == len(cases), name
        first = cases[0]
        for other in cases[1:]:
            assert list(other.rows[0]) == list(first.rows[0]), (name, other.id)
            assert rows_match(as_tuples(first.rows), as_tuples(other.rows)), (name, other.id)


def test_tables_and_columns_exist_and_tables_are_what_the_sql_reads(suite: EvalSuite,
                                                                   snapshot: SchemaSnapshot) -> None:
    columns = {t.name: {c.name for c in t.columns} for t in snapshot.tables}
    for case in answerable(suite):
        assert case.tables == sorted(read_tables(case.sql)), case.id
        assert set(case.tables) <= set(columns), case.id
        assert case.columns == sorted(set(case.columns)), case.id
        for qualified in case.columns:
            table, _, column = qualified.partition(".")
            assert table in case.tables, (case.id, qualified)
            assert column in columns[table], (case.id, qualified)


def test_every_outcome_follows_from_the_demo_policy(suite: EvalSuite, demo_config: Config) -> None:
    assert set(demo_config.policies.roles) == set(DEMO_ROLES)
    for case in answerable(suite):
        expected = {
            role: "allowed" if all(scope(demo_config.policies, role, "chinook").allows(t) for t in case.tables)
            else "refused"
            for role in DEMO_ROLES
        }
        assert case.outcome == expected, case.id
        assert ("rbac-denial" in case.tags) == ("refused" in case.outcome.values()), case.id


def test_exactly_four_unanswerable_cases(suite: EvalSuite) -> None:
    unanswerable = [c for c in suite.cases if "unanswerable" in c.tags]
    assert len(unanswerable) == 4
    assert unanswerable == [c for c in suite.cases if not c.answerable]
    for case in unanswerable:
        assert case.outcome == dict.fromkeys(DEMO_ROLES, "unanswerable"), case.id
        assert (case.sql, case.plan, case.rows, case.alt_sql, case.tables, case.columns) == (
            None, None, None, [], [], []), case.id


def test_gold_rows_are_written_for_every_answerable_case(suite: EvalSuite) -> None:
    for case in answerable(suite):
        assert case.rows, case.id  # no gold answer here is empty
        assert len({tuple(row) for row in case.rows}) == 1, case.id
        assert all(plain_value(v) == v and type(plain_value(v)) is type(v) for row in case.rows for v in row.values())
        assert len(case.alt_rows) == len(case.alt_sql), case.id
        if "order-limit" in case.tags:
            assert case.order_matters, case.id
        if case.order_matters:
            assert {"order-limit", "window"} & set(case.tags), case.id


def test_every_answerable_case_has_a_gold_plan_returning_its_rows(suite: EvalSuite, demo_config: Config,
                                                                 chinook: Adapter, snapshot: SchemaSnapshot) -> None:
    admin = scope(demo_config.policies, "admin", "chinook")
    for case in answerable(suite):
        assert case.plan is not None, case.id
        validated = validate_plan(PlanModel.model_validate(case.plan), snapshot, admin)
        assert sorted({t.name for t in validated.tables}) == case.tables, case.id
        sql = generate_sql(validated.plan, "sqlite")
        frame = chinook.execute(sql, row_limit=10_000).frame
        assert list(frame.columns) == list(case.rows[0]), case.id
        assert rows_match(as_tuples(case.rows), list(frame.itertuples(index=False, name=None)),
                          order_matters=case.order_matters), case.id


def test_reviewed_alternatives(suite: EvalSuite) -> None:
    with_alternatives = [c for c in suite.cases if c.alt_sql]
    assert len(with_alternatives) >= 3
    for case in with_alternatives:
        for alt in case.alt_sql:
            assert alt != case.sql, case.id
            assert read_tables(alt) <= set(case.tables), case.id
        for rows in case.alt_rows:
            assert len(rows) == len(case.rows), case.id
            assert list(rows[0]) != list(case.rows[0]), case.id  # another shape, not the same answer again


def test_committed_file_is_what_regenerate_writes(demo_config: Config, tmp_path: Path) -> None:
    for source in (CHINOOK_SUITE, ROUTING_SUITE):
        copy = tmp_path / source.name
        shutil.copyfile(source, copy)
        regenerate(copy, demo_config)
        assert copy.read_bytes() == source.read_bytes(), f"{source.name}: run `nl2sql eval regenerate` on it"


def test_gold_data_digest_is_pinned(suite: EvalSuite) -> None:
    assert gold_digest(suite) == GOLD_DIGEST, "the gold data changed: review it, then update GOLD_DIGEST"


# --- the routing suite -------------------------------------------------------------------------------


def test_routing_suite() -> None:
    routing = load_suite(ROUTING_SUITE)
    assert len(routing.cases) >= 60
    assert len({c.id for c in routing.cases}) == len(routing.cases)
    assert len({c.question.lower() for c in routing.cases}) == len(routing.cases)
    for case in routing.cases:
        assert case.kind == "routing", case.id
        assert (case.sql, case.plan, case.rows) == (None, None, None), case.id
        assert case.outcome == {"admin": "allowed"}, case.id
        assert set(case.datasources) <= set(DEMO_DATASOURCES), case.id
        assert sorted(case.tags) == sorted(case.datasources), case.id
    for ds in DEMO_DATASOURCES:
        assert sum(ds in c.datasources for c in routing.cases) >= 15, ds
    assert sum(len(c.datasources) == 2 for c in routing.cases) >= 5


def test_routing_questions_are_not_the_demo_examples(demo_config: Config) -> None:
    examples = {q.lower() for ds in demo_config.datasources for q in ds.sample_questions}
    examples |= {v.question.lower() for ds in demo_config.datasources for v in ds.verified_queries}
    assert not examples & {c.question.lower() for c in load_suite(ROUTING_SUITE).cases}


# --- the loader and regenerate -----------------------------------------------------------------------


def test_an_approved_answer_case_allowed_for_a_role_needs_sql(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text("version: 1\ncases:\n- id: no_sql\n  question: How many genres?\n  datasources: [chinook]\n"
                    "  outcome: {viewer: allowed}\n")
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    (problem,) = info.value.problems
    assert problem.file == str(path)
    assert "no_sql" in problem.key
    assert "needs sql" in problem.message and "viewer" in problem.message


def test_a_loader_error_names_the_file_the_case_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text("version: 1\ncases:\n- id: ok\n  question: How many genres?\n  datasources: [chinook]\n"
                    "  sql: SELECT COUNT(*) FROM Genre\n- id: bad_outcome\n  question: How many tracks?\n"
                    "  datasources: [chinook]\n  sql: SELECT COUNT(*) FROM Track\n  outcome: {viewer: maybe}\n")
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    text = str(info.value)
    assert str(path) in text
    assert "cases[1] (bad_outcome).outcome.viewer" in text


def test_regenerate_writes_plain_rows_and_leaves_cases_without_sql_alone(demo_config: Config,
                                                                         tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(
        "version: 1\ncases:\n"
        "- id: third\n  question: What is a third?\n  datasources: [chinook]\n  outcome: {admin: allowed}\n"
        "  sql: SELECT 1.0 / 3 AS third, NULL AS missing, 'x' AS text, 2 AS two\n"
        "  alt_sql: [SELECT 1.0 / 3 AS third]\n"
        "- id: weather\n  question: Will it rain?\n  datasources: [chinook]\n  outcome: {admin: unanswerable}\n"
        "  tags: [unanswerable]\n")
    suite = regenerate(path, demo_config)
    third, weather = suite.cases
    assert third.rows == [{"third": 0.3333333333, "missing": None, "text": "x", "two": 2}]
    assert third.alt_rows == [[{"third": 0.3333333333}]]
    assert weather.rows is None and weather.alt_rows == []
    first = path.read_bytes()
    regenerate(path, demo_config)
    assert path.read_bytes() == first
    assert load_suite(path) == suite


def test_regenerate_rejects_two_columns_with_one_name(demo_config: Config, tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(
        "version: 1\ncases:\n- id: managers\n  question: Who reports to whom?\n  datasources: [chinook]\n"
        "  sql: SELECT e.LastName, m.LastName FROM Employee AS e JOIN Employee AS m ON m.EmployeeId = e.ReportsTo\n")
    before = path.read_bytes()
    with pytest.raises(ConfigError) as info:
        regenerate(path, demo_config)
    text = str(info.value)
    assert str(path) in text and "cases[0] (managers).sql" in text and "'LastName'" in text and "alias" in text
    assert path.read_bytes() == before
