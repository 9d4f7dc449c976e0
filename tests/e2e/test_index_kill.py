"""Killing a build mid-embedding (SIGKILL) leaves the previous build live, and the next build succeeds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nl2sql.config.models import ProfileSettings
from nl2sql.datasources import adapter_class
from nl2sql.index import StateStore, build_datasource
from nl2sql.index.embed import shared_embedder
from nl2sql.index.retrieve import Retriever

#: A build whose embedder announces its first batch, then stalls until it is killed.
STALLING_BUILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from nl2sql.config.models import ProfileSettings
    from nl2sql.datasources import adapter_class
    from nl2sql.index import StateStore, build_datasource
    from nl2sql.index.embed import Embedder

    class Stalling(Embedder):
        model_id = "stalling-test-model"  # its own cache space: every entry must be embedded

        def embed(self, texts):
            vectors = super().embed(texts)
            print("EMBEDDING", flush=True)
            time.sleep(120)
            return vectors

    adapter = adapter_class("sqlite")("support", f"sqlite:///{sys.argv[1]}")
    build_datasource(adapter, StateStore(Path(sys.argv[2])), Stalling(), profile=ProfileSettings(), full=True)
""")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_sigkill_mid_embedding_keeps_the_previous_build(demo_dir: Path, tmp_path: Path) -> None:
    database = demo_dir / "data" / "support.sqlite"
    state = tmp_path / "state"
    store = StateStore(state)
    adapter = adapter_class("sqlite")("support", f"sqlite:///{database}")
    first = build_datasource(adapter, store, shared_embedder(), profile=ProfileSettings())

    child = subprocess.Popen([sys.executable, "-c", STALLING_BUILD, str(database), str(state)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line.strip() == "EMBEDDING", child.stderr.read()
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    assert store.live_build("support").build_id == first.build_id
    killed = [b for b in store.builds("support") if b.status == "building"]
    assert len(killed) == 1
    schema = Retriever(store, shared_embedder()).schema_for("urgent open tickets", "support", lambda t: True)
    assert "tickets" in schema.table_names()  # the previous build still serves

    after = build_datasource(adapter, store, shared_embedder(), profile=ProfileSettings())
    adapter.close()
    assert after.replaced == first.build_id
    statuses = {b.build_id: b.status for b in store.builds("support")}
    assert statuses[killed[0].build_id] == "abandoned"
    assert store.live_build("support").build_id == after.build_id
