"""Index entries: what a question about a table, a column, a relationship or a datasource would resemble.

Each entry has a stable id (a hash of its datasource, kind and subject), a text to embed, and
metadata. Names are also spelled as words (`BillingCountry` → "billing country", `hired_on` →
"hired on"), since questions use words, not identifiers.

>>> words("BillingCountry"), words("ticket_messages"), words("InvoiceLineId")
('billing country', 'ticket messages', 'invoice line id')
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, overload

from pydantic import BaseModel, Field

from nl2sql.datasources.models import ColumnProfile, SchemaSnapshot, TableInfo
from nl2sql.plan.join_keys import category, dtype_of
from nl2sql.verified.models import VerifiedQuery

EntryKind = Literal["table", "column", "relationship", "example", "verified", "description"]
ENTRY_KINDS: tuple[EntryKind, ...] = ("table", "column", "relationship", "example", "verified", "description")
MAX_SAMPLES_IN_TEXT = 8
#: The shape of entry texts: a build whose live build has another re-writes every table's entries (an
#: incremental build would otherwise keep the old texts of the tables that did not change).
ENTRY_FORMAT = 5
MAX_COLUMNS_IN_TABLE_TEXT = 30


class Entry(BaseModel):
    """One thing the index can find."""

    id: str
    datasource_id: str
    kind: EntryKind
    text: str
    table: str | None = None
    column: str | None = None
    tables: list[str] = Field(default_factory=list, description="Every table the entry is about (for scope checks).")
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def text_hash(self) -> str:
        """The key of the embedding cache: same text, same vector."""
        return text_hash(self.text)


@dataclass(frozen=True)
class StoredEntry:
    """An entry of a committed build as the state store holds it: what an incremental build needs to carry it into
    the next build (its kind, table and text, its segment and its row in that segment's FAISS file, and its stored document, written
    back as it is), never decoded into an `Entry` (a big schema's reused entries cost more to decode and encode
    again than the change itself)."""

    kind: EntryKind
    table: str | None
    text: str
    document: str
    position: int
    segment_id: str

    @cached_property
    def text_hash(self) -> str:
        """The key of the embedding cache (worked out only when asked: an incremental build reads a carried-over
        entry's vector by its position)."""
        return text_hash(self.text)


#: An entry a build writes: built now, or carried over from the live build as stored.
BuildEntry = Entry | StoredEntry


class EntryTable(Sequence[Entry]):
    """A committed build's entries as columns, as a live build holds them for search: per entry its kind, tables,
    column and text, and its metadata as JSON text, decoded when asked. At 20,000 tables (351,000 entries) one
    pydantic `Entry` each held 720 MB, these columns a fifth of that; an item (`table[i]`) is an `Entry` again."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.datasource_ids: list[str] = []
        self.kinds: list[str] = []  # one string object per kind, shared
        self.tables: list[str | None] = []
        self.columns: list[str | None] = []
        self.tables_of: list[tuple[str, ...]] = []  # one tuple per distinct set of tables, shared
        self.texts: list[str] = []
        self.metadata_json: list[str] = []
        self._groups: dict[tuple[str, ...], tuple[str, ...]] = {}  # each distinct tuple of tables, once

    @staticmethod
    def _name(value: str | None) -> str | None:
        """One string object for every equal name (names repeat across entries)."""
        return None if value is None else sys.intern(value)

    def append(self, id_: str, datasource_id: str, kind: str, table: str | None, column: str | None,
               tables: Sequence[str], text: str, metadata_json: str) -> None:
        """Add an entry at the end."""
        self.ids.append(id_)
        self.datasource_ids.append(sys.intern(datasource_id))
        self.kinds.append(sys.intern(kind))
        self.tables.append(self._name(table))
        self.columns.append(self._name(column))
        group = tuple(tables)
        if group not in self._groups:
            self._groups[group] = tuple(sys.intern(t) for t in group)
        self.tables_of.append(self._groups[group])
        self.texts.append(text)
        self.metadata_json.append(metadata_json)

    @classmethod
    def of(cls, entries: Iterable[Entry]) -> EntryTable:
        """The columns of entries held as objects (a build edited or made in memory)."""
        out = cls()
        for e in entries:
            out.append(e.id, e.datasource_id, e.kind, e.table, e.column, e.tables, e.text, json.dumps(e.metadata))
        return out

    def metadata(self, position: int) -> dict[str, Any]:
        """The metadata of the entry at `position`, decoded."""
        return json.loads(self.metadata_json[position])

    def column_metadata(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """(table, column, metadata decoded) of each column entry, in order."""
        for i, (kind, table, column) in enumerate(zip(self.kinds, self.tables, self.columns, strict=True)):
            if kind == "column" and table and column:
                yield table, column, self.metadata(i)

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, position: int) -> Entry: ...

    @overload
    def __getitem__(self, position: slice) -> list[Entry]: ...

    def __getitem__(self, position: int | slice) -> Entry | list[Entry]:
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]
        i = range(len(self))[position]  # (a negative position counts from the end; past the end raises)
        return Entry(id=self.ids[i], datasource_id=self.datasource_ids[i], kind=self.kinds[i],  # type: ignore[arg-type]
                     text=self.texts[i], table=self.tables[i], column=self.columns[i], tables=list(self.tables_of[i]),
                     metadata=self.metadata(i))


def text_hash(text: str) -> str:
    """The key of the embedding cache: same text, same vector."""
    return hashlib.sha256(text.encode()).hexdigest()


# where a description's clauses end: a colon, a semicolon or a full stop before the next word
CLAUSE_BREAK = re.compile(r"[:;.](?=\s)")


def entry_id(*parts: str) -> str:
    """A stable id from the entry's identifying parts."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]


def words(name: str) -> str:
    """An identifier as lower-case words."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", " ", name)
    return re.sub(r"[_\-\s]+", " ", spaced).strip().lower()


def qualified(table: TableInfo) -> str:
    """`schema.table` outside the default schema, else `table`."""
    return f"{table.schema_name}.{table.name}" if table.schema_name else table.name


def _type_words(type_name: str) -> str:
    cat = category(dtype_of(type_name))
    return {"number": "number", "text": "text", "temporal": "date", "boolean": "yes/no", "binary": "binary"}.get(cat, "value")


def table_entry(ds: str, table: TableInfo, description: str | None = None) -> Entry:
    """A table: its name as words, its columns as words, the tables it refers to."""
    columns = ", ".join(words(c.name) for c in table.columns[:MAX_COLUMNS_IN_TABLE_TEXT])
    refs = sorted({words(fk.ref_table) for fk in table.foreign_keys})
    text = f"{words(table.name)} table ({table.name}): {columns}."
    if refs:
        text += f" Each {words(table.name)} belongs to a {' and a '.join(refs)}."
    if table.comment or description:
        text += f" {table.comment or description}"
    name = qualified(table)
    return Entry(id=entry_id(ds, "table", name), datasource_id=ds, kind="table", text=text, table=name,
                 tables=[name], metadata={"columns": len(table.columns), "rows": table.row_count})


def column_entry(ds: str, table: TableInfo, column_name: str, type_name: str,
                 profile: ColumnProfile | None) -> Entry:
    """A column: the table and column as words, its kind of value, and frequent values when it has few."""
    # the name as words only: exact names are matched lexically at search time, and the echo cost a third of
    # the tokens embedded
    text = f"{words(column_name)} of {words(table.name)}, {_type_words(type_name)}"
    meta: dict[str, Any] = {"type": type_name}
    if profile is not None:
        meta.update(null_share=profile.null_share, distinct=profile.distinct_count, min=profile.min, max=profile.max,
                    samples=profile.sample_values, sampled_rows=profile.sampled_rows)
        if profile.name_values:  # matched, never embedded: a thousand names say nothing a vector could keep
            meta["names"] = profile.name_values
        if profile.sample_values:
            text += ", for example " + ", ".join(profile.sample_values[:MAX_SAMPLES_IN_TEXT])
        elif profile.min is not None and category(dtype_of(type_name)) == "temporal":
            text += year_span(profile.min, profile.max)
    name = qualified(table)
    return Entry(id=entry_id(ds, "column", name, column_name), datasource_id=ds, kind="column", text=text + ".",
                 table=name, column=column_name, tables=[name], metadata=meta)


def repeating_columns(entries: EntryTable) -> set[tuple[str, str]]:
    """The (table, column) pairs, lower-case, whose profile saw a value twice: fewer distinct values than non-null
    rows in the sample (a build before profiles recorded their sample's size says nothing)."""
    found = set()
    for table, column, meta in entries.column_metadata():
        if not meta.get("sampled_rows"):
            continue
        non_null = round(meta["sampled_rows"] * (1 - (meta.get("null_share") or 0)))
        if meta.get("distinct") is not None and meta["distinct"] < non_null:
            found.add((table.rpartition(".")[2].lower(), column.lower()))
    return found


def year_span(low: str, high: str | None) -> str:
    """A date column's range in years, as questions put it (full dates took five tokens each).

    >>> year_span("2009-01-01 00:00:00", "2013-12-22"), year_span("2023-09-18", "2023-09-30"), year_span("x", None)
    (', from 2009 to 2013', ', in 2023', '')
    """
    first, last = low[:4], (high or "")[:4]
    if not (first.isdigit() and last.isdigit()):
        return ""
    return f", in {first}" if first == last else f", from {first} to {last}"


def relationship_entries(ds: str, table: TableInfo) -> list[Entry]:
    """One entry per foreign key: which table refers to which, in words."""
    out = []
    name = qualified(table)
    for fk in table.foreign_keys:
        target = f"{fk.ref_schema}.{fk.ref_table}" if fk.ref_schema else fk.ref_table
        # words only: the key columns are in the metadata (an identifier echo took half the tokens)
        text = (f"{words(table.name)} linked to {words(fk.ref_table)}: {table.name}.{', '.join(fk.columns)} "
                f"references {fk.ref_table}.{', '.join(fk.ref_columns)}.")
        out.append(Entry(id=entry_id(ds, "relationship", name, ",".join(fk.columns), target), datasource_id=ds,
                         kind="relationship", text=text, table=name, tables=[name, target],
                         metadata={"columns": fk.columns, "ref_table": target, "ref_columns": fk.ref_columns}))
    return out


def example_entries(ds: str, questions: Iterable[str], verified: Sequence[VerifiedQuery] = ()) -> list[Entry]:
    """The datasource's sample questions (blank and repeated ones skipped); one that is also a verified question
    (as its entry reads) is about that query's tables, so it counts only for a caller who may read them all."""
    answered = {" ".join(q.question.split()).lower(): q.tables for q in verified if q.datasource == ds}
    seen: set[str] = set()
    out = []
    for question in questions:
        text = " ".join(question.split())
        if not text or text.lower() in seen:
            continue
        seen.add(text.lower())
        out.append(Entry(id=entry_id(ds, "example", text.lower()), datasource_id=ds, kind="example", text=text,
                         tables=list(answered.get(text.lower(), []))))
    return out


def description_entries(ds: str, description: str) -> list[Entry]:
    """The datasource's description, what it holds in the words its owners use: whole, and each of its
    clauses alone when it has several (a long description dilutes what each part says: "the customer
    support desk" matches a question about the help desk far better than the whole paragraph does)."""
    text = " ".join(description.split())
    if not text:
        return []
    entries = [Entry(id=entry_id(ds, "description"), datasource_id=ds, kind="description", text=text)]
    parts = [p.strip(" .") for p in CLAUSE_BREAK.split(text)]
    clauses = list(dict.fromkeys(p for p in parts if p))
    if len(clauses) > 1:
        entries += [Entry(id=entry_id(ds, "description", clause.lower()), datasource_id=ds, kind="description",
                          text=clause, metadata={"clause": True}) for clause in clauses]
    return entries


def verified_entries(ds: str, queries: Sequence[VerifiedQuery]) -> list[Entry]:
    """Verified queries of this datasource: the question is what gets matched, and the tables its SQL reads
    are what it is about (a query with none known is left out: it would count for every caller)."""
    return [
        Entry(id=entry_id(ds, "verified", q.question.lower()), datasource_id=ds, kind="verified", text=q.question,
              tables=list(q.tables), metadata={"sql": q.sql, "parameters": q.parameters})
        for q in queries if q.datasource == ds and q.tables
    ]


def counts_for(entry: Entry, allows: Callable[[str], bool]) -> bool:
    """Whether an entry may count for a caller: every table it is about is allowed (`allows(table)`), and a
    verified query's entry names its tables (one from a build that did not is nobody's)."""
    if entry.kind == "verified" and not entry.tables:
        return False
    return all(allows(t) for t in entry.tables)


def build_entries(snapshot: SchemaSnapshot, profiles: Sequence[ColumnProfile], *,
                  sample_questions: Sequence[str] = (), verified: Sequence[VerifiedQuery] = (),
                  description: str = "") -> list[Entry]:
    """Every entry of one datasource, in a stable order."""
    ds = snapshot.datasource_id
    by_column = {(p.schema_name, p.table, p.column): p for p in profiles}
    entries: list[Entry] = []
    for table in snapshot.tables:
        entries.append(table_entry(ds, table))
        for col in table.columns:
            entries.append(column_entry(ds, table, col.name, col.type,
                                        by_column.get((table.schema_name, table.name, col.name))))
        entries.extend(relationship_entries(ds, table))
    entries.extend(example_entries(ds, sample_questions, verified))
    entries.extend(verified_entries(ds, verified))
    entries.extend(description_entries(ds, description))
    return entries
