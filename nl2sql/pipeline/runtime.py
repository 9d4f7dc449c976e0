"""What a question's run needs, built once from the configuration and shared by runs, and per run.

`Runtime` holds the configuration, the state store, the index service, the datasource
connections, the observers and the hook runner; `RunContext` is one run's: its trace (trace id,
events, clock) and its model client (budget and usage).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from nl2sql.config.models import Config
from nl2sql.datasources import DatasourceCatalog
from nl2sql.datasources.connect import BlockLoader
from nl2sql.events import EventBus
from nl2sql.hooks import build_hooks
from nl2sql.hooks.runner import HookRunner
from nl2sql.index.service import IndexService
from nl2sql.index.store import StateStore
from nl2sql.llm.budget import Budget
from nl2sql.llm.client import LLMBlockLoader, LLMClient
from nl2sql.llm.models import CallRecord, LimitReached
from nl2sql.observers import Observer, build_observers, subscribe_observers
from nl2sql.pipeline.trace import RunTrace
from nl2sql.policies import Scope
from nl2sql.verified.scope import VerifiedCatalog

#: Distinct values read for a text parameter tied to a column.
MAX_PARAMETER_VALUES = 5000


class RunBudget(Budget):
    """The question's caps on model calls and dollars, plus its time limit (checked before every call)."""

    def __init__(self, trace: RunTrace, max_llm_calls: int | None, max_cost_usd: float | None) -> None:
        super().__init__(max_llm_calls, max_cost_usd)
        self.trace = trace

    def before_call(self) -> None:
        """Refuse the call once the run's time is up, else apply the call and dollar caps."""
        remaining = self.trace.remaining_s()
        if remaining is not None and remaining <= 0 and self.stop is None:
            self.stop = timeout_stop(self.trace.timeout_s or 0)
        super().before_call()

    def calling(self) -> AbstractContextManager[object]:
        """The run's clock stands still while a model answers (`RunTrace.waiting_for_a_model`)."""
        return self.trace.waiting_for_a_model()


def timeout_stop(timeout_s: float) -> LimitReached:
    """The stop of a run that used up its time."""
    return LimitReached(f"The question reached its time limit of {timeout_s:g} s of its own, the time it waited for "
                        "models not counted (settings.pipeline.timeout_s).",
                        limit="timeout_s", setting="settings.pipeline.timeout_s")


class Runtime:
    """Everything runs share: configuration, state, index, datasource connections, observers, hooks."""

    def __init__(self, config: Config, *, block_loader: BlockLoader | None = None,
                 llm_block_loader: LLMBlockLoader | None = None, observers: Sequence[Observer] | None = None,
                 forward: Callable | None = None) -> None:
        self.config = config
        self.store = StateStore(config.state_dir)
        self.index = IndexService(config, self.store)
        self.catalog = DatasourceCatalog(config, block_loader=block_loader)
        self.llm_block_loader = llm_block_loader
        self.hooks = build_hooks(config)
        # the tables each verified query reads, from its SQL, once (in the URL's dialect, else the adapter's)
        self.verified = VerifiedCatalog(config, lambda ds: config.datasource(ds).dialect or self.catalog.get(ds).name)
        for datasource in config.datasources:
            if datasource.dialect:
                self.verified.queries(datasource.id)
        self.observers = list(build_observers(config) if observers is None else observers)
        self.forward = forward  # every event, e.g. to Prefect's event stream
        self.listeners: list[Callable] = []  # every run's events, e.g. the CLI's live display
        self._values: dict[tuple[str, str, str], list[str]] = {}
        self._lock = threading.Lock()

    def open_trace(self, trace_id: str | None = None) -> RunTrace:
        """A new run's trace, with the observers (and the forwarder) subscribed to its bus."""
        trace_id = trace_id or str(uuid.uuid4())
        bus = EventBus(trace_id=trace_id)
        subscribe_observers(bus, self.observers)
        if self.forward is not None:
            bus.subscribe(self.forward)
        for listener in self.listeners:
            bus.subscribe(listener)
        return RunTrace(trace_id, bus, timeout_s=self.config.settings.pipeline.timeout_s, askers=self.listeners)

    def llm_client(self, trace: RunTrace) -> LLMClient:
        """The run's model client: its budget, with every call and parse retry published on the run's trace."""
        limits = self.config.settings.pipeline

        def on_call(record: CallRecord) -> None:
            trace.publish("llm.call", node=record.node, model=record.model, provider=record.provider, ok=record.ok,
                          error_code=record.error_code, input_tokens=record.usage.input_tokens,
                          output_tokens=record.usage.output_tokens, cost_usd=record.cost_usd,
                          latency_ms=round(record.latency_ms, 1))

        def on_parse_retry(node: str, attempt: int, errors: list[str]) -> None:
            trace.publish("llm.parse_retry", node=node, attempt=attempt, errors=errors)

        return LLMClient(self.config.llm, budget=RunBudget(trace, limits.max_llm_calls, limits.max_cost_usd),
                         on_call=on_call, on_parse_retry=on_parse_retry, block_loader=self.llm_block_loader)

    def column_values(self, datasource_id: str, table: str, column: str, scope: Scope | None = None) -> list[str]:
        """Distinct values of a text column (for the parameters of the verified queries a caller may run), read
        once per process; with the caller's `scope`, the database refuses it too if the column is not the caller's."""
        key = (datasource_id, table, column)
        with self._lock:
            if key in self._values:
                return self._values[key]
        from sqlglot import exp

        from nl2sql.datasources.base import table_expression

        adapter = self.catalog.get(datasource_id)
        query = exp.select(exp.column(column, quoted=True)).distinct().from_(table_expression(table)).where(
            exp.column(column, quoted=True).is_(exp.null()).not_())
        result = adapter.execute(query.sql(dialect=adapter.dialect), row_limit=MAX_PARAMETER_VALUES, timeout_s=10,
                                 scope=scope)
        values = [str(v) for v in result.frame.iloc[:, 0].tolist()] if len(result.frame.columns) else []
        with self._lock:
            self._values[key] = values
        return values

    def close(self) -> None:
        """Close observers (flushing them) and datasource connections."""
        for observer in self.observers:
            try:
                observer.close()
            except Exception:  # closing must reach every observer
                import logging

                logging.getLogger("nl2sql").exception("closing observer %r failed", observer)
        self.catalog.close()
        self.store.close()


@dataclass
class RunContext:
    """One run's services: the shared runtime, the run's trace and its model client."""

    runtime: Runtime
    trace: RunTrace
    llm: LLMClient

    @property
    def config(self) -> Config:
        """The configuration."""
        return self.runtime.config

    # the services a step may use, each by its name (a step's needs read from what it touches on `ctx`)

    @property
    def index(self) -> IndexService:
        """Routing and schema retrieval over the live index builds."""
        return self.runtime.index

    @property
    def catalog(self) -> DatasourceCatalog:
        """The datasources' read-only adapters."""
        return self.runtime.catalog

    @property
    def store(self) -> StateStore:
        """The state store: builds, snapshots, the plan cache, traces and approvals."""
        return self.runtime.store

    @property
    def hooks(self) -> HookRunner:
        """The configured hooks."""
        return self.runtime.hooks

    @property
    def embed(self) -> Callable[[list[str]], Any]:
        """Unit vectors of short texts (questions, verified questions), cached in the process."""
        return self.runtime.index.retriever.embedder.embed_cached

    @property
    def verified(self) -> VerifiedCatalog:
        """The verified queries, with the tables each reads."""
        return self.runtime.verified
