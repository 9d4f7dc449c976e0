"""Schema retrieval for one datasource, and routing a question across datasources.

Only entries the caller may see are searched, returned or counted: an entry counts when every
table it is about is in the caller's scope.

Schema retrieval scores each allowed table by its best entry (the table's own, or one of its
columns or relationships), picks `planning_k` tables by maximal marginal relevance among the
`table_k` best, adds the tables that join them (shortest foreign-key paths), then chooses
columns: all of a table's columns up to `wide_table_columns`, else its keys plus its
best-matching columns.

Routing across datasources is in `route.py`.
"""

from __future__ import annotations

import re
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from nl2sql.datasources.models import ForeignKey, SchemaSnapshot, TableInfo
from nl2sql.index.chunks import Entry, qualified, words
from nl2sql.index.embed import Embedder
from nl2sql.index.store import StateStore
from nl2sql.index.vectors import all_vectors, read_index
from nl2sql.plan.join_keys import category, dtype_of

#: Which entries may be used: a check on the tables an entry is about.
Allows = Callable[[str], bool]


@dataclass
class LiveIndex:
    """A committed build loaded for search: its entries, their vectors, and the snapshot it was built from."""

    build_id: str
    entries: list[Entry]
    vectors: np.ndarray
    snapshot: SchemaSnapshot | None

    _facts: SchemaFacts | None = field(default=None, repr=False)

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """Cosine similarity of every entry to the (unit) query vector."""
        return self.vectors @ query if len(self.entries) else np.zeros(0, dtype=np.float32)

    def facts(self) -> SchemaFacts:
        """What the retriever reads from the snapshot and the entries besides vectors (computed once)."""
        if self._facts is None:
            self._facts = SchemaFacts.of(self.snapshot, self.entries)
        return self._facts


# --- what a question says besides its vector ---------------------------------------------------

_TOKEN = re.compile(r"[a-z0-9]+")
_TIME = re.compile(
    r"\b(?:(?:1[89]|20)\d\d|years?|yearly|annual\w*|months?|monthly|quarters?|quarterly|weeks?|weekly|days?|daily|"
    r"dates?|dated|when|since|before|after|until|during|recent\w*|latest|earliest|period\w*|trend\w*|time\w*|"
    r"january|february|march|april|may|june|july|august|september|october|november|december|"
    r"hired?|born|birth\w*|age|aged|old|older|oldest|new|newer|newest|longest-serving|tenure|seniority|senior\w*)\b")
_SALES = re.compile(
    r"\b(?:revenue\w*|sales?|sold|sell\w*|spen[dt]\w*|earn\w*|income|bought|buy\w*|purchas\w*|orders?|ordered|"
    r"basket\w*|turnover|profit\w*|billed|invoiced|paid|pay\w*|units?)\b")
_PRICE = re.compile(
    r"[$€£]|\b(?:pric\w*|costs?|costly|expensive|cheap\w*|dollars?|euros?|money|amounts?|values?|budgets?|fees?)\b")
_DURATION = re.compile(
    r"\b(?:long|longer|longest|short|shorter|shortest|lengths?|lengthy|durations?|minutes?|seconds?|hours?)\b")
_SIZE = re.compile(
    r"\b(?:sizes?|sized|big|bigger|biggest|large|larger|largest|small|smaller|smallest|heavy|bytes?|"
    r"kilobytes?|megabytes?|gigabytes?|kb|mb|gb)\b")
#: Which kinds of column each cue of a question calls for.
CUE_KINDS = {"time": {"time"}, "sales": {"money", "quantity"}, "price": {"money"}, "duration": {"duration", "time"},
             "size": {"size"}}
