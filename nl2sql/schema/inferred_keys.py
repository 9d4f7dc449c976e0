"""Join keys a database does not declare, inferred from names and data.

Many databases declare no primary or foreign keys: without them retrieval never adds the column a join
needs, and the planner guesses how tables meet. For each table that declares none, the likely keys are read
from what the tables hold:

- a table's likely key: a column named `id`, `<table>id` or `<table>_id` (the table's name singular or plural)
  whose sampled values are all present and all distinct;
- a column's likely reference: the same name as another table's key (`Track.AlbumId` and `Album.AlbumId`), or
  `<table>_id` / `<table>id` naming a table whose key is `id`; failing both, `<tail>_id` where the tail is the last
  words of one table's name, and of no other's (`stay.home_id` → `rental_home`, `show_id` → `PodcastShow`), or a
  role before one of the exact names (`lead_attorney_id` → `attorney`, `home_team_id` → `team`); of a type the
  key's can be compared with; and whose sampled values are contained in the key's (at least `MIN_CONTAINMENT` of
  them).

Each inferred reference carries a confidence (the share of its values found in the key) and is kept beside
the declared ones (`SchemaSnapshot.inferred_keys`), never mixed into them: a database's own keys stay what the
drift check and the fingerprint compare. `with_inferred_keys` gives the view retrieval, the prompts and the
validator read, where each inferred reference is a `ForeignKey` with its `confidence`.

>>> likely_key_names("Album")
['id', 'albumid', 'albumsid']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from functools import lru_cache

import pandas as pd

from nl2sql.datasources.models import ForeignKey, InferredKeys, SchemaSnapshot, TableInfo
from nl2sql.plan.join_keys import coercible, dtype_of

#: (table, columns, sample_rows) → at most `sample_rows` rows of those columns (Adapter.sample_columns).
SampleColumns = Callable[[TableInfo, Sequence[str], int], pd.DataFrame]

#: The share of a column's distinct sampled values that must be among the key's for a reference to be kept.
MIN_CONTAINMENT = 0.98
#: The most rows read of a table to check a key or a reference.
SAMPLE_ROWS = 100_000


_SEPARATORS = re.compile(r"[\s_\-]")
#: How many last letters of a table's name index it for the last-words rule.
_END = 3
#: The words of a name: `rental_home`, `RentalHome` and `rental-home` alike.
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


@lru_cache(maxsize=1 << 16)
def _norm(name: str) -> str:
    """A name as compared: lower case, without underscores, spaces or dashes (`Album_Id` → `albumid`). Cached: a
    big schema's columns repeat a few thousand names (160,000 calls for one rebuild at 20,000 tables)."""
    return _SEPARATORS.sub("", name.lower())


def _forms(table: str) -> list[str]:
    """A table's name singular and plural (`Albums` → `albums`, `album`; `Genre` → `genre`, `genres`)."""
    name = _norm(table)
    if name.endswith("ies"):
        return [name, name[:-3] + "y"]
    if name.endswith("s"):
        return [name, name[:-1]]
    return [name, name + ("es" if name.endswith(("x", "ch", "sh")) else "s")]


def likely_key_names(table: str) -> list[str]:
    """The normalized names a table's own key may have: `id`, `<table>id`."""
    return ["id", *(f"{form}id" for form in _forms(table))]


