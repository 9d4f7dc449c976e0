"""What an adapter returns: a schema snapshot, column profiles, and a statement's rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pandas as pd
from pydantic import BaseModel, Field


class ColumnInfo(BaseModel):
    """One column as reflected."""

    name: str
    type: str = Field(description="The database's type name, e.g. 'INTEGER', 'NVARCHAR(40)', 'DECIMAL(10,2)'.")
    nullable: bool = True
    primary_key: bool = False
    comment: str | None = None


class ForeignKey(BaseModel):
    """A declared foreign key from some columns of a table to another table's columns."""

    columns: list[str]
    ref_table: str
    ref_columns: list[str]
    ref_schema: str | None = None
    confidence: float | None = Field(
        default=None, description="None for a key the database declares; for one inferred from names and data "
        "(nl2sql.schema.inferred_keys), the share of the column's sampled values found in the key.")


class InferredKeys(BaseModel):
    """Keys a database does not declare, inferred at build time, by qualified table name."""

    primary_keys: dict[str, list[str]] = Field(default_factory=dict)
    foreign_keys: dict[str, list[ForeignKey]] = Field(default_factory=dict)


class TableInfo(BaseModel):
    """One table (or view) as reflected."""

    name: str
    schema_name: str | None = None
    kind: Literal["table", "view"] = "table"
    columns: list[ColumnInfo]
    primary_key: list[str] = Field(default_factory=list)
    foreign_keys: list[ForeignKey] = Field(default_factory=list)
    row_count: int | None = None
    row_count_estimated: bool = False
    comment: str | None = None
    catalog_hash: str | None = Field(
        default=None, description="A hash of the table's definition in the catalog, where the adapter reads one: "
        "a rebuild reflects again only the tables whose hash changed.")

    def column(self, name: str) -> ColumnInfo | None:
        """The column with this name (exact match first, then case-insensitive)."""
        for col in self.columns:
            if col.name == name:
                return col
        lowered = name.lower()
        return next((c for c in self.columns if c.name.lower() == lowered), None)


class SchemaSnapshot(BaseModel):
    """Everything reflected from one datasource at one moment."""

    datasource_id: str
    dialect: str
    default_schema: str | None = None
    tables: list[TableInfo]
    inferred_keys: InferredKeys | None = Field(
        default=None, description="Keys inferred where the database declares none (kept apart from the declared "
        "ones: the fingerprint and the drift check compare only what the database says).")

    def column_names(self) -> set[str]:
        """Every column name of every table (how SQLite tells a double-quoted name from a string)."""
        return {c.name for t in self.tables for c in t.columns}

    def table(self, name: str, schema: str | None = None) -> TableInfo | None:
        """The table with this name (exact first, then case-insensitive), optionally in `schema`."""
        candidates = [t for t in self.tables if schema is None or (t.schema_name or "") == schema]
        for t in candidates:
            if t.name == name:
                return t
        lowered = name.lower()
        return next((t for t in candidates if t.name.lower() == lowered), None)


class ColumnProfile(BaseModel):
    """What the data in one column looks like (computed over at most `sampled_rows` rows)."""

    table: str
    column: str
    schema_name: str | None = None
    type: str
    null_share: float | None = None
    distinct_count: int | None = None
    min: str | None = None
    max: str | None = None
    sample_values: list[str] = Field(default_factory=list)
    #: The values of a column of names (customers', artists'): matched against a question's names, never shown.
    name_values: list[str] = Field(default_factory=list)
    sampled_rows: int = 0


class ColumnMeta(BaseModel):
    """A result column: its name and the type the driver reported (when it did)."""

    name: str
    type: str | None = None


@dataclass
class ExecutionResult:
    """The rows of one statement, at most `row_limit` of them."""

    frame: pd.DataFrame
    columns: list[ColumnMeta]
    truncated: bool
    elapsed_ms: float
    sql: str = ""
    warnings: list[str] = field(default_factory=list)
    #: Names the statement gave more than one column, each kept under a suffixed name (`distinct_column_names`).
    repeated_names: list[str] = field(default_factory=list)

    @property
    def row_count(self) -> int:
        """Rows returned (after the row limit)."""
        return len(self.frame)

    def plain_frame(self) -> pd.DataFrame:
        """The rows as Python objects, NULL as None (for JSON, tables and comparisons)."""
        return self.frame.astype(object).where(self.frame.notna(), None)


def share_field_sets(snapshot: SchemaSnapshot) -> None:
    """Let the snapshot's tables, columns and foreign keys that were given all their fields share one set of their
    names per class.

    Pydantic keeps with each instance the set of fields it was given (728 bytes for a column's five): at 20,000
    tables a snapshot's sets took more memory than its columns. Only a full set is shared, so setting a field
    later adds nothing to it and no instance's record of its fields changes.
    """
    full = {kind: set(kind.model_fields) for kind in (TableInfo, ColumnInfo, ForeignKey)}
    share = object.__setattr__
    for table in snapshot.tables:
        for items, fields in ((table.columns, full[ColumnInfo]), (table.foreign_keys, full[ForeignKey]),
                              ((table,), full[TableInfo])):
            for item in items:
                if item.__pydantic_fields_set__ == fields:
                    share(item, "__pydantic_fields_set__", fields)
