"""What the model nodes are asked, and the shapes of their structured answers.

Prompts hold the question, datasource descriptions and the retrieved schema (with sample values
of filterable columns): never rows of a result, except the synthesizer's preview of the answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from nl2sql.llm.models import Message
from nl2sql.plan import PlanModel

# --- structured answers ---------------------------------------------------------------------------


class Answerability(BaseModel):
    """The resolver's answer: can the shortlisted datasources answer the question, and which are needed."""

    model_config = ConfigDict(extra="forbid")

    # the reason comes first: a constrained decoder writes fields in order, so it reasons before its verdict
    reason: str = Field(description="One sentence: which data the question needs, and where it is (or is not).")
    answerable: bool
    datasource_ids: list[str] = Field(description="The datasources needed, most relevant first.")


class PlannedColumn(BaseModel):
    """A column a sub-query should return."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str


class PlannedSubQuery(BaseModel):
    """One sub-query of a decomposed question."""

    model_config = ConfigDict(extra="forbid")

    datasource_id: str
    question: str
    expected_columns: list[PlannedColumn]


class PlannedKey(BaseModel):
    """A pair of columns that hold the same key in the left and right sub-queries."""

    model_config = ConfigDict(extra="forbid")

    left: str
    right: str


class PlannedCombine(BaseModel):
    """How two sub-queries' results are combined."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["join", "compare", "union"]
    left: int = Field(description="Index of the left sub-query (0-based).")
    right: int = Field(description="Index of the right sub-query (0-based).")
    join_keys: list[PlannedKey]


class Decomposition(BaseModel):
    """The decomposer's answer: sub-queries (one datasource each) and how to combine them."""

    model_config = ConfigDict(extra="forbid")

    sub_queries: list[PlannedSubQuery]
    combine: PlannedCombine | None


def _datasource_id(ids: tuple[str, ...]) -> Any:
    """A datasource id field whose JSON schema is an enum of `ids` (a constrained decoder can write no other id);
    parsing stays lenient (ids are compared without regard to case after it)."""
    return Annotated[str, Field(json_schema_extra={"enum": list(ids)})]


@cache
def answerability_for(ids: tuple[str, ...]) -> type[Answerability]:
    """Answerability with its datasource ids an enum of the shortlist's."""
    return create_model("Answerability", __base__=Answerability,
                        datasource_ids=(list[_datasource_id(ids)],  # type: ignore[valid-type]
                                        Field(description="The datasources needed, most relevant first.")))


@cache
def decomposition_for(ids: tuple[str, ...]) -> type[Decomposition]:
    """Decomposition with each sub-query's datasource id an enum of the datasources routing chose."""
    sub_query = create_model("PlannedSubQuery", __base__=PlannedSubQuery,
                             datasource_id=(_datasource_id(ids), ...))
    return create_model("Decomposition", __base__=Decomposition, sub_queries=(list[sub_query], ...))  # type: ignore[valid-type]


def same_ids(written: Sequence[str], allowed: Sequence[str]) -> list[str]:
    """The ids of `allowed` that `written` names, compared without regard to case, in written order, once each."""
    canonical = {ds.lower(): ds for ds in allowed}
    return list(dict.fromkeys(canonical[w.strip().lower()] for w in written if w.strip().lower() in canonical))


CANNOT_ANSWER = Field(default=None, description="Only when no table shown holds what the question asks about: "
                      "why, in one sentence (with nothing selected). Null otherwise.")


class SQLAnswer(BaseModel):
    """The planner's answer in the `sql` format, read from its text: one SELECT statement, or why none of the
    tables can answer."""

    sql: str
    cannot_answer: str | None = None


#: what the `sql` format's planner answers when no table can answer (the direct baseline's words too)
CANNOT_ANSWER_WORDS = "CANNOT ANSWER"
_FENCED = re.compile(r"```[a-zA-Z]*\s*(.*?)```", re.S)
_LINE_STARTING_STATEMENT = re.compile(r"^\s*(SELECT|WITH)\b", re.I | re.M)
_STATEMENT_BEGUN = re.compile(r"\s*(SELECT|WITH)\W", re.I)
_STATEMENT_KEYWORD = re.compile(r"\b(SELECT|WITH)\b", re.I)


def reads_as_sql(text: str) -> bool:
    """Whether a text meant as words is a SQL statement (it begins with SELECT or WITH).

    >>> reads_as_sql("SELECT COUNT(*) FROM Invoice"), reads_as_sql("Selected tracks per genre")
    (True, False)
    """
    return _LINE_STARTING_STATEMENT.match(text.strip()) is not None


