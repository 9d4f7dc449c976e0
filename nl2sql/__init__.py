"""nl2sql: a natural-language-to-SQL engine for data teams, built as Prefect flows.

The library's one entry point is `Engine` (`nl2sql/engine.py`), imported on first use so that `import nl2sql`
stays light (the CLI's start-up pays for nothing it does not run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nl2sql.engine import AnswerStream, Engine

__all__ = ["AnswerStream", "Engine"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from nl2sql import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'nl2sql' has no attribute {name!r}")
