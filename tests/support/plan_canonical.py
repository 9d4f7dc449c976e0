"""The canonical form of a plan for round trips through SQL (`plan_from_sql(generate_sql(plan, d), d)`).

The generator writes some different plans as the same SQL, so a round trip can only give back one
of them. `canonical(plan)` rewrites a plan into that one, mirroring the generator:

- ORDER BY `nulls: last` becomes `nulls: null`: both are rendered as NULLs last (the default of every plan);
- in HAVING, and in ORDER BY keys that are not a bare output alias, an output alias is replaced by
  the aliased expression: the generator inlines it there (PostgreSQL resolves no alias in HAVING
  or inside an ORDER BY expression), and the SQL no longer says an alias was used;
- nested CONCATs are flattened (`a || b || c` is one concat of three however it was nested);
- AND / OR of a single condition is that condition (rendered without the connector);
- COUNT(DISTINCT *) is COUNT(*), a ranking window's `arg` is dropped, OFFSET 0 is no offset: the
  generator leaves each of them out;
- per dialect (`canonical(plan, dialect)`): in SQLite a LIKE ignores case (SQLite's own LIKE does), a cast to
  numeric is written as REAL, to boolean as INTEGER, to a timestamp as DATETIME() (the datetime function), to a
  date as DATE(), which is also the day's truncation; elsewhere the date and datetime functions are casts.
"""

from __future__ import annotations

from typing import Any

from nl2sql.plan import model as m

RANKING = ("row_number", "rank", "dense_rank")


def canonical(plan: m.PlanModel, dialect: str | None = None) -> m.PlanModel:
    """A copy of `plan` in the form a round trip through SQL (in `dialect`) gives back."""
    plan = _walk(plan.model_copy(deep=True), dialect)
    return plan


def _walk(node: Any, dialect: str | None = None) -> Any:
    if isinstance(node, list):
        return [_walk(item, dialect) for item in node]
    if not isinstance(node, m.Node):
        return node
    for name in type(node).model_fields:
        setattr(node, name, _walk(getattr(node, name), dialect))
    spelled = _as_the_dialect_writes(node, dialect)
    if spelled is not None:
        return spelled
    if isinstance(node, m.OrderItem) and node.nulls == "last":
        node.nulls = None
    elif isinstance(node, m.Function) and node.name == "concat":
        node.args = [a for arg in node.args for a in (arg.args if _is_concat(arg) else [arg])]
    elif isinstance(node, m.And | m.Or) and len(node.conditions) == 1:
        return node.conditions[0]
    elif isinstance(node, m.Aggregate) and node.arg is None:
        node.distinct = False
    elif isinstance(node, m.Window) and node.func in RANKING:
        node.arg = None
    elif isinstance(node, m.PlanModel):
        _inline_aliases(node)
        if node.offset == 0:
            node.offset = None
    return node


def _is_concat(node: Any) -> bool:
    return isinstance(node, m.Function) and node.name == "concat"


def _inline_aliases(plan: m.PlanModel) -> None:
    """Output aliases in HAVING and in ORDER BY expressions replaced as the generator does."""
    outputs = {item.alias.lower(): item.expr for item in plan.select if item.alias}
    if not outputs:
        return

    def swap(node: Any) -> Any:
        if isinstance(node, m.PlanModel):
            return node  # a sub-plan's names are its own
        if isinstance(node, m.ColumnRef) and node.table is None and node.column.lower() in outputs:
            return outputs[node.column.lower()].model_copy(deep=True)
        if isinstance(node, list):
            return [swap(item) for item in node]
        if isinstance(node, m.Node):
            for name in type(node).model_fields:
                setattr(node, name, swap(getattr(node, name)))
        return node

    if plan.having is not None:
        plan.having = swap(plan.having)
    for item in plan.order_by:
        if not (isinstance(item.expr, m.ColumnRef) and item.expr.table is None):
            item.expr = swap(item.expr)


def _as_the_dialect_writes(node: Any, dialect: str | None) -> Any:
    """The node as the dialect's SQL reads back, where its spelling folds two plans into one; None: unchanged."""
    if dialect == "sqlite":
        if isinstance(node, m.Like) and not node.case_insensitive:
            node.case_insensitive = True
        elif isinstance(node, m.Cast) and node.to in ("numeric", "boolean"):
            node.to = "real" if node.to == "numeric" else "integer"
        elif isinstance(node, m.Cast) and node.to == "timestamp":
            return m.Function(name="datetime", args=[node.arg])
        elif (isinstance(node, m.Cast) and node.to == "date") or (isinstance(node, m.Function)
                                                                  and node.name == "date"):
            return m.DateTrunc(unit="day", arg=node.arg if isinstance(node, m.Cast) else node.args[0])
    elif dialect is not None and isinstance(node, m.Function) and node.name in ("date", "datetime"):
        return m.Cast(arg=node.args[0], to="date" if node.name == "date" else "timestamp")
    return None
