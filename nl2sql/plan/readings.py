"""Where a model's validated plan contradicts what is written beside it, and only one reading is left.

Four checks, applied to a model's plan (never to a verified query's, a cached one's or a gold plan), each fix
recorded as a repair the asker sees:

- `QUESTION_RANGE`: the question names a range of positions ("the 11th to 20th longest tracks"), which has one
  page: OFFSET 10, LIMIT 10. A plan that keeps that many rows from one position too early or too late
  (OFFSET 9 or 11), or that writes the range's end as its LIMIT (LIMIT 20 OFFSET 10), is set to that page.
- `UNIT_FACTOR`: an output labelled in one unit (`… AS minutes`) computed from a column named in another
  (`Milliseconds`) by dividing by the factor of a third unit (1000: milliseconds to seconds) divides by the
  label's factor instead (60000). The label is the model's own reading of the question; the factor is the
  arithmetic it got wrong.
- `LIMIT_NOT_ASKED`: a LIMIT of more than one row where the question names no number of rows ("Which genres
  sell best in Germany?" with LIMIT 5) is dropped: the planner is told to use a LIMIT only when the question asks
  for a number, and a cut the asker did not ask for hides rows that answer the question. A LIMIT 1 ("Which genre
  sells best?") and a page with an OFFSET are left as written.
- `SHOWN_COLUMN_FIXED`: a list whose every shown column its filter fixes to one value (`SELECT g.Name … WHERE
  g.Name = 'Bossa Nova'` over Genre g JOIN Track t) shows one value on every row. Where exactly one other table
  of the plan has a column of each such name, the list shows that table's column (`t.Name`): the model mixed up
  its aliases, as in LABEL_NAMES_TABLE, and the filter says which table it meant to filter.

>>> from nl2sql.plan.model import PlanModel
>>> plan = PlanModel.model_validate({
...     "select": [{"expr": {"kind": "column", "table": "t", "column": "Name"}}],
...     "from": {"table": "Track", "alias": "t"}, "limit": 10, "offset": 9})
>>> fixed, repairs = read_against_question(plan, "Which are the 11th to 20th longest tracks?")
>>> fixed.offset, fixed.limit, [r.code for r in repairs]
(10, 10, ['QUESTION_RANGE'])
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from nl2sql.datasources.models import TableInfo
from nl2sql.plan import model as m
from nl2sql.plan.validate import PlanIssue, children

_ORDINAL = r"(\d+)\s*(?:st|nd|rd|th)"
#: "11th to 20th", "11th-20th", "11th through the 20th": a range of positions, both ends counted.
RANGE = re.compile(rf"\b{_ORDINAL}\s*(?:to|through|thru|until|-|–)\s*(?:the\s+)?{_ORDINAL}\b", re.IGNORECASE)

#: Words by which a question asks for a number of rows: a number, an ordinal, `top`, `first`, `a few`…
COUNT_WORDS = re.compile(r"\b(?:\d+(?:st|nd|rd|th)?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
                         r"fifteen|twenty|thirty|fifty|hundred|dozen|top|first|last|few|handful|couple|some|sample|"
                         r"page|limit)\b", re.IGNORECASE)

#: Units a label or a column name may carry, in their base unit (milliseconds for time, bytes for size); not
#: `min` (a minimum as often as minutes).
UNITS: dict[str, tuple[str, float]] = {
    "milliseconds": ("time", 1), "millisecond": ("time", 1), "ms": ("time", 1),
    "seconds": ("time", 1000), "second": ("time", 1000), "secs": ("time", 1000),
    "minutes": ("time", 60_000), "minute": ("time", 60_000), "mins": ("time", 60_000),
    "hours": ("time", 3_600_000), "hour": ("time", 3_600_000), "hrs": ("time", 3_600_000),
    "bytes": ("size", 1), "byte": ("size", 1),
    "kilobytes": ("size", 1024), "kb": ("size", 1024),
    "megabytes": ("size", 1024 ** 2), "mb": ("size", 1024 ** 2),
    "gigabytes": ("size", 1024 ** 3), "gb": ("size", 1024 ** 3),
}
#: Size factors written in powers of ten read as their powers of two' unit (1000000 bytes: a megabyte).
DECIMAL_SIZES = {1000: 1024, 1000 ** 2: 1024 ** 2, 1000 ** 3: 1024 ** 3}


def read_against_question(plan: m.PlanModel, question: str,
                          tables: Mapping[str, TableInfo] | None = None) -> tuple[m.PlanModel, list[PlanIssue]]:
    """The plan with its contradictions fixed (a copy where anything changed), and the repairs made. `tables`: the
    plan's tables by name, as validated (without them the shown columns are not checked)."""
    if plan.set_operations:
        return plan, []  # combined rows: each plan is read as written
    fixed = plan.model_copy(deep=True)
    repairs = [*_question_range(fixed, question), *_unit_factors(fixed), *_fixed_shown_columns(fixed, tables or {}),
               *_count_not_asked(fixed, question)]
    return (fixed, repairs) if repairs else (plan, [])


