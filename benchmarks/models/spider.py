"""Spider 1.0 dev as a project and a suite, for `run.py --spider N`: a development set nobody here wrote.

- the project: the 19 dev databases (benchmarks/data/spider_dev, CC BY-SA 4.0), one SQLite datasource each, named
  by Spider's db_id, with no description, sample question or verified query written for them, and one role
  (admin) that reads everything;
- the suite: a seeded sample of N dev questions across all 19 databases, each with Spider's gold SQL and its rows
  on that database (column names stand in as col1, col2, … since Spider's gold may repeat a name), order kept
  only where the gold statement orders its rows: strict execution match as Spider scores it.

A dev set, never a test set: tune on it, report its figures as dev figures.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import sqlglot
import yaml

SPIDER = Path(__file__).resolve().parents[1] / "data" / "spider_dev"


def spider_questions() -> list[dict[str, Any]]:
    """Spider dev's questions over the vendored databases: id, db_id, question and gold query."""
    return json.loads((SPIDER / "dev_gold.json").read_text())


def databases() -> list[str]:
    """The db_ids of the vendored databases, sorted."""
    return sorted(p.name for p in (SPIDER / "database").iterdir() if p.is_dir())


def spider_project(target: Path) -> Path:
    """A project of the 19 databases (copied: an index build writes nothing beside them, but a copy keeps the
    vendored files out of reach); returns its nl2sql.yaml."""
    data = target / "data"
    data.mkdir(parents=True, exist_ok=True)
    for db in databases():
        shutil.copyfile(SPIDER / "database" / db / f"{db}.sqlite", data / f"{db}.sqlite")
    config = {"version": 1,
              "datasources": [{"id": db.lower(), "url": f"sqlite:///data/{db}.sqlite"} for db in databases()],
              "policies": {"default_role": "admin", "admin_roles": ["admin"],
                           "roles": {"admin": {"description": "Reads every database."}}},
              "storage": {"state_dir": ".nl2sql"}}
    path = target / "nl2sql.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def sample(size: int, seed: int) -> list[dict[str, Any]]:
    """`size` dev questions drawn with `seed`, in Spider's order (the same draw for the same size and seed)."""
    questions = spider_questions()
    drawn = random.Random(seed).sample(range(len(questions)), min(size, len(questions)))
    return [questions[i] for i in sorted(drawn)]


def _orders(sql: str) -> bool:
    """Whether the gold statement orders its rows at the top level."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.ParseError:  # read as a set: a statement sqlglot cannot read is compared unordered
        return False
    return tree.args.get("order") is not None


def spider_suite(target: Path, size: int, seed: int) -> Path:
    """The suite of the sample, gold rows read from the databases; returns its path."""
    cases = []
    for q in sample(size, seed):
        with sqlite3.connect(f"file:{SPIDER / 'database' / q['db_id'] / (q['db_id'] + '.sqlite')}?mode=ro",
                             uri=True) as conn:
            rows = conn.execute(q["query"]).fetchall()
        cases.append({"id": f"spider_{q['id']:04d}", "question": q["question"], "datasources": [q["db_id"].lower()],
                      "tags": ["spider", q["db_id"].lower()], "outcome": {"admin": "allowed"},
                      "order_matters": _orders(q["query"]), "sql": q["query"],
                      "rows": [{f"col{i + 1}": v for i, v in enumerate(r)} for r in rows]})
    suite = {"version": 1, "description": f"Spider 1.0 dev (CC BY-SA 4.0): {len(cases)} questions drawn with seed "
             f"{seed}; a dev set.", "cases": cases}
    target.write_text(yaml.safe_dump(suite, sort_keys=False, allow_unicode=True))
    return target
