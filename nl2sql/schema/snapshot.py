"""Fingerprints of a schema (tables, columns, types, keys) and the difference between two snapshots."""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, Field

from nl2sql.datasources.models import SchemaSnapshot, TableInfo


def _table_shape(table: TableInfo) -> dict:
    return {
        "columns": [[c.name, c.type, c.nullable] for c in table.columns],
        "primary_key": table.primary_key,
        "foreign_keys": sorted([fk.columns, fk.ref_schema, fk.ref_table, fk.ref_columns] for fk in table.foreign_keys),
    }


def _key(table: TableInfo) -> str:
    return f"{table.schema_name}.{table.name}" if table.schema_name else table.name


def fingerprint(snapshot: SchemaSnapshot) -> str:
    """A hash of tables, columns, types, nullability and keys (not row counts, not profiles)."""
    shape = {_key(t): _table_shape(t) for t in snapshot.tables}
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


def table_fingerprints(snapshot: SchemaSnapshot) -> dict[str, str]:
    """One hash per table, to tell which tables changed between two snapshots."""
    return {_key(t): hashlib.sha256(json.dumps(_table_shape(t), sort_keys=True).encode()).hexdigest()[:16]
            for t in snapshot.tables}


class ColumnChange(BaseModel):
    """A column whose type or nullability changed."""

    table: str
    column: str
    before: str
    after: str


class SchemaDiff(BaseModel):
    """What changed from one snapshot to the next."""

    added_tables: list[str] = Field(default_factory=list)
    removed_tables: list[str] = Field(default_factory=list)
    added_columns: list[str] = Field(default_factory=list)
    removed_columns: list[str] = Field(default_factory=list)
    changed_columns: list[ColumnChange] = Field(default_factory=list)
    changed_keys: list[str] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Whether nothing changed."""
        return not any(getattr(self, f) for f in type(self).model_fields)

    def summary(self) -> str:
        """One line: counts of each kind of change."""
        if self.empty:
            return "no schema changes"
        parts = [f"{len(v)} {k.replace('_', ' ')}" for k in type(self).model_fields if (v := getattr(self, k))]
        return ", ".join(parts)


def diff_snapshots(before: SchemaSnapshot | None, after: SchemaSnapshot) -> SchemaDiff:
    """The changes from `before` (None: nothing before, every table added) to `after`."""
    old = {_key(t): t for t in (before.tables if before else [])}
    new = {_key(t): t for t in after.tables}
    diff = SchemaDiff(added_tables=sorted(set(new) - set(old)), removed_tables=sorted(set(old) - set(new)))
    for name in sorted(set(old) & set(new)):
        a, b = old[name], new[name]
        cols_a = {c.name: c for c in a.columns}
        cols_b = {c.name: c for c in b.columns}
        diff.added_columns += [f"{name}.{c}" for c in cols_b if c not in cols_a]
        diff.removed_columns += [f"{name}.{c}" for c in cols_a if c not in cols_b]
        for col in cols_a.keys() & cols_b.keys():
            ca, cb = cols_a[col], cols_b[col]
            if (ca.type, ca.nullable) != (cb.type, cb.nullable):
                diff.changed_columns.append(ColumnChange(
                    table=name, column=col, before=f"{ca.type}{'' if ca.nullable else ' NOT NULL'}",
                    after=f"{cb.type}{'' if cb.nullable else ' NOT NULL'}"))
        if _table_shape(a)["primary_key"] != _table_shape(b)["primary_key"] or \
                _table_shape(a)["foreign_keys"] != _table_shape(b)["foreign_keys"]:
            diff.changed_keys.append(name)
    return diff