def begins_as_sql(text: str) -> bool:
    """Whether a text still being written already reads as SQL: its first word, followed by more, is SELECT or
    WITH (a word not yet ended may become another: "Select" of "Selected").

    >>> begins_as_sql("SELECT COUNT"), begins_as_sql("Select"), begins_as_sql("Selected tra")
    (True, False, False)
    """
    return _STATEMENT_BEGUN.match(text) is not None


def sub_query_in_sql(partial: Any) -> bool:
    """Whether a decomposer's answer read so far (partial JSON) holds a sub-query whose question reads as SQL:
    such a decomposition is set aside whatever follows (see `steps.decompose`)."""
    sub_queries = partial.get("sub_queries") if isinstance(partial, dict) else None
    return isinstance(sub_queries, list) and any(
        isinstance(sq, dict) and isinstance(sq.get("question"), str) and begins_as_sql(sq["question"])
        for sq in sub_queries)


def sql_answer(text: str) -> SQLAnswer:
    """The statement in a model's plain-text answer: a fenced block's, else from its first SELECT or WITH, up to
    the first semicolon outside a literal; a JSON {"sql": …} answer is read too. With no statement, the words
    CANNOT ANSWER are a verdict; anything else is an empty statement (which the refiner is shown)."""
    body = text.strip()
    fenced = _FENCED.search(body)
    if fenced:
        body = fenced.group(1).strip()
    elif body.startswith("{"):
        try:
            written = json.loads(body)
        except ValueError:
            written = None
        if isinstance(written, dict) and isinstance(written.get("sql"), str):
            cannot = written.get("cannot_answer")
            return SQLAnswer(sql=written["sql"].strip(), cannot_answer=cannot if isinstance(cannot, str) else None)
    start = _LINE_STARTING_STATEMENT.search(body) or _STATEMENT_KEYWORD.search(body)  # "the SELECT below:" is prose
    if start is None:
        return SQLAnswer(sql="", cannot_answer=body if CANNOT_ANSWER_WORDS in body.upper() else None)
    return SQLAnswer(sql=_first_statement(body[start.start():]))


def _first_statement(sql: str) -> str:
    """`sql` up to its first statement-ending semicolon (sqlglot's tokens: a semicolon in a literal stays)."""
    from sqlglot.errors import TokenError
    from sqlglot.tokens import Tokenizer, TokenType

    try:
        tokens = Tokenizer().tokenize(sql)
    except TokenError:  # an unclosed literal: the parser says what is wrong, to the refiner
        return sql.strip()
    end = next((t.start for t in tokens if t.token_type == TokenType.SEMICOLON), len(sql))
    return sql[:end].strip()


class PlannerPlan(PlanModel):
    """The planner's answer in the `plan` format: the plan, or why none of the tables can answer (last: a decoder
    that writes fields in order has written a plan before it may give up)."""

    cannot_answer: str | None = CANNOT_ANSWER


# --- messages -------------------------------------------------------------------------------------
#
# Every call about a datasource begins with the same prefix for it and the caller's scope (`SharedPrefix`): the
# instructions, the tables the caller may read and the worked examples that do not depend on the question. Each
# node's own instructions and the question come after it, so a model server that keeps the last prompt cached (a
# local llama.cpp server) or caches prefixes (hosted models) reads the long part once per datasource, not per call.

#: What every node's system message adds to the planner's rules: the other tasks of a call about the same data
OTHER_TASKS = """
Asked instead which databases a question needs or how to split it, answer in JSON, as asked."""

RESOLVER_RULES = """Most questions need exactly one: list a second only when the question asks for data that only it holds.
Answer answerable=false when none of them holds the data (or the question is not about data).
List in datasource_ids only ids from the list, the fewest that together answer the question."""

DECOMPOSER_RULES = """Decide whether the question needs more than one of the databases, and split it only when it does.
Most questions need one database: then answer one sub-query, on the database whose tables hold what the question
asks about, with the question as asked.
Split only when the question asks for data that only a second database holds. Each sub-query is then a question in
plain words (not SQL) answerable from its database alone; name the columns it must return.
When results must be combined, give combine: join (rows matched on keys), compare (values side by side per key)
or union (rows stacked); a join key is a column each side returns, holding the same values (e.g. a customer id).
Use at most {max_sub_queries} sub-queries."""

