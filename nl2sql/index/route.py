"""Routing a question across datasources: evidence scores (or fused votes), a similarity floor, a shortlist.

The default strategy, "evidence", scores each datasource by three kinds of evidence:

- dense: the mean similarity of its `EVIDENCE_TOP` entries most similar to the question, among its
  schema entries (tables, columns, relationships) and its description — a fixed number of entries,
  so a big database gains nothing from its size;
- lexical: the question's words that name one of its tables or columns or a profiled value
  (`lexical_score`), `LEXICAL_WEIGHT` per point;
- names: the question's words that spell a name value of one of its tables (`name_score`: a customer, an artist
  named in full), `LEXICAL_WEIGHT` per point; names route a question but are not, alone, evidence that it asks
  about data (`without_evidence`: "the weather in Berlin" names a customer's city);
- BM25: the question's words in its entry texts (example questions and verified queries included),
  weighted by how few of the datasources use them, so the words every database's example questions
  share ("how many", "per month", "top 10") count for little; `BM25_WEIGHT` per unit.

Example questions count through their words only: their phrasing is shared across databases
("Weekly count of … over the last quarter"), and a question written the same way was routed to
whichever database had an example of that shape.

The other strategies are the vote signals of the design: each signal (table, column, example,
verified, description entries) looks at the `vote_k` entries most similar to the question across
every datasource and ranks datasources by how many of those they own, reciprocal rank fusion
(RRF_K = 60) combines the rankings, optionally with the ranking by best similarity ("votes+best"),
or votes normalised by a datasource's entry count ("normalized"). On the many-database test bed of
benchmarks/perf/index_wide.py the evidence strategy routes best (numbers in docs/index.md).

A question about two things ("refunds alongside web sessions", "compare X with Y") is also routed in parts:
cut in two at a joining word (`question_parts`), each part is routed alone, and when the two parts go to two
different datasources, each clearly ahead on its own part (the other scores under `close_call` times it there),
that pair leads the picks (`Routing.pair`): the whole question's vector sits between its two subjects, and the
second database often fell below the floor.

Whatever the strategy, a datasource below `floor_ratio` times the best one (in evidence score, or in
best similarity for the vote strategies) is dropped and at most `limit` are kept; without a
`floor_ratio`, each strategy's own (`default_floor`). Only entries the caller may see count: an
entry counts when every table it is about is allowed, and a verified query (or an example question
that is one) is about the tables its SQL reads, so a question like one over tables the caller may
not read gets no vote, no similarity and no words from it.
"""

from __future__ import annotations

import functools
import math
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from nl2sql.config.models import RoutingSettings
from nl2sql.index.retrieve import (
    Cues,
    LiveIndex,
    Retriever,
    ScopeKey,
    content_terms,
    is_name_word,
    naming_terms,
    quoted_spans,
    read_question,
)
from nl2sql.index.vectors import EXACT_UP_TO

ROUTE_SIGNALS = ("table", "column", "example", "verified", "description")
RouteStrategy = Literal["evidence", "votes", "best", "normalized", "votes+best", "normalized+best"]
ROUTE_STRATEGIES: tuple[RouteStrategy, ...] = ("evidence", "votes", "best", "normalized", "votes+best",
                                               "normalized+best")
#: The evidence strategy: entries averaged for the dense score (with the description's part closest to the
#: question: a description counts once, whole or by one clause), and what a point of each lexical score is worth.
EVIDENCE_TOP = 3
DENSE_WEIGHT = 1.0
LEXICAL_WEIGHT = 0.02
BM25_WEIGHT = 0.02
BM25_K1, BM25_B = 1.2, 0.75
#: A column two of whose values the question names whole ("phone" and "email" of a ticket's channel) is named by
#: them: the question sets its categories side by side. Points for each such set of values, as for naming a column.
COMPARED_VALUES_POINTS = 1.0
#: Words that join the two subjects of a question about two things; and "compare … with/to/and/against …".
PART_JOINS = re.compile(r"\b(?:and|alongside|next to|side by side with|versus|vs|compared (?:to|with)|against|also|"
                        r"as well as|together with|along with|plus)\b", re.IGNORECASE)
