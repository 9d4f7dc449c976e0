"""The demo's index: routing picks the right database, retrieval respects the caller's scope."""

from __future__ import annotations

import pytest

from nl2sql.errors import SecurityViolation
from nl2sql.index.route import fuse, without_evidence


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("How many urgent tickets are still open?", "support"),
        ("Which album has the most tracks?", "chinook"),
        ("Which campaign brought the most web orders?", "webanalytics"),
        ("Which agent got the worst satisfaction scores?", "support"),
        ("How many sessions bounced after one page?", "webanalytics"),
        ("Which artists have the most albums?", "chinook"),
        ("Who is the newest person on the help desk?", "support"),  # "The customer support desk: …"
    ],
)
def test_demo_questions_route_first_to_their_database(demo_index, question: str, expected: str) -> None:
    routing = demo_index.route(question, "admin")
    assert routing.picks[0] == expected, routing.explanation()


def test_viewer_gets_no_invoice_entry(demo_index) -> None:
    result = demo_index.retrieve("Which invoices had the highest totals?", "viewer")
    assert result.routing.picks == ["chinook"]
    assert result.retrieved is not None
    assert {"Invoice", "InvoiceLine", "Customer", "Employee"}.isdisjoint(result.retrieved.table_names())
    rendered = result.retrieved.render() + " ".join(result.retrieved.foreign_keys)
    assert "Invoice" not in rendered and "Customer" not in rendered


def test_denied_entries_never_vote(demo_index) -> None:
    routing = demo_index.route("How many urgent tickets are still open?", "viewer")
    assert [c.datasource_id for c in routing.candidates] == ["chinook"]  # support is out of the viewer's reach


def test_no_reachable_datasource_is_refused_before_any_search(demo_index) -> None:
    with pytest.raises(SecurityViolation):
        demo_index.route("anything", "viewer", ["support", "webanalytics"])


@pytest.fixture(scope="module")
def pruning_index(demo_config, demo_index):
    """The demo's index with its schemas pruned per question, as a schema too wide to send whole is."""
    from nl2sql.index.service import IndexService

    config = demo_config.model_copy(deep=True)
    config.settings.retrieval.whole_schema_columns = 0
    return IndexService(config, retriever=demo_index.retriever)


def test_a_small_schema_is_sent_whole_and_the_same_for_every_question(demo_index, demo_config) -> None:
    live = demo_index.live("chinook")
    readable = [t.name for t in live.snapshot.tables if t.name != "Employee"]  # the analyst's scope
    first = demo_index.retrieve_schema("Which genres sell best in Germany?", "analyst", "chinook")
    second = demo_index.retrieve_schema("How many customers are in Brazil?", "analyst", "chinook")
    assert first.table_names() == readable  # every table the caller may read, in the snapshot's order
    assert all(len(t.columns) == t.total_columns for t in first.tables)  # every column
    assert first.render() == second.render()  # one text for every question: a server's prefix cache reuses it
    rendered = first.render() + " ".join(first.foreign_keys)
    assert "Employee" not in rendered  # a denied table is not named, not even as a foreign key's target
    assert demo_config.settings.retrieval.whole_schema_columns >= sum(t.total_columns for t in first.tables)


def test_a_schema_over_the_whole_schema_budget_is_pruned_per_question(demo_config, demo_index) -> None:
    from nl2sql.index.service import IndexService

    config = demo_config.model_copy(deep=True)
    config.settings.retrieval.whole_schema_columns = 48  # the analyst reads 49 columns of Chinook
    schema = IndexService(config, retriever=demo_index.retriever).retrieve_schema("Which genres sell best in Germany?", "analyst", "chinook")
    assert len(schema.tables) < 10 and {"Genre", "Invoice", "InvoiceLine", "Track"} <= set(schema.table_names())


