"""An index build over many datasources on a Dask cluster (prefect-dask), from the installed `nl2sql`, against a
PostgreSQL-backed Prefect server: every datasource built; without a server the command says what to start."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_exit_codes import assert_exit, nl2sql

pytestmark = [pytest.mark.slow, pytest.mark.prefect, pytest.mark.postgres]

DATASOURCES = 20


def many_shops(folder: Path) -> Path:
    """A project of `DATASOURCES` small SQLite shops (customers and their orders)."""
    datasources = []
    for i in range(DATASOURCES):
        path = folder / f"shop_{i:02d}.sqlite"
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, region TEXT)")
            conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers (id), "
                         "amount REAL, status TEXT)")
            conn.executemany("INSERT INTO customers VALUES (?, ?, ?)",
                             [(j, f"customer {j}", ("north", "south")[j % 2]) for j in range(40)])
            conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)",
                             [(j, j % 40, round(j * 1.5, 2), ("open", "paid")[j % 2]) for j in range(120)])
        datasources.append({"id": f"shop_{i:02d}", "url": f"sqlite:///{path.name}",
                            "description": f"Shop {i}: its customers and their orders."})
    config = folder / "nl2sql.yaml"
    config.write_text(yaml.safe_dump({"version": 1, "datasources": datasources, "policies": {
        "default_role": "admin", "admin_roles": ["admin"], "roles": {"admin": {}}}}, sort_keys=False))
    return config


def test_twenty_datasources_build_on_a_dask_cluster(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    from nl2sql.index.store import StateStore
    from nl2sql.project import load_project
    from tests.support.postgres import server_available
    from tests.support.prefect_server import steady_prefect_server

    if (reason := server_available()) is not None:
        pytest.skip(reason)
    config = many_shops(tmp_path)
    without_server = nl2sql("-c", str(config), "index", "build", "--dask-workers", "2",
                            env={"PREFECT_API_URL": "", "PREFECT_HOME": str(tmp_path / "home")})
    assert_exit(without_server, 2)
    assert "PREFECT_API_URL" in without_server.stderr
    with steady_prefect_server(tmp_path_factory.mktemp("prefect-server")) as (_, env):
        built = nl2sql("-c", str(config), "index", "build", "--dask-workers", "2", env=env, timeout=900)
        assert_exit(built, 0)
    store = StateStore(load_project(config).state_dir)
    assert all(store.live_build(f"shop_{i:02d}") is not None for i in range(DATASOURCES))