def infer_keys(snapshot: SchemaSnapshot, sample: SampleColumns, *, sample_rows: int = SAMPLE_ROWS,
               previous: SchemaSnapshot | None = None, changed: Collection[str] = ()) -> InferredKeys:
    """The likely keys of the tables that declare none, and the likely references of their columns.

    Given the previous snapshot (with the keys inferred for it) and the tables changed since (`changed`, by
    qualified name; added and removed tables count as changed), an unchanged table keeps what was inferred for it
    unless it rests on a changed table: a table's likely key rests on its own values only, its references on the
    tables whose keys their names can point at. Only the rest is sampled again (one altered table of a big schema
    no longer samples every table).
    """
    tables = {_qualified(t): t for t in snapshot.tables if t.kind == "table"}
    # what was inferred before can be kept only where the previous snapshot carries it
    before = previous.inferred_keys if previous is not None else None
    old_tables = {_qualified(t): t for t in previous.tables if t.kind == "table"} if previous and before else {}
    stale = set(changed) | (set(tables) ^ set(old_tables))
    frames: dict[tuple[str, str], pd.Series] = {}

    def values(table: TableInfo, column: str) -> pd.Series:
        key = (_qualified(table), column)
        if key not in frames:
            frames[key] = sample(table, [column], sample_rows)[column]
        return frames[key]

    primary: dict[str, list[str]] = {}
    for name, table in tables.items():
        if table.primary_key:
            continue
        if before is not None and name not in stale:
            if name in before.primary_keys:
                primary[name] = before.primary_keys[name]
            continue
        wanted = likely_key_names(table.name)
        for column in sorted((c for c in table.columns if _norm(c.name) in wanted), key=lambda c: wanted.index(_norm(c.name))):
            got = values(table, column.name)
            if len(got) and got.notna().all() and got.is_unique:
                primary[name] = [column.name]
                break
    keys = {name: (t.primary_key or primary.get(name, [])) for name, t in tables.items()}
    # who a column's name can point at: a one-column key by its name, and a table whose key is `id` by its forms
    by_key: dict[str, list[tuple[str, str]]] = {}
    by_form: dict[str, list[tuple[str, str]]] = {}
    for name, key in keys.items():
        for pointer in _pointers(tables[name], key):
            (by_form if _norm(key[0]) == "id" else by_key).setdefault(pointer, []).append((name, key[0]))

    def exact(pointer: str, owner: str) -> list[tuple[str, str]]:
        """The other tables whose key the pointer names exactly: by the key's own name, else by the table's."""
        return [t for t in by_key.get(pointer, []) if t[0] != owner] or \
            [t for t in by_form.get(pointer, []) if t[0] != owner]

    by_tail: dict[str, list[tuple[str, str]]] = {}
    by_end: dict[str, list[str]] = {}  # the tables by the last letters of their name, made when first needed

    def by_tails(pointer: str) -> list[tuple[str, str]]:
        """The tables the last words of whose name the pointer spells, found once per pointer (a few distinct
        pointers miss an exact name, `tenant_id`, `legacy_id`: no index of every table's tails)."""
        if pointer not in by_tail:
            if not by_end:
                for name in keys:
                    by_end.setdefault(_norm(name)[-_END:], []).append(name)
            forms = tuple(_forms(pointer[:-2]))
            near = keys if min(map(len, forms)) < _END else \
                [name for end in dict.fromkeys(f[-_END:] for f in forms) for name in by_end.get(end, [])]
            by_tail[pointer] = [(name, keys[name][0]) for name in near if _norm(name).endswith(forms)
                                and pointer in _tail_pointers(tables[name], keys[name])]
        return by_tail[pointer]
    # the names by which a column could point at a changed table, before or after the change
    old_keys = {name: t.primary_key or before.primary_keys.get(name, [])
                for name, t in old_tables.items()} if before is not None else {}
    touched = {pointer for name in stale for table, key in ((tables.get(name), keys.get(name)),
                                                             (old_tables.get(name), old_keys.get(name)))
               if table is not None and key
               for pointer in [*_pointers(table, key), *_tail_pointers(table, key)]} if before is not None else set()
    ends = tuple(touched)
    references: dict[str, list[ForeignKey]] = {}
    for name, table in tables.items():
        if table.foreign_keys:
            continue  # a table that declares its references is taken at its word
        # a column ending in such a name may point there too (`lead_attorney_id` at `attorney`'s `attorney_id`)
        if before is not None and name not in stale and not any(_norm(c.name).endswith(ends) for c in table.columns):
            if name in before.foreign_keys:
                references[name] = before.foreign_keys[name]
            continue
        own = {c.lower() for c in keys[name]}
        for column in table.columns:
            if column.name.lower() in own:
                continue
            wanted = _norm(column.name)
            targets = exact(wanted, name)
            if not targets and wanted.endswith("id") and len(wanted) > 2:
                tails = [t for t in by_tails(wanted) if t[0] != name]
                targets = tails if len(tails) == 1 else []
            if not targets:  # `lead_attorney_id`, `home_team_id`: a role, then the table
                targets = next((found for tail in _column_tails(column.name) if (found := exact(tail, name))), [])
            for target_name, key_name in targets:
                target = tables[target_name]
                reference = target.column(key_name)
                if reference is None or not coercible(dtype_of(column.type), dtype_of(reference.type)):
                    continue
                share = _containment(values(table, column.name), values(target, reference.name))
                if share is None or share < MIN_CONTAINMENT:
                    continue
                references.setdefault(name, []).append(ForeignKey(
                    columns=[column.name], ref_table=target.name, ref_columns=[reference.name],
                    ref_schema=target.schema_name, confidence=round(share, 3)))
                break
    return InferredKeys(primary_keys=primary, foreign_keys=references)