#: The plan language as the model must write it, in every structured-output mode (a server that only constrains
#: decoding never shows the model the JSON schema): a compact grammar and one worked example over tables of no
#: datasource of the engine's, so it teaches the shape and nothing an eval measures.
PLAN_LANGUAGE = """The plan is one JSON object:
{"select": [{"expr": EXPR, "alias": "name"}, ...], "from": {"table": "T", "alias": "t"},
 "joins": [{"type": "inner"|"left"|"cross", "table": {"table": "U", "alias": "u"},
            "on": [{"left": COLUMN, "right": COLUMN}], "condition": COND|null}],
 "where": COND|null, "group_by": [EXPR], "having": COND|null,
 "order_by": [{"expr": EXPR, "direction": "asc"|"desc"}], "limit": N|null, "offset": N|null, "distinct": false}
Optional: "with": [{"name": "W", "plan": PLAN}] (read "W" as a table); a table {"table": "D", "alias": "d",
 "query": PLAN} is a derived table; "set_operations": [{"op": "union|union_all|intersect|except", "plan": PLAN}]
 combines the rows (order_by and limit then apply to all).
EXPR, by "kind":
 column {"kind":"column","table":"t","column":"C"}  (table: the alias given in from/joins)
 literal {"kind":"literal","value":1}  aggregate {"kind":"aggregate","func":"count|sum|avg|min|max","arg":EXPR|null,
 "distinct":false} (arg null: COUNT(*))  arithmetic {"kind":"arithmetic","op":"+|-|*|/","left":EXPR,"right":EXPR}
 function {"kind":"function","name":"round|coalesce|abs|lower|upper|length|nullif|concat|substr|replace|trim|instr|
 ceil|floor|power|mod|sqrt|sign|date|datetime|days_between|format_date|current_date","args":[EXPR]}
 cast {"kind":"cast","arg":EXPR,"to":"integer|real|numeric|text|date|timestamp|boolean"}
 case {"kind":"case","whens":[{"condition":COND,"then":EXPR}],"otherwise":EXPR|null}
 date_part {"kind":"date_part","part":"year|quarter|month|day|hour|minute|day_of_week","arg":EXPR}
 date_trunc {"kind":"date_trunc","unit":"year|quarter|month|week|day","arg":EXPR}
 window {"kind":"window","func":"row_number|rank|dense_rank|sum|avg|count|min|max","arg":EXPR|null,
 "partition_by":[EXPR],"order_by":[ORDER]}  subquery {"kind":"subquery","plan":PLAN}
COND, by "kind": compare {"op":"=|<>|<|<=|>|>=","left":EXPR,"right":EXPR}; in {"expr","values":[EXPR],"negated"};
 between {"expr","low","high","negated"}; like {"expr","pattern","case_insensitive","negated"};
 is_null {"expr","negated"}; and/or {"conditions":[COND]}; not {"condition"}; in_subquery {"expr","plan","negated"};
 exists {"plan","negated"}; truth {"expr"} (a boolean column).
Example, for tables orders(order_id, customer_id, amount, placed_on) and customers(customer_id, region):
"Total order amount per region in 2020, largest first" is
{"select": [{"expr": {"kind": "column", "table": "c", "column": "region"}, "alias": "region"},
  {"expr": {"kind": "aggregate", "func": "sum", "arg": {"kind": "column", "table": "o", "column": "amount"},
   "distinct": false}, "alias": "total_amount"}],
 "from": {"table": "orders", "alias": "o"},
 "joins": [{"type": "inner", "table": {"table": "customers", "alias": "c"},
   "on": [{"left": {"kind": "column", "table": "o", "column": "customer_id"},
           "right": {"kind": "column", "table": "c", "column": "customer_id"}}]}],
 "where": {"kind": "compare", "op": "=", "left": {"kind": "date_part", "part": "year",
   "arg": {"kind": "column", "table": "o", "column": "placed_on"}}, "right": {"kind": "literal", "value": 2020}},
 "group_by": [{"kind": "column", "table": "c", "column": "region"}], "having": null,
 "order_by": [{"expr": {"kind": "column", "table": null, "column": "total_amount"}, "direction": "desc"}],
 "limit": null, "offset": null, "distinct": false}"""

_PLAN_RULES = """You write a query plan (JSON) that answers the question from the tables below.
Use only the tables and columns listed, with their exact names. Dialect: {dialect}.
Give each output column a short snake_case alias; return the expected columns when they are listed.
Break ties in ordering on a key column. Use a LIMIT only when the question asks for a number of rows."""
_PLAN_LANGUAGE = "\n\n" + PLAN_LANGUAGE.replace("{", "{{").replace("}", "}}")

PLANNER_SYSTEM = _PLAN_RULES + """
Only when no table below holds what the question asks about (it is not about this data), add
"cannot_answer": "the reason" and leave "select" empty; otherwise "cannot_answer" is null.""" + OTHER_TASKS + \
    _PLAN_LANGUAGE

