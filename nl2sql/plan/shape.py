"""The shape of an answer: what a model's plan leaves out that the asker needs to read the answer, and a stable
order.

Six rules, each optional (`settings.pipeline.planner.answer_shape`; `groups`, `names`, `ties` and `distinct` by
default, as measured: docs/models.md), applied to a model's validated plan (never to a verified query's or a cached one's):

- `measure`: a ranking shows what it ranks by, and a filter on an aggregate shows the aggregate. "Which
  composer wrote the most tracks?" planned as `SELECT Composer … ORDER BY COUNT(*) DESC LIMIT 1` answers
  with the count beside the name; the first ORDER BY key is shown when it is computed (an aggregate, a
  function, arithmetic) or when the plan keeps only its first rows (LIMIT), and every aggregate HAVING
  compares is shown. Tie-breaking keys after the first are not.
- `names`: an id that stands for a row is shown as that row's name. A shown column that is a declared foreign key
  to a readable table with a name (`Name`, `Title`, the one column whose name ends so, or a first and a last
  name) is replaced by that name, read from that table as the plan joins it on the key or joined in (LEFT, on
  the key); a plan grouped by the id groups by the name too. Not where the question asks for ids or codes, nor
  for a column the plan labels as an id (`AS customer_id`).
- `key`: a list of one table's rows carries that table's key, first. Names are not keys (two playlists
  are called "Music"): a plan without grouping or aggregates that selects columns of its FROM table, but
  not that table's one-column primary key, gets the key in front; so does a plan of two tables that shows
  only the joined table's columns, joined on the FROM table's key (each joined row meets one FROM row: the
  rows are the joined table's). A grouped plan lists groups, and gets the
  key of a table it groups by only where that table's shown columns repeat in the data (the profile's
  `repeating` columns): "tracks per playlist" grouped by the playlist's key shows the key beside the name,
  "tracks per genre" reads by the genre's name, which no two genres share.
- `groups`: a grouped plan that shows only aggregates shows its group keys, first. "The average price of each
  media type" planned as `SELECT AVG(UnitPrice) … GROUP BY MediaTypeId` answers with a column saying which
  media type each average is for. A plan that shows any plain column beside its aggregates gets nothing (a
  genre's name, grouped by the genre's key, labels its rows).
- `distinct`: a list whose rows a join repeats shows each once. A plan without grouping or aggregates that joins
  a table of which many rows meet each row it shows (met on the shown side's one-column key), and shows nothing
  of that side, gets DISTINCT: "students who have a pet" planned as `Student JOIN Has_Pet` shows a student once,
  not once per pet. Applied after `ties`, and only where every ORDER BY key is shown.
- `ties`: a ranking cut by LIMIT is the same every time. Rows that tie on the ORDER BY keys at the cut
  would make the cut (or the order of an OFFSET's page) the database's choice: the plan's group keys,
  or else its FROM table's one-column key, are added as the last ORDER BY keys (a LIMIT without ORDER
  BY gets them as its order).

A column is shown already when a select item computes it (or computes it inside a larger expression, or is
the output alias it refers to); a count shows any count. The result is a new plan and what was added (the
columns' names, `ties broken on …`); the caller validates it again and keeps the old plan if that fails.

>>> from nl2sql.plan.model import PlanModel
>>> plan = PlanModel.model_validate({
...     "select": [{"expr": {"kind": "column", "table": "t", "column": "Composer"}}],
...     "from": {"table": "Track", "alias": "t"},
...     "group_by": [{"kind": "column", "table": "t", "column": "Composer"}],
...     "order_by": [{"expr": {"kind": "aggregate", "func": "count", "arg": None}, "direction": "desc"}],
...     "limit": 1})
>>> shaped, added = shape_answer(plan, {}, ("measure", "key"))
>>> added, [item.alias for item in shaped.select]
(['count'], [None, 'count'])
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping, Sequence

from nl2sql.config.models import AnswerShapeRule
from nl2sql.datasources.models import TableInfo
from nl2sql.plan import model as m


def shape_answer(plan: m.PlanModel, tables: Mapping[str, TableInfo], rules: Sequence[AnswerShapeRule],
                 repeating: Collection[tuple[str, str]] = (), *, readable: Mapping[str, TableInfo] | None = None,
                 question: str = "") -> tuple[m.PlanModel, list[str]]:
    """The plan with what the rules add (a copy), and what they added: column names, `ties broken on …` (empty:
    unchanged). `repeating`: the (table, column) pairs, lower-case, whose values repeat in the data. `readable`:
    the tables the caller may read, by name (`names` joins one of them); `question`: the question (`names` leaves
    a question that asks for ids alone)."""
    if (plan.distinct and not _one_row_per_group(plan)) or not rules:
        return plan, []  # DISTINCT: an added column or order key could change the rows
    if plan.set_operations:
        return plan, []  # combined rows: a column added to one plan would not match the others (and changes rows)
    shaped = plan.model_copy(deep=True)
    added: list[str] = []
    if "measure" in rules:
        for expr in _measures(shaped):
            added.append(_show(shaped, expr, len(shaped.select)))
    if "groups" in rules:
        for i, expr in enumerate(_missing_labels(shaped)):
            added.append(_show(shaped, expr, i))
    if "names" in rules and not _ASKS_FOR_IDS.search(question):
        added += _names_for_ids(shaped, tables, readable or {})
    if "key" in rules:
        key = _missing_key(shaped, tables)
        if key is not None:
            added.append(_show(shaped, key, 0))
        for key in _missing_group_keys(shaped, tables, {(t.lower(), c.lower()) for t, c in repeating}):
            added.append(_show(shaped, key, _first_shown(shaped, key.table)))
    if "ties" in rules:
        for expr in _tie_breakers(shaped, tables):
            shaped.order_by.append(m.OrderItem(expr=expr, direction="asc"))
            added.append(f"ties broken on {_describe(expr)}")
    if "distinct" in rules and _repeated_by_a_join(shaped, tables):
        shaped.distinct = True
        added.append("DISTINCT: a join repeats the rows shown")
    return (shaped, added) if added else (plan, [])


_ASKS_FOR_IDS = re.compile(r"\b(ids?|identifiers?|codes?)\b", re.IGNORECASE)
_ID_LABEL = re.compile(r"(?i:(^|_)id)$|[a-z]Id$")  # customer_id, CustomerId, id, ID; not paid
_NUMERIC_TYPE = re.compile(r"INT|REAL|NUM|DEC|FLOAT|DOUBLE|BOOL|DATE|TIME", re.IGNORECASE)


def _names_for_ids(plan: m.PlanModel, tables: Mapping[str, TableInfo], readable: Mapping[str, TableInfo]) -> list[str]:
    """Show a row's name where the plan shows only the foreign key that stands for it: `SELECT t.AlbumId … GROUP BY
    t.AlbumId` for "which albums have more than 25 tracks" shows the album's title instead, read from Album joined
    on that key (LEFT: a row names at most one album, so no row is lost or repeated), and groups by it as well.
    The table referenced must be readable and have a name (a column `Name` or `Title`, else one whose name ends
    so, or a first and a last name); nothing of it may be shown already."""
    by_name = {name.lower(): info for name, info in readable.items()}
    done: list[str] = []
    for i in reversed(range(len(plan.select))):
        ref = plan.select[i].expr
        if not isinstance(ref, m.ColumnRef) or not ref.table or _ID_LABEL.search(plan.select[i].alias or ""):
            continue  # `AS customer_id`: the plan means the id
        owner = next((t for t in plan.tables() if t.name_in_scope.lower() == ref.table.lower()), None)
        info = tables.get(owner.table) if owner is not None else None
        fk = next((fk for fk in (info.foreign_keys if info is not None else []) if fk.confidence is None
                   and [c.lower() for c in fk.columns] == [ref.column.lower()]), None)
        parent = by_name.get(fk.ref_table.lower()) if fk is not None else None
        if fk is None or parent is None or [c.lower() for c in parent.primary_key] != [c.lower() for c in fk.ref_columns]:
            continue
        labels = _name_columns(parent)
        alias = _joined_parent(plan, ref, parent)
        if not labels or (alias is not None and any(
                isinstance(n, m.ColumnRef) and (n.table or "").lower() == alias.lower()
                for item in plan.select for n in _nodes(item.expr))):
            continue
        if alias is None:
            alias = _unused(parent.name, {t.name_in_scope for t in plan.tables()})
            table = m.TableRef(table=parent.name, alias=None if alias == parent.name else alias)
            plan.joins.append(m.Join(type="left", table=table, on=[m.JoinKey(
                left=m.ColumnRef(table=alias, column=parent.primary_key[0]), right=ref.model_copy(deep=True))]))
        shown = [m.ColumnRef(table=alias, column=label) for label in labels]
        keep_alias = plan.select[i].alias if len(shown) == 1 else None
        plan.select[i:i + 1] = [m.SelectItem(expr=c, alias=keep_alias) for c in shown]
        if _key(ref) in {_key(e) for e in plan.group_by}:
            plan.group_by += [c.model_copy(deep=True) for c in shown]
        done.append(f"{' and '.join(_describe(c) for c in shown)} for {_describe(ref)}")
    return done[::-1]


def _name_columns(info: TableInfo) -> list[str]:
    """The columns that name a row of the table: `Name` or `Title`; else the one column whose name ends in name or
    title (`FullName`, `department_name`); else a first and a last name, in that order; else none."""
    texts = [c.name for c in info.columns if not _NUMERIC_TYPE.search(c.type or "")]
    exact = [c for c in texts if c.lower() in ("name", "title")]
    if exact:
        return exact[:1]
    named = [c for c in texts if re.search(r"(name|title)$", c.lower())]
    if len(named) == 1:
        return named
    first = [c for c in named if re.match(r"(first|f)_?name$", c.lower())]
    last = [c for c in named if re.match(r"(last|l)_?name$", c.lower())]
    return [first[0], last[0]] if len(first) == 1 and len(last) == 1 else []


def _joined_parent(plan: m.PlanModel, ref: m.ColumnRef, parent: TableInfo) -> str | None:
    """The name in scope of a table of the plan that is `parent`, joined on `ref` = its key."""
    for join in plan.joins:
        if join.table.table.lower() != parent.name.lower():
            continue
        alias = join.table.name_in_scope.lower()
        for k in join.on:
            for near, far in ((k.left, k.right), (k.right, k.left)):
                if _key(near) == _key(ref) and (far.table or "").lower() == alias \
                        and [far.column.lower()] == [c.lower() for c in parent.primary_key]:
                    return join.table.name_in_scope
    return None


def _repeated_by_a_join(plan: m.PlanModel, tables: Mapping[str, TableInfo]) -> bool:
    """Whether a plain list (no grouping, aggregate, DISTINCT or set operation) repeats its rows: a join to a
    table of which many rows meet each row shown, met on the shown side's one-column key, whose side of the plan
    shows nothing ("students who have a pet": Student JOIN Has_Pet shows each student once per pet). Every
    ORDER BY key must be shown (a DISTINCT list orders by what it shows)."""
    if plan.group_by or plan.distinct or plan.set_operations or not plan.joins:
        return False
    if any(_has(item.expr, m.Aggregate | m.Window) for item in plan.select):
        return False
    refs = [plan.from_, *(j.table for j in plan.joins)]
    if any(ref.query is not None for ref in refs):
        return False
    names = {ref.name_in_scope.lower(): ref for ref in refs}
    shown = {n.table.lower() for item in plan.select for n in _nodes(item.expr)
             if isinstance(n, m.ColumnRef) and n.table and n.table.lower() in names}
    if not shown or not all(_shown(item.expr, plan) or _is_output_alias(item.expr, plan) for item in plan.order_by):
        return False
    edges = [(k.left.table.lower(), k.left.column.lower(), k.right.table.lower(), k.right.column.lower())
             for j in plan.joins for k in j.on if k.left.table and k.right.table
             and k.left.table.lower() in names and k.right.table.lower() in names]

    def is_key(alias: str, column: str) -> bool:
        info = tables.get(names[alias].table)
        return info is not None and [c.lower() for c in info.primary_key] == [column]

    def side(start: str, cut: tuple[str, str, str, str]) -> set[str]:
        """The aliases reached from `start` without crossing the edge `cut`."""
        seen, todo = {start}, [start]
        while todo:
            here = todo.pop()
            for edge in edges:
                if edge == cut:
                    continue
                for a, b in ((edge[0], edge[2]), (edge[2], edge[0])):
                    if a == here and b not in seen:
                        seen.add(b)
                        todo.append(b)
        return seen

    for edge in edges:
        left, left_column, right, right_column = edge
        for one, one_column, many, many_column in ((left, left_column, right, right_column),
                                                   (right, right_column, left, left_column)):
            if is_key(one, one_column) and not is_key(many, many_column) \
                    and not side(many, edge) & shown and side(one, edge) & shown:
                return True
    return False


def _show(plan: m.PlanModel, expr: m.ExprNode, position: int) -> str:
    """Add `expr` to the plan's select list at `position`, under a free readable alias; the alias."""
    alias = _free_alias(_alias_for(expr), plan)
    plan.select.insert(position, m.SelectItem(expr=expr.model_copy(deep=True), alias=alias))
    return alias


def _tie_breakers(plan: m.PlanModel, tables: Mapping[str, TableInfo]) -> list[m.ExprNode]:
    """The keys a LIMIT's cut needs after the plan's own order: its group keys, else its FROM table's key."""
    if plan.limit is None:
        return []
    if plan.group_by:
        keys = [e.model_copy(deep=True) for e in plan.group_by]
    elif any(_has(item.expr, m.Aggregate) for item in plan.select):
        return []  # one row
    else:
        key = _key_of(plan.from_, tables)
        if key is None:
            return []
        keys = [key]
    ordered = set()
    for item in plan.order_by:
        ordered.add(_key(item.expr))
        if _is_output_alias(item.expr, plan):  # ORDER BY tracks: the select item named tracks
            name = item.expr.column.lower()  # type: ignore[union-attr]
            ordered |= {_key(i.expr) for i in plan.select if (i.alias or "").lower() == name}
    return [k for k in keys if _key(k) not in ordered]


def _describe(expr: m.ExprNode) -> str:
    return f"{expr.table}.{expr.column}" if isinstance(expr, m.ColumnRef) and expr.table else _alias_for(expr)


def _measures(plan: m.PlanModel) -> list[m.ExprNode]:
    """The first order key and HAVING's aggregates that no select item shows, in that order, once each."""
    grouped = bool(plan.group_by) or any(_has(item.expr, m.Aggregate) for item in plan.select)
    wanted: list[m.ExprNode] = []
    if plan.order_by:
        first = plan.order_by[0].expr
        computed = not isinstance(first, m.ColumnRef)
        if not _is_output_alias(first, plan) and (computed or plan.limit is not None):
            wanted.append(first)
    if plan.having is not None:
        wanted += [node for node in _nodes(plan.having) if isinstance(node, m.Aggregate)]
    found: list[m.ExprNode] = []
    for expr in wanted:
        if isinstance(expr, m.Value | m.ScalarSubquery | m.Window):
            continue
        if grouped != _has(expr, m.Aggregate):  # a plain column beside aggregates could not be built
            continue
        if not _shown(expr, plan) and all(_key(expr) != _key(f) for f in found):
            found.append(expr)
    return found


def _missing_labels(plan: m.PlanModel) -> list[m.ExprNode]:
    """The group keys of a grouped plan that shows only aggregates (its rows would carry no label)."""
    if not plan.group_by or not plan.select or not all(_has(item.expr, m.Aggregate) for item in plan.select):
        return []
    return [expr for expr in plan.group_by if not isinstance(expr, m.Value | m.ScalarSubquery | m.Window)]


def _missing_key(plan: m.PlanModel, tables: Mapping[str, TableInfo]) -> m.ColumnRef | None:
    """The one-column key of the table whose rows the plan lists (no grouping, no aggregate) without it: the FROM
    table when it shows columns of it; in a plan of two tables that shows only the joined one's columns, met on
    the FROM table's key (each of its rows meets one row), the joined table."""
    if plan.group_by or any(_has(item.expr, m.Aggregate) for item in plan.select):
        return None
    shown = [item.expr for item in plan.select if isinstance(item.expr, m.ColumnRef) and item.expr.table]
    owners = {c.table.lower() for c in shown}  # type: ignore[union-attr]
    listed: m.TableRef | None = plan.from_ if plan.from_.name_in_scope.lower() in owners else None
    if listed is None and len(plan.joins) == 1 and owners == {plan.joins[0].table.name_in_scope.lower()}:
        from_key = _key_of(plan.from_, tables)
        if from_key is not None and any(_key(from_key) in (_key(k.left), _key(k.right)) for k in plan.joins[0].on):
            listed = plan.joins[0].table
    key = _key_of(listed, tables) if listed is not None else None
    if key is None or _key(key) in {_key(c) for c in shown}:
        return None
    return key


def _missing_group_keys(plan: m.PlanModel, tables: Mapping[str, TableInfo],
                        repeating: set[tuple[str, str]]) -> list[m.ColumnRef]:
    """The one-column keys a grouped plan groups by but does not show, of each table whose shown columns repeat
    in the data (its rows would carry a label two groups may share)."""
    if not plan.group_by:
        return []
    grouped = {_key(e) for e in plan.group_by}
    found = []
    for ref in plan.tables():
        key = _key_of(ref, tables)
        if key is None or _key(key) not in grouped or _shown(key, plan):
            continue
        shown = [item.expr.column.lower() for item in plan.select if isinstance(item.expr, m.ColumnRef)
                 and (item.expr.table or "").lower() == ref.name_in_scope.lower()]
        if any((ref.table.lower(), column) in repeating for column in shown):
            found.append(key)
    return found


def _first_shown(plan: m.PlanModel, table: str | None) -> int:
    """The position of the first select item that is a column of `table` (the key goes in front of its label)."""
    return next((i for i, item in enumerate(plan.select) if isinstance(item.expr, m.ColumnRef)
                 and (item.expr.table or "").lower() == (table or "").lower()), 0)


def _key_of(ref: m.TableRef, tables: Mapping[str, TableInfo]) -> m.ColumnRef | None:
    """The column naming `ref`'s one-column primary key, under its name in the plan."""
    info = tables.get(ref.table)
    if info is None or len(info.primary_key) != 1:
        return None
    return m.ColumnRef(table=ref.name_in_scope, column=info.primary_key[0])


def _shown(expr: m.ExprNode, plan: m.PlanModel) -> bool:
    """Whether a select item computes `expr`, inside a larger expression or as a part of it; any count shows a
    count."""
    key = _key(expr)
    for item in plan.select:
        inside = [_key(n) for n in _nodes(item.expr)]
        computed = not isinstance(item.expr, m.ColumnRef)  # a column inside LENGTH(column) shows no length
        if key in inside or (computed and any(_key(n) == _key(item.expr) for n in _nodes(expr))):
            return True
        if _is_count(expr) and any(_is_count(n) for n in _nodes(item.expr)):
            return True
    return False


def _one_row_per_group(plan: m.PlanModel) -> bool:
    """Whether the plan's rows are already distinct: grouped, with every group key selected (a DISTINCT there
    changes nothing, and neither does a measure or an order key added to it)."""
    selected = {_key(item.expr) for item in plan.select}
    return bool(plan.group_by) and all(_key(expr) in selected for expr in plan.group_by)


def _is_count(node: m.Node) -> bool:
    return isinstance(node, m.Aggregate) and node.func == "count" and not node.distinct


def _is_output_alias(expr: m.ExprNode, plan: m.PlanModel) -> bool:
    return isinstance(expr, m.ColumnRef) and expr.table is None and expr.column.lower() in {
        (item.alias or "").lower() for item in plan.select}


def _nodes(node: m.Node) -> Iterator[m.Node]:
    """`node` and every node below it, not entering sub-plans."""
    yield node
    for name in type(node).model_fields:
        value = getattr(node, name)
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, m.Node) and not isinstance(child, m.PlanModel):
                yield from _nodes(child)


def _has(node: m.Node, kind: type) -> bool:
    return any(isinstance(n, kind) for n in _nodes(node))


def _key(node: m.Node) -> str:
    return json.dumps(node.model_dump(mode="json"), sort_keys=True).lower()


def _alias_for(expr: m.ExprNode) -> str:
    """A readable output name: `count`, `sum_total`, `length_title`, `milliseconds`."""
    columns = [n.column for n in _nodes(expr) if isinstance(n, m.ColumnRef)]
    head = expr.func if isinstance(expr, m.Aggregate) else expr.name if isinstance(expr, m.Function) else ""
    if isinstance(expr, m.Function) and expr.name == "round" and expr.args:
        return _alias_for(expr.args[0])
    parts = [head, *columns[:1]] if head else columns[:1] or ["measure"]
    return _snake("_".join(parts))


def _snake(name: str) -> str:
    """`InvoiceDate` → `invoice_date`."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _free_alias(alias: str, plan: m.PlanModel) -> str:
    return _unused(alias, {item.alias or "" for item in plan.select})


def _unused(name: str, taken: set[str]) -> str:
    """`name`, or `name_2`, `name_3`, … : the first that is not taken (compared without case)."""
    lowered = {t.lower() for t in taken}
    candidate, n = name, 2
    while candidate.lower() in lowered:
        candidate, n = f"{name}_{n}", n + 1
    return candidate
