"""The storage-purge flow with a fixed clock: old traces, builds beyond keep_builds and old audit files go;
`retention.purged` carries the counts."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import yaml

from nl2sql.events import Event

pytestmark = pytest.mark.prefect


def test_the_purge_deletes_by_age_and_count_and_says_how_much(prefect_server: None, demo_dir: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from nl2sql.flows import purge as purge_module
    from nl2sql.flows.index import index_build
    from nl2sql.index.store import StateStore
    from nl2sql.project import load_project

    target = tmp_path / "project"
    shutil.copytree(demo_dir, target, ignore=shutil.ignore_patterns(".nl2sql"))
    config = target / "nl2sql.yaml"
    index_build(datasource_ids=["support"], config=str(config))
    index_build(datasource_ids=["support"], config=str(config), full=True)
    raw = yaml.safe_load(config.read_text())
    raw.setdefault("storage", {}).update(keep_builds=1, max_age_days=7, audit_max_age_days=7)
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    cfg = load_project(config)
    store = StateStore(cfg.state_dir)
    store.save_trace("a-run", "How many tickets?", "success", {})
    audit = cfg.state_dir / "audit"
    audit.mkdir(parents=True, exist_ok=True)
    (audit / "2020-01-01.jsonl").write_text("{}\n")
    seen: list[Event] = []
    monkeypatch.setattr(purge_module, "forward_to_prefect", seen.append)

    today = purge_module.storage_purge(config=str(config))
    assert today["traces"] == 0 and today["index_builds"] == 1 and today["audit_files"] == 1
    assert len([b for b in store.builds("support") if b.status == "committed"]) == 1

    later = purge_module.storage_purge(config=str(config), now=time.time() + 8 * purge_module.DAY_S)
    assert later["traces"] == 1 and later["build_records"] == 1  # the pruned build's record, a week on
    assert store.live_build("support") is not None
    purged = [e for e in seen if e.name == "retention.purged"]
    assert [e.data["counts"] for e in purged] == [today, later]
