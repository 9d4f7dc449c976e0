"""The lookups retrieval runs per question give what a walk over every table and column gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nl2sql.index import retrieve
from nl2sql.index.retrieve import WordSets, _bridges

WORDS = st.sampled_from(["name", "customer", "order", "date", "total", "city", "first", "last", "id"])


@settings(max_examples=300, deadline=None)
@given(spelled=st.dictionaries(st.text("abcdefgh", min_size=1, max_size=3), st.frozensets(WORDS, max_size=4),
                               max_size=30),
       terms=st.sets(WORDS | st.sampled_from(["unknown", "revenue"]), max_size=6))
def test_names_found_by_their_word_sets_are_those_whose_every_word_the_question_has(
        spelled: dict[str, frozenset[str]], terms: set[str]) -> None:
    expected = {name for name, found in spelled.items() if found and found <= terms}
    named = list(WordSets(spelled).named(terms))
    assert sorted(named) == sorted(expected)  # each once


NODES = [f"t{i}" for i in range(12)]


@settings(max_examples=300, deadline=None)
@given(edges=st.sets(st.tuples(st.sampled_from(NODES), st.sampled_from(NODES)), max_size=40),
       chosen=st.lists(st.sampled_from(NODES), min_size=1, max_size=5, unique=True),
       allowed=st.sets(st.sampled_from(NODES), min_size=6))
def test_join_paths_stopping_at_the_nearest_chosen_table_are_those_of_the_whole_search(
        edges: set[tuple[str, str]], chosen: list[str], allowed: set[str]) -> None:
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        if a != b:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set()).add(a)
    ordered = {name: tuple(sorted(near)) for name, near in graph.items()}
    tables = allowed | set(chosen)
    stopped = _bridges(chosen, tables, ordered)
    whole_search = retrieve._reach

    def without_stop(graph, sources, max_hops, allowed, stop=()):
        return whole_search(graph, sources, max_hops, allowed)

    retrieve._reach = without_stop
    try:
        assert stopped == _bridges(chosen, tables, ordered)
    finally:
        retrieve._reach = whole_search