COMPARED = re.compile(r"\bcompar\w*\b.*?\b(with|to|and|against)\b", re.IGNORECASE)
#: A part with a word referring back to the other, or starting with a preposition, is about the other's subject.
REFERS_BACK = re.compile(r"\b(?:them|their|theirs|they|it|its|those|these)\b", re.IGNORECASE)
MODIFIER = re.compile(r"(?:by|per|with|for|in|on|over|from|of|during|since|before|after|than|above|below|under)\b",
                      re.IGNORECASE)
#: After a first part that sets conditions ("List athletes with position defender"), a second part that is an
#: attribute compared with a value ("and salary above average", "and hours over 40") is one more condition on the
#: same subject, not a second subject ("Show tracks and page views above 100" keeps its cut; a year is a period).
CONDITION = re.compile(r"(?:the\s+)?(?:[\w-]+\s+){1,3}(?:is\s+|are\s+)?(?:above|below|over|under|more than|less than|"
                       r"greater than|higher than|lower than|at least|at most)\s+(?:the\s+)?(?:average|mean|median|"
                       r"\$?(?!(?:19|20)\d\d\b)\d)", re.IGNORECASE)
SETS_CONDITIONS = re.compile(r"\b(?:with|where|whose|having)\b", re.IGNORECASE)
#: At most this many cuts of one question are routed (two routings each): a long question is not routed a dozen times.
MAX_PART_CUTS = 3
#: A part's datasource is clearly ahead when the other's score there is under this share of its (the default of
#: `settings.routing.close_call`).
CLOSE_CALL: float = RoutingSettings.model_fields["close_call"].default
#: The floor each strategy routes best with on the test bed: the evidence score spreads wider than similarity.
DEFAULT_FLOORS: dict[str, float] = {"evidence": 0.6}
VOTES_FLOOR = 0.8


def default_floor(strategy: str) -> float:
    """The floor_ratio a strategy uses when none is set.

    >>> default_floor("evidence"), default_floor("votes+best")
    (0.6, 0.8)
    """
    return DEFAULT_FLOORS.get(strategy, VOTES_FLOOR)


@dataclass
class RouteCandidate:
    """One datasource's routing result."""

    datasource_id: str
    score: float
    similarity: float
    ranks: dict[str, int]
    votes: dict[str, int]
    evidence: dict[str, float] = field(default_factory=dict)


@dataclass
class Routing:
    """The shortlist and how it was reached (for traces)."""

    picks: list[str]
    candidates: list[RouteCandidate]
    dropped: dict[str, str]
    strategy: str
    settings: dict[str, float]
    #: The two datasources the question's two parts were routed to, when they lead the picks (see `question_parts`).
    pair: list[str] | None = None

    def explanation(self) -> dict:
        """A plain record of the signals, fused scores, picks and drops."""
        return {"picks": self.picks, "dropped": self.dropped, "strategy": self.strategy, "settings": self.settings,
                "pair": self.pair, "candidates": [vars(c) for c in self.candidates]}


