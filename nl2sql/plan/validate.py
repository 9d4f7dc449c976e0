"""The plan validator: every name exists, every table is in the caller's scope, and the plan can be built.

Scope comes first: a plan that reads a table outside what the caller may read is refused with the
generic sentence before anything else is looked at, whether that table is denied or does not exist
(one answer for both, so a plan cannot probe for tables), and no message ever names such a table;
only a slip on a readable table's name goes on to the name checks. Then every
table, alias and column is resolved against the schema snapshot (names come back in their
reflected case, unqualified columns get their table), join keys are checked for type
compatibility with the rules of `join_keys`, and aggregates, GROUP BY, windows and sub-plans are
checked for buildability. Each problem has a code and a message a model can act on.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from nl2sql.datasources.guard import sqlglot_dialect
from nl2sql.datasources.models import ColumnInfo, SchemaSnapshot, TableInfo
from nl2sql.errors import NL2SQLError, SecurityViolation, did_you_mean
from nl2sql.plan import model as m
from nl2sql.plan.join_keys import Dtype, category, coercible, describe, dtype_of, value_dtype
from nl2sql.policies import Scope

MAX_LISTED_COLUMNS = 40
FUNCTION_ARITY = {"round": (1, 2), "coalesce": (2, 99), "abs": (1, 1), "lower": (1, 1), "upper": (1, 1),
                  "length": (1, 1), "nullif": (2, 2), "concat": (2, 99),
                  "substr": (2, 3), "replace": (3, 3), "trim": (1, 1), "ltrim": (1, 1), "rtrim": (1, 1),
                  "instr": (2, 2), "ceil": (1, 1), "floor": (1, 1), "power": (2, 2), "mod": (2, 2), "sqrt": (1, 1),
                  "sign": (1, 1), "date": (1, 1), "datetime": (1, 1), "days_between": (2, 2), "format_date": (2, 2),
                  "current_date": (0, 0), "current_timestamp": (0, 0)}
#: What a function returns (None: the type of its first argument).
FUNCTION_DTYPES: dict[str, Dtype | None] = {
    "length": "integer", "instr": "integer", "concat": "text", "substr": "text", "replace": "text", "trim": "text",
    "ltrim": "text", "rtrim": "text", "lower": "text", "upper": "text", "ceil": "integer", "floor": "integer",
    "power": "float", "sqrt": "float", "sign": "integer", "date": "date", "datetime": "datetime",
    "days_between": "float", "format_date": "text", "current_date": "date", "current_timestamp": "datetime"}
#: The type name a cast's target reads as (for the columns of a common or derived table).
CAST_DTYPES: dict[str, Dtype] = {"integer": "integer", "real": "float", "numeric": "decimal", "text": "text",
                                 "date": "date", "timestamp": "datetime", "boolean": "boolean"}
#: A type name for each dtype, read back by dtype_of (a common or derived table's columns have no reflected type).
DTYPE_NAMES: dict[str, str] = {"integer": "INTEGER", "decimal": "DECIMAL", "float": "DOUBLE", "text": "TEXT",
                               "date": "DATE", "datetime": "TIMESTAMP", "boolean": "BOOLEAN", "binary": "BLOB"}
RANKING = ("row_number", "rank", "dense_rank")
#: The integers every supported database reads as written (signed 64-bit): SQLite turns a larger literal into
#: an approximate REAL, and LIMIT or OFFSET past it fails in the database. A plan's numbers stay within it.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class PlanIssue:
    """One problem in a plan: a code, a message a model can act on, and where it is."""

    code: str
    message: str
    path: str

    def __str__(self) -> str:
        return f"[{self.code}] {self.message} (at {self.path})"


class PlanValidationError(NL2SQLError):
    """A plan that cannot be turned into a correct statement; `issues` lists every problem found."""

    code = "PLAN_INVALID"

    def __init__(self, issues: list[PlanIssue]) -> None:
        self.issues = issues
        head = "The plan has 1 problem:" if len(issues) == 1 else f"The plan has {len(issues)} problems:"
        super().__init__(head + "\n" + "\n".join(f"- {i}" for i in issues), node="validator")

    @property
    def codes(self) -> list[str]:
        """The issue codes, in order."""
        return [i.code for i in self.issues]

    @property
    def details(self) -> list[str]:
        """The issue codes, in order."""
        return self.codes


@dataclass
class ValidatedPlan:
    """A plan whose names are resolved (reflected case, qualified columns), with the tables it reads."""

    plan: m.PlanModel
    tables: list[TableInfo]
    schemas: dict[str, str] = field(default_factory=dict)
    #: What the validator fixed because it had exactly one reading (each worth a warning to the asker).
    repairs: list[PlanIssue] = field(default_factory=list)


@dataclass
class VisibleNames:
    """The tables (by alias or name, lower-cased) and output aliases visible in one plan."""

    tables: dict[str, tuple[m.TableRef, TableInfo | None]] = field(default_factory=dict)
    select_aliases: set[str] = field(default_factory=set)
    parent: VisibleNames | None = None
    #: joins a repair added (a column's own table, one foreign key away): appended to the plan's joins
    added_joins: list[m.Join] = field(default_factory=list)
    #: the join keys compared for equality (lower-cased names, join type)
    join_equalities: list[tuple[tuple[str, str], tuple[str, str], str]] = field(default_factory=list)
    #: the common tables (WITH) named here, as tables of their output columns (lower-cased names)
    common: dict[str, TableInfo] = field(default_factory=dict)

    def common_table(self, name: str) -> TableInfo | None:
        """The common table of that name visible here (the nearest WITH first), or None."""
        return self.all_common().get(name.lower())

    def all_common(self) -> dict[str, TableInfo]:
        """Every common table visible here, the nearest WITH's first."""
        found: dict[str, TableInfo] = {}
        frame: VisibleNames | None = self
        while frame is not None:
            for name, info in frame.common.items():
                found.setdefault(name, info)
            frame = frame.parent
        return found

    def lookup(self, name: str) -> tuple[m.TableRef, TableInfo | None] | None:
        frame: VisibleNames | None = self
        while frame is not None:
            if name.lower() in frame.tables:
                return frame.tables[name.lower()]
            frame = frame.parent
        return None

    def has_unknown_table(self) -> bool:
        """Whether a table visible here (in this plan or an outer one) could not be resolved."""
        frame: VisibleNames | None = self
        while frame is not None:
            if any(info is None for _, info in frame.tables.values()):
                return True
            frame = frame.parent
        return False

    def aliases_of(self, table: str) -> list[m.TableRef]:
        """The references in scope (here or outside) that read the table named `table` under another name."""
        found, frame = [], self
        while frame is not None:
            found += [ref for ref, info in frame.tables.values()
                      if info is not None and info.name.lower() == table.lower() and ref.name_in_scope != info.name]
            frame = frame.parent
        return found

    def in_scope(self) -> list[str]:
        names, frame = [], self
        while frame is not None:
            names += [ref.name_in_scope for ref, _ in frame.tables.values()]
            frame = frame.parent
        return names


def iter_plans(plan: m.PlanModel) -> Iterator[m.PlanModel]:
    """The plan and every sub-plan inside it, outermost first."""
    yield plan
    for node in children(plan):
        yield from _sub_plans(node)


def children(node: m.Node) -> Iterator[m.Node]:
    """A plan node's direct child nodes, in field order."""
    for name in type(node).model_fields:
        value = getattr(node, name)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, m.Node):
                yield item


def _sub_plans(node: m.Node) -> Iterator[m.PlanModel]:
    if isinstance(node, m.PlanModel):
        yield from iter_plans(node)
        return
    for child in children(node):
        yield from _sub_plans(child)


def _plans_in(node: m.Node) -> Iterator[m.PlanModel]:
    """The plans directly inside a node (not the plans inside those)."""
    if isinstance(node, m.PlanModel):
        yield node
        return
    for child in children(node):
        yield from _plans_in(child)


def _contains(node: m.Node, kinds: tuple[type, ...], *, into_subplans: bool = False) -> bool:
    if isinstance(node, kinds):
        return True
    if isinstance(node, m.PlanModel) and not into_subplans:
        return False
    return any(_contains(c, kinds, into_subplans=into_subplans) for c in children(node))


def _column_refs(node: m.Node, grouped_keys: frozenset[str] = frozenset()) -> Iterator[m.ColumnRef]:
    """Column references outside aggregates, sub-plans and grouped expressions (windows are looked into:
    their arguments are computed after grouping)."""
    if grouped_keys and _key(node) in grouped_keys:
        return
    if isinstance(node, m.ColumnRef):
        yield node
    elif not isinstance(node, m.Aggregate | m.PlanModel):
        for child in children(node):
            yield from _column_refs(child, grouped_keys)


def _refs_of_this_plan(node: m.Node | None) -> Iterator[m.ColumnRef]:
    """Every column reference of one plan's clause, aggregates and windows included, sub-plans left out."""
    if isinstance(node, m.ColumnRef):
        yield node
    elif node is not None and not isinstance(node, m.PlanModel):
        for child in children(node):
            yield from _refs_of_this_plan(child)


