"""Building the demo's index once for a test session."""

from __future__ import annotations

from pathlib import Path

from nl2sql.config import Config
from nl2sql.datasources import DatasourceCatalog
from nl2sql.index import StateStore, build_datasource
from nl2sql.index.embed import shared_embedder
from nl2sql.verified.match import index_entries_of


def build_demo_index(config: Config, state_dir: Path) -> StateStore:
    """Build every demo datasource into a store at `state_dir` (no Prefect: the domain functions)."""
    store = StateStore(state_dir)
    with DatasourceCatalog(config) as catalog:
        for ds in config.datasources:
            build_datasource(catalog.get(ds.id), store, shared_embedder(), profile=config.settings.profile,
                             sample_questions=ds.sample_questions, verified=index_entries_of(ds),
                             description=ds.description)
    return store