def route(retriever: Retriever, question: str, datasource_ids: Sequence[str], allows: Callable[[str, str], bool], *,
          vote_k: int = 20, rrf_k: int = 60, floor_ratio: float | None = None, limit: int = 3,
          strategy: RouteStrategy = "evidence", lexical: bool = True, query: np.ndarray | None = None,
          pairs: bool = True, close_call: float = CLOSE_CALL) -> Routing:
    """Rank datasources for a question; `allows(datasource_id, table)` filters entries by scope.

    With `lexical`, the question's words that name a table, a column or a profiled value of a
    datasource ("urgent", "Jazz", "campaign") count too. With `pairs`, a question about two things whose parts go
    clearly to two datasources has that pair first (`pair_of_parts`).
    """
    def ranked(text: str, vector: np.ndarray | None) -> Routing:
        return rank_datasources(retriever, text, datasource_ids, allows, vote_k=vote_k, rrf_k=rrf_k,
                                floor_ratio=floor_ratio, limit=limit, strategy=strategy, lexical=lexical, query=vector)

    routing = ranked(question, query)
    cuts = question_parts(question)[:MAX_PART_CUTS] if pairs and limit > 1 and len(datasource_ids) > 1 else []
    if not cuts or not routing.picks:
        return routing
    texts = list(dict.fromkeys(part for cut in cuts for part in cut))
    vectors = dict(zip(texts, retriever.embedder.embed_cached(texts), strict=True))
    for left, right in cuts:
        pair = pair_of_parts(ranked(left, vectors[left]), ranked(right, vectors[right]), close_call)
        if pair:
            return with_pair(routing, pair, limit)
    return routing


def question_parts(question: str) -> list[tuple[str, str]]:
    """The ways a question cuts in two at a joining word ("and", "alongside", "compared with", "compare … with"),
    where each part names something of its own: a word that may name data (`naming_terms`), none shared with the
    other part, no word referring back to it ("count them", "their status"), no leading preposition ("by
    region", "with last year") and, after a first part that sets conditions, no second part that is an attribute
    compared with a value ("with position defender and salary above average"): those parts are about the other
    part's subject, not a second one.

    >>> question_parts("Compare monthly refunds with web sessions")
    [('Compare monthly refunds', 'web sessions')]
    >>> question_parts("Group the tickets by agent and count them"), question_parts("Total fees and average fees of loans")
    ([], [])
    >>> question_parts("Which artists have the most albums, and how many?"), question_parts("Orders by region and by month")
    ([], [])
    >>> question_parts("Which tracks are by 'Simon and Garfunkel'?")
    []
    >>> question_parts("List athletes with position defender and salary above average")
    []
    """
    cuts = {(m.start(), m.end()) for m in PART_JOINS.finditer(question)}
    compared = COMPARED.search(question)
    if compared:
        cuts.add((compared.start(1), compared.end(1)))
    quoted = quoted_spans(question)  # a joining word inside quotes is part of a value: 'Simon and Garfunkel'
    cuts = {(start, end) for start, end in cuts if not any(q0 < start and end < q1 for q0, q1 in quoted)}
    parts = [(question[:start].strip(" ,;"), question[end:].strip(" ,;?.")) for start, end in sorted(cuts)]
    return [(left, right) for left, right in parts if own_subjects(left, right)]


def own_subjects(left: str, right: str) -> bool:
    """Whether the two parts of a question each name something of their own (see `question_parts`)."""
    named_left, named_right = naming_terms(left), naming_terms(right)
    return (bool(named_left) and bool(named_right) and not named_left & named_right
            and not REFERS_BACK.search(left) and not REFERS_BACK.search(right) and not MODIFIER.match(right)
            and not (CONDITION.match(right) and SETS_CONDITIONS.search(left)))


def pair_of_parts(left: Routing, right: Routing, close_call: float = CLOSE_CALL) -> list[str] | None:
    """The two datasources a question's two parts go to, when they differ and each is clearly ahead on its own part:
    the other one scores under `close_call` times it there (absent: nothing)."""
    if not left.picks or not right.picks or left.picks[0] == right.picks[0]:
        return None
    a, b = left.picks[0], right.picks[0]
    on_left = {c.datasource_id: c.score for c in left.candidates}
    on_right = {c.datasource_id: c.score for c in right.candidates}
    if on_left.get(b, 0.0) < close_call * on_left[a] and on_right.get(a, 0.0) < close_call * on_right[b]:
        return [a, b]
    return None