def _spelled(name: str) -> str:
    return name.lower().replace("_", "")


def _tables_named(label: str, frame: VisibleNames) -> list[tuple[m.TableRef, TableInfo]]:
    """The tables of this plan (not outer ones) whose name a column label spells: `genre`, `media_type`,
    `genres`, `genre_name`."""
    spelled = _spelled(label)
    forms = {spelled, spelled.removesuffix("name"), spelled.removesuffix("s"), spelled.removesuffix("es")} - {""}
    return [(ref, info) for ref, info in frame.tables.values()
            if info is not None and _spelled(info.name) in forms]


def _listed(names: list[str] | dict[str, str]) -> str:
    names = list(names)
    return ", ".join(names[:MAX_LISTED_COLUMNS]) + (", …" if len(names) > MAX_LISTED_COLUMNS else "")


def _no_such_column(info: TableInfo, column: str, readable: Sequence[TableInfo] = ()) -> str:
    """What a model needs to fix a column put on the wrong table: a like name, the tables that do have it, the
    table's own columns."""
    names = [c.name for c in info.columns]
    guess = did_you_mean(column, names)
    hint = f" Did you mean {guess}?" if guess else ""
    holders = [t.name for t in readable if t is not info and t.column(column) is not None]
    if holders:
        hint += f" {column} is a column of {', '.join(holders[:5])}: join that table and take it from there."
    return f"{info.name} has no column {column}.{hint} Columns of {info.name}: {_listed(names)}."


