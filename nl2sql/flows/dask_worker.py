"""The preload of each Dask worker process an index build starts (`nl2sql index build --dask-workers N`).

When the build ends, the cluster closes its scheduler while a worker's heartbeat may be in flight; distributed then
logs that heartbeat's connection error with a full traceback, though nothing failed (dask/distributed#7192). The
filter installed here drops that one record. Any other failure still reaches the build: a task that fails, or a
worker lost mid-build, fails the datasource's future, which the flow reports.
"""

from __future__ import annotations

import logging
from typing import Any

HEARTBEAT_FAILED = "Failed to communicate with scheduler during heartbeat."


class ClosingHeartbeatFilter(logging.Filter):
    """Drops the worker's record of a heartbeat that met a closed connection."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (record.getMessage() == HEARTBEAT_FAILED and isinstance(exc, OSError))


def dask_setup(worker: Any) -> None:
    """Install the filter on the worker's logger (distributed calls this in each worker process it starts)."""
    logger = logging.getLogger("distributed.worker")
    if not any(isinstance(f, ClosingHeartbeatFilter) for f in logger.filters):
        logger.addFilter(ClosingHeartbeatFilter())