def with_pair(routing: Routing, pair: list[str], limit: int) -> Routing:
    """The routing with the pair's two datasources first (the whole question's first pick leading, if it is one of
    them), then its other picks, up to `limit`."""
    first, second = pair if routing.picks[0] not in pair or routing.picks[0] == pair[0] else pair[::-1]
    ordered = [first, second, *[ds for ds in routing.picks if ds not in pair]]
    picks = ordered[:limit]
    dropped = {ds: why for ds, why in routing.dropped.items() if ds not in pair}
    dropped.update({ds: f"beyond the shortlist of {limit}, after the pair its parts were routed to"
                    for ds in ordered[limit:]})
    return Routing(picks, routing.candidates, dropped, routing.strategy, routing.settings, pair=[first, second])


def rank_datasources(retriever: Retriever, question: str, datasource_ids: Sequence[str],
                     allows: Callable[[str, str], bool], *, vote_k: int = 20, rrf_k: int = 60,
                     floor_ratio: float | None = None, limit: int = 3, strategy: RouteStrategy = "evidence",
                     lexical: bool = True, query: np.ndarray | None = None) -> Routing:
    """The whole question's ranking: each datasource's evidence (or fused votes), the floor and the shortlist."""
    query = retriever.embed(question) if query is None else query
    floor_ratio = default_floor(strategy) if floor_ratio is None else floor_ratio
    hits: dict[str, list[tuple[float, str]]] = {s: [] for s in ROUTE_SIGNALS}
    cues = read_question(question)
    words: dict[str, float] = {}
    names: dict[str, float] = {}
    best: dict[str, float] = {}
    sizes: dict[str, int] = {}
    dense: dict[str, float] = {}
    term_counts: dict[str, tuple[dict[str, int], int]] = {}
    question_terms = set(content_terms(question))
    for ds in datasource_ids:
        live = retriever.live(ds)
        if live is None:
            continue
        view = live.view(ScopeKey((allows, ds), functools.partial(allows, ds)))  # worked out once per scope
        if strategy == "evidence":
            # example questions are left out here and of the floor: phrasing, not content, made them close
            evidence, described = view.evidence_ids, view.description_ids
            if not len(view.routing_ids):
                continue
            # the caller's entries only: all scored, unless they are many in a graph index (see `schema_for`)
            scored = live.scores(query, evidence) if not live.graph or len(evidence) <= EXACT_UP_TO else \
                live.search(query, view.evidence_selector, EVIDENCE_TOP)[1]
            # the EVIDENCE_TOP best, ascending (a partition, not a sort of every score)
            top = np.sort(scored[np.argpartition(scored, -EVIDENCE_TOP)[-EVIDENCE_TOP:]] if len(scored) > EVIDENCE_TOP
                          else scored).tolist()
            if len(described):
                top = sorted([*top, float(live.scores(query, described).max())])[-EVIDENCE_TOP:]
            if not top:  # only example questions: their best similarity stands in
                top = [float(live.scores(query, view.routing_ids).max())]
            dense[ds] = float(np.mean(top))
            best[ds] = top[-1]
            sizes[ds] = len(view.routing_ids)
            term_counts[ds] = view.term_counts(question_terms)
        else:
            visible = view.routing_ids
            if not len(visible):
                continue
            sims = live.scores(query, visible)
            sizes[ds] = len(visible)
            best[ds] = float(sims.max())
            for i, sim in zip(visible.tolist(), sims.tolist(), strict=True):
                kind = live.entries.kinds[i]
                if kind in hits:
                    hits[kind].append((sim, ds))
        if lexical:
            words[ds] = lexical_score(live, cues, view.visible_tables)
            names[ds] = name_score(live, cues, view.visible_tables)
    rankings: dict[str, list[str]] = {}
    votes: dict[str, dict[str, int]] = {}
    evidence: dict[str, dict[str, float]] = {}
    if strategy == "evidence":
        lexical_points = bm25(question_terms, term_counts)
        for ds in best:
            evidence[ds] = {"dense": round(dense[ds], 4), "lexical": words.get(ds, 0.0), "names": names.get(ds, 0.0),
                            "bm25": round(lexical_points[ds], 4)}
        fused = {ds: DENSE_WEIGHT * dense[ds] + LEXICAL_WEIGHT * (words.get(ds, 0.0) + names.get(ds, 0.0))
                 + BM25_WEIGHT * lexical_points[ds] for ds in best}
        for name in ("dense", "lexical", "names", "bm25"):
            rankings[name] = sorted(best, key=lambda ds, n=name: -evidence[ds][n])
    else:
        fused = fuse_votes(hits, words, best, sizes, strategy=strategy, vote_k=vote_k, rrf_k=rrf_k,
                           rankings=rankings, votes=votes)
    order = sorted(fused, key=lambda ds: (-fused[ds], -best[ds]))
    # the floor is on the evidence score where there is one (it already weighs similarity), else on similarity
    level = fused if strategy == "evidence" else best
    what = "evidence score" if strategy == "evidence" else "best similarity"
    top = max(level.values(), default=0.0)
    picks, dropped = [], {}
    for ds in order:
        if level[ds] < floor_ratio * top:
            dropped[ds] = f"{what} {level[ds]:.3f} below {floor_ratio:g} × {top:.3f}"
        elif len(picks) >= limit:
            dropped[ds] = f"beyond the shortlist of {limit}"
        else:
            picks.append(ds)
    candidates = [RouteCandidate(ds, round(fused[ds], 6), round(best[ds], 4),
                                 {s: r.index(ds) + 1 for s, r in rankings.items() if ds in r},
                                 {s: v.get(ds, 0) for s, v in votes.items()}, evidence.get(ds, {})) for ds in order]
    return Routing(picks, candidates, dropped, strategy,
                   {"vote_k": vote_k, "rrf_k": rrf_k, "floor_ratio": floor_ratio, "limit": limit})


