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

import threading
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nl2sql.datasources.models import SchemaSnapshot, TableInfo
from nl2sql.index.chunks import Entry, qualified
from nl2sql.index.embed import Embedder
from nl2sql.index.store import StateStore
from nl2sql.index.vectors import all_vectors, read_index

#: Which entries may be used: a check on the tables an entry is about.
Allows = Callable[[str], bool]


@dataclass
class LiveIndex:
    """A committed build loaded for search: its entries, their vectors, and the snapshot it was built from."""

    build_id: str
    entries: list[Entry]
    vectors: np.ndarray
    snapshot: SchemaSnapshot | None

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """Cosine similarity of every entry to the (unit) query vector."""
        return self.vectors @ query if len(self.entries) else np.zeros(0, dtype=np.float32)


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
                   ) -> RetrievedSchema:
        """The tables and columns the planner should see for this question in this datasource."""
        live = self.live(datasource_id)
        if live is None or live.snapshot is None:
            return RetrievedSchema(datasource_id, [], [])
        query = self.embed(question) if query is None else query
        sims = live.similarities(query)
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
        ranked = sorted(best, key=lambda t: -best[t])[:table_k]
        chosen = _mmr(ranked, best, table_vec, planning_k, mmr_lambda)
        reasons = {t: "match" for t in chosen}
        for bridge in _bridges(chosen, tables):
            if bridge not in reasons:
                chosen.append(bridge)
                reasons[bridge] = "join path"
        out = [self._table(tables[t], best.get(t, 0.0), column_sims, wide_table_columns, allows, live, reasons[t])
               for t in chosen]
        names = set(chosen)
        fks = [f"{qualified(tables[t])}.{','.join(fk.columns)} → {fk.ref_table}.{','.join(fk.ref_columns)}"
               for t in chosen for fk in tables[t].foreign_keys if (fk.ref_table if not fk.ref_schema else f"{fk.ref_schema}.{fk.ref_table}") in names]
        return RetrievedSchema(datasource_id, out, fks)

    def _table(self, table: TableInfo, score: float, column_sims: dict[tuple[str, str], float], wide: int,
               allows: Allows, live: LiveIndex, reason: str) -> RetrievedTable:
        name = qualified(table)
        refs = {c: f"{fk.ref_table}.{fk.ref_columns[i]}" for fk in table.foreign_keys
                for i, c in enumerate(fk.columns) if allows(f"{fk.ref_schema}.{fk.ref_table}" if fk.ref_schema else fk.ref_table)}
        keys = {c.name for c in table.columns if c.primary_key} | set(refs)
        if len(table.columns) <= wide:
            picked = [c.name for c in table.columns]
        else:
            others = sorted((c.name for c in table.columns if c.name not in keys),
                            key=lambda c: -column_sims.get((name, c), -1.0))
            picked_set = keys | set(others[:max(wide - len(keys), 3)])
            picked = [c.name for c in table.columns if c.name in picked_set]
        samples = {e.column: e.metadata.get("samples") or [] for e in live.entries
                   if e.kind == "column" and e.table == name}
        columns = [RetrievedColumn(name=c.name, type=c.type, nullable=c.nullable, primary_key=c.primary_key,
                                   references=refs.get(c.name), samples=list(samples.get(c.name, []))[:8],
                                   score=column_sims.get((name, c.name), 0.0))
                   for c in table.columns if c.name in set(picked)]
        return RetrievedTable(name=name, score=score, columns=columns, total_columns=len(table.columns),
                              row_count=table.row_count, reason=reason)

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
    """Tables on the shortest foreign-key paths that connect the chosen tables to the first one."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, table in tables.items():
        for fk in table.foreign_keys:
            target = f"{fk.ref_schema}.{fk.ref_table}" if fk.ref_schema else fk.ref_table
            if target in tables and target != name:
                graph[name].add(target)
                graph[target].add(name)
    if not chosen:
        return []
    added: list[str] = []
    connected = {chosen[0]}
    for target in chosen[1:]:
        if target in connected:
            continue
        path = _shortest_path(graph, connected, target, max_hops)
        for node in path:
            if node not in connected and node not in chosen and node not in added:
                added.append(node)
        connected |= set(path) | {target}
    return added


def _shortest_path(graph: dict[str, set[str]], sources: set[str], target: str, max_hops: int) -> list[str]:
    previous: dict[str, str | None] = {s: None for s in sources}
    queue = deque((s, 0) for s in sources)
    while queue:
        node, hops = queue.popleft()
        if node == target:
            path = []
            while node is not None:
                path.append(node)
                node = previous[node]
            return path[::-1]
        if hops >= max_hops:
            continue
        for nxt in sorted(graph[node]):
            if nxt not in previous:
                previous[nxt] = node
                queue.append((nxt, hops + 1))
    return []
