"""Fingerprints of a schema (tables, columns, types, keys) and the difference between two snapshots."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable

from pydantic import BaseModel, Field

from nl2sql.datasources.models import ColumnInfo, ForeignKey, SchemaSnapshot, TableInfo


def _table_shape(table: TableInfo) -> dict:
    return {
        "columns": [[c.name, c.type, c.nullable] for c in table.columns],
        "primary_key": table.primary_key,
        "foreign_keys": sorted([fk.columns, fk.ref_schema, fk.ref_table, fk.ref_columns] for fk in table.foreign_keys),
    }


def _key(table: TableInfo) -> str:
    return f"{table.schema_name}.{table.name}" if table.schema_name else table.name


def table_key(schema: str | None, name: str) -> str:
    """A table as impact and expectations name it: `schema.name` or `name`, lower case (SQL names ignore case)."""
    return f"{schema}.{name}".lower() if schema else name.lower()


def fingerprint(snapshot: SchemaSnapshot) -> str:
    """A hash of tables, columns, types, nullability and keys (not row counts, not profiles)."""
    shape = {_key(t): _table_shape(t) for t in snapshot.tables}
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


def changed_tables(before: SchemaSnapshot, after: SchemaSnapshot) -> list[str]:
    """The tables of `after` (in its order) that `before` lacks, or whose shape or row count differs from it."""
    old = {_key(t): t for t in before.tables}
    return [_key(t) for t in after.tables
            if (was := old.get(_key(t))) is None or was.row_count != t.row_count or not same_shape(was, t)]


def same_shape(a: TableInfo, b: TableInfo) -> bool:
    """Whether two tables have the same columns, types, nullability and keys. A table that reflection carried over
    from the previous snapshot shares its lists with it, so identity answers first (a big schema's unchanged
    tables are then never walked column by column)."""
    return _carried_over(a, b) or _table_shape(a) == _table_shape(b)


def _carried_over(a: TableInfo, b: TableInfo) -> bool:
    """Whether `b` is `a` carried over by reflection (they share their columns and keys)."""
    return a.columns is b.columns and a.primary_key is b.primary_key and a.foreign_keys is b.foreign_keys


class ColumnChange(BaseModel):
    """A column whose type or nullability changed (`before` and `after` read like `INTEGER NOT NULL`)."""

    table: str
    column: str
    before: str
    after: str


class KeyChange(BaseModel):
    """A table whose primary key changed (its columns, in order)."""

    table: str
    before: list[str]
    after: list[str]


class ColumnRename(BaseModel):
    """A column dropped and one of the same type added in the same table, read as one column renamed."""

    table: str
    before: str
    after: str
    type: str


#: How each kind of change reads in a summary, singular and plural.
CHANGE_WORDS: dict[str, tuple[str, str]] = {
    "added_tables": ("table added", "tables added"),
    "removed_tables": ("table dropped", "tables dropped"),
    "renamed_columns": ("column renamed", "columns renamed"),
    "added_columns": ("column added", "columns added"),
    "removed_columns": ("column dropped", "columns dropped"),
    "changed_columns": ("column changed", "columns changed"),
    "changed_primary_keys": ("primary key changed", "primary keys changed"),
    "added_foreign_keys": ("foreign key added", "foreign keys added"),
    "removed_foreign_keys": ("foreign key dropped", "foreign keys dropped"),
    "reordered_columns": ("table with columns reordered", "tables with columns reordered"),
}


class SchemaDiff(BaseModel):
    """What changed from one snapshot to the next: empty exactly when their fingerprints are equal."""

    added_tables: list[str] = Field(default_factory=list)
    removed_tables: list[str] = Field(default_factory=list)
    added_columns: list[str] = Field(default_factory=list)
    removed_columns: list[str] = Field(default_factory=list)
    changed_columns: list[ColumnChange] = Field(default_factory=list)
    changed_primary_keys: list[KeyChange] = Field(default_factory=list)
    added_foreign_keys: list[str] = Field(default_factory=list)
    removed_foreign_keys: list[str] = Field(default_factory=list)
    reordered_columns: list[str] = Field(default_factory=list, description="Tables whose columns only moved.")
    renamed_columns: list[ColumnRename] = Field(
        default_factory=list, description="Dropped and added columns read as renames; each is also listed in "
        "removed_columns and added_columns, so readers of those still see the old column gone.")

    @property
    def empty(self) -> bool:
        """Whether nothing changed."""
        return not any(getattr(self, f) for f in type(self).model_fields)

    def changed_tables(self) -> list[str]:
        """Every table the diff touches (added, removed or changed), sorted."""
        names = {*self.added_tables, *self.removed_tables, *self.reordered_columns}
        names |= {c.rpartition(".")[0] for c in (*self.added_columns, *self.removed_columns)}
        names |= {c.table for c in self.changed_columns} | {k.table for k in self.changed_primary_keys}
        names |= {_fk_table(fk) for fk in (*self.added_foreign_keys, *self.removed_foreign_keys)}
        return sorted(names)

    def counts(self) -> dict[str, int]:
        """How many changes of each kind (the kinds with none left out): what an event may carry."""
        return {k: len(v) for k in type(self).model_fields if (v := getattr(self, k))}

    def unrenamed_added_columns(self) -> list[str]:
        """The added columns that are not the new name of a renamed column."""
        renamed = {f"{r.table}.{r.after}" for r in self.renamed_columns}
        return [c for c in self.added_columns if c not in renamed]

    def unrenamed_removed_columns(self) -> list[str]:
        """The dropped columns that are not the old name of a renamed column."""
        renamed = {f"{r.table}.{r.before}" for r in self.renamed_columns}
        return [c for c in self.removed_columns if c not in renamed]

    def summary(self) -> str:
        """One line: how many changes of each kind, a rename counted once (not as a column dropped and one added)."""
        if self.empty:
            return "no schema changes"
        counts = {k: len(getattr(self, k)) for k in CHANGE_WORDS}
        counts["added_columns"] = len(self.unrenamed_added_columns())
        counts["removed_columns"] = len(self.unrenamed_removed_columns())
        return ", ".join(f"{n} {CHANGE_WORDS[k][n != 1]}" for k, n in counts.items() if n)

    def scoped(self, readable: Callable[[str], bool]) -> SchemaDiff:
        """The part of the diff a caller may see: changes to tables `readable` allows (a foreign key only when
        both its tables are), so drift in denied tables alone reads as no change."""
        def fk_readable(fk: str) -> bool:
            return readable(_fk_table(fk)) and readable(_fk_ref_table(fk))

        return SchemaDiff(
            added_tables=[t for t in self.added_tables if readable(t)],
            removed_tables=[t for t in self.removed_tables if readable(t)],
            added_columns=[c for c in self.added_columns if readable(c.rpartition(".")[0])],
            removed_columns=[c for c in self.removed_columns if readable(c.rpartition(".")[0])],
            changed_columns=[c for c in self.changed_columns if readable(c.table)],
            changed_primary_keys=[k for k in self.changed_primary_keys if readable(k.table)],
            added_foreign_keys=[fk for fk in self.added_foreign_keys if fk_readable(fk)],
            removed_foreign_keys=[fk for fk in self.removed_foreign_keys if fk_readable(fk)],
            reordered_columns=[t for t in self.reordered_columns if readable(t)],
            renamed_columns=[r for r in self.renamed_columns if readable(r.table)])


#: How a foreign key reads in a diff: `tickets(agent_id) -> agents(agent_id)`.
FK_ARROW = " -> "


def _fk_text(table: str, fk: ForeignKey) -> str:
    ref = f"{fk.ref_schema}.{fk.ref_table}" if fk.ref_schema else fk.ref_table
    return f"{table}({', '.join(fk.columns)}){FK_ARROW}{ref}({', '.join(fk.ref_columns)})"


def _fk_table(fk: str) -> str:
    return fk.partition("(")[0]


def _fk_ref_table(fk: str) -> str:
    return fk.partition(FK_ARROW)[2].partition("(")[0]


def _column_text(column: ColumnInfo) -> str:
    return f"{column.type}{'' if column.nullable else ' NOT NULL'}"


def diff_snapshots(before: SchemaSnapshot | None, after: SchemaSnapshot) -> SchemaDiff:
    """The changes from `before` (None: nothing before, every table added) to `after`."""
    old = {_key(t): t for t in (before.tables if before else [])}
    new = {_key(t): t for t in after.tables}
    diff = SchemaDiff(added_tables=sorted(set(new) - set(old)), removed_tables=sorted(set(old) - set(new)))
    for name in sorted(set(old) & set(new)):
        a, b = old[name], new[name]
        if _carried_over(a, b):
            continue  # nothing of a carried-over table can differ
        cols_a = {c.name: c for c in a.columns}
        cols_b = {c.name: c for c in b.columns}
        added = [c for c in cols_b if c not in cols_a]
        removed = [c for c in cols_a if c not in cols_b]
        diff.added_columns += [f"{name}.{c}" for c in added]
        diff.removed_columns += [f"{name}.{c}" for c in removed]
        diff.renamed_columns += _renames(name, [cols_a[c] for c in removed], [cols_b[c] for c in added])
        for col in [c for c in cols_a if c in cols_b]:
            if _column_text(cols_a[col]) != _column_text(cols_b[col]):
                diff.changed_columns.append(ColumnChange(table=name, column=col, before=_column_text(cols_a[col]),
                                                         after=_column_text(cols_b[col])))
        kept_a = [c for c in cols_a if c in cols_b]
        kept_b = [c for c in cols_b if c in cols_a]
        if kept_a != kept_b:
            diff.reordered_columns.append(name)
        if a.primary_key != b.primary_key:
            diff.changed_primary_keys.append(KeyChange(table=name, before=a.primary_key, after=b.primary_key))
        fks_a = Counter(_fk_text(name, fk) for fk in a.foreign_keys)
        fks_b = Counter(_fk_text(name, fk) for fk in b.foreign_keys)
        diff.added_foreign_keys += sorted((fks_b - fks_a).elements())
        diff.removed_foreign_keys += sorted((fks_a - fks_b).elements())
    return diff


def _renames(table: str, removed: list[ColumnInfo], added: list[ColumnInfo]) -> list[ColumnRename]:
    """The dropped and added columns of one table that pair up by type alone: a type (with its nullability) that
    exactly one dropped and exactly one added column have. Other pairings would be guesses, so they stay apart."""
    by_type_removed = Counter(_column_text(c) for c in removed)
    by_type_added = Counter(_column_text(c) for c in added)
    out = []
    for old in removed:
        text = _column_text(old)
        if by_type_removed[text] == 1 and by_type_added[text] == 1:
            new = next(c for c in added if _column_text(c) == text)
            out.append(ColumnRename(table=table, before=old.name, after=new.name, type=text))
    return out