def close_calls(scores: Mapping[str, float], ratio: float) -> list[str]:
    """The datasources routing cannot tell apart from its best: a score at least `ratio` times the best one's.

    >>> close_calls({"shop": 0.64, "web": 0.5, "desk": 0.6}, 0.85)
    ['shop', 'desk']
    """
    top = max(scores.values(), default=0.0)
    return [ds for ds, score in scores.items() if score >= ratio * top]


def backed_by_routing(scores: Mapping[str, float], pair: Sequence[str] | None, ratio: float) -> list[str]:
    """The datasources a model may send a question to over routing's first pick: its close calls, and the pair a
    two-part question's parts went to (routing's own evidence that both are needed).

    >>> backed_by_routing({"shop": 0.64, "web": 0.3, "desk": 0.6}, ["shop", "web"], 0.85)
    ['shop', 'desk', 'web']
    """
    return list(dict.fromkeys([*close_calls(scores, ratio), *(pair or [])]))


def without_evidence(routing: Routing, min_dense: float) -> bool:
    """Whether no datasource holds anything the question asks about: the evidence strategy, no datasource with a
    word of the question in its names, values or entries, and the best dense evidence below `min_dense`. A name
    value the question spells does not count: it says where a thing is, not that the question asks about data.

    >>> weak = RouteCandidate("shop", 0.17, 0.2, {}, {}, {"dense": 0.17, "lexical": 0.0, "bm25": 0.0})
    >>> without_evidence(Routing(["shop"], [weak], {}, "evidence", {}), 0.28)
    True
    """
    if routing.strategy != "evidence" or not routing.candidates:
        return False
    evidence = [c.evidence for c in routing.candidates]
    return all(not e.get("lexical") and not e.get("bm25") for e in evidence) and max(
        e.get("dense", 0.0) for e in evidence) < min_dense


def fuse_votes(hits: dict[str, list[tuple[float, str]]], words: dict[str, float], best: dict[str, float],
               sizes: dict[str, int], *, strategy: RouteStrategy, vote_k: int, rrf_k: int,
               rankings: dict[str, list[str]], votes: dict[str, dict[str, int]]) -> dict[str, float]:
    """The vote strategies: a ranking per signal (filled into `rankings` and `votes`), fused by RRF."""
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
    if any(words.values()):
        rankings["lexical"] = sorted((ds for ds in words if words[ds] > 0), key=lambda ds: (-words[ds], -best[ds]))
        votes["lexical"] = {ds: round(w) for ds, w in words.items()}
    if strategy in ("best", "votes+best", "normalized+best"):
        rankings["best"] = sorted(best, key=lambda ds: -best[ds])
    return fuse(rankings, list(best), rrf_k)