def looks_like_date(text: str) -> bool:
    """Whether a literal reads as an ISO date or timestamp."""
    return bool(re.match(r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?$", text.strip()))


def looks_like_number(text: str) -> bool:
    """Whether a literal reads as a number."""
    return bool(re.match(r"^[+-]?(\d+(\.\d*)?|\.\d+)$", text.strip()))


def _describe_node(node: m.Node) -> str:
    if isinstance(node, m.ColumnRef):
        return f"{node.table}.{node.column}" if node.table else node.column
    if isinstance(node, m.Value):
        return repr(node.value)
    return f"the {node.kind} expression"


def _key(node: m.Node) -> str:
    return json.dumps(node.model_dump(mode="json"), sort_keys=True)


class PlanValidator:
    """Validates one plan (and its sub-plans) against a snapshot and a scope."""

    def __init__(self, snapshot: SchemaSnapshot, scope: Scope, max_limit: int | None = None) -> None:
        self.snapshot = snapshot
        self.scope = scope
        self.max_limit = INT64_MAX if max_limit is None else max_limit
        self.allowed = [t for t in snapshot.tables if scope.allows(t.name, t.schema_name)]
        self.issues: list[PlanIssue] = []
        self.repairs: list[PlanIssue] = []
        self.read: dict[str, TableInfo] = {}

    def issue(self, code: str, message: str, path: str) -> None:
        """Record one problem."""
        self.issues.append(PlanIssue(code, message, path))

    # --- tables --------------------------------------------------------------------------------

    def check_scope(self, plan: m.PlanModel, question: str | None = None) -> None:
        """Refuse (generically) a plan that reads a table outside what the caller may read.

        A table the caller may not read and a table that does not exist get the same answer, so a plan cannot tell
        one from the other. Only a slip on a readable table's name (`Tracks`, `customers`: close to one of them,
        compared with readable names alone) is left to the name checks, which repair or report it, and, for a
        model's plan (`question` given), a join that only a column the readable table lacks ties to it
        (`_drop_invented_joins`). A caller who may read every table of the datasource has no table to be told
        apart from one that does not exist: a table the model invented is left to the name checks
        (UNKNOWN_TABLE, which the refiner can correct), not refused.
        """
        if not self.scope.reachable:
            raise SecurityViolation(datasource=self.scope.datasource, node="validator")
        self._scope_of(plan, frozenset(), question, [0])

    def _scope_of(self, plan: m.PlanModel, common: frozenset[str], question: str | None, count: list[int]) -> None:
        """check_scope for one plan and, inside it, every plan it holds: set-operation branches, common tables,
        derived tables, sub-queries. A name a visible common table has is that common table, never a table of the
        database (as the database reads it); every other name must be a table the caller may read."""
        readable = [t.name for t in self.allowed]
        whole = len(self.allowed) == len(self.snapshot.tables)  # nothing here is hidden from this caller
        index, count[0] = count[0], count[0] + 1
        seen = set(common)
        for table in plan.with_:  # each sees the ones before it (none is recursive)
            self._scope_of(table.plan, frozenset(seen), question, count)
            seen.add(table.name.lower())
        visible = frozenset(seen)
        if question is not None:
            self._drop_invented_joins(plan, question, "plan" if index == 0 else f"plan (sub-plan {index})", visible)
        for ref in plan.tables():
            if ref.query is not None:
                self._scope_of(ref.query, visible, question, count)
                continue
            if ref.table.lower() in visible:
                continue
            info = self.snapshot.table(ref.table)
            if info is not None and info in self.allowed:
                continue
            if info is None and whole:
                continue  # a table that does not exist, for a caller who sees them all: UNKNOWN_TABLE
            if info is not None or did_you_mean(ref.table, readable) is None:
                raise SecurityViolation(datasource=self.scope.datasource, node="validator")
        for node in children(plan):
            if isinstance(node, m.CommonTable | m.TableRef):
                continue
            if isinstance(node, m.Join):
                for part in children(node):
                    if not isinstance(part, m.TableRef):
                        for sub in _plans_in(part):
                            self._scope_of(sub, visible, question, count)
                continue
            for sub in _plans_in(node):
                self._scope_of(sub, visible, question, count)

    def _drop_invented_joins(self, sub: m.PlanModel, question: str, path: str,
                             common: frozenset[str] = frozenset()) -> None:
        """Drop a join the model invented: a table outside what the caller may read (whether it exists or not: the
        answer is the same), joined on a column that the readable table on the other side does not have
        (`Customer T1 JOIN Address T2 ON T1.AddressId = T2.AddressId`), every other column read through it a
        column of that readable table (`T2.Country`), and a table the question does not name. Its columns are read
        from the readable table (`INVENTED_JOIN`). So is a table named after the readable table's column it is
        joined on, a foreign key taken for a table (`Customer T1 JOIN SupportRep T2 ON T1.SupportRepId =
        T2.SupportRepId`). Any other table outside the caller's reach is refused as ever.
        """
        words = set(re.findall(r"[a-z]+", question.lower()))
        for j, join in reversed(list(enumerate(sub.joins))):
            if join.table.query is not None or join.table.table.lower() in common:
                continue  # a derived or common table: the plan's own
            info = self.snapshot.table(join.table.table)
            if (info is not None and info in self.allowed) or len(join.on) != 1 \
                    or did_you_mean(join.table.table, [t.name for t in self.allowed]) is not None \
                    or _name_forms(join.table.table) & words or _words_of_name_in(join.table.table, words):
                continue
            invented = join.table.name_in_scope.lower()
            key = join.on[0]
            ours, theirs = (key.left, key.right) if (key.right.table or "").lower() == invented else (key.right, key.left)
            if (theirs.table or "").lower() != invented or ours.table is None:
                continue
            holder = self._readable_in(sub, ours.table)
            has_key = holder is not None and holder[1].column(ours.column) is not None
            if holder is None or (has_key and not _named_after(join.table.table, ours.column)):
                continue
            refs = [n for n in _columns_outside(sub, join) if (n.table or "").lower() == invented]
            if not all(holder[1].column(r.column) is not None for r in refs):
                continue
            for r in refs:
                r.table = holder[0]
            del sub.joins[j]
            read = ", ".join(dict.fromkeys(r.column for r in refs)) or "nothing"
            why = (f"a table named after {ours.table}.{ours.column}, which is a column" if has_key
                   else f"{ours.table}.{ours.column}, a column {holder[1].name} does not have")
            self.repairs.append(PlanIssue("INVENTED_JOIN", f"The join on {why}, was dropped; {read} read from "
                                          f"{holder[1].name}.", f"{path}.joins[{j}]"))

    def _readable_in(self, sub: m.PlanModel, alias: str) -> tuple[str, TableInfo] | None:
        """The name in scope and the table of the plan's table under `alias`, when the caller may read it."""
        for ref in [sub.from_, *(j.table for j in sub.joins)]:
            if ref.name_in_scope.lower() == alias.lower():
                info = self.snapshot.table(ref.table)
                return (ref.name_in_scope, info) if info is not None and info in self.allowed else None
        return None

    def resolve_table(self, ref: m.TableRef, path: str) -> TableInfo | None:
        """The table a reference names (its name set to the reflected case), or None with an issue."""
        info = self.snapshot.table(ref.table) or self._singular_or_plural(ref, path)
        if info is None or info not in self.allowed:
            names = [t.name for t in self.allowed]
            guess = did_you_mean(ref.table, names)
            hint = f" Did you mean {guess}?" if guess else ""
            self.issue("UNKNOWN_TABLE", f"There is no table {ref.table}.{hint} Tables: {', '.join(names)}.", path)
            return None
        ref.table = info.name
        self.read[info.name] = info
        return info

    def _singular_or_plural(self, ref: m.TableRef, path: str) -> TableInfo | None:
        """The one readable table whose name is `ref`'s with an `s` added or dropped (`Tracks`, `customer`), as a
        repair; None when no readable table, or more than one, reads so."""
        forms = _name_forms(ref.table) - {ref.table.lower()}
        found = [t for t in self.allowed if t.name.lower() in forms]
        if len(found) != 1:
            return None
        self.repairs.append(PlanIssue("TABLE_NAME", f"Table {ref.table} read as {found[0].name}.", path))
        if ref.alias is None:  # the columns that named the table as written still find it
            ref.alias = ref.table
        return found[0]

    # --- plans ---------------------------------------------------------------------------------

    def plan(self, plan: m.PlanModel, path: str, parent: VisibleNames | None = None) -> VisibleNames:
        """Validate one plan in the scope of `parent` (for correlated references): its common tables, its SELECT,
        and the plans its set operations combine it with."""
        if plan.with_:
            parent = VisibleNames(parent=parent)
            for i, table in enumerate(plan.with_):
                key = table.name.lower()
                if key in parent.common:
                    self.issue("DUPLICATE_ALIAS", f"{table.name} is named twice in with.", f"{path}.with[{i}]")
                    continue
                parent.common[key] = self._output_table(table.name, table.plan, f"{path}.with[{i}].plan", parent)
        frame = self._select(plan, path, parent)
        for i, operation in enumerate(plan.set_operations):
            where = f"{path}.set_operations[{i}].plan"
            branch = operation.plan
            for clause in ("order_by", "limit", "offset", "with_"):
                if getattr(branch, clause):
                    self.issue("SET_OPERATION_BRANCH", f"A plan combined by {operation.op} cannot have its own "
                               f"{clause.rstrip('_')}: put order_by and limit on the first plan (they apply to "
                               "the combined rows), with on the first plan too.", f"{where}.{clause.rstrip('_')}")
            self.plan(branch, where, parent)
            if branch.select and plan.select and len(branch.select) != len(plan.select) \
                    and not any(isinstance(i.expr, m.Star) for i in (*branch.select, *plan.select)):
                self.issue("SET_OPERATION_COLUMNS", f"{operation.op} combines plans of the same number of columns: "
                           f"the first selects {len(plan.select)}, this one {len(branch.select)}.", f"{where}.select")
        return frame

    def _output_table(self, name: str, plan: m.PlanModel, path: str, parent: VisibleNames | None) -> TableInfo:
        """Validate a common or derived table's plan; a table of its output columns (named by alias, or by the
        column; typed where known), as the plans that read it see it."""
        frame = self.plan(plan, path, parent)
        columns, taken = [], set()
        for i, item in enumerate(plan.select):
            label = item.alias or (item.expr.column if isinstance(item.expr, m.ColumnRef) else f"column{i + 1}")
            if label.lower() in taken:
                continue
            taken.add(label.lower())
            columns.append(ColumnInfo(name=label, type=DTYPE_NAMES.get(self._dtype_of(item.expr, frame) or "", "")))
        return TableInfo(name=name, columns=columns)

    def _dtype_of(self, node: m.ExprNode, frame: VisibleNames) -> Dtype | None:
        """The dtype of an already validated expression, where it is plain to see."""
        if isinstance(node, m.ColumnRef) and node.table:
            found = frame.lookup(node.table)
            column = found[1].column(node.column) if found is not None and found[1] is not None else None
            return dtype_of(column.type, sqlglot_dialect(self.snapshot.dialect)) if column is not None else None
        if isinstance(node, m.Value):
            return value_dtype(node.value)
        if isinstance(node, m.Cast):
            return CAST_DTYPES[node.to]
        if isinstance(node, m.Aggregate):
            if node.func == "count":
                return "integer"
            inner = self._dtype_of(node.arg, frame) if node.arg is not None else None
            if node.func == "avg":
                return "float" if inner is None or category(inner) == "number" else None
            return inner
        if isinstance(node, m.Function):
            kind = FUNCTION_DTYPES.get(node.name)
            return kind if kind is not None else (self._dtype_of(node.args[0], frame) if node.args else None)
        if isinstance(node, m.DatePartOf):
            return "integer"
        return None

    def _select(self, plan: m.PlanModel, path: str, parent: VisibleNames | None) -> VisibleNames:
        """Validate one SELECT in the scope of `parent`."""
        frame = VisibleNames(parent=parent)
        self._add_table(frame, plan.from_, f"{path}.from")
        joins: list[m.Join] = []
        for j, join in enumerate(plan.joins):
            if self._add_table(frame, join.table, f"{path}.joins[{j}].table"):
                joins += self._join(join, frame, f"{path}.joins[{j}]")
            joins.append(join)
        plan.joins[:] = joins
        frame.join_equalities = [((k.left.table.lower(), k.left.column.lower()),
                                  (k.right.table.lower(), k.right.column.lower()), join.type)
                                 for join in joins for k in join.on if k.left.table and k.right.table]
        frame.join_equalities += [(left, right, join.type) for join in joins
                                  for left, right in _condition_equalities(join.condition)]
        if not plan.select:
            self.issue("EMPTY_SELECT", "The plan selects nothing. Add at least one select item.", f"{path}.select")
        self._expand_stars(plan, frame, path)
        self._labelled_tables(plan, frame, path)
        for i, item in enumerate(plan.select):
            self.expr(item.expr, frame, "select", f"{path}.select[{i}]")
        frame.select_aliases = {item.alias.lower() for item in plan.select if item.alias}
        if plan.where is not None:
            self.condition(plan.where, frame, "where", f"{path}.where")
        for i, expr in enumerate(plan.group_by):
            self.expr(expr, frame, "group_by", f"{path}.group_by[{i}]")
            self._not_constant(expr, "group_by", f"{path}.group_by[{i}]")
        if plan.having is not None:
            self.condition(plan.having, frame, "having", f"{path}.having")
        for i, item in enumerate(plan.order_by):
            self.expr(item.expr, frame, "order_by", f"{path}.order_by[{i}]")
            self._not_constant(item.expr, "order_by", f"{path}.order_by[{i}]")
        for name, ceiling in (("limit", self.max_limit), ("offset", INT64_MAX)):
            value = getattr(plan, name)
            if value is not None and value < 0:
                self.issue("BAD_LIMIT", f"{name} must be 0 or more, not {value}.", f"{path}.{name}")
            elif value is not None and value > ceiling:
                why = " (settings.resources.max_rows)" if name == "limit" and ceiling != INT64_MAX else ""
                self.issue("BAD_LIMIT", f"{name} must be at most {ceiling}{why}, not {value}.", f"{path}.{name}")
        self._grouping(plan, frame, path)
        plan.joins.extend(frame.added_joins)
        return frame

    def _expand_stars(self, plan: m.PlanModel, frame: VisibleNames, path: str) -> None:
        """`*` and `t.*` as the columns they stand for: every column of the plan's tables (or of t), each of which
        the caller may read (the tables were checked for scope first)."""
        items: list[m.SelectItem] = []
        for i, item in enumerate(plan.select):
            if not isinstance(item.expr, m.Star):
                items.append(item)
                continue
            refs = list(frame.tables.values())
            if item.expr.table is not None:
                found = frame.tables.get(item.expr.table.lower())
                if found is None:
                    self.issue("UNKNOWN_ALIAS", f"No table or alias {item.expr.table} is in this plan. In scope: "
                               f"{', '.join(r.name_in_scope for r, _ in refs) or '(none)'}.", f"{path}.select[{i}]")
                    continue
                refs = [found]
            for ref, info in refs:
                if info is not None:
                    items += [m.SelectItem(expr=m.ColumnRef(table=ref.name_in_scope, column=c.name))
                              for c in info.columns]
        plan.select[:] = items

    def _labelled_tables(self, plan: m.PlanModel, frame: VisibleNames, path: str) -> None:
        """A column whose label names another table of this plan that has the column (`T2.Name AS genre` where T2
        is Track and T1 is Genre) reads that table's column, here and wherever this plan names it again (a
        repair): a model that numbers its aliases mixes them up, and the label is what it meant."""
        for i, item in enumerate(plan.select):
            ref = item.expr
            if not (isinstance(ref, m.ColumnRef) and ref.table and item.alias):
                continue
            found = frame.tables.get(ref.table.lower())
            if found is None or found[1] is None:
                continue
            named = _tables_named(item.alias, frame)
            if len(named) != 1 or named[0][1] is found[1] or named[0][1].column(ref.column) is None:
                continue
            target, info = named[0]
            written = (ref.table.lower(), ref.column.lower())
            for node in [*plan.select, plan.where, *plan.group_by, plan.having, *plan.order_by]:
                for other in _refs_of_this_plan(node):
                    if other.table and (other.table.lower(), other.column.lower()) == written:
                        other.table = target.name_in_scope
            self.repairs.append(PlanIssue("LABEL_NAMES_TABLE", f"{found[0].name_in_scope}.{ref.column} AS "
                                          f"{item.alias} read as {target.name_in_scope}.{ref.column}: the label "
                                          f"names {info.name}, which has {ref.column} ({found[0].name_in_scope} "
                                          f"is {found[1].name}).", f"{path}.select[{i}]"))

    def _not_constant(self, expr: m.ExprNode, clause: str, path: str) -> None:
        if isinstance(expr, m.Value):
            self.issue("CONSTANT_KEY", f"A constant in {clause} is read as a column position or does nothing. "
                       f"Put a column or an expression (or a select alias) in {clause}.", path)

    def _add_table(self, frame: VisibleNames, ref: m.TableRef, path: str) -> bool:
        """Bring a table into scope (a table of the database, a common table, or a derived table); False (and the
        first use kept) when its alias is taken."""
        if ref.query is not None:
            if ref.alias is None:
                ref.alias = ref.table
            # a derived table sees the common tables around it, not the tables beside it (no LATERAL)
            inner = VisibleNames(common=frame.all_common())
            info: TableInfo | None = self._output_table(ref.table, ref.query, f"{path}.query", inner)
        else:
            info = frame.common_table(ref.table)
            if info is None:
                info = self.resolve_table(ref, path)
            elif ref.table != info.name:
                ref.table = info.name
        key = ref.name_in_scope.lower()
        if key in frame.tables:
            self.issue("DUPLICATE_ALIAS", f"{ref.name_in_scope} is used twice in this plan. Give each use of a "
                       "table its own alias (self-joins need aliases).", path)
            return False
        frame.tables[key] = (ref, info)
        return True

    def _join(self, join: m.Join, frame: VisibleNames, path: str) -> list[m.Join]:
        """Check one join's keys; the link join to put before it when its keys had one repair."""
        links: list[m.Join] = []
        if join.type == "cross" and (join.on or join.condition is not None):
            self.issue("CROSS_JOIN_WITH_KEYS", f"A cross join to {join.table.name_in_scope} pairs every row: it has "
                       "no keys or condition. Use an inner join for those.", path)
        if join.condition is not None:
            self.condition(join.condition, frame, "join", f"{path}.condition")
        if not join.on and join.condition is None and join.type != "cross":
            self.issue("JOIN_WITHOUT_KEYS", f"The join to {join.table.name_in_scope} has no keys. Add at least one "
                       "pair of columns to compare. Any other condition goes in `condition`; a cross join (type cross) pairs "
                       "every row.", f"{path}.on")
        joined = join.table.name_in_scope.lower()
        for k, key in enumerate(join.on):
            self._declared_key_side(key, frame, f"{path}.on[{k}]")
            left = self.column(key.left, frame, "join", f"{path}.on[{k}].left")
            right = self.column(key.right, frame, "join", f"{path}.on[{k}].right")
            sides = {(k.table or "").lower() for k in (key.left, key.right)}
            if any(k.table is None or frame.lookup(k.table) is None for k in (key.left, key.right)):
                continue  # an unresolved side is already reported
            if joined not in sides or len(sides) < 2:
                self.issue("JOIN_NOT_CONNECTED", f"The join to {join.table.name_in_scope} must compare a column of "
                           f"{join.table.name_in_scope} with a column of a table joined before it.", f"{path}.on[{k}]")
            if left and right and not coercible(left, right, parse_text=False) \
                    and self._key_as_sqlite(join, key, left, right, frame, f"{path}.on[{k}]"):
                continue
            if left and right and not coercible(left, right, parse_text=False):
                self.issue(
                    "JOIN_KEY_TYPE_MISMATCH",
                    f"{key.left.table}.{key.left.column} is {describe(left)} but {key.right.table}.{key.right.column} "
                    f"is {describe(right)}: they cannot be compared. Join on columns that hold the same kind of "
                    "value (usually a foreign key and the key it references).",
                    f"{path}.on[{k}]",
                )
            elif left and right and joined in sides and len(sides) == 2:
                link = self._keys_of_one_thing(join, k, frame, f"{path}.on[{k}]")
                if link is not None:
                    links.append(link)
        return links

    def _declared_key_side(self, key: m.JoinKey, frame: VisibleNames, path: str) -> None:
        """A key pair one side of which names a column its table lacks (`cars_data.MakeId = car_names.MakeId`, a
        name taken from the other side): that side becomes its end of the one declared foreign key between the two
        tables whose other end is the named column (`cars_data.Id`, which references `car_names.MakeId`), a
        repair. Unchanged when no such key, or more than one, links them."""
        found = [frame.lookup(ref.table) if ref.table else None for ref in (key.left, key.right)]
        if any(f is None or f[1] is None for f in found):
            return
        (_, left_info), (_, right_info) = found  # type: ignore[misc]
        missing = [left_info.column(key.left.column) is None, right_info.column(key.right.column) is None]
        if missing.count(True) != 1:
            return
        broken, kept, broken_info, kept_info = ((key.left, key.right, left_info, right_info) if missing[0]
                                                else (key.right, key.left, right_info, left_info))
        if broken_info is kept_info:
            return
        ends = [(fk.columns[0], fk.ref_columns[0]) for fk in broken_info.foreign_keys
                if len(fk.columns) == 1 and fk.ref_table.lower() == kept_info.name.lower()]
        ends += [(fk.ref_columns[0], fk.columns[0]) for fk in kept_info.foreign_keys
                 if len(fk.columns) == 1 and fk.ref_table.lower() == broken_info.name.lower()]
        fitting = [own for own, other in ends if other.lower() == kept.column.lower()]
        if len(fitting) != 1:
            return
        self.repairs.append(PlanIssue("JOIN_ON_DECLARED_KEY", f"{broken.table}.{broken.column} read as "
                                      f"{broken.table}.{fitting[0]}: {broken_info.name} has no column {broken.column}; "
                                      f"{fitting[0]} is its end of the foreign key to {kept.table}.{kept.column}.",
                                      path))
        broken.column = fitting[0]

    def _key_as_sqlite(self, join: m.Join, key: m.JoinKey, left: Dtype, right: Dtype, frame: VisibleNames,
                       path: str) -> bool:
        """In SQLite, a text key joined to a number key compares as numbers (numeric affinity): the pair moves to the
        join's condition with the text side read as a number, so every dialect joins as SQLite does (a repair). Only
        for a key pair that is one (a declared foreign key, or columns of one name): a name joined to an id is a
        mistake SQLite would answer with no rows, said rather than repaired."""
        if sqlglot_dialect(self.snapshot.dialect) != "sqlite" or {category(left), category(right)} != {"text", "number"}:
            return False
        if key.left.column.lower() != key.right.column.lower() and not _declared_link(key, frame):
            return False
        text, number = (key.left, key.right) if category(left) == "text" else (key.right, key.left)
        pair = m.Comparison(op="=", left=m.Cast(arg=text, to="numeric"), right=number)
        join.condition = pair if join.condition is None else m.And(conditions=[join.condition, pair])
        join.on.remove(key)
        self.repairs.append(PlanIssue("COMPARED_AS_SQLITE", f"{_describe_node(text)} is text: read as a number to join "
                                      f"with {_describe_node(number)}, as SQLite does.", path))
        return True

    def _keys_of_one_thing(self, join: m.Join, k: int, frame: VisibleNames, path: str) -> m.Join | None:
        """A key pair must compare keys of one table's rows. `Customer.CustomerId = InvoiceLine.InvoiceId` never
        means what it says: when exactly one table links the two (Invoice: a key of one, a foreign key to the
        other) and the plan does not read it, the join goes through it (a repair); otherwise it is an issue."""
        key = join.on[k]
        joined = join.table.name_in_scope.lower()
        earlier, new = (key.left, key.right) if (key.right.table or "").lower() == joined else (key.right, key.left)
        earlier_info, new_info = frame.lookup(earlier.table or "")[1], frame.lookup(new.table or "")[1]
        if earlier_info is None or new_info is None:
            return None
        earlier_of, new_of = _identified(earlier_info, earlier.column), _identified(new_info, new.column)
        if earlier_of is None or new_of is None or earlier_of.lower() == new_of.lower():
            return None
        pair = f"{earlier.table}.{earlier.column} = {new.table}.{new.column}"
        link = self._link_table(earlier_of, new_of, frame)
        if link is None:
            self.issue("JOIN_KEYS_MISMATCH", f"{pair} compares a key of {earlier_of} with a key of {new_of}: they "
                       "never name the same row. Join a foreign key to the key it references "
                       f"({_foreign_keys_between(self.allowed, earlier_of, new_of)}).", path)
            return None
        table, to_earlier, to_new = link
        alias = _free_alias(table.name, frame)
        ref = m.TableRef(table=table.name, alias=None if alias == table.name else alias)
        frame.tables[alias.lower()] = (ref, table)
        self.read[table.name] = table
        key.left, key.right = (m.ColumnRef(table=new.table, column=new.column),
                               m.ColumnRef(table=alias, column=to_new))
        self.repairs.append(PlanIssue("JOIN_THROUGH_LINK_TABLE", f"{pair} compares a key of {earlier_of} with a key "
                                      f"of {new_of}: joined through {table.name} ({alias}.{to_earlier} = "
                                      f"{earlier.table}.{earlier.column}, {new.table}.{new.column} = "
                                      f"{alias}.{to_new}).", path))
        return m.Join(type=join.type, table=ref,
                      on=[m.JoinKey(left=m.ColumnRef(table=alias, column=to_earlier),
                                    right=m.ColumnRef(table=earlier.table, column=earlier.column))])

    def _link_table(self, earlier_of: str, new_of: str, frame: VisibleNames) -> tuple[TableInfo, str, str] | None:
        """(table, its column matching the earlier key, its column matching the new one): the one readable table
        that is one of the two things and holds a single foreign key to the other, when the plan does not read it."""
        found = []
        for this, other in ((new_of, earlier_of), (earlier_of, new_of)):
            table = self.snapshot.table(this)
            if table is None or table not in self.allowed or len(table.primary_key) != 1 or any(
                    info is not None and info.name == table.name for _, info in frame.tables.values()):
                continue
            fks = [fk for fk in table.foreign_keys if len(fk.columns) == 1 and fk.ref_table.lower() == other.lower()]
            if len(fks) == 1:
                own, fk_column = table.primary_key[0], fks[0].columns[0]
                found.append((table, fk_column, own) if this == new_of else (table, own, fk_column))
        return found[0] if len(found) == 1 else None

    # --- expressions ---------------------------------------------------------------------------

    def column(self, ref: m.ColumnRef, frame: VisibleNames, clause: str, path: str) -> Dtype | None:
        """Resolve a column reference in place; its dtype, or None when unknown."""
        if ref.table is None:
            return self._unqualified(ref, frame, clause, path)
        found = frame.lookup(ref.table)
        aliases = frame.aliases_of(ref.table) if found is None else []
        if len(aliases) == 1:  # a table's name where it has an alias: one reading only
            self.repairs.append(PlanIssue("ALIAS_FOR_TABLE_NAME", f"{ref.table}.{ref.column} read as "
                                          f"{aliases[0].name_in_scope}.{ref.column} (the alias of {ref.table}).", path))
            ref.table = aliases[0].name_in_scope
            found = frame.lookup(ref.table)
        if found is None:
            self.issue("UNKNOWN_ALIAS", f"No table or alias {ref.table} is in scope here. In scope: "
                       f"{', '.join(frame.in_scope()) or '(none)'}.", path)
            return None
        table_ref, info = found
        ref.table = table_ref.name_in_scope
        if info is None:
            return None
        col = info.column(ref.column)
        if col is None:
            holder = self._other_holder(ref, info, frame) if clause != "join" else None
            if holder is not None:
                self.repairs.append(PlanIssue("COLUMN_ON_OTHER_TABLE", f"{ref.table}.{ref.column} read as "
                                              f"{holder}.{ref.column} ({info.name} has no column {ref.column}; "
                                              f"{holder} is the one table here that has it).", path))
                ref.table = holder
                return self.column(ref, frame, clause, path)
            parent = self._parent_holder(ref, info, frame, path) if clause != "join" else None
            if parent is not None:
                return self.column(ref, frame, clause, path)
            self.issue("UNKNOWN_COLUMN", _no_such_column(info, ref.column, self.allowed), path)
            return None
        if ref.column != col.name:
            self.repairs.append(PlanIssue("COLUMN_CASE", f"{ref.table}.{ref.column} read as {ref.table}.{col.name}.",
                                          path))
            ref.column = col.name
        return dtype_of(col.type, sqlglot_dialect(self.snapshot.dialect))

    @staticmethod
    def _other_holder(ref: m.ColumnRef, info: TableInfo, frame: VisibleNames) -> str | None:
        """The one other table of this plan that has the column `ref` names on a table without it, when the named
        table has no column of a like name either (else there are two readings). Not for join keys: moving one
        side of a key to the other table would compare that table with itself."""
        if did_you_mean(ref.column, [c.name for c in info.columns]) is not None:
            return None
        holders = [r.name_in_scope for r, i in frame.tables.values()
                   if i is not None and i is not info and i.column(ref.column) is not None]
        return holders[0] if len(holders) == 1 else None

    def _parent_holder(self, ref: m.ColumnRef, info: TableInfo, frame: VisibleNames, path: str) -> str | None:
        """The alias of the one readable table, one foreign key away from `info` (a row of `info` names one row of
        it), that has the column `ref` names on `info`: the alias the plan already joins it under on that foreign
        key, else joined in (LEFT, so no row of `info` is lost or repeated); `ref` moved to it. None, and nothing
        changed, when no such table, or more than one, has it, or the named table has a column of a like name and
        the same kind of value (two readings)."""
        links = []
        for fk in info.foreign_keys:
            target = self.snapshot.table(fk.ref_table)
            if (len(fk.columns) == 1 and target is not None and target in self.allowed
                    and target.column(ref.column) is not None):
                links.append((fk, target))
        if len(links) != 1:
            return None
        fk, target = links[0]
        dialect = sqlglot_dialect(self.snapshot.dialect)
        kind = category(dtype_of(target.column(ref.column).type, dialect))  # type: ignore[union-attr]
        like = did_you_mean(ref.column, [c.name for c in info.columns])
        if like is not None and category(dtype_of(info.column(like).type, dialect)) == kind:  # type: ignore[union-attr]
            return None
        joined = _joined_on(ref.table or "", fk.columns[0], target, fk.ref_columns[0], frame)
        if joined is not None:  # a second copy of the same row would only hide that it is one
            self.repairs.append(PlanIssue("COLUMN_ON_PARENT_TABLE", f"{ref.table}.{ref.column} read as "
                                          f"{joined}.{ref.column}: {info.name} has no column {ref.column}; {joined} "
                                          f"is the {target.name} its {fk.columns[0]} references.", path))
            ref.table = joined
            return joined
        alias = _free_alias(target.name, frame)
        table_ref = m.TableRef(table=target.name, alias=None if alias == target.name else alias)
        frame.tables[alias.lower()] = (table_ref, target)
        frame.added_joins.append(m.Join(type="left", table=table_ref, on=[m.JoinKey(
            left=m.ColumnRef(table=alias, column=fk.ref_columns[0]), right=m.ColumnRef(table=ref.table,
                                                                                     column=fk.columns[0]))]))
        self.read[target.name] = target
        self.repairs.append(PlanIssue("COLUMN_ON_PARENT_TABLE", f"{ref.table}.{ref.column} read as "
                                      f"{alias}.{ref.column}: {info.name} has no column {ref.column}; {target.name}, "
                                      f"which its {fk.columns[0]} references, was joined in.", path))
        ref.table = alias
        return alias

    def _unqualified(self, ref: m.ColumnRef, frame: VisibleNames, clause: str, path: str) -> Dtype | None:
        if clause in ("order_by", "having") and ref.column.lower() in frame.select_aliases:
            return "other"  # an output alias
        holders = [(r, i) for r, i in frame.tables.values() if i is not None and i.column(ref.column)]
        if len(holders) == 1:
            ref.table = holders[0][0].name_in_scope
            return self.column(ref, frame, clause, path)
        if len(holders) > 1 and (one := _joined_on_it(ref.column, [r for r, _ in holders], frame)) is not None:
            ref.table = one
            self.repairs.append(PlanIssue("JOIN_KEY_COLUMN", f"{ref.column} read as {one}.{ref.column}: the tables "
                                          "that have it are joined on it, so each row holds one value.", path))
            return self.column(ref, frame, clause, path)
        if len(holders) > 1:
            self.issue("AMBIGUOUS_COLUMN", f"Column {ref.column} is in more than one table here; set its table to "
                       f"one of {', '.join(r.name_in_scope for r, _ in holders)}.", path)
            return None
        if frame.has_unknown_table():
            return None  # it may belong to the table already reported as unknown
        known = [(r, i) for r, i in frame.tables.values() if i is not None]
        if len(known) == 1:
            self.issue("UNKNOWN_COLUMN", _no_such_column(known[0][1], ref.column, self.allowed), path)
            return None
        every = {f"{r.name_in_scope}.{c.name}": c.name for r, i in known for c in i.columns}
        guess = did_you_mean(ref.column, every.values())
        hint = f" Did you mean {next(q for q, c in every.items() if c == guess)}?" if guess else ""
        self.issue("UNKNOWN_COLUMN", f"No table in this plan has a column {ref.column}.{hint} Set `table` to the "
                   f"alias of the table that holds it. Columns: {_listed(every)}.", path)
        return None

    def expr(self, node: m.ExprNode, frame: VisibleNames, clause: str, path: str, *, in_aggregate: bool = False) -> Dtype | None:
        """Validate an expression in place; its dtype where known."""
        if isinstance(node, m.ColumnRef):
            return self.column(node, frame, clause, path)
        if isinstance(node, m.Value):
            self._number_in_range(node.value, path)
            return value_dtype(node.value)
        if isinstance(node, m.Aggregate):
            if clause in ("where", "group_by", "join"):
                self.issue("AGGREGATE_NOT_ALLOWED", f"{node.func}() cannot be used in {clause}. Filter on "
                           "aggregates with having instead.", path)
            if in_aggregate:
                self.issue("NESTED_AGGREGATE", f"{node.func}() is inside another aggregate; aggregates cannot be "
                           "nested. Compute the inner aggregate in a sub-plan.", path)
            if node.arg is None and node.func != "count":
                self.issue("MISSING_ARGUMENT", f"{node.func}() needs an argument.", path)
            if node.arg is not None:
                dtype = self.expr(node.arg, frame, clause, f"{path}.arg", in_aggregate=True)
                if node.func in ("sum", "avg") and dtype is not None and category(dtype) == "text" \
                        and sqlglot_dialect(self.snapshot.dialect) == "sqlite":
                    self.repairs.append(PlanIssue("COMPARED_AS_SQLITE", f"{_describe_node(node.arg)} is text: "
                                                  f"read as numbers for {node.func}(), as SQLite does.", path))
                    node.arg = m.Cast(arg=node.arg, to="real")
            return None
        if isinstance(node, m.Window):
            return self._window(node, frame, clause, path)
        if isinstance(node, m.Arithmetic):
            self.expr(node.left, frame, clause, f"{path}.left", in_aggregate=in_aggregate)
            self.expr(node.right, frame, clause, f"{path}.right", in_aggregate=in_aggregate)
            return None
        if isinstance(node, m.Function):
            low, high = FUNCTION_ARITY[node.name]
            if not low <= len(node.args) <= high:
                want = str(low) if low == high else f"{low} to {high}" if high < 99 else f"at least {low}"
                self.issue("BAD_ARGUMENTS", f"{node.name}() takes {want} arguments, not {len(node.args)}.", path)
            dtypes = [self.expr(arg, frame, clause, f"{path}.args[{i}]", in_aggregate=in_aggregate)
                      for i, arg in enumerate(node.args)]
            if node.name == "format_date" and len(node.args) == 2 and not (
                    isinstance(node.args[1], m.Value) and isinstance(node.args[1].value, str)):
                self.issue("BAD_ARGUMENTS", "format_date's format must be a text such as '%Y-%m'.", f"{path}.args[1]")
            kind = FUNCTION_DTYPES.get(node.name)
            return kind if kind is not None else (dtypes[0] if dtypes else None)
        if isinstance(node, m.Cast):
            self.expr(node.arg, frame, clause, f"{path}.arg", in_aggregate=in_aggregate)
            return CAST_DTYPES[node.to]
        if isinstance(node, m.Star):
            self.issue("STAR_NOT_ALLOWED", "* stands for columns only as a whole select item (count(*) is an "
                       "aggregate with no argument).", path)
            return None
        if isinstance(node, m.Case):
            if not node.whens:
                self.issue("EMPTY_CASE", "A case needs at least one when.", path)
            branches = []
            for i, when in enumerate(node.whens):
                self.condition(when.condition, frame, clause, f"{path}.whens[{i}].condition")
                branches.append(self.expr(when.then, frame, clause, f"{path}.whens[{i}].then", in_aggregate=in_aggregate))
            if node.otherwise is not None:
                branches.append(self.expr(node.otherwise, frame, clause, f"{path}.otherwise", in_aggregate=in_aggregate))
            kinds = {category(d) for d in branches if d is not None} - {"other"}
            if {"number", "text"} <= kinds:
                self.issue("CASE_MIXED_TYPES", "The branches of this case mix numbers and text, which most databases "
                           "refuse. Make every branch the same kind (write the numbers as text, or the text as numbers).",
                           path)
            return next((d for d in branches if d is not None), None)
        if isinstance(node, m.DatePartOf | m.DateTrunc):
            dtype = self.expr(node.arg, frame, clause, f"{path}.arg", in_aggregate=in_aggregate)
            if dtype in ("integer", "decimal", "float", "boolean", "binary"):
                what = f"{node.arg.table}.{node.arg.column}" if isinstance(node.arg, m.ColumnRef) else "its argument"
                self.issue("NOT_A_DATE", f"{node.kind} needs a date or timestamp, but {what} is {describe(dtype)}. "
                           "Use a date or timestamp column.", f"{path}.arg")
            return "integer" if isinstance(node, m.DatePartOf) else "datetime"
        if isinstance(node, m.ScalarSubquery):
            inner = self._sub_plan(node.plan, frame, f"{path}.plan", one_column=True)
            return self._dtype_of(node.plan.select[0].expr, inner) if len(node.plan.select) == 1 else None
        raise TypeError(f"unknown expression node {type(node).__name__}")  # pragma: no cover

    def _number_in_range(self, value: object, path: str) -> None:
        """Refuse a literal number the databases would not read as written (rather than fail or round there)."""
        if isinstance(value, bool):
            return
        if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            self.issue("BAD_NUMBER", f"The number {value} is out of range: integers must lie between {INT64_MIN} "
                       f"and {INT64_MAX}. Use a smaller number, or write it as a decimal (1e30).", path)
        elif isinstance(value, float) and not math.isfinite(value):
            self.issue("BAD_NUMBER", f"{value} is not a number a database can compare with. Use a finite number.",
                       path)

    def _window(self, node: m.Window, frame: VisibleNames, clause: str, path: str) -> None:
        if clause not in ("select", "order_by"):
            self.issue("WINDOW_NOT_ALLOWED", f"Window functions can only be selected or ordered by, not used in "
                       f"{clause}. Select it in a sub-plan and filter the outer plan.", path)
        if node.func in RANKING:
            if node.arg is not None:
                self.issue("BAD_ARGUMENTS", f"{node.func}() takes no argument.", f"{path}.arg")
            if not node.order_by:
                self.issue("WINDOW_WITHOUT_ORDER", f"{node.func}() needs order_by.", path)
        elif node.arg is None and node.func != "count":
            self.issue("MISSING_ARGUMENT", f"{node.func}() over a window needs an argument.", path)
        if node.arg is not None:
            self.expr(node.arg, frame, "select", f"{path}.arg")
        for i, expr in enumerate(node.partition_by):
            self.expr(expr, frame, "select", f"{path}.partition_by[{i}]")
        for i, item in enumerate(node.order_by):
            self.expr(item.expr, frame, "select", f"{path}.order_by[{i}].expr")

    def _sub_plan(self, plan: m.PlanModel, frame: VisibleNames, path: str, *, one_column: bool) -> VisibleNames:
        inner = self.plan(plan, path, parent=frame)
        if one_column and len(plan.select) > 1:
            self.issue("SUBQUERY_COLUMNS", f"This sub-plan must select exactly one column, not {len(plan.select)}.",
                       f"{path}.select")
        return inner

    def _in_as_sqlite(self, node: m.InSubquery, subject: Dtype | None, inner: VisibleNames, path: str) -> None:
        """In SQLite, text IN (numbers) or a number IN (texts) compares as numbers (numeric affinity): the text side
        read as a number, so every dialect compares as SQLite does (a repair)."""
        if sqlglot_dialect(self.snapshot.dialect) != "sqlite" or len(node.plan.select) != 1 or subject is None:
            return
        item = node.plan.select[0]
        selected = self._dtype_of(item.expr, inner)
        if selected is None or {category(subject), category(selected)} != {"text", "number"}:
            return
        if category(subject) == "text":
            node.expr = m.Cast(arg=node.expr, to="numeric")
        else:
            item.expr = m.Cast(arg=item.expr, to="numeric")
        self.repairs.append(PlanIssue("COMPARED_AS_SQLITE", "text compared with numbers in in: read as numbers, as "
                                      "SQLite does.", path))

    # --- conditions ----------------------------------------------------------------------------

    def condition(self, node: m.ConditionNode, frame: VisibleNames, clause: str, path: str) -> None:
        """Validate a boolean tree in place."""
        if isinstance(node, m.Comparison):
            left = self.expr(node.left, frame, clause, f"{path}.left")
            right = self.expr(node.right, frame, clause, f"{path}.right")
            if not self._compared_as_sqlite(node, left, right, path):
                self._comparable(node.left, left, node.right, right, path)
        elif isinstance(node, m.InList):
            subject = self.expr(node.expr, frame, clause, f"{path}.expr")
            if not node.values:
                self.issue("EMPTY_IN_LIST", "An in condition needs at least one value.", f"{path}.values")
            for i, value in enumerate(node.values):
                dtype = self.expr(value, frame, clause, f"{path}.values[{i}]")
                self._comparable(node.expr, subject, value, dtype, f"{path}.values[{i}]")
        elif isinstance(node, m.Between):
            subject = self.expr(node.expr, frame, clause, f"{path}.expr")
            for name in ("low", "high"):
                bound = getattr(node, name)
                self._comparable(node.expr, subject, bound, self.expr(bound, frame, clause, f"{path}.{name}"),
                                 f"{path}.{name}")
        elif isinstance(node, m.Like):
            if not isinstance(node.pattern, str):
                self.expr(node.pattern, frame, clause, f"{path}.pattern")
            dtype = self.expr(node.expr, frame, clause, f"{path}.expr")
            if dtype is not None and category(dtype) not in ("text", "other"):
                self.issue("LIKE_NOT_TEXT", f"like needs text, but {_describe_node(node.expr)} is {describe(dtype)}. "
                           "Compare numbers and dates with compare or between instead.", f"{path}.expr")
        elif isinstance(node, m.IsNull):
            self.expr(node.expr, frame, clause, f"{path}.expr")
        elif isinstance(node, m.And | m.Or):
            if not node.conditions:
                self.issue("EMPTY_CONDITION", f"An {node.kind} needs at least one condition.", f"{path}.conditions")
            for i, sub in enumerate(node.conditions):
                self.condition(sub, frame, clause, f"{path}.conditions[{i}]")
        elif isinstance(node, m.Not):
            self.condition(node.condition, frame, clause, f"{path}.condition")
        elif isinstance(node, m.InSubquery):
            subject = self.expr(node.expr, frame, clause, f"{path}.expr")
            inner = self._sub_plan(node.plan, frame, f"{path}.plan", one_column=True)
            self._in_as_sqlite(node, subject, inner, path)
        elif isinstance(node, m.Exists):
            self._sub_plan(node.plan, frame, f"{path}.plan", one_column=False)
        elif isinstance(node, m.Truth):
            self.expr(node.expr, frame, clause, f"{path}.expr")

    def _compared_as_sqlite(self, node: m.Comparison, left: Dtype | None, right: Dtype | None, path: str) -> bool:
        """In SQLite, text compared with a number, written the way SQLite reads it (a repair; True when made), so that
        every dialect computes what SQLite does: beside a text column a number literal is text ('2014'); text beside
        a number column or expression is read as a number (CAST … AS NUMERIC: SQLite's numeric affinity)."""
        if sqlglot_dialect(self.snapshot.dialect) != "sqlite" or left is None or right is None:
            return False
        if {category(left), category(right)} != {"text", "number"}:
            return False
        text_side = "left" if category(left) == "text" else "right"
        number_side = "right" if text_side == "left" else "left"
        number, text = getattr(node, number_side), getattr(node, text_side)
        if self._number_as_text(number, text, path):
            return True
        if isinstance(text, m.Value):
            return False  # a literal text against a number: the usual rule says how to write it
        if isinstance(text, m.ColumnRef) and isinstance(number, m.ColumnRef) \
                and text.column.lower() != number.column.lower():
            return False  # two columns of different names and kinds: more likely a mistake than a text-typed key
        setattr(node, text_side, m.Cast(arg=text, to="numeric"))
        self.repairs.append(PlanIssue("COMPARED_AS_SQLITE", f"{_describe_node(text)} is text: read as a number to "
                                      f"compare with {_describe_node(number)}, as SQLite does.", path))
        return True

    def _number_as_text(self, number: m.ExprNode, text: m.ExprNode, path: str) -> bool:
        """A number literal beside text, written as the text SQLite compares it as (its text affinity); True when
        it was one (a repair)."""
        if not (isinstance(number, m.Value) and isinstance(number.value, int | float)
                and not isinstance(number.value, bool)):
            return False
        written = repr(number.value)
        number.value = str(number.value)
        self.repairs.append(PlanIssue("COMPARED_AS_SQLITE", f"{_describe_node(text)} is text: {written} compared as "
                                      f"the text '{number.value}', as SQLite does.", path))
        return True

    def _comparable(self, left: m.ExprNode, left_dtype: Dtype | None, right: m.ExprNode, right_dtype: Dtype | None,
                    path: str) -> None:
        """Refuse comparisons most databases reject: text with numbers, dates with numbers, text that is no date."""
        if left_dtype is None or right_dtype is None:
            return
        kinds = {category(left_dtype), category(right_dtype)}
        if "other" in kinds or len(kinds) == 1:
            return
        if sqlglot_dialect(self.snapshot.dialect) == "sqlite" and kinds == {"text", "number"}:
            number, text = (left, right) if category(left_dtype) == "number" else (right, left)
            if self._number_as_text(number, text, path):
                return
        sides = ((left, left_dtype), (right, right_dtype))
        for (node, _), (_, other) in (sides, sides[::-1]):
            if isinstance(node, m.Value) and isinstance(node.value, str) and category(other) != "text":
                if category(other) == "temporal" and looks_like_date(node.value):
                    return  # '2011-06-30' against a date: every engine reads the text as a date
                if category(other) == "number" and looks_like_number(node.value):
                    return
        if kinds <= {"number", "boolean"} or kinds == {"temporal"}:
            return
        self.issue("COMPARE_TYPE_MISMATCH", f"{_describe_node(left)} is {describe(left_dtype)} but "
                   f"{_describe_node(right)} is {describe(right_dtype)}: they cannot be compared. Compare values "
                   "of the same kind (write dates as 'YYYY-MM-DD', numbers without quotes).", path)

    # --- grouping ------------------------------------------------------------------------------

    def _shown_key_grouped(self, expr: m.ExprNode, grouped: set[tuple[str, str]], keyed: set[tuple[str, str]],
                           frame: VisibleNames, plan: m.PlanModel, where: str) -> bool:
        """Group by a table's key when the plan shows it beside that table's grouped columns (`SELECT d.name, d.id,
        COUNT(*) … GROUP BY d.name`): one group per row of the table, the only reading in which each group has one
        key to show; two rows sharing a name are then kept apart instead of merged. Only when the plan joins other
        tables (the aggregates count their rows; over the table alone, grouping by its key would count 1s) and
        groups by the table's own values (a foreign key grouped names rows of another table)."""
        if not isinstance(expr, m.ColumnRef) or expr.table is None or len(frame.tables) < 2:
            return False
        alias, column = expr.table.lower(), expr.column.lower()
        found = frame.tables.get(alias)
        if found is None or found[1] is None or (alias, column) in keyed \
                or [c.lower() for c in found[1].primary_key] != [column]:
            return False
        foreign = {c.lower() for fk in found[1].foreign_keys for c in fk.columns}
        own = [c for table, c in grouped if table == alias]
        if not own or any(c in foreign for c in own):
            return False
        self.repairs.append(PlanIssue("GROUP_BY_SHOWN_KEY", f"{expr.table}.{expr.column} added to group_by (the plan "
                                      f"shows the key of {expr.table} beside its grouped columns).", where))
        plan.group_by.append(m.ColumnRef(table=expr.table, column=expr.column))
        return True

    def _grouping(self, plan: m.PlanModel, frame: VisibleNames, path: str) -> None:
        aggregated = bool(plan.group_by) or plan.having is not None or any(
            _contains(item.expr, (m.Aggregate,)) for item in plan.select)
        if not aggregated:
            return
        keys = frozenset(_key(e) for e in plan.group_by)
        grouped = {((e.table or "").lower(), e.column.lower()) for e in plan.group_by if isinstance(e, m.ColumnRef)}
        keyed = _equal_by_inner_joins(grouped, frame.join_equalities)  # a column equal to a grouped one
        local = set(frame.tables)
        for i, item in enumerate(plan.select):
            if self._shown_key_grouped(item.expr, grouped, keyed, frame, plan, f"{path}.select[{i}]"):
                grouped.add((item.expr.table.lower(), item.expr.column.lower()))  # type: ignore[union-attr]
                keyed = _equal_by_inner_joins(grouped, frame.join_equalities)
        aggregates = [n for item in plan.select for n in _aggregates_of(item.expr)]
        # SQLite's bare columns beside one MIN or MAX take the values of the row it found (a documented SQLite
        # reading, and the one way to say "the row with the most" without a sub-plan there)
        bare = (sqlglot_dialect(self.snapshot.dialect) == "sqlite" and len(aggregates) == 1
                and aggregates[0].func in ("min", "max") and plan.having is None)
        checks = [(item.expr, f"{path}.select[{i}]") for i, item in enumerate(plan.select)]
        checks += [(item.expr, f"{path}.order_by[{i}]") for i, item in enumerate(plan.order_by)]
        if plan.having is not None:
            checks.append((plan.having, f"{path}.having"))
        for expr, where in checks:
            if _key(expr) in keys:
                continue
            for ref in _column_refs(expr, keys):
                if ref.table is None or ref.table.lower() not in local:
                    continue  # an output alias, or an outer (correlated) reference
                info = frame.tables[ref.table.lower()][1]
                if info is None or info.column(ref.column) is None:
                    continue  # already reported as unknown
                column = (ref.table.lower(), ref.column.lower())
                if column not in grouped and _keyed_by(info, ref.table.lower(), keyed):
                    # grouped by the table's key: the column has one value per group, so grouping by it too
                    # changes no group (the one reading)
                    self.repairs.append(PlanIssue("GROUP_BY_DEPENDENT_COLUMN", f"{ref.table}.{ref.column} added to "
                                                  f"group_by (the plan groups by the key of {ref.table}).", where))
                    plan.group_by.append(m.ColumnRef(table=ref.table, column=ref.column))
                    grouped.add(column)
                if column not in grouped and bare and where.startswith(f"{path}.select"):
                    self.repairs.append(PlanIssue("BARE_COLUMN", f"{ref.table}.{ref.column} is read from the row "
                                                  f"whose {aggregates[0].func}() the plan selects, as SQLite does.",
                                                  where))
                    grouped.add(column)
                if column not in grouped:
                    self.issue("GROUP_BY_MISMATCH", f"{ref.table}.{ref.column} is used without an aggregate but is "
                               "not in group_by. Add it to group_by or aggregate it.", where)


def _declared_link(key: m.JoinKey, frame: VisibleNames) -> bool:
    """Whether a key pair is a foreign key the database declares (either way round)."""
    sides = []
    for ref in (key.left, key.right):
        found = frame.lookup(ref.table or "")
        if found is None or found[1] is None:
            return False
        sides.append((found[1], ref.column.lower()))
    for (info, column), (other, other_column) in (sides, sides[::-1]):
        for fk in info.foreign_keys:
            if [c.lower() for c in fk.columns] == [column] and fk.ref_table.lower() == other.name.lower() \
                    and [c.lower() for c in fk.ref_columns] == [other_column]:
                return True
    return False


def _identified(info: TableInfo, column: str) -> str | None:
    """The table whose rows a column names: its own for a one-column primary key, the referenced one for a
    one-column foreign key; None for any other column."""
    for fk in info.foreign_keys:
        if len(fk.columns) == 1 and fk.columns[0].lower() == column.lower():
            return fk.ref_table
    if len(info.primary_key) == 1 and info.primary_key[0].lower() == column.lower():
        return info.name
    return None


def _foreign_keys_between(tables: list[TableInfo], first: str, second: str) -> str:
    """The foreign keys from either table, or from a table that references both, into either (for a message)."""
    wanted, keys = {first.lower(), second.lower()}, []
    for table in tables:
        single = [fk for fk in table.foreign_keys if len(fk.columns) == 1]
        if table.name.lower() in wanted or {fk.ref_table.lower() for fk in single} >= wanted:
            keys += [f"{table.name}.{fk.columns[0]} → {fk.ref_table}.{fk.ref_columns[0]}" for fk in single
                     if fk.ref_table.lower() in wanted]
    return "foreign keys: " + ", ".join(keys) if keys else "no foreign key links them"


def _joined_on_it(column: str, holders: list[m.TableRef], frame: VisibleNames) -> str | None:
    """The table to read an unqualified `column` from when every table holding it is joined on it (`FROM Invoice i
    JOIN Customer c ON c.CustomerId = i.CustomerId … GROUP BY CustomerId`): the FROM table's when it holds it (kept by
    a LEFT join too), else the first's, with inner joins only; None when some holder is not equated with the others."""
    names = [r.name_in_scope.lower() for r in holders]
    from_name = next(iter(frame.tables), "")  # the FROM table is the first brought into scope
    wanted = column.lower()
    group = {names[0]}
    grew = True
    while grew:
        grew = False
        for (lt, lc), (rt, rc), kind in frame.join_equalities:
            if lc != wanted or rc != wanted or lt not in names or rt not in names:
                continue
            if kind != "inner" and from_name not in (lt, rt):
                continue
            if (lt in group) != (rt in group):
                group |= {lt, rt}
                grew = True
    if group != set(names):
        return None
    chosen = from_name if from_name in names else names[0]
    if chosen != from_name and any(kind != "inner" for *_, kind in frame.join_equalities):
        return None
    return holders[names.index(chosen)].name_in_scope


def _free_alias(name: str, frame: VisibleNames) -> str:
    """`name`, or `name_2`, … : the first that no table in scope is called."""
    taken = {n.lower() for n in frame.in_scope()}
    alias, n = name, 2
    while alias.lower() in taken:
        alias, n = f"{name}_{n}", n + 1
    return alias


def _named_after(table: str, column: str) -> bool:
    """Whether a table's name is a column's (`SupportRepId`), or the column's without its id (`SupportRep`)."""
    name, col = table.lower().replace("_", ""), column.lower().replace("_", "")
    return name == col or (col.endswith("id") and name == col[:-2])


def _words_of_name_in(table: str, words: set[str]) -> bool:
    """Whether a name of two or more words (`SupportRep`, `support_rep`) is written word by word in the question
    ("their support reps")."""
    parts = [p.lower() for p in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", table)]
    return len(parts) > 1 and all(_name_forms(p) & words for p in parts)


def _name_forms(table: str) -> set[str]:
    """How a question may write a table's name as a word: `Address`, `addresses`, `Customers` → `customer`."""
    name = table.lower()
    return {name, f"{name}s", f"{name}es", name.removesuffix("s"), name.removesuffix("es")}


def _columns_outside(sub: m.Node, skip: m.Join) -> Iterator[m.ColumnRef]:
    """The plan's column references outside the join `skip`'s condition, in field order, not entering sub-plans."""
    for child in children(sub):
        if isinstance(child, m.ColumnRef):
            yield child
        elif child is not skip and not isinstance(child, m.PlanModel):
            yield from _columns_outside(child, skip)


def _aggregates_of(node: m.Node) -> Iterator[m.Aggregate]:
    """The aggregates of one plan's expression (not of its sub-plans; not windows')."""
    if isinstance(node, m.Aggregate):
        yield node
    elif not isinstance(node, m.PlanModel | m.Window):
        for child in children(node):
            yield from _aggregates_of(child)


def _condition_equalities(node: m.ConditionNode | None) -> Iterator[tuple[tuple[str, str], tuple[str, str]]]:
    """The column pairs a join condition holds equal (`a.x = b.y`, also with a cast on either side, in an AND)."""
    if isinstance(node, m.And):
        for part in node.conditions:
            yield from _condition_equalities(part)
    elif isinstance(node, m.Comparison) and node.op == "=":
        sides = [n.arg if isinstance(n, m.Cast) else n for n in (node.left, node.right)]
        if all(isinstance(n, m.ColumnRef) and n.table for n in sides):
            left, right = sides
            yield (left.table.lower(), left.column.lower()), (right.table.lower(), right.column.lower())  # type: ignore[union-attr]


def _joined_on(alias: str, column: str, target: TableInfo, target_column: str, frame: VisibleNames) -> str | None:
    """The alias under which this plan reads `target` with `target_column` equal to `alias`.`column` by a join's
    key pair (the plan's own joins or one added by a repair), if any."""
    child = (alias.lower(), column.lower())
    equalities = [(left, right) for left, right, _ in frame.join_equalities]
    equalities += [((k.left.table.lower(), k.left.column.lower()), (k.right.table.lower(), k.right.column.lower()))
                   for join in frame.added_joins for k in join.on if k.left.table and k.right.table]
    for left, right in equalities:
        other = right if left == child else left if right == child else None
        if other is None or other[1] != target_column.lower():
            continue
        found = frame.tables.get(other[0])
        if found is not None and found[1] is target:
            return found[0].name_in_scope
    return None


def _equal_by_inner_joins(columns: set[tuple[str, str]],
                          equalities: list[tuple[tuple[str, str], tuple[str, str], str]]) -> set[tuple[str, str]]:
    """The columns, and every column an inner join's key pair makes equal to one of them (grouping by one groups
    by the other)."""
    found = set(columns)
    grew = True
    while grew:
        grew = False
        for left, right, kind in equalities:
            if kind == "inner" and (left in found) != (right in found):
                found |= {left, right}
                grew = True
    return found


def _keyed_by(info: TableInfo, alias: str, grouped: set[tuple[str, str]]) -> bool:
    """Whether the grouped columns hold the whole primary key of the table read under `alias`."""
    return bool(info.primary_key) and all((alias, c.lower()) in grouped for c in info.primary_key)


def validate_plan(plan: m.PlanModel, snapshot: SchemaSnapshot, scope: Scope,
                  question: str | None = None, *, max_limit: int | None = None) -> ValidatedPlan:
    """Check a plan against the snapshot and the caller's scope; the resolved plan, or an error.

    Raises SecurityViolation (generic sentence, no names) when the plan reads a table out of scope,
    and PlanValidationError listing every other problem. `question`: a model's plan's question (a join it
    invented may then be dropped, `INVENTED_JOIN`). `max_limit`: the largest limit a plan may set
    (settings.resources.max_rows; default: the largest 64-bit integer, as for offset and literal numbers).
    """
    resolved = plan.model_copy(deep=True)
    validator = PlanValidator(snapshot, scope, max_limit)
    validator.check_scope(resolved, question)
    validator.plan(resolved, "plan")
    if validator.issues:
        raise PlanValidationError(validator.issues)
    tables = list(validator.read.values())
    schemas = {t.name: t.schema_name for t in tables if t.schema_name}
    return ValidatedPlan(plan=resolved, tables=tables, schemas=schemas, repairs=validator.repairs)
