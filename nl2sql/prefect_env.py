"""Process settings that must be in place before Prefect is imported: its home, and no telemetry."""

from __future__ import annotations

import os
from pathlib import Path

from nl2sql.private_files import private_file, private_folder


def prepare_prefect_env(state_dir: Path) -> None:
    """Keep Prefect's home inside the project's state folder and stop it reaching out (unless the user set them).
    That home and its SQLite database are its owner's alone (0700, 0600): the database keeps runs' parameters and
    the answers given to paused runs, deleted rows included, until SQLite reuses their pages."""
    if "PREFECT_HOME" not in os.environ:
        private_folder(state_dir)
        home = private_folder(state_dir / "prefect")
        if "PREFECT_SERVER_DATABASE_CONNECTION_URL" not in os.environ:  # the default: $PREFECT_HOME/prefect.db
            private_file(home / "prefect.db")
        os.environ["PREFECT_HOME"] = str(home)
    # The first start of Prefect's embedded server migrates a fresh database: on a busy 2-core machine that
    # takes longer than Prefect's default wait of 20 s.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