def bm25(terms: set[str], counts: dict[str, tuple[dict[str, int], int]]) -> dict[str, float]:
    """Okapi BM25 of the question's words in each datasource's entry texts, one datasource as one document.

    >>> scores = bm25({"ticket", "open"}, {"support": ({"ticket": 9, "open": 2}, 300), "shop": ({"open": 1}, 200)})
    >>> round(scores["support"], 2), round(scores["shop"], 2)
    (1.56, 0.2)
    """
    if not counts:
        return {}
    average = sum(length for _, length in counts.values()) / len(counts) or 1.0
    used = {t: sum(1 for found, _ in counts.values() if t in found) for t in terms}
    idf = {t: math.log(1 + (len(counts) - n + 0.5) / (n + 0.5)) for t, n in used.items()}
    scores = {}
    for ds, (found, length) in counts.items():
        norm = BM25_K1 * (1 - BM25_B + BM25_B * length / average)
        scores[ds] = sum(idf[t] * n * (BM25_K1 + 1) / (n + norm) for t, n in found.items())
    return scores


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


@functools.lru_cache(maxsize=65_536)
def value_terms(value: str) -> frozenset[str]:
    """A profiled value's words as a question's are read, numbers and stop words left out: "the" of "On-The-Go", or
    "will" of a ticket's subject, is no sign that a question names it (kept: the same values come up again).

    >>> sorted(value_terms("On-The-Go 1")), sorted(value_terms("summer_sale_2011"))
    (['go'], ['sale', 'summer'])
    >>> sorted(value_terms("Downloaded files will not open"))  # a ticket's words: "will" names nothing
    ['downloaded', 'file', 'open']
    """
    return frozenset(content_terms(value))


def lexical_score(live: LiveIndex, cues: Cues, visible: set[str]) -> float:
    """How many of the question's words name a visible table (2), column (1) or profiled value (2) of a build.

    Each word counts once, so a database with many tables gains nothing from its size.
    """
    facts = live.facts()
    covered: dict[str, float] = {}
    for table in facts.named_tables(cues.terms, visible):
        for word in facts.table_words[table]:
            covered[word] = max(covered.get(word, 0.0), 2.0)
    for key in facts.named_columns(cues.terms, visible):
        for word in facts.column_words[key]:
            covered[word] = max(covered.get(word, 0.0), 1.0)
    values, _ = facts.value_hits(cues, visible)
    compared: set[frozenset[str]] = set()
    for table, column in values:
        whole: set[frozenset[str]] = set()
        for value in facts.samples.get((table, column), []):
            # a value counts by the share of its words the question has: "Jazz" whole, "summer_sale_2011" for
            # "sales" half (a campaign named after a season is weak evidence of sales data)
            spelled = value_terms(value)
            for word in spelled & cues.terms:
                covered[word] = max(covered.get(word, 0.0), 2.0 * len(spelled & cues.terms) / len(spelled))
            if spelled and spelled <= cues.terms:
                whole.add(spelled)
        if len(whole) >= 2:  # the same values in several columns (a currency everywhere) name them once
            compared.add(frozenset().union(*whole))
    return sum(covered.values()) + COMPARED_VALUES_POINTS * len(compared)


def name_score(live: LiveIndex, cues: Cues, visible: set[str]) -> float:
    """Two points for each word of the question that spells a name value of a visible table (`SchemaFacts.name_hits`).

    Each word counts once, as in `lexical_score`.
    """
    _, spelled = live.facts().name_hits(cues, visible)
    return 2.0 * sum(1 for word in spelled if is_name_word(word))
