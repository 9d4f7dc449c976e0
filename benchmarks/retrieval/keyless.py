"""Retrieval on keyless copies of the demo databases: how much column recall the inferred keys keep.

Copies the demo's chinook (SQLite) and support (SQLite) with every PRIMARY KEY and REFERENCES stripped (the
same tables, types and rows), builds the keyed demo and the keyless copies (with and without inferred keys),
and runs retrieval on `suites/chinook.yaml` with pruning on (`whole_schema_columns: 0`, as a wide database
would be sent). Prints table and column recall and columns sent, and the keys the build inferred
against those the originals declare; writes keyless.json beside this file.

    .venv/bin/python benchmarks/retrieval/keyless.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BIN = Path(sys.executable).parent


def strip_keys(source: Path, target: Path) -> None:
    """A copy of a SQLite database with no PRIMARY KEY and no REFERENCES: same tables, types and rows."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        for name, sql in src.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' "
                                     "AND name NOT LIKE 'sqlite_%'").fetchall():
            sql = re.sub(r",\s*(?:CONSTRAINT\s+\S+\s+)?FOREIGN KEY\s*\([^)]*\)\s*REFERENCES\s+\S+\s*\([^)]*\)"
                         r"(?:\s+ON\s+(?:DELETE|UPDATE)\s+(?:NO ACTION|CASCADE|SET NULL|RESTRICT))*", "", sql,
                         flags=re.IGNORECASE)
            sql = re.sub(r"\s+REFERENCES\s+\"?\w+\"?\s*\([^)]*\)", "", sql, flags=re.IGNORECASE)
            sql = re.sub(r",\s*(?:CONSTRAINT\s+\S+\s+)?PRIMARY KEY\s*\([^)]*\)", "", sql, flags=re.IGNORECASE)
            sql = re.sub(r"\s+PRIMARY KEY(?:\s+AUTOINCREMENT)?", "", sql, flags=re.IGNORECASE)
            dst.execute(sql)
            rows = src.execute(f'SELECT * FROM "{name}"').fetchall()
            if rows:
                dst.executemany(f'INSERT INTO "{name}" VALUES ({",".join("?" * len(rows[0]))})', rows)
        dst.commit()
    finally:
        src.close()
        dst.close()


def _cli(*args: str) -> None:
    subprocess.run([str(BIN / "nl2sql"), *args], check=True, capture_output=True, text=True)


def _project(target: Path, keyless: bool, infer: bool = True) -> Path:
    """A demo project (pruning on), its SQLite databases keyless when asked, keys inferred or not; built."""
    _cli("init", "--demo", str(target), "--force")
    if keyless:
        for name in ("chinook.sqlite", "support.sqlite"):
            path = target / "data" / name
            if path.exists():
                original = path.with_suffix(".keyed")
                path.rename(original)
                strip_keys(original, path)
                original.unlink()
    config = target / "nl2sql.yaml"
    config.write_text(_with_pruning(config.read_text(), infer))
    _cli("-c", str(config), "index", "build")
    return config


def _with_pruning(text: str, infer: bool) -> str:
    """The config with `settings.retrieval.whole_schema_columns: 0` (each question's columns chosen) and
    `settings.profile.infer_keys` as asked."""
    import yaml

    raw = yaml.safe_load(text)
    settings = raw.setdefault("settings", {})
    settings.setdefault("retrieval", {})["whole_schema_columns"] = 0
    settings.setdefault("profile", {})["infer_keys"] = infer
    return yaml.safe_dump(raw, sort_keys=False)


def _recall(config: Path, out: Path) -> dict[str, float]:
    _cli("-c", str(config), "eval", "run", "--mode", "retrieval", "--suite", str(ROOT / "suites" / "chinook.yaml"),
         "--out", str(out))
    report = json.loads(out.read_text())
    figures = report["metrics"]
    return {k: figures.get(k) for k in ("table_recall", "column_recall", "columns_sent")}


def _keys(config: Path) -> dict[str, list[str]]:
    """The declared and inferred references of the built chinook, as `Table.column → Table.column` lines."""
    from nl2sql.index.store import StateStore
    from nl2sql.project import load_project

    project = load_project(config)
    store = StateStore(project.state_dir)
    live = store.live_build("chinook")
    assert live is not None and live.fingerprint
    snapshot = store.snapshot("chinook", live.fingerprint)
    assert snapshot is not None
    declared = [f"{t.name}.{fk.columns[0]} → {fk.ref_table}.{fk.ref_columns[0]}" for t in snapshot.tables
                for fk in t.foreign_keys]
    inferred = snapshot.inferred_keys
    found = [f"{t}.{fk.columns[0]} → {fk.ref_table}.{fk.ref_columns[0]}"
             for t, fks in (inferred.foreign_keys.items() if inferred else []) for fk in fks]
    keys = [f"{t}.{k[0]}" for t, k in (inferred.primary_keys.items() if inferred else [])]
    return {"declared": sorted(declared), "inferred": sorted(found), "inferred_primary_keys": sorted(keys)}


def main() -> None:
    """Build both, measure both, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE / "keyless.json"))
    args = parser.parse_args()
    figures: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="nl2sql-keyless-") as tmp:
        for label, keyless, infer in (("keyed", False, True), ("keyless, not inferred", True, False),
                                      ("keyless", True, True)):
            config = _project(Path(tmp) / label.replace(", ", "-").replace(" ", "-"), keyless, infer)
            figures[label] = {**_recall(config, Path(tmp) / f"{label}.json"), "keys": _keys(config)}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    keyed, keyless = figures["keyed"], figures["keyless"]
    bare = figures["keyless, not inferred"]
    record = {"commit": commit, "suite": "suites/chinook.yaml", "whole_schema_columns": 0, **figures,
              "column_recall_gap_points": round(100 * (keyed["column_recall"] - keyless["column_recall"]), 2),
              "column_recall_gap_points_not_inferred": round(100 * (keyed["column_recall"] - bare["column_recall"]),
                                                             2)}
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(f"{'':22} {'tables':>8} {'columns':>8} {'sent':>6}")
    for label, f in figures.items():
        print(f"{label:22} {f['table_recall']:8.4f} {f['column_recall']:8.4f} {f['columns_sent']:6.2f}")
    print(f"column recall gap to the keyed demo: {record['column_recall_gap_points']} points with inferred keys, "
          f"{record['column_recall_gap_points_not_inferred']} without")
    print(f"declared references {len(keyed['keys']['declared'])}, inferred on the keyless copy "
          f"{len(keyless['keys']['inferred'])}: {', '.join(keyless['keys']['inferred'])}")
    missed = sorted(set(keyed["keys"]["declared"]) - set(keyless["keys"]["inferred"]))
    print(f"not inferred: {', '.join(missed) or 'none'}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