def test_schema_keeps_keys_and_join_paths(pruning_index) -> None:
    schema = pruning_index.retrieve_schema("Which genres sell best in Germany?", "admin", "chinook")
    names = schema.table_names()
    assert {"Genre", "Invoice"} <= set(names)
    assert {"InvoiceLine", "Track"} <= set(names)  # the tables that join genres to invoices
    invoice = next(t for t in schema.tables if t.name == "Invoice")
    assert any(c.primary_key for c in invoice.columns)


def test_fuse_ranks_unranked_last() -> None:
    scores = fuse({"table": ["a"], "column": ["a", "b"]}, ["a", "b", "c"], 60)
    assert scores["a"] > scores["b"] > scores["c"]


def test_evidence_is_explained_and_counts_only_what_the_caller_may_read(demo_index) -> None:
    question = "Which invoices had the highest totals?"
    admin = demo_index.route(question, "admin")
    viewer = demo_index.route(question, "viewer")
    assert admin.strategy == "evidence" and admin.picks[0] == "chinook"
    evidence = {c.datasource_id: c.evidence for c in admin.candidates}
    assert set(evidence["chinook"]) == {"dense", "lexical", "names", "bm25"}
    assert admin.explanation()["candidates"][0]["evidence"] == evidence[admin.picks[0]]
    # the viewer may not read Invoice: its words and its profiled values count for nothing
    seen = next(c for c in viewer.candidates if c.datasource_id == "chinook").evidence
    assert seen["bm25"] < evidence["chinook"]["bm25"] and seen["lexical"] < evidence["chinook"]["lexical"]


def test_term_index_skips_entries_of_tables_out_of_scope() -> None:
    from nl2sql.index.chunks import Entry, EntryTable
    from nl2sql.index.retrieve import TermIndex

    entries = [Entry(id="1", datasource_id="d", kind="table", text="invoice table: total, billing country.",
                     table="Invoice", tables=["Invoice"]),
               Entry(id="2", datasource_id="d", kind="column", text="name of genre, text, for example Jazz.",
                     table="Genre", tables=["Genre"]),
               Entry(id="3", datasource_id="d", kind="example", text="Which invoices were biggest?"),
               Entry(id="4", datasource_id="d", kind="relationship", text="invoice linked to customer.",
                     table="Invoice", tables=["Invoice", "Customer"])]
    terms = TermIndex.of(EntryTable.of(entries))
    everything = terms.visible({"invoice", "jazz", "customer"}, lambda group: True)
    assert everything == ({"invoice": 2, "jazz": 1}, 12)  # relationships only repeat their tables' words
    no_invoice = terms.visible({"invoice", "jazz"}, lambda group: "Invoice" not in group)
    assert no_invoice == ({"invoice": 1, "jazz": 1}, 7)  # the example's word stays: it names no table


def test_a_description_is_indexed_whole_and_by_clause_and_its_words_count_once() -> None:
    from nl2sql.index.chunks import EntryTable, description_entries
    from nl2sql.index.retrieve import TermIndex

    entries = description_entries("support", "The customer support  desk: tickets by email; agents. Surveys 2010.")
    assert [e.text for e in entries] == ["The customer support desk: tickets by email; agents. Surveys 2010.",
                                         "The customer support desk", "tickets by email", "agents", "Surveys 2010"]
    assert len({e.id for e in entries}) == 5 and {e.kind for e in entries} == {"description"}
    assert description_entries("support", "One clause only.")[0].text == "One clause only."
    assert len(description_entries("support", "One clause only.")) == 1 and description_entries("support", " ") == []
    assert TermIndex.of(EntryTable.of(entries)).visible({"desk", "email"}, lambda group: True) == ({"desk": 1, "email": 1}, 7)


