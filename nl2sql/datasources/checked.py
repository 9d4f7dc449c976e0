"""Running caller-supplied SQL: the guard, then the caller's scope, then the read-only adapter."""

from __future__ import annotations

from nl2sql.datasources.base import Adapter
from nl2sql.datasources.guard import guard_sql, tables_read
from nl2sql.datasources.models import ExecutionResult
from nl2sql.errors import SecurityViolation
from nl2sql.policies import Scope


def check_sql_scope(sql: str, dialect: str, scope: Scope) -> None:
    """Raise SQLRejected for anything but one read-only SELECT, SecurityViolation for a table out of scope."""
    tree = guard_sql(sql, dialect)
    if not scope.reachable:
        raise SecurityViolation(datasource=scope.datasource)
    for read in tables_read(tree):
        if not scope.allows(read.name, read.schema):
            raise SecurityViolation(datasource=scope.datasource)


def run_checked_sql(
    adapter: Adapter, sql: str, scope: Scope, *, row_limit: int = 1000, timeout_s: float = 30.0
) -> ExecutionResult:
    """Guard, scope-check and run one statement; refusals carry the generic sentence and no rows."""
    check_sql_scope(sql, adapter.name, scope)
    return adapter._run(sql, row_limit=row_limit, timeout_s=timeout_s, scope=scope)
