"""Schema retrieval for one datasource: which tables and columns the planner sees for a question.

Only entries the caller may see are searched, returned or counted: an entry counts when every
table it is about is in the caller's scope. What a caller may see of a build (its tables, the entries
routing counts and retrieval scores, BM25's word counts) is worked out once per scope and kept with the
build (`ScopeView`), so a question costs FAISS's scoring of those entries and no walk over every entry.

Tables. Each allowed table scores its best entry's similarity (the table's own entry, one of its
columns or relationships), plus bonuses for what the question says in words: the table's name
("customers" → Customer), a known value of one of its columns ("Jazz" → Genre.Name), and a kind
of table the question calls for (`Cues`: "revenue" asks for a transaction table, "in 2010" for
one with dates, "who" for one of people, "longest" for a duration, "biggest" for a size). The
`planning_k` best (among the `table_k` best, by maximal marginal relevance) are chosen, the ones
after the first `MIN_SEEDS` only when within `SEED_GAP` of the best score; the best table of each
called-for kind is added; when the question names something no profiled value knows (a quoted
string or a capitalised word, e.g. an artist), the narrow named tables the chosen ones refer to
are added (where such a name is looked up); then the tables on short foreign-key paths that join
them all (a greedy Steiner tree).

Columns. A table of at most `wide_table_columns` columns is sent whole. A wider one sends its
primary key, its foreign keys to tables sent or named in the question (or that the caller may
not read: the key is then all it has of the relationship), its name columns (a
person's first and last name where it has them), the columns of the kinds the question calls for
(dates, amounts and quantities, durations, sizes), the columns named or holding a value named in
the question, and, for a table within `PRIMARY_GAP` of the best score, its best-matching column
and those within `COLUMN_GAP` of it.

Whole schemas. When the tables the caller may read have at most `whole_schema_columns` columns in all, every
one is sent with every column, in the snapshot's order: a small schema left whole loses nothing a question
needs (a small model invents the columns it is not shown), and the same text for every question lets a model
server reuse its cached prompt prefix.

On the demo's Chinook questions the pruning keeps every needed table and about 99% of the needed columns
while sending about 15 columns (benchmarks/retrieval/chinook_quality.py). Routing across
datasources is in `route.py`.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
import unicodedata
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Collection, Container, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import faiss
import numpy as np

from nl2sql.datasources.models import ForeignKey, SchemaSnapshot, TableInfo
from nl2sql.index.chunks import Entry, EntryTable, qualified, repeating_columns, words
from nl2sql.index.collection import collection_paused
from nl2sql.index.embed import Embedder
from nl2sql.index.store import BuildInfo, StateStore
from nl2sql.index.vectors import (
    EXACT_UP_TO,
    EntrySelector,
    SegmentedIndex,
    flat_index,
    read_index,
    searched,
    similarities_of,
)
from nl2sql.plan.join_keys import category, dtype_of
from nl2sql.schema.inferred_keys import with_inferred_keys

log = logging.getLogger(__name__)

#: Which entries may be used: a check on the tables an entry is about.
Allows = Callable[[str], bool]

#: Chosen tables kept whatever their score; later ones need a score within SEED_GAP of the best.
MIN_SEEDS = 3
SEED_GAP = 0.4
#: Entries a search of the index returns for a question when the caller's entries are too many to score all.
SEARCH_K = 512
#: Score bonuses: the question names the table, names a known value of it, calls for its kind.
NAME_BONUS = 0.3
VALUE_BONUS = 0.2
CUE_BONUS = 0.2
#: A table within PRIMARY_GAP of the best score also sends its best-matching columns (MIN_COLUMNS,
#: and any within COLUMN_GAP of the best of them).
PRIMARY_GAP = 0.3
MIN_COLUMNS = 1
COLUMN_GAP = 0.03


@dataclass
class LiveIndex:
    """A committed build loaded for search: its entries, its FAISS index (the vectors, memory-mapped from the state
    store's files, one per segment), and the snapshot it was built from."""

    build_id: str
    entries: EntryTable  # entries held as objects are turned into columns
    index: SegmentedIndex  # one FAISS index is taken as a build of one segment
    snapshot: SchemaSnapshot | None
    _facts: SchemaFacts | None = field(default=None, repr=False)
    _layout: EntryLayout | None = field(default=None, repr=False)
    _terms: TermIndex | None = field(default=None, repr=False)
    _joins: dict[str, tuple[str, ...]] | None = field(default=None, repr=False)
    graph: bool = False  # an HNSW index: past EXACT_UP_TO visible entries, a question searches its graph
    _kinds: dict[str, np.ndarray] | None = field(default=None, repr=False)
    _views: OrderedDict[Hashable, ScopeView] = field(default_factory=OrderedDict, repr=False)
    _views_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _repeating: set[tuple[str, str]] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.entries, EntryTable):
            self.entries = EntryTable.of(self.entries)
        if isinstance(self.index, faiss.Index):
            self.index = SegmentedIndex([self.index])

    @classmethod
    def of_vectors(cls, build_id: str, entries: Sequence[Entry] | EntryTable, vectors: np.ndarray,
                   snapshot: SchemaSnapshot | None) -> LiveIndex:
        """A live index over vectors held in memory (an edited or synthetic build)."""
        return cls(build_id, entries, flat_index(vectors), snapshot)  # type: ignore[arg-type]

    def view(self, allows: Allows) -> ScopeView:
        """What a caller may see of this build (`ScopeView`), computed once per scope: `allows` is the key, so it
        must be pure; equal predicates (a `ScopeKey` of the same scope) share one view, and an unhashable one is
        never cached. The `VIEWS` most recently used are kept."""
        try:
            hash(allows)
        except TypeError:
            return ScopeView(self, allows)
        with self._views_lock:
            found = self._views.get(allows)
            if found is not None:
                self._views.move_to_end(allows)
                return found
        made = ScopeView(self, allows)
        with self._views_lock:
            self._views[allows] = made
            while len(self._views) > VIEWS:
                self._views.popitem(last=False)
        return made

    def similarities(self, query: np.ndarray, visible: np.ndarray) -> np.ndarray:
        """Cosine similarity of the (unit) query to each entry `visible` (a mask over the entries) marks, −inf to
        the others: FAISS reads the visible entries' vectors only, so what a caller may not see is never scored."""
        out = np.full(self.index.ntotal, -np.inf, dtype=np.float32)
        ids = np.flatnonzero(visible)
        out[ids] = self.scores(query, ids)
        return out

    def scores(self, query: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Cosine similarity of the (unit) query to the entries at `ids`, in their order: FAISS reads those
        entries' vectors only."""
        return similarities_of(self.index, query, ids)

    def search(self, query: np.ndarray, among: EntrySelector, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The `k` entries of `among` most similar to the (unit) query, best first (`vectors.searched`)."""
        return searched(self.index, query, among, k)

    def vector(self, position: int) -> np.ndarray:
        """One entry's stored vector."""
        return self.index.reconstruct(int(position))

    def facts(self) -> SchemaFacts:
        """What retrieval reads from the snapshot and the entries besides vectors (computed once)."""
        if self._facts is None:
            with collection_paused():
                self._facts = SchemaFacts.of(self.snapshot, self.entries)
        return self._facts

    def layout(self) -> EntryLayout:
        """Entry positions grouped by table and kind, for vectorised scoring (computed once)."""
        if self._layout is None:
            with collection_paused():
                self._layout = EntryLayout.of(self.entries)
        return self._layout

    def repeating(self) -> set[tuple[str, str]]:
        """`chunks.repeating_columns` of this build's entries (computed once)."""
        if self._repeating is None:
            with collection_paused():
                self._repeating = repeating_columns(self.entries)
        return self._repeating

    def kind_counts(self, wanted: frozenset[str]) -> np.ndarray:
        """Per table of the layout, how many of the `wanted` kinds (`SchemaFacts.table_kinds`) it is."""
        with self._views_lock:
            if self._kinds is None:
                kinds, tables = self.facts().table_kinds, self.layout().tables
                names = sorted(set().union(*kinds.values())) if kinds else []
                self._kinds = {k: np.array([k in kinds.get(t, ()) for t in tables], dtype=np.float64) for k in names}
        out = np.zeros(len(self.layout().tables), dtype=np.float64)
        for kind in wanted:
            if kind in self._kinds:
                out += self._kinds[kind]
        return out

    def terms(self) -> TermIndex:
        """The words of the entries' texts, for lexical routing (computed once)."""
        if self._terms is None:
            with collection_paused():
                self._terms = TermIndex.of(self.entries)
        return self._terms

    def joins(self) -> dict[str, tuple[str, ...]]:
        """Each table's neighbours by foreign key, either way, sorted, over the whole snapshot (computed once)."""
        if self._joins is None:
            tables = {qualified(t): t for t in self.snapshot.tables} if self.snapshot else {}
            graph: dict[str, set[str]] = defaultdict(set)
            for name, table in tables.items():
                for fk in table.foreign_keys:
                    target = _target(fk)
                    if target in tables and target != name:
                        graph[name].add(target)
                        graph[target].add(name)
            self._joins = {name: tuple(sorted(near)) for name, near in graph.items()}
        return self._joins


#: Entries whose words count for lexical routing (a relationship only repeats its tables' words).
TERM_KINDS = frozenset({"table", "column", "example", "verified", "description"})


@dataclass
class TermIndex:
    """How often each word occurs in a build's entry texts, by the tables the entries are about, so the words
    of tables a caller may not read are never counted."""

    counts: dict[str, dict[tuple[str, ...], int]]  # word → tables of the entries → occurrences
    lengths: dict[tuple[str, ...], int]  # tables → words in those entries

    @classmethod
    def of(cls, entries: EntryTable) -> TermIndex:
        """Count the words of every entry of a lexical kind (stop words and numbers left out)."""
        counts: dict[str, dict[tuple[str, ...], int]] = defaultdict(lambda: defaultdict(int))
        lengths: dict[tuple[str, ...], int] = defaultdict(int)
        for i, (kind, group, text) in enumerate(zip(entries.kinds, entries.tables_of, entries.texts, strict=True)):
            if kind not in TERM_KINDS or (kind == "description" and entries.metadata(i).get("clause")):
                continue  # (a description's clause repeats its words)
            if kind == "verified" and not group:
                continue  # a verified query's words count only with the tables it reads
            for term in content_terms(text):
                counts[term][group] += 1
                lengths[group] += 1
        return cls({t: dict(g) for t, g in counts.items()}, dict(lengths))

    def visible(self, terms: set[str], allowed: Callable[[tuple[str, ...]], bool]) -> tuple[dict[str, int], int]:
        """(occurrences of each given word, words in all) over the entries whose tables are all allowed."""
        seen, total = self.seen_by(allowed)
        return self.counted(terms, seen), total

    def seen_by(self, allowed: Callable[[tuple[str, ...]], bool]) -> tuple[dict[tuple[str, ...], bool], int]:
        """Whether each group of tables is allowed, and how many words the allowed groups' entries hold."""
        seen = {group: allowed(group) for group in self.lengths}
        return seen, sum(n for g, n in self.lengths.items() if seen[g])

    def counted(self, terms: set[str], seen: dict[tuple[str, ...], bool]) -> dict[str, int]:
        """Occurrences of each given word over the entries whose tables `seen` marks (words never seen left out)."""
        found = {t: sum(n for g, n in self.counts.get(t, {}).items() if seen[g]) for t in terms}
        return {t: n for t, n in found.items() if n}

    def vocabulary(self, allowed: Callable[[tuple[str, ...]], bool]) -> VisibleWords:
        """The words of the entries whose tables are all allowed, as a container (checked word by word)."""
        return VisibleWords(self, allowed)


class VisibleWords:
    """The words a caller's entries use: a word is in it when some entry it occurs in is about allowed tables."""

    def __init__(self, terms: TermIndex, allowed: Callable[[tuple[str, ...]], bool]) -> None:
        self.terms, self.allowed = terms, allowed
        self._seen: dict[tuple[str, ...], bool] = {}

    def _visible(self, group: tuple[str, ...]) -> bool:
        if group not in self._seen:
            self._seen[group] = self.allowed(group)
        return self._seen[group]

    def __contains__(self, word: object) -> bool:
        groups = self.terms.counts.get(word, {}) if isinstance(word, str) else {}
        return any(self._visible(group) for group in groups)


def content_terms(text: str) -> list[str]:
    """The words that can tell one database from another: singular, no stop words, no numbers.

    >>> content_terms("How many tickets were opened in 2023 by each agent?")
    ['many', 'ticket', 'opened', 'each', 'agent']
    """
    return [singular(t) for t in plain_words(text) if t not in _STOP and not t.isdigit()]


#: Words that place or compare rather than name ("last year", "above average", "the same month").
_RELATIVE = frozenset(["above", "below", "last", "next", "other", "over", "previous", "prior", "same", "this", "that",
                       "under"])


def naming_terms(text: str) -> set[str]:
    """The words of a text that may name data: its content terms less the words of asking, of time and of place.

    >>> sorted(naming_terms("How many were hired each year, and what is their total?"))
    []
    >>> sorted(naming_terms("Count the refunds per month")), sorted(naming_terms("the same month last year"))
    (['refund'], [])
    """
    return {singular(t) for t in plain_words(text) if t not in _STOP and t not in _QUESTION_WORDS
            and t not in _RELATIVE and not t.isdigit() and not _TIME.fullmatch(t)}


@dataclass
class EntryLayout:
    """Where each table's entries are: arrays, so a question's scan is a few numpy operations."""

    tables: list[str]
    table_of: np.ndarray  # per entry: index into `tables` for table/column/relationship entries, else -1
    schema_kind: np.ndarray  # per entry: True for table, column and relationship entries
    multi: list[int]  # entries about more than one table (checked one by one)
    columns: dict[str, list[int]]  # table → its column entries
    table_entry: dict[str, int]  # table → its table entry
    multi_tables: list[frozenset[str]]  # the tables of each `multi` entry
    multi_names: frozenset[str]  # every table some `multi` entry is about
    by_table: np.ndarray  # the schema entries, grouped by table in `tables` order
    starts: np.ndarray  # where each table's group begins in `by_table`

    @classmethod
    def of(cls, entries: EntryTable) -> EntryLayout:
        rows = list(zip(entries.kinds, entries.tables, entries.tables_of, strict=True))
        names = sorted({table for kind, table, _ in rows if table is not None and kind != "verified"})
        index = {t: i for i, t in enumerate(names)}
        table_of = np.full(len(entries), -1, dtype=np.int64)
        schema_kind = np.zeros(len(entries), dtype=bool)
        columns: dict[str, list[int]] = defaultdict(list)
        table_entry: dict[str, int] = {}
        multi = []
        for i, (kind, table, tables) in enumerate(rows):
            if kind in ("table", "column", "relationship") and table in index:
                table_of[i] = index[table]
                schema_kind[i] = True
            if len(tables) > 1 and kind in ("table", "column", "relationship"):
                multi.append(i)
            if kind == "column" and table is not None:
                columns[table].append(i)
            if kind == "table" and table is not None:
                table_entry[table] = i
        multi_tables = [frozenset(entries.tables_of[i]) for i in multi]
        placed = np.flatnonzero(table_of >= 0)
        by_table = placed[np.argsort(table_of[placed], kind="stable")]
        starts = np.searchsorted(table_of[by_table], np.arange(len(names)))
        return cls(names, table_of, schema_kind, multi, dict(columns), table_entry, multi_tables,
                   frozenset().union(*multi_tables), by_table, starts)

    @functools.cached_property
    def position(self) -> dict[str, int]:
        """Each table's index in `tables`."""
        return {t: i for i, t in enumerate(self.tables)}

    def entries_of(self, table: int) -> np.ndarray:
        """The schema entries of the table at index `table` of `tables`."""
        end = self.starts[table + 1] if table + 1 < len(self.starts) else len(self.by_table)
        return self.by_table[self.starts[table]:end]

    def table_maxima(self, values: np.ndarray) -> np.ndarray:
        """Per table, the greatest of its entries' values, as float64."""
        if not len(self.tables):
            return np.zeros(0, dtype=np.float64)
        # every table has entries of its own (its name comes from one), so no group of reduceat is empty
        return np.maximum.reduceat(values[self.by_table], self.starts).astype(np.float64)


#: The entries routing's dense evidence averages (with the description's part closest to the question).
EVIDENCE_KINDS = frozenset({"table", "column", "relationship", "verified"})
#: Scopes whose views (`ScopeView`) a live build keeps.
VIEWS = 32


@dataclass(frozen=True)
class ScopeKey:
    """A table predicate compared by `key` (the caller's scope) instead of by identity, so the view a live build
    computed for one call of a scope serves every later call of it (`LiveIndex.view`)."""

    key: Hashable
    allows: Allows = field(compare=False)

    def __call__(self, table: str) -> bool:
        return self.allows(table)


class ScopeView:
    """One caller's part of a build, worked out once per scope so that a question costs no walk over every entry:
    the tables it may read, the entries routing counts (every table an entry is about readable; a verified query
    only with its tables), the schema entries retrieval scores, and BM25's word counts over what it may see."""

    def __init__(self, live: LiveIndex, allows: Allows) -> None:
        self.live, self.allows = live, allows
        self._word_counts: dict[str, int] = {}  # BM25's count of each word asked about so far

    @functools.cached_property
    def table_ok(self) -> dict[str, bool]:
        """Every table some entry is about, and whether the caller may read it."""
        return {t: bool(self.allows(t)) for t in {t for group in set(self.live.entries.tables_of) for t in group}}

    @functools.cached_property
    def visible_tables(self) -> frozenset[str]:
        """The tables entries are about that the caller may read."""
        return frozenset(t for t, ok in self.table_ok.items() if ok)

    @functools.cached_property
    def readable(self) -> dict[str, TableInfo]:
        """The snapshot's tables the caller may read, by qualified name, in the snapshot's order."""
        snapshot = self.live.snapshot
        return {name: t for t in (snapshot.tables if snapshot else []) if self.allows(name := qualified(t))}

    @functools.cached_property
    def readable_columns(self) -> int:
        """How many columns the readable tables have in all."""
        return sum(len(t.columns) for t in self.readable.values())

    @functools.cached_property
    def routing_ids(self) -> np.ndarray:
        """Positions of the entries routing counts (`chunks.counts_for`, inlined)."""
        ok, entries = self.table_ok, self.live.entries
        counted = {group: all(ok[t] for t in group) for group in set(entries.tables_of)}
        return np.array([i for i, (kind, group) in enumerate(zip(entries.kinds, entries.tables_of, strict=True))
                         if counted[group] and (group or kind != "verified")], dtype=np.int64)

    def _routing_ids_of(self, kinds: Container[str]) -> np.ndarray:
        of_kind = self.live.entries.kinds
        return np.array([i for i in self.routing_ids.tolist() if of_kind[i] in kinds], dtype=np.int64)

    @functools.cached_property
    def evidence_ids(self) -> np.ndarray:
        """Positions among `routing_ids` of the entries routing's dense evidence averages (`route.EVIDENCE_KINDS`)."""
        return self._routing_ids_of(EVIDENCE_KINDS)

    @functools.cached_property
    def description_ids(self) -> np.ndarray:
        """Positions among `routing_ids` of the description's entries (whole, and by clause)."""
        return self._routing_ids_of({"description"})

    @functools.cached_property
    def scored(self) -> np.ndarray:
        """Mask over the entries of the schema entries retrieval scores: a table's, its columns' and its
        relationships' (a relationship to a table the caller may not read does not count)."""
        layout, tables = self.live.layout(), self.readable
        allowed = np.array([t in tables for t in layout.tables] + [False], dtype=bool)  # index -1 → False
        usable = layout.schema_kind & allowed[layout.table_of]
        denied = {t for t in layout.multi_names if t not in tables and not self.allows(t)}
        if denied:
            for i, names in zip(layout.multi, layout.multi_tables, strict=True):
                if usable[i] and not denied.isdisjoint(names):
                    usable[i] = False
        return usable

    @functools.cached_property
    def scored_ids(self) -> np.ndarray:
        """Positions of the entries `scored` marks."""
        return np.flatnonzero(self.scored)

    @functools.cached_property
    def scored_selector(self) -> EntrySelector:
        """`scored_ids` as a FAISS search filter."""
        return EntrySelector(self.scored_ids, len(self.live.entries))

    @functools.cached_property
    def evidence_selector(self) -> EntrySelector:
        """`evidence_ids` as a FAISS search filter."""
        return EntrySelector(self.evidence_ids, len(self.live.entries))

    @functools.cached_property
    def scored_tables(self) -> frozenset[str]:
        """The readable tables with at least one scored entry."""
        layout = self.live.layout()
        return frozenset(layout.tables[i] for i in np.unique(layout.table_of[self.scored_ids]).tolist())

    @functools.cached_property
    def _term_groups(self) -> tuple[dict[tuple[str, ...], bool], int]:
        return self.live.terms().seen_by(lambda group: all(map(self.allows, group)))

    def term_counts(self, words: set[str]) -> tuple[dict[str, int], int]:
        """(occurrences of each given word, words in all) over the entries the caller may see (`TermIndex`); each
        word's count is kept with the view once worked out (a common word occurs in thousands of tables' entries)."""
        seen, total = self._term_groups
        known = self._word_counts
        missing = {w for w in words if w not in known}
        if missing:
            counted = self.live.terms().counted(missing, seen)
            known.update({w: counted.get(w, 0) for w in missing})
        return {w: known[w] for w in words if known[w]}, total


# --- what a question says besides its vector ---------------------------------------------------

_TIME = re.compile(
    r"\b(?:(?:1[89]|20)\d\d|years?|yearly|annual\w*|months?|monthly|quarters?|quarterly|weeks?|weekly|days?|daily|"
    r"dates?|dated|when|since|before|after|until|during|recent\w*|latest|earliest|period\w*|trend\w*|"
    r"january|february|march|april|may|june|july|august|september|october|november|december|"
    r"hired?|born|birth\w*|age|aged|old|older|oldest|new|newer|newest|tenure|seniority|senior\w*)\b")
_SALES = re.compile(
    r"\b(?:revenue\w*|sales?|sold|sell\w*|spen[dt]\w*|earn\w*|income|bought|buy\w*|purchas\w*|orders?|ordered|"
    r"basket\w*|turnover|profit\w*|billed|invoiced|paid|pay\w*)\b")
_QUANTITY = re.compile(r"\b(?:quantit\w*|units?|items?|pieces?|copies)\b")
_PRICE = re.compile(
    r"[$€£]|\b(?:pric\w*|costs?|costly|expensive|cheap\w*|dollars?|euros?|money|amounts?|values?|budgets?|fees?)\b")
_DURATION = re.compile(
    r"\b(?:long|longer|longest|short|shorter|shortest|lengths?|lengthy|durations?|minutes?|seconds?|hours?)\b")
_SIZE = re.compile(
    r"\b(?:sizes?|sized|big|bigger|biggest|large|larger|largest|small|smaller|smallest|heavy|bytes?|"
    r"kilobytes?|megabytes?|gigabytes?|kb|mb|gb)\b")
_PERSON = re.compile(r"\b(?:who|whom|whose)\b")
_CUES = (("time", _TIME), ("sales", _SALES), ("quantity", _QUANTITY), ("price", _PRICE), ("duration", _DURATION),
         ("size", _SIZE), ("person", _PERSON))
#: Which kinds of column each cue calls for.
CUE_COLUMNS = {"time": {"time"}, "sales": {"money", "quantity"}, "quantity": {"quantity"}, "price": {"money"},
               "duration": {"duration", "time"}, "size": {"size"}, "person": {"name"}}
#: Which kind of table each cue calls for ("transaction": one with a quantity, or an amount and a date).
CUE_TABLES = {"time": "time", "sales": "transaction", "quantity": "quantity", "price": "money",
              "duration": "duration", "size": "size", "person": "person"}

_TOKEN = re.compile(r"[a-z0-9]+")
_WORD = re.compile(r"[^\W_][\w'’-]*")
_PATTERN_BEFORE = re.compile(r"\b(?:contains?|containing|like|(?:starts?|starting|begins?|beginning|ends?|ending)"
                             r"\s+with)\s*$", re.IGNORECASE)
_QUOTED = re.compile(r"(?:(?<=\s)|(?<=\()|^)['\"‘“]([^'\"‘’“”]+)['\"’”](?=\W|$)")
_CALENDAR = frozenset(["january", "february", "march", "april", "may", "june", "july", "august", "september",
                       "october", "november", "december", "monday", "tuesday", "wednesday", "thursday", "friday",
                       "saturday", "sunday", "i"])
_STOP = frozenset(["a", "an", "and", "are", "at", "be", "by", "for", "from", "how", "in", "is", "it", "of", "on",
                   "or", "the", "to", "was", "what", "which", "who", "with",
                   # the words sentences are built with (profiled free text holds them: "Downloaded files will not
                   # open", "Question about sales tax"), which name no data ("us", "may", "no", "show" can: kept)
                   "about", "am", "been", "being", "both", "but", "can", "could", "did", "do", "does", "doing",
                   "either", "had", "has", "have", "having", "he", "her", "hers", "him", "his", "i", "if", "into",
                   "its", "just", "me", "might", "must", "my", "nor", "not", "our", "ours", "she", "should", "so",
                   "such", "than", "that", "their", "theirs", "them", "then", "these", "they", "this", "those",
                   "too", "very", "we", "were", "whether", "while", "whom", "will", "would", "you", "your", "yours",
                   "d", "ll", "m", "re", "s", "t", "ve"])


@functools.lru_cache(maxsize=1 << 17)  # a big schema's names repeat the same words millions of times
def singular(word: str) -> str:
    """A crude singular, enough to match "customers" with "customer" and "countries" with "country".

    >>> [singular(w) for w in ("customers", "countries", "addresses", "status", "bus", "tracks")]
    ['customer', 'country', 'address', 'status', 'bus', 'track']
    """
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "shes", "ches", "xes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def terms_of(text: str) -> list[str]:
    """Lower-case singular word tokens."""
    return [singular(t) for t in plain_words(text)]


#: Letters with no decomposition to a plain one (NFKD leaves them whole).
_PLAIN = str.maketrans({"ø": "o", "æ": "ae", "œ": "oe", "ł": "l", "đ": "d", "ð": "d", "þ": "th", "ı": "i"})


def plain_words(text: str) -> list[str]:
    """The lower-case words of a text, accents taken off: a name is matched however it is typed, with its accents or
    without ("Luís Gonçalves", "Luis Goncalves").

    >>> plain_words("Luís Gonçalves, Bjørn Hansen & Straße 34")
    ['luis', 'goncalves', 'bjorn', 'hansen', 'strasse', '34']
    """
    return _TOKEN.findall(plain(text))


def plain(text: str) -> str:
    """A text in lower case with its accents taken off (`plain_words`)."""
    text = text.casefold()
    if text.isascii():  # most texts are: they skip the pass letter by letter
        return text
    return "".join(c for c in unicodedata.normalize("NFKD", text.translate(_PLAIN)) if not unicodedata.combining(c))


@dataclass(frozen=True)
class Cues:
    """What a question says besides its vector: its words, and the kinds of data it asks about."""

    tokens: tuple[str, ...]
    terms: frozenset[str]
    asks: frozenset[str]
    names: tuple[str, ...]

    @property
    def column_kinds(self) -> set[str]:
        """The kinds of column the question calls for."""
        return {kind for cue in self.asks for kind in CUE_COLUMNS[cue]}

    @property
    def table_kinds(self) -> set[str]:
        """The kinds of table the question calls for."""
        return {CUE_TABLES[cue] for cue in self.asks}


def is_name_word(token: str) -> bool:
    """Whether a name value's word may name it: not a stop word, a number or a letter ("AC/DC" is two words)."""
    return token not in _STOP and len(token) > 1 and not token.isdigit()


def read_question(question: str) -> Cues:
    """The cues of one question.

    >>> cues = read_question("Which customers spent the most in 2010?")
    >>> sorted(cues.asks), "customer" in cues.terms
    (['sales', 'time'], True)
    """
    lower = question.lower()
    tokens = tuple(terms_of(lower))
    asks = frozenset(cue for cue, pattern in _CUES if pattern.search(lower))
    return Cues(tokens, frozenset(tokens), asks, tuple(names_in(question)))


def names_in(question: str) -> list[str]:
    """Quoted strings, and capitalised words but the first: what may be values to look up.

    >>> names_in("Which albums are by Led Zeppelin (any artist whose name contains 'zeppelin')?")
    ['zeppelin', 'Led', 'Zeppelin']
    """
    out = list(_QUOTED.findall(question))
    for i, match in enumerate(_WORD.finditer(question)):
        word = match.group().rstrip("'’")
        if i and word[:1].isupper() and word.lower() not in _CALENDAR:
            out.append(word)
    return out


def quoted_patterns(question: str) -> set[str]:
    """The words of quoted strings the question matches values against, not names ("starts with 'Greatest'").

    >>> sorted(quoted_patterns("Albums whose title contains 'Greatest Hits' by 'Queen'"))
    ['greatest', 'hit']
    """
    return {t for m in _QUOTED.finditer(question) if _PATTERN_BEFORE.search(question[:m.start()])
            for t in terms_of(m.group(1))}


def quoted_spans(question: str) -> list[tuple[int, int]]:
    """Where the question's quoted strings are (start and end of each, quotes included).

    >>> quoted_spans("Tracks by 'Simon and Garfunkel' and won't-play songs")
    [(10, 31)]
    """
    return [m.span() for m in _QUOTED.finditer(question)]


def unknown_runs(question: str, vocabulary: Container[str], known: Container[str] = frozenset()) -> list[str]:
    """Runs of two or more words the datasource's texts never use and that spell none of its values (`known`: the
    question's words found in a value it matched): a name written in lower case ("led zeppelin").

    >>> unknown_runs("Which albums did led zeppelin release?", {"album", "release"})
    ['led zeppelin']
    >>> unknown_runs("Which album has the most tracks?", {"album", "track"})
    []
    >>> unknown_runs("How many tracks are in the heavy metal genre?", {"track", "genre"}, {"heavy", "metal"})
    []
    """
    runs: list[list[str]] = [[]]
    for match in _WORD.finditer(question.lower()):
        word = match.group().rstrip("'’")
        spelled = singular(plain(word))
        if word in _STOP or word in _QUESTION_WORDS or word.isdigit() or spelled in vocabulary or spelled in known:
            runs.append([])
        else:
            runs[-1].append(word)
    return [" ".join(run) for run in runs if len(run) >= 2]


#: Words of questions, not of data, beyond the stop words: they never make a run of unknown words.
_QUESTION_WORDS = frozenset(["all", "any", "average", "biggest", "count", "each", "ever", "every", "few", "fewest",
                             "find", "give", "highest", "least", "list", "lowest", "many", "more", "most", "much",
                             "number", "only", "per", "show", "smallest", "there", "top", "total", "us", "when",
                             "where", "whose", "why"])


# --- what retrieval knows of a datasource besides vectors -----------------------------------------

_NAME_WORDS = {"name", "title"}
_PERSON_NAME = re.compile(r"\b(?:first|last|full|given|family|sur|middle)\s?name\b|\bsurname\b")
_MONEY_NAME = re.compile(r"price|total|amount|cost|revenue|budget|fee|salary|spend|paid|value|usd|eur")
_QUANTITY_NAME = re.compile(r"quantity|qty|units|items|count")
_DURATION_NAME = re.compile(r"milli|second|minute|hour|duration|length|\bs$")
_SIZE_NAME = re.compile(r"byte|size|\b[kmg]b$")
_dtype = cache(dtype_of)  # type names repeat: parse each once


def column_kinds(name: str, type_name: str) -> set[str]:
    """What a column holds, from its name and type: name, person, time, money, quantity, duration, size.

    >>> sorted(column_kinds("UnitPrice", "NUMERIC(10,2)")), sorted(column_kinds("duration_s", "INTEGER"))
    (['money'], ['duration'])
    """
    spelled = words(name)
    dtype = _dtype(type_name)
    cat = category(dtype)
    kind: set[str] = set()
    if cat == "text" and spelled.split()[-1:] and spelled.split()[-1] in _NAME_WORDS:
        kind.add("name")
    if cat == "text" and _PERSON_NAME.search(spelled):
        kind |= {"person", "name"}
    if cat == "temporal":
        kind.add("time")
    if cat == "number":
        for label, pattern in (("quantity", _QUANTITY_NAME), ("duration", _DURATION_NAME), ("size", _SIZE_NAME)):
            if pattern.search(spelled):
                kind.add(label)
        if dtype == "decimal" or _MONEY_NAME.search(spelled):
            kind.add("money")
    return kind


@dataclass
class SchemaFacts:
    """Words and kinds of each table and column, and the profiled sample values, for lexical matching."""

    table_words: dict[str, frozenset[str]]
    column_words: dict[tuple[str, str], frozenset[str]]
    column_kinds: dict[str, dict[str, frozenset[str]]]
    table_kinds: dict[str, set[str]]
    samples: dict[tuple[str, str], list[str]]
    values: dict[str, list[tuple[tuple[str, ...], str, str]]]
    value_words: dict[str, set[tuple[str, str]]]
    vocabulary: frozenset[str]
    #: Name values (`ColumnProfile.name_values`) by their first word: (words, table, column).
    names: dict[str, list[tuple[tuple[str, ...], str, str]]] = field(default_factory=dict)
    #: Columns whose every value is known (all sampled, or all kept as name values).
    complete: set[tuple[str, str]] = field(default_factory=set)

    @functools.cached_property
    def _column_sets(self) -> WordSets:
        return WordSets(self.column_words)

    @functools.cached_property
    def _table_sets(self) -> WordSets:
        return WordSets(self.table_words)

    def named_columns(self, terms: set[str] | frozenset[str], tables: Container[str]) -> set[tuple[str, str]]:
        """Columns of `tables` whose every word is among `terms` (key columns, which have none, never)."""
        return {key for key in self._column_sets.named(terms) if key[0] in tables}

    def named_tables(self, terms: set[str] | frozenset[str], tables: Container[str]) -> set[str]:
        """Tables of `tables` whose name's every word is among `terms` ("customers" → Customer)."""
        return {t for t in self._table_sets.named(terms) if t in tables}

    @classmethod
    def of(cls, snapshot: SchemaSnapshot | None, entries: EntryTable) -> SchemaFacts:
        """The facts of one build. Equal words, word sets, kinds and (table, column) keys are one object each: at
        20,000 tables a copy of each per column held a third of what serving a build takes."""
        shared: dict[Hashable, Any] = {}

        def one(value: Hashable) -> Any:
            return shared.setdefault(value, value)

        def spelled(text: str) -> list[str]:
            return [one(w) for w in terms_of(text)]

        table_words: dict[str, frozenset[str]] = {}
        column_words: dict[tuple[str, str], frozenset[str]] = {}
        kinds: dict[str, dict[str, frozenset[str]]] = {}
        read: dict[tuple[str, str], tuple[frozenset[str], frozenset[str]]] = {}  # (name, type) → words, kinds
        for table in snapshot.tables if snapshot else []:
            name = qualified(table)
            table_words[name] = one(frozenset(spelled(words(table.name))))
            found_kinds = {}
            for col in table.columns:
                if (col.name, col.type) not in read:  # a big schema repeats its column names table after table
                    said = spelled(words(col.name))
                    read[(col.name, col.type)] = (one(frozenset() if said[-1:] == ["id"] else frozenset(said)),
                                                  frozenset(column_kinds(col.name, col.type)))
                column_words[(name, col.name)], kinds_of = read[(col.name, col.type)]
                found_kinds[col.name] = set(kinds_of)
            if any("person" in k for k in found_kinds.values()):  # a person's name, not a job title, names a row
                for k in found_kinds.values():
                    if "person" not in k:
                        k.discard("name")
            kinds[name] = {column: one(frozenset(k)) for column, k in found_kinds.items()}
        table_kinds = {}
        for name, columns in kinds.items():
            found = set().union(*columns.values())
            if "quantity" in found or {"money", "time"} <= found:
                found.add("transaction")
            table_kinds[name] = found
        samples: dict[tuple[str, str], list[str]] = {}  # only columns with sampled values
        values: dict[str, list[tuple[tuple[str, ...], str, str]]] = defaultdict(list)
        value_words: dict[str, set[tuple[str, str]]] = defaultdict(set)
        names: dict[str, list[tuple[tuple[str, ...], str, str]]] = defaultdict(list)
        complete: set[tuple[str, str]] = set()
        rows = {qualified(t): t.row_count for t in snapshot.tables} if snapshot else {}
        for table, column, metadata in entries.column_metadata():
            # every value is known when the profile read every row and kept each distinct value it found
            kept = len(metadata.get("names") or metadata.get("samples") or [])
            if kept and kept >= (metadata.get("distinct") or 0) and (metadata.get("sampled_rows") or 0) >= (
                    rows.get(table) or 0):
                complete.add(one((table, column)))
            for value in metadata.get("names") or []:
                tokens = tuple(spelled(str(value)))
                if any(is_name_word(t) for t in tokens):
                    names[tokens[0]].append((one(tokens), table, column))
            found_values = [str(v) for v in metadata.get("samples") or []]
            if not found_values:
                continue
            key = one((table, column))
            samples[key] = found_values
            for value in found_values:
                tokens = tuple(spelled(value))
                meaningful = [t for t in tokens if t not in _STOP and len(t) > 2 and not t.isdigit()]
                if not meaningful:
                    continue
                values[tokens[0]].append((one(tokens), table, column))
                for token in meaningful:
                    value_words[token].add(key)
        vocabulary = frozenset().union(*table_words.values(), *column_words.values())
        return cls(table_words, column_words, kinds, table_kinds, samples, dict(values), dict(value_words),
                   vocabulary, dict(names), complete)

    def value_words_in(self, cues: Cues, columns: Iterable[tuple[str, str]]) -> set[str]:
        """The question's words found in a sample or name value of these columns (those `value_hits` matched)."""
        _, spelled = self.name_hits(cues, {table for table, _ in columns})
        return (spelled | {word for key in columns for value in self.samples.get(key, ())
                           for word in terms_of(value)}) & cues.terms

    def name_hits(self, cues: Cues, tables: Container[str]) -> tuple[set[tuple[str, str]], set[str]]:
        """Which columns of `tables` hold a name value the question spells whole, and the words of those it spells.

        A value of two words that name something matches wherever the question has its words in order ("which
        albums did led zeppelin release"); a value of one, only where the question writes it as a name, capitalised
        or quoted ("What did Luís Gonçalves buy?"): a one-word album title ("Live") is not named by "live".
        """
        matched = self._name_matches(cues, tables)
        return set(matched), set().union(*matched.values())

    def name_tables(self, cues: Cues, tables: Container[str]) -> list[str]:
        """The tables of `tables` holding a name value the question spells, but one that spells only some of the words
        another spells ("Frank Harris": the customer, not the album "Frank" or a composer "Harris")."""
        by_table: dict[str, set[str]] = defaultdict(set)
        for (table, _), spelled in self._name_matches(cues, tables).items():
            by_table[table] |= spelled
        return sorted(t for t, spelled in by_table.items() if not any(spelled < other for other in by_table.values()))

    def _name_matches(self, cues: Cues, tables: Container[str]) -> dict[tuple[str, str], set[str]]:
        """(table, column) → the words of the question its name values spell (see `name_hits`)."""
        matched: dict[tuple[str, str], set[str]] = defaultdict(set)
        tokens = cues.tokens
        written = {t for name in cues.names for t in terms_of(name)}
        for i, token in enumerate(tokens):
            for value, table, column in self.names.get(token, ()):
                if table in tables and tuple(tokens[i:i + len(value)]) == value and (
                        sum(map(is_name_word, value)) > 1 or any(t in written for t in value)):
                    matched[(table, column)].update(value)
        return matched

    def value_hits(self, cues: Cues, tables: set[str]) -> tuple[set[tuple[str, str]], list[str]]:
        """Which columns of `tables` hold a value the question names, and which names in it match nothing.

        A value matches when the question contains all of its words; a word of the question that
        names no table or column, and a name in it (`names_in`), also match a value containing that
        word ("videos", "MPEG" → "Protected MPEG-4 video file"). A name that matches no value and
        is not a table or column word is returned as unmatched: a value nobody profiled. Only the
        values of `tables` (those the caller may read) are looked at.
        """
        def words_of(token: str) -> set[tuple[str, str]]:
            return {hit for hit in self.value_words.get(token, ()) if hit[0] in tables}

        tokens = cues.tokens
        hits, spelled = self.name_hits(cues, tables)
        for i, token in enumerate(tokens):
            for value, table, column in self.values.get(token, ()):
                if table in tables and tuple(tokens[i:i + len(value)]) == value:
                    hits.add((table, column))
            if len(token) > 3 and token not in _STOP and token not in self.vocabulary:
                hits |= words_of(token)
        unmatched = []
        for name in cues.names:
            terms = [t for t in terms_of(name) if t not in _STOP]
            if not terms or set(terms) <= self.vocabulary | spelled:
                continue
            found = [words_of(t) for t in terms]
            if all(found):
                hits |= set().union(*found)
            else:
                unmatched.append(name)
        return hits, unmatched


class WordSets:
    """Names grouped by the set of words they are spelled with: a question's words are checked against each distinct
    set that shares one of them, so the cost follows how many ways names are spelled, not how many names share a
    word ("name" is a word of thousands of columns, spelled alike)."""

    def __init__(self, spelled: Mapping[Hashable, frozenset[str]]) -> None:
        groups: dict[frozenset[str], list] = defaultdict(list)
        for name, found in spelled.items():
            if found:  # (a key column is spelled with no word: no question names it)
                groups[found].append(name)
        self.groups = dict(groups)
        by_word: dict[str, list[frozenset[str]]] = defaultdict(list)
        for found in self.groups:
            for word in found:
                by_word[word].append(found)
        self.by_word = dict(by_word)

    def named(self, terms: set[str] | frozenset[str]) -> Iterator[Hashable]:
        """Each name whose every word is among `terms`."""
        candidates = {found for term in terms for found in self.by_word.get(term, ())}
        for found in candidates:
            if found <= terms:
                yield from self.groups[found]


@dataclass
class RetrievedColumn:
    """A column sent to the planner."""

    name: str
    type: str
    nullable: bool
    primary_key: bool
    references: str | None = None
    samples: list[str] = field(default_factory=list)
    score: float = 0.0
    likely: bool = False  # the reference is inferred from names and data, not declared by the database


@dataclass
class RetrievedTable:
    """A table sent to the planner, with the columns chosen for it."""

    name: str
    score: float
    columns: list[RetrievedColumn]
    total_columns: int
    row_count: int | None
    reason: str = "match"


@dataclass
class RetrievedSchema:
    """What the planner sees of one datasource for one question."""

    datasource_id: str
    tables: list[RetrievedTable]
    foreign_keys: list[str]

    @property
    def column_count(self) -> int:
        """Columns sent in all."""
        return sum(len(t.columns) for t in self.tables)

    def table_names(self) -> list[str]:
        """The tables sent."""
        return [t.name for t in self.tables]

    def render_ddl(self, dialect: str) -> str:
        """The tables as CREATE TABLE statements in the dialect (names quoted where it needs), with keys,
        references, and sample values of filterable columns as comments: the form models trained on SQL read.

        >>> schema = RetrievedSchema("shop", [RetrievedTable("order lines", 1.0, [
        ...     RetrievedColumn("id", "INTEGER", False, True),
        ...     RetrievedColumn("status", "TEXT", True, False, samples=["open", "shipped"]),
        ...     RetrievedColumn("order_id", "INTEGER", False, False, references="orders.id")], 3, 10)], [])
        >>> print(schema.render_ddl("sqlite"))
        CREATE TABLE "order lines" (
          id INTEGER PRIMARY KEY,
          status TEXT,  -- e.g. 'open', 'shipped'
          order_id INTEGER REFERENCES orders(id)
        );
        """
        from sqlglot import exp

        from nl2sql.datasources.guard import sqlglot_dialect

        target = sqlglot_dialect(dialect)

        def name(text: str) -> str:
            return exp.to_identifier(text).sql(dialect=target)

        statements = []
        for table in self.tables:
            keys = [c.name for c in table.columns if c.primary_key]
            lines = []
            for c in table.columns:
                line = f"  {name(c.name)} {c.type or ''}".rstrip()
                if c.primary_key and len(keys) == 1:
                    line += " PRIMARY KEY"
                if c.references:
                    ref_table, ref_column = c.references.rsplit(".", 1)
                    line += f" REFERENCES {exp.to_table(ref_table).sql(dialect=target)}({name(ref_column)})"
                lines.append([line, c])
            if len(keys) > 1:
                lines.append([f"  PRIMARY KEY ({', '.join(name(k) for k in keys)})", None])
            body = []
            for i, (line, column) in enumerate(lines):
                line += "," if i < len(lines) - 1 else ""
                notes = ["likely key (inferred, not declared)"] if column is not None and column.likely else []
                if column is not None and column.samples:
                    notes.append("e.g. " + ", ".join(repr(v) for v in column.samples[:6]))
                if notes:
                    line += "  -- " + "; ".join(notes)
                body.append(line)
            more = (f"  -- and {table.total_columns - len(table.columns)} more columns\n"
                    if len(table.columns) < table.total_columns else "")
            statements.append(f"CREATE TABLE {exp.to_table(table.name).sql(dialect=target)} (\n"
                              + "\n".join(body) + f"\n{more});")
        return "\n".join(statements)

    def outline(self) -> str:
        """One line per table, its name and its columns' names: what a database holds, for a model that chooses
        between databases and writes no query on this one (a fraction of `render`'s tokens).

        >>> RetrievedSchema("shop", [RetrievedTable("orders", 1.0, [RetrievedColumn("id", "INTEGER", False, True),
        ...     RetrievedColumn("placed_on", "DATE", True, False)], 3, 10)], []).outline()
        'orders(id, placed_on, …)'
        """
        return "\n".join(f"{t.name}({', '.join(c.name for c in t.columns)}"
                         f"{', …' if len(t.columns) < t.total_columns else ''})" for t in self.tables)

    def render(self) -> str:
        """A compact text for prompts and the CLI."""
        lines = []
        for table in self.tables:
            cols = []
            for c in table.columns:
                bits = [c.type or "?"]
                if c.primary_key:
                    bits.append("PK")
                if c.references:
                    bits.append(f"→ {c.references}" + (" (likely)" if c.likely else ""))
                if c.samples:
                    bits.append("e.g. " + ", ".join(repr(s) for s in c.samples[:6]))
                cols.append(f"  {c.name} ({'; '.join(bits)})")
            more = f" (+{table.total_columns - len(table.columns)} more columns)" if len(table.columns) < table.total_columns else ""
            rows = f", {table.row_count} rows" if table.row_count is not None else ""
            lines.append(f"{table.name}{rows}{more}:")
            lines.extend(cols)
        return "\n".join(lines)


class Retriever:
    """Search over the live builds of a store; loads each build once."""

    def __init__(self, store: StateStore, embedder: Embedder) -> None:
        self.store = store
        self.embedder = embedder
        self._live: dict[str, LiveIndex] = {}
        self._lock = threading.Lock()

    def live(self, datasource_id: str) -> LiveIndex | None:
        """The live build of a datasource (reloaded when the live pointer moved), or None before any build."""
        info = self.store.live_build(datasource_id)
        if info is None:
            return None
        with self._lock:
            cached = self._live.get(datasource_id)
            if cached is None or cached.build_id != info.build_id:
                cached = self._load(datasource_id, info)
                self._live[datasource_id] = cached
                if info.model_id and info.model_id != self.embedder.model_id:
                    # e.g. after NL2SQL_EMBED_PRECISION changed: it still retrieves (the vectors are cosine
                    # ~0.99 apart), but questions and entries should come from one model
                    log.warning("The live index of %s was embedded by %s, questions are embedded by %s: rebuild it "
                                "(nl2sql index build --datasource %s).", datasource_id, info.model_id,
                                self.embedder.model_id, datasource_id)
        return cached

    def _load(self, datasource_id: str, info: BuildInfo) -> LiveIndex:
        """A committed build read for search: its segments' files mapped, its entries and snapshot read."""
        with collection_paused():  # a big build's entries and snapshot are objects by the hundred thousand
            index = SegmentedIndex([read_index(self.store.index_path(datasource_id, s.segment_id), mapped=True)
                                    for s in self.store.segments(info.build_id)])
            snapshot = self.store.snapshot(datasource_id, info.fingerprint) if info.fingerprint else None
            # keys the database does not declare, inferred at build time, read like declared ones from here on
            snapshot = with_inferred_keys(snapshot) if snapshot is not None else None
            return LiveIndex(info.build_id, self.store.entry_table(info.build_id), index, snapshot, graph=index.graph)

    def embed(self, question: str) -> np.ndarray:
        """The question's unit vector."""
        return self.embedder.embed_cached([question])[0]

    # --- schema retrieval ----------------------------------------------------------------------

    def schema_for(self, question: str, datasource_id: str, allows: Allows, *, table_k: int = 8, planning_k: int = 4,
                   wide_table_columns: int = 3, mmr_lambda: float = 1.0, query: np.ndarray | None = None,
                   min_seeds: int = MIN_SEEDS, seed_gap: float = SEED_GAP, name_bonus: float = NAME_BONUS,
                   value_bonus: float = VALUE_BONUS, cue_bonus: float = CUE_BONUS, primary_gap: float = PRIMARY_GAP,
                   min_columns: int = MIN_COLUMNS, column_gap: float = COLUMN_GAP,
                   whole_schema_columns: int = 0, search_k: int = SEARCH_K) -> RetrievedSchema:
        """The tables and columns the planner should see for this question in this datasource (see the module doc)."""
        live = self.live(datasource_id)
        if live is None or live.snapshot is None:
            return RetrievedSchema(datasource_id, [], [])
        query = self.embed(question) if query is None else query
        facts = live.facts()
        view = live.view(allows)  # the caller's tables and entries, worked out once per scope
        tables, layout, scored = view.readable, live.layout(), view.scored_tables
        # the caller's entries only: all scored, unless they are many in a graph index: then the `search_k` best
        # by a search of it (the tables it does not reach are scored exactly when a bonus, a join or a lookup brings
        # them in); a flat index's filtered scan costs more than scoring by id, so a flat build is always scored
        sims = np.full(len(live.entries), -np.inf, dtype=np.float32)
        exact = not live.graph or len(view.scored_ids) <= EXACT_UP_TO
        if exact:
            sims[view.scored_ids] = live.scores(query, view.scored_ids)
        else:
            hit, hit_sims = live.search(query, view.scored_selector, search_k)
            sims[hit] = hit_sims
        maxima = layout.table_maxima(sims)
        column_sims = _LazyColumnSims(live, layout, sims)
        cues = read_question(question)
        named = facts.named_tables(cues.terms, tables)
        valued, unmatched = facts.value_hits(cues, scored)
        picks = valued | facts.named_columns(cues.terms, scored)
        valued_tables = {t for t, _ in valued}
        position = layout.position
        bonus = cue_bonus * live.kind_counts(cues.table_kinds)
        for t in named & scored:
            bonus[position[t]] += name_bonus
        for t in valued_tables & scored:
            bonus[position[t]] += value_bonus
        score = _TableScores(position, maxima, bonus, scored)

        def complete(more: Iterable[str]) -> None:
            """Score exactly the scored entries of these tables that the search did not return."""
            for t in [] if exact else [t for t in more if t in scored]:
                entries = layout.entries_of(position[t])
                missing = entries[view.scored[entries] & ~np.isfinite(sims[entries])]
                if len(missing):
                    sims[missing] = live.scores(query, missing)
                    maxima[position[t]] = float(sims[entries].max())

        complete(named | valued_tables)
        if view.readable_columns <= whole_schema_columns:
            # small enough to send whole: nothing the question needs is left out, and in the snapshot's order the
            # prompt's schema is the same for every question (a model server's prefix cache then reuses it)
            whole = list(tables)
            out = [_retrieved(tables[t], score.get(t, 0.0), {c.name for c in tables[t].columns}, column_sims, allows,
                              facts, "whole schema") for t in whole]
            return RetrievedSchema(datasource_id, out, _foreign_key_lines(whole, tables))
        ranked = score.top(table_k)
        table_vec = {t: live.vector(layout.table_entry[t]) for t in ranked if t in layout.table_entry}
        top = score[ranked[0]] if ranked else 0.0
        chosen = _mmr(ranked, score, table_vec, planning_k, mmr_lambda)
        chosen = chosen[:min_seeds] + [t for t in chosen[min_seeds:] if score[t] >= top - seed_gap]
        for kind in sorted(cues.table_kinds):  # the best table of each kind the question calls for
            of_kind = [t for t in ranked if kind in facts.table_kinds.get(t, set())]
            if of_kind and of_kind[0] not in chosen:
                chosen.append(of_kind[0])
        # a table holding a name the question spells is about what it asks ("tracks by Metallica": Artist)
        chosen += [t for t in facts.name_tables(cues, scored) if t not in chosen]
        reasons = {t: "match" for t in chosen}
        runs = unknown_runs(question, live.terms().vocabulary(lambda group: all(map(allows, group))),
                            facts.value_words_in(cues, valued))
        if unmatched or runs:
            # a name no profiled value knows: offer the tables where names are looked up, but those whose every name
            # is known and none matched (a piece of a value, "starts with 'Greatest'", may still be in any of them)
            patterns = quoted_patterns(question)
            whole = not any(set(terms_of(name)) <= patterns for name in unmatched)
            for lookup in _named_parents(chosen, tables, facts, wide_table_columns, whole=whole):
                chosen.append(lookup)
                reasons[lookup] = "name lookup"
        for bridge in _bridges(chosen, tables, live.joins()):
            if bridge not in reasons:
                chosen.append(bridge)
                reasons[bridge] = "join path"
        complete(chosen)
        sent = set(chosen)
        out = []
        for t in chosen:
            primary = score.get(t, -1.0) >= top - primary_gap
            # foreign keys kept: to tables sent or named, and to tables the caller may not read (the key is
            # all the caller has of that relationship)
            keyed = sent | named | {_target(fk) for fk in tables[t].foreign_keys if _target(fk) not in tables}
            picked = _columns(tables[t], facts, cues, picks, column_sims, keyed, wide=wide_table_columns,
                              min_columns=min_columns if primary else 0, column_gap=column_gap)
            out.append(_retrieved(tables[t], score.get(t, 0.0), picked, column_sims, allows, facts, reasons[t]))
        return RetrievedSchema(datasource_id, out, _foreign_key_lines(chosen, tables))


class _TableScores(Mapping[str, float]):
    """Each scored table's score (best similarity plus bonuses), read from one array over the layout's tables."""

    def __init__(self, position: dict[str, int], maxima: np.ndarray, bonus: np.ndarray,
                 tables: frozenset[str]) -> None:
        self._position, self._maxima, self._bonus, self._tables = position, maxima, bonus, tables

    def __getitem__(self, table: str) -> float:
        value = float(self._maxima[self._position[table]] + self._bonus[self._position[table]]) \
            if table in self._tables else -math.inf
        if not math.isfinite(value):  # not the caller's, or not reached by a search: no score (yet)
            raise KeyError(table)
        return value

    def __iter__(self) -> Iterator[str]:
        return (t for t in self._tables if t in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def top(self, k: int) -> list[str]:
        """The `k` best tables, best first (ties in the layout's order)."""
        values = self._maxima + self._bonus
        finite = np.flatnonzero(np.isfinite(values))
        if len(finite) > k:
            finite = finite[np.argpartition(-values[finite], k - 1)[:k]]
        order = finite[np.lexsort((finite, -values[finite]))]
        tables = list(self._position)
        return [tables[i] for i in order.tolist()]


def _foreign_key_lines(sent: list[str], tables: dict[str, TableInfo]) -> list[str]:
    """The foreign keys between the tables sent, as `Track.GenreId → Genre.GenreId` (an inferred one marked
    `(likely)`)."""
    among = set(sent)
    return [f"{t}.{','.join(fk.columns)} → {fk.ref_table}.{','.join(fk.ref_columns)}"
            + (" (likely)" if fk.confidence is not None else "")
            for t in sent for fk in tables[t].foreign_keys if _target(fk) in among]


class _LazyColumnSims(dict):
    """(table, column) → similarity, filled one table at a time when asked (most tables never are)."""

    def __init__(self, live: LiveIndex, layout: EntryLayout, sims: np.ndarray) -> None:
        super().__init__()
        self._live, self._layout, self._sims, self._done = live, layout, sims, set()

    def _fill(self, table: str) -> None:
        if table not in self._done:
            self._done.add(table)
            columns = self._live.entries.columns
            for i in self._layout.columns.get(table, []):
                column = columns[i]
                if column:
                    super().__setitem__((table, column), float(self._sims[i]))

    def __getitem__(self, key: tuple[str, str]) -> float:
        self._fill(key[0])
        return super().__getitem__(key)

    def get(self, key: tuple[str, str], default: float | None = None) -> float | None:  # type: ignore[override]
        self._fill(key[0])
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, tuple) and key:
            self._fill(key[0])
        return super().__contains__(key)


def _columns(table: TableInfo, facts: SchemaFacts, cues: Cues, picks: set[tuple[str, str]],
             column_sims: dict[tuple[str, str], float], wanted_tables: set[str], *, wide: int, min_columns: int,
             column_gap: float) -> set[str]:
    """Which columns of a chosen table to send (see the module doc)."""
    name = qualified(table)
    if len(table.columns) <= wide:
        return {c.name for c in table.columns}
    picked = {c.name for c in table.columns if c.primary_key}
    picked |= {c for fk in table.foreign_keys if _target(fk) in wanted_tables for c in fk.columns}
    wanted = cues.column_kinds
    picked |= {c for c, kind in facts.column_kinds.get(name, {}).items() if "name" in kind or kind & wanted}
    picked |= {c for t, c in picks if t == name}
    others = sorted((c.name for c in table.columns if c.name not in picked),
                    key=lambda c: -column_sims.get((name, c), -1.0))
    if others and min_columns:
        ceiling = column_sims.get((name, others[0]), -1.0)
        picked |= set(others[:min_columns])
        picked |= {c for c in others if column_sims.get((name, c), -1.0) >= ceiling - column_gap}
    return picked


def _retrieved(table: TableInfo, score: float, picked: set[str], column_sims: dict[tuple[str, str], float],
               allows: Allows, facts: SchemaFacts, reason: str) -> RetrievedTable:
    name = qualified(table)
    readable = [fk for fk in table.foreign_keys if allows(_target(fk))]
    refs = {c: f"{fk.ref_table}.{fk.ref_columns[i]}" for fk in readable for i, c in enumerate(fk.columns)}
    likely = {c for fk in readable if fk.confidence is not None for c in fk.columns}
    columns = [RetrievedColumn(name=c.name, type=c.type, nullable=c.nullable, primary_key=c.primary_key,
                               references=refs.get(c.name), samples=list(facts.samples.get((name, c.name), []))[:8],
                               score=column_sims.get((name, c.name), 0.0), likely=c.name in likely)
               for c in table.columns if c.name in picked]
    return RetrievedTable(name=name, score=score, columns=columns, total_columns=len(table.columns),
                          row_count=table.row_count, reason=reason)


def _named_parents(chosen: list[str], tables: dict[str, TableInfo], facts: SchemaFacts, narrow: int, *,
                   whole: bool = False) -> list[str]:
    """Narrow tables with a name column that the chosen ones refer to, directly or through each other.

    They are where a named thing (an artist, a genre) is looked up. With `whole` (the names looked up are whole
    values), a table whose name columns' every value is known (`SchemaFacts.complete`) is passed through, not
    offered: had it held the name, the name would have matched.
    """
    out: list[str] = []
    passed: set[str] = set()
    frontier = list(chosen)
    while frontier:
        name = frontier.pop(0)
        for fk in tables[name].foreign_keys:
            target = _target(fk)
            if target not in tables or target in chosen or target in out or target in passed:
                continue
            named = [c for c, kind in facts.column_kinds.get(target, {}).items() if "name" in kind]
            if named and len(tables[target].columns) <= narrow:
                if whole and all((target, c) in facts.complete for c in named):
                    passed.add(target)
                else:
                    out.append(target)
                frontier.append(target)
    return out


def _target(fk: ForeignKey) -> str:
    return f"{fk.ref_schema}.{fk.ref_table}" if fk.ref_schema else fk.ref_table


def _mmr(ranked: list[str], relevance: dict[str, float], vectors: dict[str, np.ndarray], k: int, lam: float) -> list[str]:
    """Pick k of `ranked` by maximal marginal relevance (relevance against similarity to those already picked)."""
    picked: list[str] = []
    pool = list(ranked)
    while pool and len(picked) < k:
        def gain(t: str) -> float:
            if not picked or t not in vectors:
                return relevance[t]
            redundancy = max(float(vectors[t] @ vectors[p]) for p in picked if p in vectors) if any(
                p in vectors for p in picked) else 0.0
            return lam * relevance[t] - (1 - lam) * redundancy
        choice = max(pool, key=gain)
        picked.append(choice)
        pool.remove(choice)
    return picked


def _bridges(chosen: list[str], tables: Container[str], graph: Mapping[str, Sequence[str]], max_hops: int = 3) -> list[str]:
    """Tables on short foreign-key paths (through `tables` only) that join the chosen tables: a greedy
    Steiner tree.

    Starting from the first chosen table, the chosen table nearest to those already joined is
    joined next, by a shortest path of at most `max_hops`; one out of reach starts a new group.
    """
    if not chosen:
        return []
    added: list[str] = []
    connected = {chosen[0]}
    remaining = [t for t in chosen[1:] if t != chosen[0]]
    while remaining:
        previous = _reach(graph, connected, max_hops, tables, stop=remaining)
        reachable = [t for t in remaining if t in previous]
        target = reachable[0] if reachable else remaining[0]
        if reachable:
            target = min(reachable, key=lambda t: (_hops(previous, t), remaining.index(t)))
            node: str | None = target
            while node is not None:
                if node not in connected and node not in chosen and node not in added:
                    added.append(node)
                connected.add(node)
                node = previous[node]
        connected.add(target)
        remaining.remove(target)
    return added


def _reach(graph: Mapping[str, Sequence[str]], sources: set[str], max_hops: int,
           allowed: Container[str], stop: Collection[str] = ()) -> dict[str, str | None]:
    """Breadth-first from `sources` through `allowed` nodes (each node's neighbours in order): each reached node's
    predecessor on a shortest path. With `stop`, no further than the first hop that reaches one of those nodes
    (what `_bridges` joins next is among them), and of that hop only the stops it reaches."""
    previous: dict[str, str | None] = {s: None for s in sources}
    frontier = sorted(sources)
    stops = [s for s in dict.fromkeys(stop) if s in allowed]
    for hop in range(max_hops):
        if stops:
            # whether the next hop reaches a stop, looked at from the stops' side: a hub table's neighbours are
            # thousands, a stop's a few. A stop's predecessor is the first node of the frontier, in its order,
            # next to it: the one a full expansion of the hop would have met it from.
            order = {node: i for i, node in enumerate(frontier)}
            reached = {s: min(near, key=order.__getitem__) for s in stops if s not in previous
                       if (near := [n for n in graph.get(s, ()) if n in order])}
            if reached:
                previous.update(reached)
                return previous
            if hop == max_hops - 1:
                break  # no stop within reach: the last hop's other nodes are of no use
        nxt = []
        for node in frontier:
            for neighbour in graph.get(node, ()):
                if neighbour in allowed and neighbour not in previous:
                    previous[neighbour] = node
                    nxt.append(neighbour)
        frontier = nxt
    return previous


def _hops(previous: dict[str, str | None], node: str) -> int:
    hops = 0
    while previous[node] is not None:
        node = previous[node]
        hops += 1
    return hops
