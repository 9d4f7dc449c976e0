"""The index as the rest of the engine uses it: routing and schema retrieval for a caller, from settings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from nl2sql.config.models import Config
from nl2sql.datasources import DatasourceCatalog
from nl2sql.errors import SecurityViolation
from nl2sql.index.build import BuildResult, build_datasource
from nl2sql.index.embed import Embedder, shared_embedder
from nl2sql.index.retrieve import LiveIndex, RetrievedSchema, Retriever, ScopeKey
from nl2sql.index.route import Routing, route
from nl2sql.index.scope_evidence import needs_unreadable_records
from nl2sql.index.store import StateStore
from nl2sql.policies import Scope, reachable_datasources, scope
from nl2sql.verified.match import index_entries_of


@dataclass
class Retrieval:
    """Routing across the caller's datasources, and the schema the planner would see for the best one."""

    routing: Routing
    retrieved: RetrievedSchema | None


class IndexService:
    """Routing and retrieval over the live builds of a project's state folder."""

    def __init__(self, config: Config, store: StateStore | None = None, retriever: Retriever | None = None) -> None:
        self.config = config
        self.store = store or StateStore(config.state_dir)
        self.retriever = retriever or Retriever(self.store, shared_embedder())

    def live(self, datasource_id: str) -> LiveIndex | None:
        """The datasource's live build (entries, vectors, snapshot), or None when it has none."""
        return self.retriever.live(datasource_id)

    def unbuilt(self, datasource_ids: Sequence[str]) -> list[str]:
        """Datasources with no live build yet."""
        return [ds for ds in datasource_ids if self.store.live_build(ds) is None]

    def route(self, question: str, roles: Sequence[str] | str | None, datasource_ids: Sequence[str] | None = None) -> Routing:
        """Rank the caller's reachable datasources (SecurityViolation, with no search, when none is)."""
        ids = list(datasource_ids or [d.id for d in self.config.datasources])
        reachable = reachable_datasources(self.config.policies, roles, ids)
        if not reachable:
            raise SecurityViolation(node="resolver")
        scopes = _Scopes(tuple((ds, scope(self.config.policies, roles, ds)) for ds in reachable))
        settings = self.config.settings.routing
        return route(self.retriever, question, reachable, scopes,
                     vote_k=settings.vote_k, rrf_k=settings.rrf_k, floor_ratio=settings.floor_ratio,
                     limit=settings.shortlist, strategy=settings.strategy, pairs=settings.pairs,
                     close_call=settings.close_call)

    def retrieve_schema(self, question: str, roles: Sequence[str] | str | None, datasource_id: str) -> RetrievedSchema:
        """The tables and columns of one datasource the planner should see for this caller and question."""
        caller = scope(self.config.policies, roles, datasource_id)
        if not caller.reachable:
            raise SecurityViolation(datasource=datasource_id, node="schema_retrieval")
        s = self.config.settings.retrieval
        return self.retriever.schema_for(question, datasource_id, _table_scope(caller),
                                         table_k=s.table_k, planning_k=s.planning_k,
                                         wide_table_columns=s.wide_table_columns, mmr_lambda=s.mmr_lambda,
                                         whole_schema_columns=s.whole_schema_columns)

    def needs_unreadable_records(self, question: str, roles: Sequence[str] | str | None, datasource_id: str) -> bool:
        """Whether the question speaks of sales that only tables outside the caller's scope record
        (`scope_evidence.needs_unreadable_records`); False without a live build."""
        live = self.live(datasource_id)
        if live is None or live.snapshot is None:
            return False
        caller = scope(self.config.policies, roles, datasource_id)
        view = live.view(_table_scope(caller))
        return needs_unreadable_records(question, live.facts(), view.readable.keys())

    def retrieve(self, question: str, roles: Sequence[str] | str | None, datasource_id: str | None = None,
                 among: Sequence[str] | None = None) -> Retrieval:
        """Routing (among the given datasources, default all), then the schema of the chosen (or given) one."""
        routing = self.route(question, roles, [datasource_id] if datasource_id else among)
        target = datasource_id or (routing.picks[0] if routing.picks else None)
        return Retrieval(routing, self.retrieve_schema(question, roles, target) if target else None)


def build_configured(config: Config, store: StateStore, embedder: Embedder | None = None) -> list[BuildResult]:
    """Build every configured datasource's index in this process, one after another (no Prefect: the
    `index-build` flow runs the same steps as tasks)."""
    embedder = embedder or shared_embedder()
    with DatasourceCatalog(config) as catalog:
        return [build_datasource(catalog.get(ds.id), store, embedder, profile=config.settings.profile,
                                 keep=config.storage.keep_builds, sample_questions=ds.sample_questions,
                                 verified=index_entries_of(ds),
                                 description=ds.description) for ds in config.datasources]


@dataclass(frozen=True)
class _Scopes:
    """Each reachable datasource's scope, as routing asks it (`allows(datasource, table)`); compared by value, so
    a live build's view of a scope serves every call of it."""

    scopes: tuple[tuple[str, Scope], ...]

    def __call__(self, datasource_id: str, table: str) -> bool:
        return _allows(dict(self.scopes)[datasource_id], table)


def _table_scope(caller: Scope) -> ScopeKey:
    """The caller's scope as retrieval asks it (`allows(table)`), keyed by the scope: one view per scope."""
    return ScopeKey(caller, partial(_allows, caller))


def _allows(caller: Scope, table: str) -> bool:
    schema, _, name = table.rpartition(".")
    return caller.allows(name, schema or None)