def test_the_routing_strategy_is_a_setting(demo_config, demo_index) -> None:
    from nl2sql.index.service import IndexService

    config = demo_config.model_copy(deep=True)
    config.settings.routing.strategy = "votes+best"
    routing = IndexService(config).route("Which album has the most tracks?", "admin")
    assert routing.strategy == "votes+best" and all(not c.evidence for c in routing.candidates)
    assert routing.settings["floor_ratio"] == 0.8  # unset: the strategy's own floor
    assert demo_index.route("Which album has the most tracks?", "admin").settings["floor_ratio"] == 0.6
    config.settings.routing.floor_ratio = 0.95
    assert IndexService(config).route("Which album has the most tracks?", "admin").settings["floor_ratio"] == 0.95


def test_a_name_in_lower_case_brings_the_table_it_is_looked_up_in(pruning_index) -> None:
    schema = pruning_index.retrieve_schema("Which albums did led zeppelin release?", "admin", "chinook")
    assert {"Album", "Artist"} <= set(schema.table_names())
    # "Led Zeppelin" is a name value of Artist.Name: the table is found where the name is, not looked up
    assert {t.name: t.reason for t in schema.tables}["Artist"] == "match"


def test_the_table_holding_a_name_the_question_spells_is_sent(pruning_index) -> None:
    songs = pruning_index.retrieve_schema("Which playlists have songs by Aerosmith?", "admin", "chinook")
    assert {"Playlist", "Track", "Artist", "Album"} <= set(songs.table_names())  # Album: the join path to Artist
    # "Frank Harris" is a customer in full, while the album "Frank" and a composer "Harris" spell a word each
    spent = pruning_index.retrieve_schema("How much has Frank Harris spent?", "admin", "chinook")
    assert "Customer" in spent.table_names()


def test_name_values_never_reach_the_planners_schema(pruning_index) -> None:
    schema = pruning_index.retrieve_schema("What did Leonie Köhler buy from us in 2009?", "admin", "chinook")
    assert "Customer" in schema.table_names()
    rendered = schema.render()
    # the customers' names are matched, never shown: not even the one the question spells
    assert "FirstName" in rendered and not any(name in rendered for name in ("Köhler", "Gonçalves", "Leonie"))


def test_a_whole_name_is_not_looked_up_where_every_name_is_known(pruning_index) -> None:
    # every artist and album title is a name value, and none is 'Yellow Submarine': no lookup offers them; a piece
    # of a value ("starting with 'Yellow'") may be in any of them, and they are offered
    whole = pruning_index.retrieve_schema("Which playlists include the song 'Yellow Submarine'?", "admin", "chinook")
    looked_up = {t.name for t in whole.tables if t.reason == "name lookup"}
    assert looked_up and looked_up.isdisjoint({"Artist", "Album", "MediaType"})
    piece = pruning_index.retrieve_schema("Which tracks have a name starting with 'Yellow'?", "admin", "chinook")
    assert {"Artist", "Album"} <= {t.name for t in piece.tables if t.reason == "name lookup"}


def test_a_value_counts_by_the_share_of_its_words_the_question_has(demo_index) -> None:
    # "sales" is one word of the campaign "summer_sale_2011" (webanalytics): half the weight of a whole value
    part = {c.datasource_id: c.evidence for c in demo_index.route("What period do our sales records cover?",
                                                                    "analyst").candidates}
    whole = {c.datasource_id: c.evidence for c in demo_index.route("How many tracks are Jazz?", "analyst").candidates}
    assert part["webanalytics"]["lexical"] == pytest.approx(1.0)
    assert whole["chinook"]["lexical"] >= 2.0  # the genre "Jazz" is a whole value


def test_a_stop_word_a_value_shares_with_the_question_counts_nothing(demo_index) -> None:
    # "show" names half of the playlist "TV Shows" (1.0); "the" of the playlist "On-The-Go 1" is no evidence
    found = {c.datasource_id: c.evidence for c in demo_index.route("Show me the unresolved complaints",
                                                                     "admin").candidates}
    assert found["chinook"]["lexical"] == pytest.approx(1.0)