def _pointers(table: TableInfo, key: Sequence[str]) -> list[str]:
    """The normalized column names that can point at a table with this key: the key's own name (`albumid`), or,
    for a key named `id`, `<table>id` in the table name's forms; none for a key of several columns or none."""
    if len(key) != 1:
        return []
    if _norm(key[0]) != "id":
        return [_norm(key[0])]
    return [f"{form}id" for form in _forms(table.name)]


def _tail_pointers(table: TableInfo, key: Sequence[str]) -> list[str]:
    """The normalized column names that can point at a table with a one-column key by the last words of its name
    (`rental_home` → `homeid`, `homesid`; `PodcastShow` → `showid`, `showsid`); none for a one-word name.

    >>> _tail_pointers(TableInfo(name="rental_home", columns=[]), ["rental_home_id"])
    ['homeid', 'homesid']
    """
    parts = _WORDS.findall(table.name)
    if len(key) != 1 or len(parts) < 2:
        return []
    return [f"{form}id" for i in range(1, len(parts)) for form in _forms("".join(parts[i:]))]


@lru_cache(maxsize=1 << 16)
def _column_tails(column: str) -> tuple[str, ...]:
    """A column's name less its first words, longest first (`lead_attorney_id` → `attorneyid`). Cached: a big
    schema's columns repeat a few thousand names."""
    parts = _WORDS.findall(column)
    return tuple(_norm("".join(parts[i:])) for i in range(1, len(parts) - 1))


def _containment(column: pd.Series, key: pd.Series) -> float | None:
    """The share of the column's distinct non-null values found among the key's (None: no values to judge)."""
    seen = set(column.dropna().map(_comparable))
    if not seen:
        return None
    known = set(key.dropna().map(_comparable))
    return len(seen & known) / len(seen)


def _comparable(value: object) -> object:
    """A value as a key compares it: integral numbers as int (`3`, `3.0`, `"3"` alike), text as written."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return int(value) if float(value).is_integer() else value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


def _qualified(table: TableInfo) -> str:
    return f"{table.schema_name}.{table.name}" if table.schema_name else table.name


def with_inferred_keys(snapshot: SchemaSnapshot) -> SchemaSnapshot:
    """The snapshot with its inferred keys added where nothing is declared (a copy; the same one when none)."""
    inferred = snapshot.inferred_keys
    if inferred is None or not (inferred.primary_keys or inferred.foreign_keys):
        return snapshot
    tables = []
    for table in snapshot.tables:
        name = _qualified(table)
        update: dict = {}
        key = inferred.primary_keys.get(name)
        if key and not table.primary_key:
            update["primary_key"] = list(key)
            update["columns"] = [c.model_copy(update={"primary_key": True}) if c.name in key else c
                                 for c in table.columns]
        references = inferred.foreign_keys.get(name)
        if references and not table.foreign_keys:
            update["foreign_keys"] = list(references)
        tables.append(table.model_copy(update=update) if update else table)
    return snapshot.model_copy(update={"tables": tables})
