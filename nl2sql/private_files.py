"""Folders and files only their owner may read or write (0700, 0600): the state folder and what it holds —
`state.db` (profiled sample values, approvals, traces), the desk's token, audit logs, and Prefect's home with its
database (runs' parameters and inputs). Each is made so when it is created, and an existing one is tightened
when it is opened, so a project written by an older version is fixed on its next use.

>>> import tempfile
>>> from pathlib import Path
>>> folder = private_folder(Path(tempfile.mkdtemp()) / "state")
>>> oct(folder.stat().st_mode & 0o777), oct(private_file(folder / "state.db").stat().st_mode & 0o777)
('0o700', '0o600')
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("nl2sql.private_files")
#: The question desk's address and token in the state folder: written by the desk (`nl2sql serve`'s, or a
#: background one), read by `nl2sql ask`.
DESK_FILE = "serve-desk.json"

FOLDER_MODE = 0o700
FILE_MODE = 0o600
#: The files SQLite keeps beside a database (they hold recent writes, deleted rows included).
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def _tighten(path: Path, mode: int) -> None:
    """Take group and other permissions off `path` (when it has any and this user owns it)."""
    try:
        found = path.stat()
        if found.st_mode & 0o077 and found.st_uid == os.getuid():
            os.chmod(path, mode)
    except OSError as exc:  # not ours, or a read-only mount: leave it as it is
        log.debug("could not make %s private: %s", path, exc)


def private_folder(path: Path) -> Path:
    """`path` as a folder only its owner may enter (created, with its missing parents, when absent)."""
    path.mkdir(parents=True, exist_ok=True, mode=FOLDER_MODE)
    _tighten(path, FOLDER_MODE)
    return path


def private_file(path: Path) -> Path:
    """`path` as a file only its owner may read: created empty when absent — so the SQLite database opened on it
    is created with that mode, and SQLite gives its -wal and -shm files the database's mode — and tightened,
    with its SQLite companion files, when present."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    for each in (path, *(path.with_name(path.name + suffix) for suffix in SQLITE_COMPANIONS)):
        if each.exists():
            _tighten(each, FILE_MODE)
    return path


def read_desk_file(state_dir: Path) -> dict[str, Any] | None:
    """The question desk file's content while its process lives; None with no file, an unreadable one, or its
    process gone."""
    try:
        found = json.loads((state_dir / DESK_FILE).read_text())
        os.kill(int(found["pid"]), 0)
        return found
    except (OSError, ValueError, KeyError, TypeError):
        return None