# short: rules about aliases and qualified columns made a small model join tables the question does not need
_SQL_RULES = """You write one {dialect} SELECT statement that answers the question from the tables given as CREATE TABLE
statements. Use only those tables and columns, with their exact names.
Answer with the statement only: no JSON, no comments, no explanation.
Return the expected columns when they are listed. Break ties in ordering on a key column.
Use a LIMIT only when the question asks for a number of rows."""

# plain text, not JSON: a small model writes SQL as it was trained to, and no grammar slows its decoding
SQL_PLANNER_SYSTEM = _SQL_RULES + f"""
Only when no table given holds what the question asks about (it is not about this data), answer
{CANNOT_ANSWER_WORDS} instead."""

_SYNTHESIZER_RULES = """State the numbers as they appear in the result; never invent values that are not in it.
Mention the data notes when there are any."""
SYNTHESIZER_SYSTEM = "You answer a question in one plain sentence from the query result given; the asker sees the rows " \
    "too.\n" + \
    _SYNTHESIZER_RULES

#: how a dialect is named to a model
DIALECT_NAMES = {"sqlite": "SQLite", "duckdb": "DuckDB", "postgresql": "PostgreSQL", "postgres": "PostgreSQL"}


@dataclass(frozen=True)
class SharedPrefix:
    """The beginning of every call about one datasource for one caller scope: the system message (instructions
    for every node) and the start of the first user message (the tables, the worked examples that do not depend on
    the question). Byte-identical from one question and one node to the next: a model server reuses it."""

    datasource_id: str
    format: Literal["plan", "sql"]
    dialect: str
    system: str
    head: str

    def messages(self, tail: str) -> list[Message]:
        """The prefix, then what this call asks (after the head, in the same user message)."""
        return [Message("system", self.system, shared=len(self.system)),
                Message("user", self.head + tail, shared=len(self.head))]


def shared_prefix(datasource_id: str, fmt: Literal["plan", "sql"], dialect: str, tables: str,
                  examples: Sequence[tuple[str, str]] = ()) -> SharedPrefix:
    """The prefix of a datasource's calls: `tables` as the planner reads them (CREATE TABLE statements in the `sql`
    format, `RetrievedSchema.render` in the `plan` format) and `examples`, (question, answer) pairs in the format,
    the same for every question."""
    if fmt == "sql":
        system = SQL_PLANNER_SYSTEM.format(dialect=DIALECT_NAMES.get(dialect, dialect)) + OTHER_TASKS
        head = f"{tables}\n\n{_sql_examples(examples)}"
    else:
        system = PLANNER_SYSTEM.format(dialect=dialect)
        head = f"Tables:\n{tables}\n\n{_examples(examples, 'Plan')}"
    return SharedPrefix(datasource_id, fmt, dialect, system, head)


def datasource_lines(datasources: Sequence[tuple[str, str, Sequence[str]]]) -> str:
    """One block per datasource: id, description and the tables that matched the question."""
    return "\n".join(f"- {ds}: {desc.strip()} Tables: {', '.join(tables) or '—'}" for ds, desc, tables in datasources)


def _not_a_statement(prefix: SharedPrefix) -> str:
    table_word = "CREATE TABLE statements" if prefix.format == "sql" else "tables"
    return f"No statement or plan this time. The {table_word} above are those of database {prefix.datasource_id}.\n"


def resolver_messages(prefix: SharedPrefix, question: str,
                      datasources: Sequence[tuple[str, str, Sequence[str]]]) -> list[Message]:
    """Messages for the answerability check: the prefix of routing's first pick, then the shortlist (each
    datasource's id, description and the tables that matched) and the question."""
    return prefix.messages(f"{_not_a_statement(prefix)}Which of these databases does the question need?\n"
                           f"Databases:\n{datasource_lines(datasources)}\n\n{RESOLVER_RULES}\n\nQuestion: {question}")


def decomposer_messages(prefix: SharedPrefix, question: str, description: str,
                        others: Sequence[tuple[str, str, str]], max_sub_queries: int) -> list[Message]:
    """Messages for the decomposer: the prefix of its first datasource (with its `description`), then each other
    datasource's description and tables (`RetrievedSchema.outline`: names and columns), and the question."""
    blocks = "\n\n".join(f"Database {ds}: {desc.strip()}\n{schema}" for ds, desc, schema in others)
    return prefix.messages(f"{_not_a_statement(prefix)}Database {prefix.datasource_id}: {description.strip()}\n\n"
                           f"The other databases:\n\n{blocks}\n\n"
                           f"{DECOMPOSER_RULES.format(max_sub_queries=max_sub_queries)}\n\nQuestion: {question}")