def test_two_values_of_one_column_name_the_column(demo_index) -> None:
    # "urgent" and "low" are two priorities of a ticket: the question sets them side by side, which names the
    # column as its name would (1 point); "urgent" and "chat", a priority and a channel, name two columns' values only
    def lexical(question: str) -> float:
        found = {c.datasource_id: c.evidence for c in demo_index.route(question, "admin").candidates}
        return found["support"]["lexical"]

    one = lexical("Are urgent tickets answered sooner?")
    assert lexical("Are urgent tickets answered sooner than low ones?") == pytest.approx(one + 2.0 + 1.0)
    assert lexical("Are urgent chat tickets answered sooner?") == pytest.approx(one + 2.0)


def test_a_customer_named_in_full_routes_to_the_database_of_customers(demo_index) -> None:
    # first and last names are one value a row (no sample values): they are name values, matched, never shown
    routing = demo_index.route("What did Leonie Köhler buy from us in 2009?", "admin")
    evidence = {c.datasource_id: c.evidence for c in routing.candidates}
    assert routing.picks[0] == "chinook", routing.explanation()
    assert evidence["chinook"]["names"] >= 2.0 and evidence["support"]["names"] == evidence["webanalytics"]["names"] == 0
    # typed without its accents, the name is the same name
    typed = {c.datasource_id: c.evidence for c in demo_index.route("What did Leonie Kohler buy from us in 2009?",
                                                                     "admin").candidates}
    assert typed["chinook"]["names"] == evidence["chinook"]["names"]
    # lower case, a name is no name: "live" does not name the one-word album title "Live" (nor "frank" "Frank")
    plain = {c.datasource_id: c.evidence for c in demo_index.route("What did frank buy live?", "admin").candidates}
    assert plain["chinook"]["names"] == 0
    # the viewer may not read Customer: the names in it are no evidence
    seen = demo_index.route("What did Leonie Köhler buy from us in 2009?", "viewer")
    assert [c.evidence["names"] for c in seen.candidates] == [0.0]


def test_a_question_naming_nothing_of_any_datasource_has_no_evidence(demo_index) -> None:
    # "Berlin" is a customer's city (a name value): where a thing is, not that the question asks about data
    weather = demo_index.route("What will the weather be like in Berlin tomorrow?", "analyst")
    assert next(c for c in weather.candidates if c.datasource_id == "chinook").evidence["names"] > 0
    assert without_evidence(weather, 0.28) and not without_evidence(weather, 0.0)
    assert not without_evidence(demo_index.route("Which artists have the most albums?", "analyst"), 0.28)


@pytest.mark.parametrize("question", ["Media types of tracks alongside the bounce rate of sessions",
                                      "Playlists next to the browsers visitors use"])
def test_a_question_about_two_things_gets_the_pair_its_parts_go_to(demo_config, demo_index, question: str) -> None:
    from nl2sql.index.service import IndexService

    routing = demo_index.route(question, "admin")
    assert routing.picks[:2] == ["chinook", "webanalytics"] and routing.pair == ["chinook", "webanalytics"]
    assert "webanalytics" not in routing.dropped and routing.explanation()["pair"] == ["chinook", "webanalytics"]
    config = demo_config.model_copy(deep=True)
    config.settings.routing.pairs = False
    whole = IndexService(config, retriever=demo_index.retriever).route(question, "admin")
    assert whole.picks[0] == "chinook" and whole.pair is None


def test_a_second_database_below_the_floor_comes_back_with_the_pair(demo_config, demo_index) -> None:
    from nl2sql.index.service import IndexService

    question = "Media types of tracks alongside the bounce rate of sessions"
    config = demo_config.model_copy(deep=True)
    config.settings.routing.pairs = False  # routed whole, the second database falls below the floor
    whole = IndexService(config, retriever=demo_index.retriever).route(question, "admin")
    assert whole.picks == ["chinook"] and "below" in whole.dropped["webanalytics"]
    assert demo_index.route(question, "admin").picks[:2] == ["chinook", "webanalytics"]


