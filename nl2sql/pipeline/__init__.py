"""A question's pipeline: the steps declared once, the run scope, and the inline executor."""

from nl2sql.pipeline.declaration import ASK, Pipeline, Step
from nl2sql.pipeline.inline import ask_inline
from nl2sql.pipeline.result import QueryResult, RunError, RunWarning, SubQueryResult
from nl2sql.pipeline.runtime import Runtime
from nl2sql.pipeline.trace import RunTrace

__all__ = ["ASK", "Pipeline", "QueryResult", "RunError", "RunTrace", "RunWarning", "Runtime", "Step",
           "SubQueryResult", "ask_inline"]
