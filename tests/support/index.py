"""Building the demo's index once for a test session."""

from __future__ import annotations

from pathlib import Path

from nl2sql.config import Config
from nl2sql.index import StateStore
from nl2sql.index.service import build_configured


def build_demo_index(config: Config, state_dir: Path) -> StateStore:
    """Build every demo datasource into a store at `state_dir` (no Prefect: the domain functions)."""
    store = StateStore(state_dir)
    build_configured(config, store)
    return store