def _expected(expected: Sequence[str]) -> str:
    return f"\nExpected columns: {', '.join(expected)}" if expected else ""


def _examples(examples: Sequence[tuple[str, str]], label: str) -> str:
    """Worked examples on this database, placed after the tables: the prompt up to the tables is then the same for
    every question, so a model server reuses its cached prefix (on a CPU the tables are most of the reading)."""
    if not examples:
        return ""
    shown = "\n".join(f"- Asked: {asked}\n  {label}: {answer}" for asked, answer in examples)
    return f"Answered before on this database:\n{shown}\n\n"


def _sql_examples(examples: Sequence[tuple[str, str]]) -> str:
    """The `sql` format's worked examples, after the tables as SQL comments and statements (the form SQL models
    are trained on)."""
    if not examples:
        return ""
    shown = "\n\n".join(f"-- Question: {asked}\n{sql.strip().rstrip(';')};" for asked, sql in examples)
    return f"-- Answered before on this database:\n{shown}\n\n"


def planner_messages(prefix: SharedPrefix, question: str, expected: Sequence[str] = (),
                     examples: Sequence[tuple[str, str]] = ()) -> list[Message]:
    """Messages for the planner: the prefix, the worked examples chosen for this question (nearest first; those
    the same for every question are in the prefix), then the question."""
    if prefix.format == "sql":
        name = DIALECT_NAMES.get(prefix.dialect, prefix.dialect)
        return prefix.messages(f"{_sql_examples(examples)}-- Using valid {name}, answer the following question for "
                               f"the tables provided above.\nQuestion: {question}{_expected(expected)}")
    return prefix.messages(f"{_examples(examples, 'Plan')}Question: {question}{_expected(expected)}")


#: how the refiner's turn begins (it continues the planner's conversation)
SQL_REFINER_TURN = "That statement failed:"
PLAN_REFINER_TURN = "That plan failed:"


def refiner_messages(asked: Sequence[Message], written: str | None, errors: Sequence[str], *,
                     fmt: Literal["plan", "sql"] = "sql") -> list[Message]:
    """Messages for the refiner: the planner's conversation (`planner_messages`), what it wrote (a statement, or
    a plan's JSON), then the errors (the prompt up to the answer is the planner's: a server reuses its cache)."""
    turn, what, none = ((SQL_REFINER_TURN, "statement", "(no statement)") if fmt == "sql"
                        else (PLAN_REFINER_TURN, "plan", "(no plan)"))
    return [*asked, Message("assistant", written or none),
            Message("user", f"{turn}\n" + "\n".join(f"- {e}" for e in errors)
                    + f"\nAnswer with the corrected {what} only.")]


def _result_text(columns: Sequence[str], rows: Sequence[Sequence[Any]], total_rows: int, notes: Sequence[str]) -> str:
    """A result's first rows as a small table, how many there are in all, and the data notes."""
    table = "\n".join([" | ".join(columns)] + [" | ".join("" if v is None else str(v) for v in r) for r in rows])
    more = f"\n({total_rows} rows in all; the first {len(rows)} shown)" if total_rows > len(rows) else ""
    note_text = ("\nData notes:\n" + "\n".join(f"- {n}" for n in notes)) if notes else ""
    return f"Result:\n{table}{more}{note_text}"


def synthesizer_messages(question: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], total_rows: int,
                         notes: Sequence[str]) -> list[Message]:
    """Messages for the answer: the question, the result's first rows, and data notes."""
    return [Message("system", SYNTHESIZER_SYSTEM),
            Message("user", f"Question: {question}\n\n{_result_text(columns, rows, total_rows, notes)}")]


#: how the synthesizer's turn begins when it follows the planner's conversation
SYNTHESIZER_TURN = "That statement ran."


def synthesizer_turn(asked: Sequence[Message], sql: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
                     total_rows: int, notes: Sequence[str]) -> list[Message]:
    """Messages for the answer as the next turn of the planner's conversation (`planner_messages`): its
    statement, then the result and what to write (the prompt up to the statement is the planner's: a server
    reuses its cached prefix)."""
    return [*asked, Message("assistant", sql),
            Message("user", f"{SYNTHESIZER_TURN}\n{_result_text(columns, rows, total_rows, notes)}\n\n"
                            "Now answer the question in one plain sentence (words, not SQL) from this result; the "
                            "asker sees the rows too.\n" + _SYNTHESIZER_RULES)]