def test_a_question_about_one_thing_with_an_and_keeps_its_picks(demo_config, demo_index) -> None:
    from nl2sql.index.service import IndexService

    config = demo_config.model_copy(deep=True)
    config.settings.routing.pairs = False
    whole = IndexService(config, retriever=demo_index.retriever)
    for question in ("Which artists and albums have the most tracks?",
                     "How many open tickets and how many agents does each team have?",
                     "Group the tickets by priority and count them", "List the customers and their invoices",
                     "Compare the number of playlists with last year"):
        routing = demo_index.route(question, "admin")
        assert routing.pair is None and routing.picks == whole.route(question, "admin").picks, routing.explanation()


def test_a_pair_is_only_of_datasources_the_caller_reaches(demo_index) -> None:
    routing = demo_index.route("Media types of tracks alongside the bounce rate of sessions", "viewer")
    assert routing.picks == ["chinook"] and routing.pair is None


def test_question_parts_cut_at_joining_words_and_keep_content_on_both_sides() -> None:
    from nl2sql.index.route import question_parts

    assert question_parts("Refunds alongside web sessions by month") == [("Refunds", "web sessions by month")]
    assert question_parts("Compare the number of albums to the number of tickets") == [
        ("Compare the number of albums", "the number of tickets")]
    assert ("Do months with more orders", "have more refunds") in question_parts(
        "Do months with more orders also have more refunds?")
    assert question_parts("Sales and") == [] and question_parts("And the refunds?") == []
    # a part about the other part's subject (refers back, shares its word, a modifier, only asks or places in time),
    # or a joining word inside a quoted value
    for question in ("Group the refunds by reason and count them", "List the refunds and their reasons",
                     "Total refunds and average refunds per store", "Refunds by store and by month",
                     "Which stores have the most refunds, and how many?", "Compare the refunds with last year",
                     "Which tracks are by 'Simon and Garfunkel'?",
                     "List refunds with reason damaged and amount above average",
                     "Show agents whose team is billing and tickets closed over 40"):
        assert question_parts(question) == [], question
    # a condition on the first subject is no second subject; the first subject may carry one of its own, and
    # without conditions before it a compared part is a second subject; a year is a period, not a value compared
    assert question_parts("Refunds above average and web sessions") == [("Refunds above average", "web sessions")]
    assert question_parts("Show tracks and page views above 100") == [("Show tracks", "page views above 100")]
    assert question_parts("Refunds with reason damaged and web sessions over 2023") == [
        ("Refunds with reason damaged", "web sessions over 2023")]


def test_a_pair_needs_each_part_clearly_ahead_on_its_own_part() -> None:
    from nl2sql.index.route import RouteCandidate, Routing, pair_of_parts, with_pair

    def routed(**scores: float) -> Routing:
        ranked = sorted(scores, key=lambda ds: -scores[ds])
        return Routing(ranked[:1], [RouteCandidate(ds, scores[ds], scores[ds], {}, {}) for ds in ranked], {},
                       "evidence", {})

    assert pair_of_parts(routed(shop=0.8, web=0.3), routed(web=0.7, shop=0.2)) == ["shop", "web"]
    assert pair_of_parts(routed(shop=0.8, web=0.7), routed(web=0.7, shop=0.2)) is None  # web close on the first part
    assert pair_of_parts(routed(shop=0.8, web=0.3), routed(shop=0.9, web=0.2)) is None  # one database for both
    whole = Routing(["desk", "shop"], [], {"web": "evidence score 0.2 below 0.6 × 0.5"}, "evidence", {})
    paired = with_pair(whole, ["shop", "web"], 2)
    assert paired.picks == ["shop", "web"] and paired.pair == ["shop", "web"]
    assert "web" not in paired.dropped and "after the pair" in paired.dropped["desk"]
    assert with_pair(Routing(["web"], [], {}, "evidence", {}), ["shop", "web"], 3).picks == ["web", "shop"]
