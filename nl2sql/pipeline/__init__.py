"""A question's pipeline: the steps declared once, the run scope, and the inline executor.

The names below are imported on first use (PEP 562), so that reading a result (`nl2sql.pipeline.result`) does not
load the steps, the runtime and their dependencies: `nl2sql ask` handing a question to `nl2sql serve` reads one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nl2sql.pipeline.declaration import ASK, Pipeline, Step
    from nl2sql.pipeline.inline import ask_inline
    from nl2sql.pipeline.result import QueryResult, RunError, RunWarning, SubQueryResult
    from nl2sql.pipeline.runtime import Runtime
    from nl2sql.pipeline.trace import RunTrace

_WHERE = {"ASK": "declaration", "Pipeline": "declaration", "Step": "declaration", "ask_inline": "inline",
          "QueryResult": "result", "RunError": "result", "RunWarning": "result", "SubQueryResult": "result",
          "Runtime": "runtime", "RunTrace": "trace"}

__all__ = ["ASK", "Pipeline", "QueryResult", "RunError", "RunTrace", "RunWarning", "Runtime", "Step",
           "SubQueryResult", "ask_inline"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"nl2sql.pipeline.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'nl2sql.pipeline' has no attribute {name!r}")
