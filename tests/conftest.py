"""Fixtures shared by every test: the demo project (built once per session) and PostgreSQL; the fake model
server and the demo project wired to it (per module) from tests/support/fixtures.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nl2sql.config import Config
from nl2sql.demo import CHINOOK, init_demo
from nl2sql.prefect_env import prepare_prefect_env
from nl2sql.project import load_project

# Before anything imports Prefect: its home inside the repository's (ignored) state folder, no telemetry.
prepare_prefect_env(Path(__file__).resolve().parent.parent / ".nl2sql" / "tests")
# The embedder's rewritten graphs: kept in the same ignored folder, not the user's cache (subprocesses inherit it).
os.environ["NL2SQL_CACHE_DIR"] = str(Path(__file__).resolve().parent.parent / ".nl2sql" / "cache")

# `nl2sql ask` in a subprocess asks in its own process: no background question desk outlives a test (the desk's own
# tests turn it on for their commands).
os.environ["NL2SQL_BACKGROUND_DESK"] = "0"

pytest_plugins = ["tests.support.fixtures"]


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A demo project written once per test session (treat it as read-only)."""
    target = tmp_path_factory.mktemp("demo")
    init_demo(target, env={})  # no model from the environment: tests are key-free
    return target


@pytest.fixture(scope="session")
def demo_config(demo_dir: Path) -> Config:
    """The demo project's configuration."""
    return load_project(demo_dir / "nl2sql.yaml")


@pytest.fixture(scope="session")
def demo_index(demo_config: Config, tmp_path_factory: pytest.TempPathFactory):
    """The demo's index, built once per session into its own state folder (an IndexService over it)."""
    from nl2sql.index.service import IndexService
    from tests.support.index import build_demo_index

    store = build_demo_index(demo_config, tmp_path_factory.mktemp("state"))
    return IndexService(demo_config, store=store)


@pytest.fixture(scope="session")
def chinook_path() -> Path:
    """The vendored Chinook database (read it, never write it)."""
    return CHINOOK


@pytest.fixture(scope="session")
def duckdb_chinook_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Chinook copied into a DuckDB file once per session (datetimes as TIMESTAMP)."""
    from tests.support.chinook_copies import copy_sqlite_to_duckdb

    target = tmp_path_factory.mktemp("duckdb") / "chinook.duckdb"
    copy_sqlite_to_duckdb(CHINOOK, target)
    return target


@pytest.fixture(scope="session")
def postgres_chinook_url() -> Iterator[str]:
    """A scratch PostgreSQL database holding a copy of Chinook (skips, saying why, without a server)."""
    from tests.support.postgres import copy_sqlite_database, scratch_database, server_available

    reason = server_available()
    if reason:
        pytest.skip(reason)
    with scratch_database("nl2sql_chinook") as db:
        copy_sqlite_database(CHINOOK, db.admin_url)
        db.grant_read()
        yield db.reader_url
