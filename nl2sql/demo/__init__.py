"""The demo project: the vendored Chinook database and two generated ones (support, webanalytics)."""

from __future__ import annotations

import shutil
import sqlite3
from importlib.resources import files
from pathlib import Path
from urllib.parse import quote

from nl2sql.errors import NL2SQLError

DEMO_DIR = Path(str(files("nl2sql.demo")))
CHINOOK = DEMO_DIR / "chinook.sqlite"
CHINOOK_SHA256 = "479757c1ef8408fe23a4e1a478fc3ecc1929c21a98bc1fe66d758ffd8ea85120"
CONFIG_TEMPLATE = DEMO_DIR / "nl2sql.yaml"


def chinook_customers(path: Path = CHINOOK) -> list[tuple[int, str]]:
    """Chinook's customers as (CustomerId, Country), the ids the generated databases refer to."""
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    try:
        return [(int(i), str(c)) for i, c in conn.execute("SELECT CustomerId, Country FROM Customer ORDER BY 1")]
    finally:
        conn.close()


def init_demo(target: Path, *, force: bool = False) -> Path:
    """Write the demo project into `target`: nl2sql.yaml and data/ with three databases. Returns the config path."""
    from nl2sql.demo.support import write_support
    from nl2sql.demo.webanalytics import write_webanalytics

    config = target / "nl2sql.yaml"
    if config.exists() and not force:
        raise NL2SQLError(
            f"{config} already exists.", fix="Pass --force to overwrite the demo project, or choose another folder."
        )
    data = target / "data"
    data.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CHINOOK, data / "chinook.sqlite")
    customers = chinook_customers()
    write_support(data / "support.sqlite", customers)
    write_webanalytics(data / "webanalytics.duckdb", customers)
    shutil.copyfile(CONFIG_TEMPLATE, config)
    return config