#: Which kind of table each cue calls for ("transaction": a quantity, or an amount with a date).
CUE_TABLES = {"time": "time", "sales": "transaction", "price": "money", "duration": "duration", "size": "size"}
_NAME_WORDS = {"name", "title"}
_MONEY_NAME = re.compile(r"price|total|amount|cost|revenue|budget|fee|salary|spend|paid|value|usd|eur")
_QUANTITY_NAME = re.compile(r"quantity|qty|units|items|count")
_DURATION_NAME = re.compile(r"milli|second|minute|hour|duration|length|\\bs$")
_SIZE_NAME = re.compile(r"byte|size|\\b[kmg]b$")
_STOP = frozenset(["a", "an", "and", "are", "at", "be", "by", "for", "from", "how", "in", "is", "it", "of", "on", "or", "the", "to", "was", "what", "which", "who", "with"])


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
    return [singular(t) for t in _TOKEN.findall(text.lower())]


@dataclass(frozen=True)
class Cues:
    """What a question says besides its vector: its words, and whether it asks about time or money."""

    tokens: tuple[str, ...]
    terms: frozenset[str]
    asks: frozenset[str]

    @property
    def kinds(self) -> set[str]:
        """The kinds of column the question calls for."""
        return {kind for cue in self.asks for kind in CUE_KINDS[cue]}

    @property
    def table_kinds(self) -> set[str]:
        """The kinds of table the question calls for."""
        return {CUE_TABLES[cue] for cue in self.asks}


def read_question(question: str) -> Cues:
    """The cues of one question.

    >>> cues = read_question("Which customers spent the most in 2010?")
    >>> sorted(cues.asks), "customer" in cues.terms
    (['sales', 'time'], True)
    """
    lower = question.lower()
    tokens = tuple(terms_of(lower))
    asks = {cue for cue, pattern in (("time", _TIME), ("sales", _SALES), ("price", _PRICE),
                                           ("duration", _DURATION), ("size", _SIZE))
            if pattern.search(lower)}
    return Cues(tokens, frozenset(tokens), frozenset(asks))


