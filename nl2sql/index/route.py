"""Routing a question across datasources: signals, votes, reciprocal rank fusion, a similarity floor.

Each signal (table, column, example-question and verified-query entries) looks at the `vote_k`
entries most similar to the question, across every datasource, and ranks datasources by how
many of those they own; reciprocal rank fusion (RRF_K = 60) combines the rankings; a datasource
whose best similarity is below `floor_ratio` times the best one is dropped, and at most `limit`
are kept. Only entries the caller may see vote. The strategy can also rank by best similarity,
or by votes normalised by a datasource's entry count (raw votes favour big databases).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from nl2sql.index.retrieve import Cues, LiveIndex, Retriever, read_question

ROUTE_SIGNALS = ("table", "column", "example", "verified", "description")
RouteStrategy = Literal["votes", "best", "normalized", "votes+best", "normalized+best"]


@dataclass
class RouteCandidate:
    """One datasource's routing result."""

    datasource_id: str
    score: float
    similarity: float
    ranks: dict[str, int]
    votes: dict[str, int]


@dataclass
class Routing:
    """The shortlist and how it was reached (for traces)."""

    picks: list[str]
    candidates: list[RouteCandidate]
    dropped: dict[str, str]
    strategy: str
    settings: dict[str, float]

    def explanation(self) -> dict:
        """A plain record of the signals, fused scores, picks and drops."""
        return {"picks": self.picks, "dropped": self.dropped, "strategy": self.strategy, "settings": self.settings,
                "candidates": [vars(c) for c in self.candidates]}



def route(retriever: Retriever, question: str, datasource_ids: Sequence[str], allows: Callable[[str, str], bool], *,
          vote_k: int = 20, rrf_k: int = 60, floor_ratio: float = 0.8, limit: int = 3,
          strategy: RouteStrategy = "votes+best", lexical: bool = True, query: np.ndarray | None = None) -> Routing:
    """Rank datasources for a question; `allows(datasource_id, table)` filters entries by scope.

    With `lexical`, one more signal ranks datasources by the question's words that name one of
    their tables or columns, or one of their profiled values ("urgent", "Jazz", "campaign").
    """
    query = retriever.embed(question) if query is None else query
    hits: dict[str, list[tuple[float, str]]] = {s: [] for s in ROUTE_SIGNALS}
    cues = read_question(question)
    words: dict[str, float] = {}
    best: dict[str, float] = {}
    sizes: dict[str, int] = {}
    for ds in datasource_ids:
        live = retriever.live(ds)
        if live is None:
            continue
        sims = live.similarities(query)
        tables = {t: allows(ds, t) for t in {t for e in live.entries for t in e.tables}}
        visible = [i for i, e in enumerate(live.entries) if all(tables[t] for t in e.tables)]
        if not visible:
            continue
        if lexical:
            words[ds] = lexical_score(live, cues, {t for t, ok in tables.items() if ok})
        sizes[ds] = len(visible)
        best[ds] = float(max(sims[i] for i in visible))
        for i in visible:
            kind = live.entries[i].kind
            if kind in hits:
                hits[kind].append((float(sims[i]), ds))
    rankings: dict[str, list[str]] = {}
    votes: dict[str, dict[str, int]] = {}
    for signal, scored in hits.items():
        if not scored:
            continue
        if signal == "description":  # one entry per datasource: ranked by how well it describes the question
            closest: dict[str, float] = {}
            for sim, ds in scored:
                closest[ds] = max(sim, closest.get(ds, -1.0))
            rankings[signal] = sorted(closest, key=lambda ds: -closest[ds])
            votes[signal] = {ds: 1 for ds in closest}
            continue
        top = sorted(scored, reverse=True)[:vote_k]
        count: dict[str, float] = defaultdict(float)
        for _, ds in top:
            count[ds] += 1
        votes[signal] = {ds: int(n) for ds, n in count.items()}
        if strategy.startswith("normalized"):
            count = {ds: n / np.sqrt(sizes[ds]) for ds, n in count.items()}
        if strategy != "best":
            rankings[signal] = sorted(count, key=lambda ds: (-count[ds], -best[ds]))
    if lexical and any(words.values()):
        rankings["lexical"] = sorted((ds for ds in words if words[ds] > 0), key=lambda ds: (-words[ds], -best[ds]))
        votes["lexical"] = {ds: round(w) for ds, w in words.items()}
    if strategy in ("best", "votes+best", "normalized+best"):
        rankings["best"] = sorted(best, key=lambda ds: -best[ds])
    fused = fuse(rankings, list(best), rrf_k)
    order = sorted(fused, key=lambda ds: (-fused[ds], -best[ds]))
    top_sim = max(best.values(), default=0.0)
    picks, dropped = [], {}
    for ds in order:
        if best[ds] < floor_ratio * top_sim:
            dropped[ds] = f"best similarity {best[ds]:.3f} below {floor_ratio:g} × {top_sim:.3f}"
        elif len(picks) >= limit:
            dropped[ds] = f"beyond the shortlist of {limit}"
        else:
            picks.append(ds)
    candidates = [RouteCandidate(ds, round(fused[ds], 6), round(best[ds], 4),
                                 {s: r.index(ds) + 1 for s, r in rankings.items() if ds in r},
                                 {s: v.get(ds, 0) for s, v in votes.items()}) for ds in order]
    return Routing(picks, candidates, dropped, strategy,
                   {"vote_k": vote_k, "rrf_k": rrf_k, "floor_ratio": floor_ratio, "limit": limit})




def fuse(rankings: dict[str, list[str]], datasource_ids: Sequence[str], rrf_k: int = 60) -> dict[str, float]:
    """Reciprocal rank fusion: sum over signals of 1 / (rrf_k + rank); an unranked datasource ranks last + 1.

    >>> fuse({"a": ["x", "y"], "b": ["y"]}, ["x", "y"], 60) == {"x": 1/61 + 1/62, "y": 1/62 + 1/61}
    True
    """
    scores = {ds: 0.0 for ds in datasource_ids}
    for ranked in rankings.values():
        for ds in datasource_ids:
            rank = ranked.index(ds) + 1 if ds in ranked else len(ranked) + 1
            scores[ds] += 1.0 / (rrf_k + rank)
    return scores


def lexical_score(live: LiveIndex, cues: Cues, visible: set[str]) -> float:
    """How many of the question's words name a visible table (2), column (1) or profiled value (2) of a build.

    Each word counts once, so a database with many tables gains nothing from its size.
    """
    facts = live.facts()
    covered: dict[str, float] = {}
    for table, spelled in facts.table_words.items():
        if table in visible and spelled and spelled <= cues.terms:
            for word in spelled:
                covered[word] = max(covered.get(word, 0.0), 2.0)
    for (table, _), spelled in facts.column_words.items():
        if table in visible and spelled and spelled <= cues.terms:
            for word in spelled:
                covered[word] = max(covered.get(word, 0.0), 1.0)
    values, _ = facts.value_hits(cues, visible)
    for table, column in values:
        for value in facts.samples.get((table, column), []):
            for word in read_question(value).terms & cues.terms:
                covered[word] = max(covered.get(word, 0.0), 2.0)
    return sum(covered.values())
