"""Process settings that must be in place before Prefect is imported: its home, and no telemetry."""

from __future__ import annotations

import os
from pathlib import Path


def prepare_prefect_env(state_dir: Path) -> None:
    """Keep Prefect's home inside the project's state folder and stop it reaching out (unless the user set them)."""
    if "PREFECT_HOME" not in os.environ:
        home = state_dir / "prefect"
        home.mkdir(parents=True, exist_ok=True)
        os.environ["PREFECT_HOME"] = str(home)
    # The first start of Prefect's embedded server migrates a fresh database: on a busy 2-core machine that
    # takes longer than Prefect's default wait of 20 s.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
