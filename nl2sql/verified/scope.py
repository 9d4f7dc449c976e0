"""Which verified queries (and example questions) a caller has: those whose every table is in the caller's scope.

The tables of a verified query are read once from its SQL (the guard's parse, `tables_read`),
together with the tables its parameters look values up in (`parameters.*.column`). A query
whose SQL the guard refuses has no tables and is nobody's: it is never matched, sent or
counted. Everything that uses verified queries (the matcher, its parameter look-ups, routing
entries, few-shot examples) takes them from here, so a query over a table the caller may not
read never shows its SQL, its tables or its values to that caller. Example questions are kept
apart (`VerifiedCatalog.examples`): the same scoping, and nothing that answers ever sees them.

>>> from nl2sql.config.models import VerifiedQueryConfig
>>> query = VerifiedQueryConfig(question="Which customers live in {country}?",
...     sql="SELECT FirstName FROM Customer AS c JOIN Invoice AS i ON i.CustomerId = c.CustomerId "
...         "WHERE c.Country = :country", parameters={"country": {"column": "Customer.Country"}})
>>> query_tables(query, "sqlite")
('Customer', 'Invoice')
>>> query_tables(VerifiedQueryConfig(question="q", sql="DELETE FROM Customer"), "sqlite") is None
True
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from nl2sql.config.models import Config, DatasourceConfig, ExampleQuestionConfig, VerifiedQueryConfig
from nl2sql.datasources.guard import guard_sql, tables_read
from nl2sql.errors import NL2SQLError
from nl2sql.policies import Scope, scope


def query_tables(query: VerifiedQueryConfig | ExampleQuestionConfig, dialect: str | None) -> tuple[str, ...] | None:
    """Every table the query reads (`schema.table` where its SQL names a schema) and its parameters look
    values up in, in order; None when the guard refuses its SQL."""
    try:
        tree = guard_sql(query.sql, dialect or "")
    except NL2SQLError:
        return None
    names = [".".join(p for p in (read.schema, read.name) if p) for read in tables_read(tree)]
    names += [p.column.rpartition(".")[0] for p in query.parameters.values() if p.column]
    return tuple(dict.fromkeys(n for n in names if n))


def allows_table(caller: Scope, table: str) -> bool:
    """Whether the caller may read `table` (`name` or `schema.name`)."""
    schema, _, name = table.rpartition(".")
    return caller.allows(name, schema or None)


@dataclass(frozen=True)
class CuratedQuery:
    """One verified query (or example question) of one datasource, with the tables it reads."""

    datasource_id: str
    position: int
    query: VerifiedQueryConfig | ExampleQuestionConfig
    tables: tuple[str, ...]

    def readable_by(self, caller: Scope) -> bool:
        """Whether every table of the query is in the caller's scope (there, and in this datasource)."""
        return (caller.datasource == self.datasource_id and caller.reachable and bool(self.tables)
                and all(allows_table(caller, t) for t in self.tables))


def curated_queries(datasource: DatasourceConfig, dialect: str | None, *,
                    examples: bool = False) -> list[CuratedQuery]:
    """The datasource's verified queries (`examples`: its example questions) with their tables (one whose SQL
    cannot be read left out)."""
    out = []
    listed = datasource.example_questions if examples else datasource.verified_queries
    for position, query in enumerate(listed):
        tables = query_tables(query, dialect)
        if tables:
            out.append(CuratedQuery(datasource.id, position, query, tables))
    return out


class VerifiedCatalog:
    """A configuration's verified queries, their tables read once per datasource (on first use, in the
    datasource's dialect), and the split of them a caller sees."""

    def __init__(self, config: Config, dialect_of: Callable[[str], str | None]) -> None:
        self.config = config
        self.dialect_of = dialect_of
        self._queries: dict[tuple[str, bool], list[CuratedQuery]] = {}
        self._lock = threading.Lock()

    def queries(self, datasource_id: str, *, examples: bool = False) -> list[CuratedQuery]:
        """The datasource's verified queries (`examples`: its example questions) with their tables."""
        key = (datasource_id, examples)
        with self._lock:
            known = self._queries.get(key)
        if known is None:
            known = curated_queries(self.config.datasource(datasource_id), self.dialect_of(datasource_id),
                                    examples=examples)
            with self._lock:
                self._queries[key] = known
        return known

    def examples(self, roles: Sequence[str] | str | None, datasource_id: str) -> list[CuratedQuery]:
        """The datasource's example questions the caller may read, in the configuration's order (worked examples
        only: nothing that answers a question reads them)."""
        caller = scope(self.config.policies, roles, datasource_id)
        return [q for q in self.queries(datasource_id, examples=True) if q.readable_by(caller)]

    def split(self, roles: Sequence[str] | str | None,
              datasource_ids: Iterable[str]) -> tuple[list[CuratedQuery], list[CuratedQuery]]:
        """(the queries the caller may run, those it may not) of the given datasources, in order."""
        readable: list[CuratedQuery] = []
        denied: list[CuratedQuery] = []
        for ds in datasource_ids:
            caller = scope(self.config.policies, roles, ds)
            for query in self.queries(ds):
                (readable if query.readable_by(caller) else denied).append(query)
        return readable, denied

    def readable(self, roles: Sequence[str] | str | None, datasource_ids: Iterable[str]) -> list[CuratedQuery]:
        """The queries the caller may run (what few-shot examples and listings may show)."""
        return self.split(roles, datasource_ids)[0]