@dataclass
class SchemaFacts:
    """Per-table lexical facts: name words, column words and kinds, sample values."""

    table_words: dict[str, frozenset[str]]
    column_words: dict[tuple[str, str], frozenset[str]]
    column_kinds: dict[str, dict[str, set[str]]]
    table_kinds: dict[str, set[str]]
    samples: dict[tuple[str, str], list[str]]
    values: dict[str, list[tuple[tuple[str, ...], str, str]]]

    @classmethod
    def of(cls, snapshot: SchemaSnapshot | None, entries: Sequence[Entry]) -> SchemaFacts:
        table_words: dict[str, frozenset[str]] = {}
        column_words: dict[tuple[str, str], frozenset[str]] = {}
        kinds: dict[str, dict[str, set[str]]] = {}
        for table in snapshot.tables if snapshot else []:
            name = qualified(table)
            table_words[name] = frozenset(terms_of(words(table.name)))
            kinds[name] = {}
            for col in table.columns:
                spelled = words(col.name)
                column_words[(name, col.name)] = frozenset(t for t in terms_of(spelled) if t != "id") \
                    if spelled.split()[-1:] != ["id"] else frozenset()
                cat = category(dtype_of(col.type))
                kind: set[str] = set()
                last = spelled.split()[-1] if spelled else ""
                if last in _NAME_WORDS and cat == "text":
                    kind.add("name")
                if cat == "temporal":
                    kind.add("time")
                if cat == "number" and (dtype_of(col.type) == "decimal" or _MONEY_NAME.search(spelled)):
                    kind.add("money")
                if cat == "number" and _QUANTITY_NAME.search(spelled):
                    kind.add("quantity")
                if cat == "number" and _DURATION_NAME.search(spelled):
                    kind.add("duration")
                if cat == "number" and _SIZE_NAME.search(spelled):
                    kind.add("size")
                kinds[name][col.name] = kind
        table_kinds = {}
        for name, columns in kinds.items():
            found = set().union(*columns.values()) if columns else set()
            if "quantity" in found or {"money", "time"} <= found:
                found.add("transaction")
            table_kinds[name] = found
        samples: dict[tuple[str, str], list[str]] = {}
        values: dict[str, list[tuple[tuple[str, ...], str, str]]] = defaultdict(list)
        for entry in entries:
            if entry.kind != "column" or not entry.table or not entry.column:
                continue
            found = [str(v) for v in entry.metadata.get("samples") or []]
            samples[(entry.table, entry.column)] = found
            for value in found:
                tokens = tuple(terms_of(value))
                if not tokens or all(t in _STOP or t.isdigit() or len(t) < 3 for t in tokens):
                    continue
                values[tokens[0]].append((tokens, entry.table, entry.column))
        return cls(table_words, column_words, kinds, table_kinds, samples, dict(values))

    def value_hits(self, tokens: Sequence[str]) -> set[tuple[str, str]]:
        """(table, column) of every sample value that the question's words contain."""
        hits = set()
        for i, token in enumerate(tokens):
            for value, table, column in self.values.get(token, ()):
                if tuple(tokens[i:i + len(value)]) == value:
                    hits.add((table, column))
        return hits


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
                    bits.append(f"→ {c.references}")
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
                index = read_index(self.store.index_path(datasource_id, info.build_id))
                snapshot = self.store.snapshot(datasource_id, info.fingerprint) if info.fingerprint else None
                cached = LiveIndex(info.build_id, self.store.entries(info.build_id), all_vectors(index), snapshot)
                self._live[datasource_id] = cached
        return cached

    def embed(self, question: str) -> np.ndarray:
        """The question's unit vector."""
        return self.embedder.embed([question])[0]

    # --- schema retrieval ----------------------------------------------------------------------

    def schema_for(self, question: str, datasource_id: str, allows: Allows, *, table_k: int = 8, planning_k: int = 5,
                   wide_table_columns: int = 12, mmr_lambda: float = 0.7, query: np.ndarray | None = None,
                   table_gap: float = 0.1, column_gap: float = 0.05, min_columns: int = 1,
                   name_bonus: float = 0.1, value_bonus: float = 0.1, cue_bonus: float = 0.1, fk_to_sent_only: bool = False,
                   ) -> RetrievedSchema:
        """The tables and columns the planner should see for this question in this datasource."""
        live = self.live(datasource_id)
        if live is None or live.snapshot is None:
            return RetrievedSchema(datasource_id, [], [])
        query = self.embed(question) if query is None else query
        sims = live.similarities(query)
        facts = live.facts()
        tables = {qualified(t): t for t in live.snapshot.tables if allows(qualified(t))}
        best: dict[str, float] = defaultdict(lambda: -1.0)
        column_sims: dict[tuple[str, str], float] = {}
        table_vec: dict[str, np.ndarray] = {}
        for i, entry in enumerate(live.entries):
            if entry.table not in tables or not all(allows(t) for t in entry.tables):
                continue
            score = float(sims[i])
            if entry.kind in ("table", "column", "relationship"):
                best[entry.table] = max(best[entry.table], score)
            if entry.kind == "column" and entry.column:
                column_sims[(entry.table, entry.column)] = score
            if entry.kind == "table":
                table_vec[entry.table] = live.vectors[i]
        cues = read_question(question)
        named_tables = {t for t in best if facts.table_words.get(t) and facts.table_words[t] <= cues.terms}
        valued = {(t, c) for t, c in facts.value_hits(cues.tokens) if t in best}
        named_columns = {(t, c) for (t, c), w in facts.column_words.items() if t in best and w and w <= cues.terms}
        wanted = cues.kinds
        cued = {t for t in best if facts.table_kinds.get(t, set()) & cues.table_kinds}
        score = {t: best[t] + name_bonus * (t in named_tables) + value_bonus * any(v[0] == t for v in valued)
                 + cue_bonus * (t in cued) for t in best}
        ranked = sorted(score, key=lambda t: -score[t])[:table_k]
        top = score[ranked[0]] if ranked else 0.0
        close = [t for t in ranked if score[t] >= top - table_gap]
        chosen = _mmr(close, score, table_vec, planning_k, mmr_lambda)
        reasons = {t: "match" for t in chosen}
        for bridge in _bridges(chosen, tables):
            if bridge not in reasons:
                chosen.append(bridge)
                reasons[bridge] = "join path"
        picks = {(t, c) for t, c in valued | named_columns}
        out = [self._table(tables[t], score.get(t, 0.0), column_sims, wide_table_columns, allows, live, reasons[t],
                           cues=cues, picks=picks, sent=set(chosen), column_gap=column_gap, min_columns=min_columns,
                           fk_to_sent_only=fk_to_sent_only)
               for t in chosen]
        names = set(chosen)
        fks = [f"{qualified(tables[t])}.{','.join(fk.columns)} → {fk.ref_table}.{','.join(fk.ref_columns)}"
               for t in chosen for fk in tables[t].foreign_keys if (fk.ref_table if not fk.ref_schema else f"{fk.ref_schema}.{fk.ref_table}") in names]
        return RetrievedSchema(datasource_id, out, fks)

    def _table(self, table: TableInfo, score: float, column_sims: dict[tuple[str, str], float], wide: int,
               allows: Allows, live: LiveIndex, reason: str, *, cues: Cues, picks: set[tuple[str, str]],
               sent: set[str], column_gap: float, min_columns: int, fk_to_sent_only: bool) -> RetrievedTable:
        name = qualified(table)
        facts = live.facts()
        refs = {c: f"{fk.ref_table}.{fk.ref_columns[i]}" for fk in table.foreign_keys
                for i, c in enumerate(fk.columns) if allows(_target(fk))}
        if len(table.columns) <= wide:
            picked = {c.name for c in table.columns}
        else:
            picked = {c.name for c in table.columns if c.primary_key}
            picked |= {c for fk in table.foreign_keys if allows(_target(fk)) and (not fk_to_sent_only or _target(fk) in sent)
                       for c in fk.columns}
            kinds = facts.column_kinds.get(name, {})
            wanted = cues.kinds
            for column, kind in kinds.items():
                if "name" in kind or kind & wanted:
                    picked.add(column)
            picked |= {c for t, c in picks if t == name}
            others = sorted((c.name for c in table.columns if c.name not in picked),
                            key=lambda c: -column_sims.get((name, c), -1.0))
            if others:
                top = max(column_sims.get((name, c.name), -1.0) for c in table.columns)
                picked |= set(others[:min_columns])
                picked |= {c for c in others if column_sims.get((name, c), -1.0) >= top - column_gap}
        columns = [RetrievedColumn(name=c.name, type=c.type, nullable=c.nullable, primary_key=c.primary_key,
                                   references=refs.get(c.name), samples=list(facts.samples.get((name, c.name), []))[:8],
                                   score=column_sims.get((name, c.name), 0.0))
                   for c in table.columns if c.name in picked]
        return RetrievedTable(name=name, score=score, columns=columns, total_columns=len(table.columns),
                              row_count=table.row_count, reason=reason)


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


def _bridges(chosen: list[str], tables: dict[str, TableInfo], max_hops: int = 3) -> list[str]:
    """Tables on short foreign-key paths that join the chosen tables: a greedy Steiner tree.

    Starting from the first chosen table, the chosen table nearest to those already joined is
    joined next, by a shortest path of at most `max_hops`; one out of reach starts a new group.
    """
    graph: dict[str, set[str]] = defaultdict(set)
    for name, table in tables.items():
        for fk in table.foreign_keys:
            target = _target(fk)
            if target in tables and target != name:
                graph[name].add(target)
                graph[target].add(name)
    if not chosen:
        return []
    added: list[str] = []
    connected = {chosen[0]}
    remaining = [t for t in chosen[1:] if t != chosen[0]]
    while remaining:
        previous = _reach(graph, connected, max_hops)
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


def _reach(graph: dict[str, set[str]], sources: set[str], max_hops: int) -> dict[str, str | None]:
    """Breadth-first from `sources`: each reached node's predecessor on a shortest path."""
    previous: dict[str, str | None] = {s: None for s in sources}
    frontier = sorted(sources)
    for _ in range(max_hops):
        nxt = []
        for node in frontier:
            for neighbour in sorted(graph[node]):
                if neighbour not in previous:
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