def _fixed_shown_columns(plan: m.PlanModel, tables: Mapping[str, TableInfo]) -> list[PlanIssue]:
    """Show the other table's column of the same name where a list shows only columns its filter fixes."""
    if plan.group_by or not plan.select or plan.where is None:
        return []
    conjuncts = plan.where.conditions if isinstance(plan.where, m.And) else [plan.where]
    fixed = {(c.left.table or "").lower() + "." + c.left.column.lower() for c in conjuncts
             if isinstance(c, m.Comparison) and c.op == "=" and isinstance(c.left, m.ColumnRef)
             and isinstance(c.right, m.Value) and c.right.value is not None}
    moves: list[tuple[m.ColumnRef, m.TableRef]] = []
    for item in plan.select:
        ref = item.expr
        if not isinstance(ref, m.ColumnRef) or f"{(ref.table or '').lower()}.{ref.column.lower()}" not in fixed:
            return []
        others = [t for t in plan.tables() if t.name_in_scope.lower() != (ref.table or "").lower()
                  and (info := tables.get(t.table)) is not None and info.column(ref.column) is not None
                  and not _joined_on(plan, ref, t)]  # a join key equal to the fixed one is fixed as well
        if len(others) != 1:
            return []
        moves.append((ref, others[0]))
    repairs = []
    for i, (ref, other) in enumerate(moves):
        repairs.append(PlanIssue("SHOWN_COLUMN_FIXED", f"{ref.table}.{ref.column} shown as {other.name_in_scope}."
                                 f"{ref.column}: the filter fixes {ref.table}.{ref.column} to one value, so every row "
                                 "would show it.", f"plan.select[{i}]"))
        ref.table = other.name_in_scope
    return repairs


def _joined_on(plan: m.PlanModel, ref: m.ColumnRef, other: m.TableRef) -> bool:
    """Whether a join compares `ref` with the column of the same name of `other`."""
    sides = {f"{(ref.table or '').lower()}.{ref.column.lower()}", f"{other.name_in_scope.lower()}.{ref.column.lower()}"}
    return any({f"{(k.left.table or '').lower()}.{k.left.column.lower()}",
                f"{(k.right.table or '').lower()}.{k.right.column.lower()}"} == sides for j in plan.joins for k in j.on)


def _count_not_asked(plan: m.PlanModel, question: str) -> list[PlanIssue]:
    """Drop a LIMIT of more than one row that the question asks for nowhere (no number, ordinal or `top`)."""
    if plan.limit is None or plan.limit <= 1 or plan.offset or COUNT_WORDS.search(question):
        return []
    written, plan.limit = plan.limit, None
    return [PlanIssue("LIMIT_NOT_ASKED", f"LIMIT {written} dropped: the question asks for no number of rows, so "
                      "every row that answers it is shown.", "plan.limit")]


def _question_range(plan: m.PlanModel, question: str) -> list[PlanIssue]:
    """Set the page of the one range of positions the question names, when the plan is one position off."""
    ranges = RANGE.findall(question)
    if len(ranges) != 1 or plan.limit is None:
        return []
    first, last = (int(n) for n in ranges[0])
    if not 1 <= first < last:
        return []
    size, offset = last - first + 1, first - 1
    written = plan.offset or 0
    one_off = plan.limit == size and abs(written - offset) == 1
    end_as_limit = plan.limit == last and written == offset
    if not (one_off or end_as_limit):
        return []
    plan.limit, plan.offset = size, offset
    return [PlanIssue("QUESTION_RANGE", f"LIMIT {size} OFFSET {offset}: the question asks for positions {first} to "
                      f"{last} (the plan had LIMIT {size if one_off else last} OFFSET {written}).", "plan.limit")]


def _unit_factors(plan: m.PlanModel) -> list[PlanIssue]:
    """Divide by the label's factor where a select item divides a unit-named column by another unit's."""
    repairs = []
    for i, item in enumerate(plan.select):
        target = _unit_of(item.alias or "")
        if target is None:
            continue
        for node in _divisions(item.expr):
            source = _source_unit(node.left)
            if source is None or source[0] != target[0] or not isinstance(node.right, m.Value):
                continue
            written = node.right.value
            if isinstance(written, bool) or not isinstance(written, int | float) or written <= 0:
                continue
            wanted = target[1] / source[1]
            factor = DECIMAL_SIZES.get(int(written), written) if target[0] == "size" else written
            known = {f / source[1] for kind, f in UNITS.values() if kind == source[0] and f > source[1]}
            if factor == wanted or factor not in known or wanted <= 1:
                continue  # right already, or not a unit's factor: the model meant something else
            node.right = m.Value(value=float(wanted))
            repairs.append(PlanIssue("UNIT_FACTOR", f"{item.alias} divides by {wanted:g}, not {written:g}: the "
                                     "label names a unit the column's factor does not give.", f"plan.select[{i}]"))
    return repairs


def _unit_of(name: str) -> tuple[str, float] | None:
    """The one unit a label's words name (`avg_minutes` → minutes), or None (none, or two)."""
    units = {UNITS[w] for w in re.split(r"[^a-z]+", _words(name)) if w in UNITS}
    return units.pop() if len(units) == 1 else None


def _source_unit(expr: m.ExprNode) -> tuple[str, float] | None:
    """The unit of the one column an expression reads (directly or inside an aggregate or ROUND)."""
    columns = [n for n in _walk(expr) if isinstance(n, m.ColumnRef)]
    return _unit_of(columns[0].column) if len(columns) == 1 else None


def _divisions(expr: m.ExprNode) -> list[m.Arithmetic]:
    return [n for n in _walk(expr) if isinstance(n, m.Arithmetic) and n.op == "/"]


def _walk(node: m.Node) -> list[m.Node]:
    """`node` and every node below it, not entering sub-plans."""
    found = [node]
    for child in children(node):
        if not isinstance(child, m.PlanModel):
            found += _walk(child)
    return found


def _words(name: str) -> str:
    """`TotalMilliseconds` → `total milliseconds`, `avg_minutes` → `avg minutes`."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).lower()
