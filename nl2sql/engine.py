"""The library facade: one object over a project's flows and steps, for Python callers, the CLI and the MCP server.

>>> import tempfile
>>> from pathlib import Path
>>> from nl2sql import Engine
>>> from nl2sql.demo import init_demo
>>> engine = Engine.from_config(init_demo(Path(tempfile.mkdtemp()) / "demo", env={}))
>>> [d.id for d in engine.datasources(role="analyst")], [d.id for d in engine.datasources(role="viewer")]
(['chinook', 'support', 'webanalytics'], ['chinook'])
>>> result = engine.ask("How much did we earn in each year?", role="analyst")   # a verified query: no model
>>> result.status, result.sub_queries[0].columns, result.sub_queries[0].rows[0]
('success', ['year', 'invoices', 'revenue'], [2007, 83, 449.46])
>>> engine.ask("How much did we earn in each year?", role="viewer").answer.content   # invoices are not a viewer's
'You do not have access to the data needed to answer this question.'
>>> engine.sql("SELECT Name FROM Genre ORDER BY GenreId LIMIT 2", datasource="chinook", role="viewer").row_count
2
>>> engine.sql("SELECT * FROM Invoice", datasource="chinook", role="viewer")
Traceback (most recent call last):
...
nl2sql.errors.SecurityViolation: You do not have access to the data needed to answer this question.
>>> "Invoice" in [t.name for t in engine.schema("chinook", role="viewer").tables]
False
>>> stream = engine.stream("How much did we earn in each year?", role="analyst")
>>> [e.data["node"] for e in stream if e.name == "node.finished"], stream.result.status
(['curated_matcher', 'executor', 'sanity', 'synthesizer'], 'success')
>>> engine.close()
>>> Engine.from_config("no/such/nl2sql.yaml")
Traceback (most recent call last):
...
nl2sql.errors.ConfigError: no/such/nl2sql.yaml: file not found ...

Every method takes the caller as `user=` and `role=`: with `policies.users` configured, the user's own role (or
the one given, which the user must hold); without, the role given (else `policies.default_role`). What a method
returns or refuses is decided for that caller alone, as in every other way in.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from nl2sql.config import Config, config_path
from nl2sql.errors import NL2SQLError, SecurityViolation, UnknownNameError
from nl2sql.policies import reachable_datasources, scope
from nl2sql.policies.scope import role_rules
from nl2sql.policies.users import acting_role
from nl2sql.project import load_project

if TYPE_CHECKING:
    from nl2sql.datasources.models import ExecutionResult, SchemaSnapshot
    from nl2sql.events import Event
    from nl2sql.index.service import Retrieval
    from nl2sql.pipeline import QueryResult, Runtime

Executor = Literal["inline", "prefect"]
#: The event names `Engine.stream` yields: the steps as they run, and the answer as it is written.
STREAMED = frozenset({"run.started", "node.started", "node.finished", "answer.delta", "sanity.flagged",
                      "approval.requested", "run.limit_reached", "run.finished", "run.failed"})


def _block_url(name: str) -> str:
    from nl2sql.blocks import load_datasource_url  # Prefect only when a configuration names a block

    return load_datasource_url(name)


def _llm_block(name: str) -> Any:
    from nl2sql.blocks import load_llm_block

    return load_llm_block(name)


@dataclass(frozen=True)
class DatasourceInfo:
    """A datasource a caller may ask about: its id, description and dialect."""

    id: str
    description: str
    dialect: str


@dataclass(frozen=True)
class VerifiedQueryInfo:
    """A verified query a caller may run: its datasource, question, SQL and parameters."""

    datasource_id: str
    question: str
    sql: str
    parameters: list[str]


class AnswerStream:
    """A question's events as they happen (`for event in stream`), then its `result`.

    The run goes on in a thread of this process; iterating ends after the run's last event, when `result` is set
    (an engine fault is raised from the iteration instead)."""

    def __init__(self, start: Callable[[Callable[[Event], None]], QueryResult], names: frozenset[str]) -> None:
        self._events: queue.Queue[Any] = queue.Queue()
        self._names = names
        self.result: QueryResult | None = None
        self._thread = threading.Thread(target=self._run, args=(start,), name="nl2sql-stream", daemon=True)
        self._thread.start()

    def _run(self, start: Callable[[Callable[[Event], None]], QueryResult]) -> None:
        try:
            self.result = start(self._offer)
            self._events.put(None)
        except BaseException as exc:  # handed to the iterating thread
            self._events.put(exc)

    def _offer(self, event: Event) -> None:
        if event.name in self._names:
            self._events.put(event)

    def __iter__(self) -> Iterator[Event]:
        while True:
            item = self._events.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


class Engine:
    """A project's engine: ask, stream, retrieve, run SQL, list what a caller may reach, evaluate.

    Build it with `Engine.from_config(path)`; close it (or use it as a context manager) to flush the audit log and
    close connections."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._runtime: Runtime | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, path: str | Path | None = None) -> Engine:
        """The engine of a configuration file (default: $NL2SQL_CONFIG or ./nl2sql.yaml), checked as a whole."""
        return cls(load_project(config_path(str(path) if path is not None else None)))

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def runtime(self) -> Runtime:
        """The services runs share (state, index, connections, hooks, observers), built on first use."""
        with self._lock:
            if self._runtime is None:
                from nl2sql.pipeline import Runtime

                self._runtime = Runtime(self.config, block_loader=_block_url, llm_block_loader=_llm_block)
            return self._runtime

    def close(self) -> None:
        """Flush observers and close connections (the engine can be used again: it reopens them)."""
        with self._lock:
            runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.close()

    # --- the caller ----------------------------------------------------------------------------

    def role_of(self, user: str | None = None, role: str | None = None) -> str:
        """The role a caller acts in (IdentityError for an unknown user or a role the user lacks,
        UnknownNameError for a role the policies do not define)."""
        acting = acting_role(self.config.policies, user, role) or self.config.policies.default_role
        role_rules(self.config.policies, acting)
        return acting

    def datasources(self, *, user: str | None = None, role: str | None = None) -> list[DatasourceInfo]:
        """The datasources the caller may ask about."""
        acting = self.role_of(user, role)
        ids = reachable_datasources(self.config.policies, [acting], [d.id for d in self.config.datasources])
        return [DatasourceInfo(d.id, d.description, self.dialect_of(d.id)) for d in self.config.datasources
                if d.id in ids]

    def dialect_of(self, datasource_id: str) -> str:
        """The SQL dialect of a datasource (its configured one, else its adapter's)."""
        configured = self.config.datasource(datasource_id).dialect
        return configured or self.runtime.catalog.get(datasource_id).name

    def schema(self, datasource: str, *, user: str | None = None, role: str | None = None) -> SchemaSnapshot:
        """The datasource as the caller may see it, reflected now: only the tables the caller may read, without
        foreign keys to the others; SecurityViolation for a datasource the caller cannot reach."""
        acting = self.role_of(user, role)
        self.config.datasource(datasource)
        caller = scope(self.config.policies, acting, datasource)
        if not caller.reachable:
            raise SecurityViolation(datasource=datasource)
        snapshot = self.runtime.catalog.get(datasource).reflect()
        tables = [t.model_copy(deep=True) for t in snapshot.tables if caller.allows(t.name, t.schema_name)]
        for t in tables:  # a key to a table the caller may not see would name it
            t.foreign_keys = [fk for fk in t.foreign_keys if caller.allows(fk.ref_table, fk.ref_schema)]
        return snapshot.model_copy(update={"tables": tables})

    def verified_queries(self, *, user: str | None = None, role: str | None = None,
                         datasource: str | None = None) -> list[VerifiedQueryInfo]:
        """The verified queries the caller may run (every table they read is in the caller's scope)."""
        acting = self.role_of(user, role)
        ids = [datasource] if datasource else [d.id for d in self.config.datasources]
        return [VerifiedQueryInfo(q.datasource_id, q.query.question, q.query.sql.strip(), sorted(q.query.parameters))
                for q in self.runtime.verified.readable([acting], ids)]

    # --- questions -----------------------------------------------------------------------------

    def ask(self, question: str, *, user: str | None = None, role: str | None = None,
            datasource: str | None = None, execute: bool = True, executor: Executor = "inline",
            on_event: Callable[[Event], None] | None = None, in_words: bool = True) -> QueryResult:
        """Answer a question for a caller: `inline` runs the steps in this process; `prefect` runs them as the
        `ask` flow (each step a task run, visible in the Prefect UI). `on_event` hears the run's events as they
        happen. A refusal, an unanswerable question or a failed statement is a result with its status, not an
        exception. `in_words` off: no answer in words from the synthesizer model, a plain summary of the rows."""
        return self._ask(question, user=user, role=role, datasource=datasource, execute=execute, executor=executor,
                         listener=on_event, in_words=in_words)

    def stream(self, question: str, *, user: str | None = None, role: str | None = None,
               datasource: str | None = None, execute: bool = True, executor: Executor = "inline") -> AnswerStream:
        """`ask`, with its events as they happen: iterate for the steps (`node.started`, `node.finished`), the
        answer as it is written (`answer.delta`) and the run's end; then read `.result`."""
        return AnswerStream(lambda listener: self._ask(question, user=user, role=role, datasource=datasource,
                                                       execute=execute, executor=executor, listener=listener),
                            STREAMED)

    def _ask(self, question: str, *, user: str | None, role: str | None, datasource: str | None, execute: bool,
             executor: Executor, listener: Callable[[Event], None] | None = None, in_words: bool = True) -> QueryResult:
        acting = self.role_of(user, role)
        if datasource is not None:
            self.config.datasource(datasource)
        if executor == "inline":
            return self._ask_inline(question, acting, user, datasource, execute, listener, in_words)
        if executor == "prefect":
            return self._ask_prefect(question, acting, user, datasource, execute, listener, in_words)
        raise UnknownNameError("executor", str(executor), ["inline", "prefect"])

    def _ask_inline(self, question: str, role: str, user: str | None, datasource: str | None, execute: bool,
                    listener: Callable[[Event], None] | None, in_words: bool = True) -> QueryResult:
        from nl2sql.pipeline import ask_inline

        runtime = self.runtime
        trace_id = str(uuid.uuid4())
        own = None if listener is None else _for_trace(trace_id, listener)
        if own is not None:
            runtime.listeners.append(own)
        try:
            return ask_inline(runtime, question, roles=[role], user_id=user, datasource_id=datasource,
                              execute=execute, in_words=in_words, trace_id=trace_id)
        finally:
            if own is not None:
                runtime.listeners.remove(own)

    def _ask_prefect(self, question: str, role: str, user: str | None, datasource: str | None, execute: bool,
                     listener: Callable[[Event], None] | None, in_words: bool = True) -> QueryResult:
        from nl2sql.prefect_env import prepare_prefect_env

        prepare_prefect_env(self.config.state_dir)
        from nl2sql.flows.ask import ASK_LISTENERS, ask_here, runtime_for

        runtime_for(str(self.config.path), loaded=self.config)
        own = None if listener is None else _for_thread(threading.get_ident(), listener)
        if own is not None:
            ASK_LISTENERS.append(own)
        try:
            return ask_here(question, role=role, user_id=user, datasource_id=datasource, execute=execute,
                            in_words=in_words, config=str(self.config.path))
        finally:
            if own is not None:
                ASK_LISTENERS.remove(own)

    # --- retrieval, SQL, evaluation ------------------------------------------------------------

    def unindexed(self, datasources: Sequence[str] | None = None) -> list[str]:
        """The datasources (default: all) without a live index build yet."""
        wanted = list(datasources) if datasources else [d.id for d in self.config.datasources]
        return self.runtime.index.unbuilt(wanted)

    def retrieve(self, question: str, *, user: str | None = None, role: str | None = None,
                 datasource: str | None = None) -> Retrieval:
        """How a question routes across the caller's datasources, and the schema the planner would see for the
        best one (or the one given)."""
        acting = self.role_of(user, role)
        if datasource is not None:
            self.config.datasource(datasource)
        wanted = [datasource] if datasource else [d.id for d in self.config.datasources]
        missing = self.unindexed(wanted)
        built = [ds for ds in wanted if ds not in missing]
        if not built:
            raise NL2SQLError(f"No index for {', '.join(missing)} yet.", fix="Run `nl2sql index build` first.")
        return self.runtime.index.retrieve(question, [acting], datasource, among=built)

    def sql(self, statement: str, *, datasource: str, user: str | None = None, role: str | None = None,
            limit: int | None = None) -> ExecutionResult:
        """Run one SELECT on a datasource for a caller: the guard, the caller's scope, a read-only connection, the
        row limit (default `settings.pipeline.row_limit`) and the statement timeout."""
        from nl2sql.datasources import run_checked_sql

        acting = self.role_of(user, role)
        self.config.datasource(datasource)
        limits = self.config.settings.pipeline
        return run_checked_sql(self.runtime.catalog.get(datasource), statement,
                               scope(self.config.policies, acting, datasource),
                               row_limit=limit or limits.row_limit, timeout_s=limits.statement_timeout_s)

    def evaluate(self, suite: str | Path, *, mode: Literal["plans", "retrieval", "full"] = "plans",
                 roles: Sequence[str] | None = None, ids: Sequence[str] | None = None,
                 tags: Sequence[str] | None = None, limit: int | None = None,
                 max_cost_usd: float | None = None) -> Any:
        """Run an eval suite in a mode, in this process, and return its `EvalReport` (the `eval-run` flow and
        `nl2sql eval run` add the Prefect run, the gate and records)."""
        from nl2sql.evaluation.run import evaluate

        return evaluate(mode, self.config, str(suite), roles=roles, ids=ids, tags=tags, limit=limit,
                        max_cost_usd=max_cost_usd, block_loader=_block_url)


def _for_trace(trace_id: str, listener: Callable[[Event], None]) -> Callable[[Event], None]:
    """A listener that hears one run's events only."""

    def hear(event: Event) -> None:
        if event.trace_id == trace_id:
            listener(event)

    return hear


def _for_thread(thread_id: int, listener: Callable[[Event], None]) -> Callable[[Event], None]:
    """A listener that hears the events of the run started on one thread (its run.started names the trace; the
    run's sub-query threads publish under the same trace id)."""
    traces: list[str] = []

    def hear(event: Event) -> None:
        if not traces and event.name == "run.started" and threading.get_ident() == thread_id:
            traces.append(event.trace_id or "")
        if traces and event.trace_id == traces[0]:
            listener(event)

    return hear
