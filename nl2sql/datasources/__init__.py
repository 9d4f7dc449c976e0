"""Datasource adapters over SQLAlchemy: reflect, profile, and execute one guarded statement read-only."""

from nl2sql.adapters import adapter_class, adapter_names, register_adapter
from nl2sql.datasources.base import Adapter
from nl2sql.datasources.checked import check_sql_scope, run_checked_sql
from nl2sql.datasources.connect import DatasourceCatalog, datasource_url, open_adapter
from nl2sql.datasources.guard import TableRead, guard_sql, tables_read
from nl2sql.datasources.models import (
    ColumnInfo,
    ColumnMeta,
    ColumnProfile,
    ExecutionResult,
    ForeignKey,
    SchemaSnapshot,
    TableInfo,
)

__all__ = [
    "Adapter",
    "ColumnInfo",
    "ColumnMeta",
    "ColumnProfile",
    "DatasourceCatalog",
    "ExecutionResult",
    "ForeignKey",
    "SchemaSnapshot",
    "TableInfo",
    "TableRead",
    "adapter_class",
    "adapter_names",
    "check_sql_scope",
    "datasource_url",
    "guard_sql",
    "open_adapter",
    "register_adapter",
    "run_checked_sql",
    "tables_read",
]
