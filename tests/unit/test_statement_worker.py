"""Callers' statements on SQLite and DuckDB run in worker processes: memory bounded by RLIMIT_DATA, time bounded by a
kill at the timeout + INTERRUPT_GRACE_S, and a child that is gone is replaced."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import duckdb
import pytest

from nl2sql.adapters import adapter_class
from nl2sql.config.models import ResourceSettings
from nl2sql.datasources.worker import INTERRUPT_GRACE_S
from nl2sql.errors import ConfigError, DatasourceError, QueryTimeout


@pytest.fixture
def duck(tmp_path: Path):
    path = tmp_path / "w.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS n FROM range(1000)")
    adapter = adapter_class("duckdb")("w", f"duckdb:///{path}")
    yield adapter
    adapter.close()


def test_a_statement_past_the_process_memory_fails_and_the_next_one_runs(duck) -> None:
    with pytest.raises(DatasourceError, match="more memory than it may use") as caught:
        duck.execute("SELECT length(repeat('x', 2000000000))")
    assert "statement_process_memory" in caught.value.fix
    assert duck.execute("SELECT count(*) AS n FROM t").frame.iloc[0, 0] == 1000


def test_a_statement_that_ignores_the_interrupt_is_killed_soon_after_its_timeout(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "s.sqlite"
    sqlite3.connect(path).close()
    adapter = adapter_class("sqlite")("s", f"sqlite:///{path}")
    # a sort of 1000 rows of 15 MB spends minutes writing its temp files between two calls of the progress handler
    wide = ("WITH RECURSIVE r(n, s) AS (SELECT 1, zeroblob(15000000) UNION ALL SELECT n + 1, s FROM r WHERE n < 1000) "
            "SELECT count(*) FROM (SELECT s FROM r ORDER BY n DESC)")
    try:
        adapter.execute("SELECT 1")  # the child is up: its start is not the statement's time
        started = time.monotonic()
        with pytest.raises(QueryTimeout):
            adapter.execute(wide, timeout_s=1)
        assert time.monotonic() - started < 1 + INTERRUPT_GRACE_S + 2
        assert adapter.execute("SELECT 41 + 1 AS n").frame.iloc[0, 0] == 42  # a new child
    finally:
        adapter.close()


def test_a_child_that_died_is_replaced(duck) -> None:
    duck.execute("SELECT 1")
    (worker,) = duck._workers._idle
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.wait()
    assert duck.execute("SELECT 2 AS n").frame.iloc[0, 0] == 2


def test_statements_from_many_threads_share_the_pool(duck) -> None:
    results: list[int] = []

    def ask(k: int) -> None:
        results.append(int(duck.execute(f"SELECT {k} + sum(n) - sum(n) AS k FROM t").frame.iloc[0, 0]))

    threads = [threading.Thread(target=ask, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(results) == list(range(6))
    assert duck._workers._started <= ResourceSettings().statement_processes


def test_closing_the_adapter_stops_its_children(duck) -> None:
    duck.execute("SELECT 1")
    (worker,) = duck._workers._idle
    duck.close()
    assert worker.process.poll() is not None


def test_the_process_memory_must_hold_duckdbs_own_limit(tmp_path: Path) -> None:
    from nl2sql.config.load import load_config

    path = tmp_path / "nl2sql.yaml"
    path.write_text("version: 1\ndatasources: []\nsettings:\n  resources:\n    duckdb_memory_limit: 1GB\n"
                    "    statement_process_memory: 1GB\n")
    with pytest.raises(ConfigError, match="statement_process_memory"):
        load_config(path)
