"""The installed `nl2sql ask` gives a caller no verified query over a table it may not read: the generic refusal,
no SQL, no table name, whatever the question's value names (a run of the real CLI each: a few seconds)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import nl2sql.demo
from nl2sql.config import Config
from nl2sql.config.models import PLACEHOLDER
from nl2sql.demo import init_demo
from nl2sql.errors import GENERIC_REFUSAL
from nl2sql.policies import scope
from nl2sql.project import load_project
from nl2sql.verified.scope import VerifiedCatalog
from tests.support.index import build_demo_index
from tests.support.prefect_server import steady_prefect_server

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

EXE = Path(sys.executable).parent / "nl2sql"
#: A value for each parameter without a default.
SAMPLES = {"artist": "AC/DC"}
ROLES = ("admin", "analyst", "viewer", "support")
DEMO_CONFIG = Path(nl2sql.demo.__file__).resolve().parent / "nl2sql.yaml"


def _denied_cases() -> list[tuple[str, str, str, bool]]:
    """(role, question, table names, --no-execute) for every demo verified question over a table the role may not
    read; each question is asked by each such role, with and without --no-execute in turn."""
    config = load_project(DEMO_CONFIG)  # read only: its verified queries and roles
    catalog = VerifiedCatalog(config, lambda ds: config.datasource(ds).dialect)
    cases: list[tuple[str, str, str, bool]] = []
    asked: dict[str, int] = {}
    for ds in config.datasources:
        for curated in catalog.queries(ds.id):
            params = curated.query.parameters
            question = PLACEHOLDER.sub(lambda m, p=params: str(p[m.group(1)].default or SAMPLES[m.group(1)]),
                                       curated.query.question)
            for role in ROLES:
                if not curated.readable_by(scope(config.policies, role, ds.id)):
                    asked[role] = asked.get(role, 0) + 1
                    cases.append((role, question, ",".join(curated.tables), asked[role] % 2 == 0))
    return cases


CASES = _denied_cases()


@pytest.fixture(scope="session")
def indexed_demo(tmp_path_factory: pytest.TempPathFactory) -> Config:
    """A demo project with its index built into its own state folder, once."""
    config = load_project(init_demo(tmp_path_factory.mktemp("verified-cli"), env={}))
    build_demo_index(config, config.state_dir)
    return config


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One loopback Prefect server for every run of this module (each CLI run would otherwise start its own)."""
    with steady_prefect_server(tmp_path_factory.mktemp("verified-prefect")) as (_, env):
        yield env


def ask(config: Config, env: dict[str, str], question: str, role: str, *, no_execute: bool) -> tuple[int, str, str]:
    args = [str(EXE), "-c", str(config.path), "ask", question, "--role", role, "--json"]
    done = subprocess.run(args + (["--no-execute"] if no_execute else []), env=env, capture_output=True, text=True,
                          timeout=300)
    return done.returncode, done.stdout, done.stderr


def test_the_demo_has_denied_verified_questions_for_the_viewer_and_the_support_role() -> None:
    roles = {role for role, *_ in CASES}
    assert roles == {"viewer", "support"}  # admin reads everything, analyst everything but Employee
    assert any(q == "Which customers live in USA?" for r, q, *_ in CASES if r == "viewer")
    assert not any(q == "Which customers live in USA?" for r, q, *_ in CASES if r == "support")


@pytest.mark.parametrize(("role", "question", "tables", "no_execute"), CASES,
                         ids=[f"{r}-{'plan' if n else 'run'}-{q[:40]}" for r, q, _, n in CASES])
def test_a_denied_verified_question_gets_only_the_generic_refusal(indexed_demo: Config, cli_env: dict[str, str],
                                                                  role: str, question: str, tables: str,
                                                                  no_execute: bool) -> None:
    code, out, err = ask(indexed_demo, cli_env, question, role, no_execute=no_execute)
    assert code == 1, (out, err)
    result = json.loads(out)
    assert result["status"] == "error" and result["answer"]["content"] == GENERIC_REFUSAL
    assert [(e["code"], e["message"]) for e in result["errors"]] == [("SECURITY_VIOLATION", GENERIC_REFUSAL)]
    assert result["sub_queries"] == [] and result["llm_calls"] == 0
    shown = (out + err).replace(question, "")  # the question may use a table's word ("tickets", "sessions")
    assert "select" not in shown.lower(), shown
    for table in tables.split(","):
        assert not re.search(rf"\b{re.escape(table)}\b", shown, re.IGNORECASE), (table, shown)


def _comparable(out: str) -> dict[str, Any]:
    data = json.loads(out)
    for key in ("trace_id", "duration_ms", "question"):
        data.pop(key)
    return data


def test_brazil_and_narnia_look_the_same_to_a_viewer(indexed_demo: Config, cli_env: dict[str, str]) -> None:
    runs = [ask(indexed_demo, cli_env, f"Which customers live in {country}?", "viewer", no_execute=True)
            for country in ("Brazil", "Narnia")]
    assert [code for code, _, _ in runs] == [1, 1]
    brazil, narnia = (_comparable(out) for _, out, _ in runs)
    assert brazil == narnia
    assert brazil["answer"]["content"] == GENERIC_REFUSAL and brazil["sub_queries"] == []
