"""Eval suites: cases in the case format (a contract other tools read), their loader, writer and selectors.

The loader reports every problem at once, each naming the file, the case id and the field, with
what to do; the writer keeps a file stable (loading and writing an unchanged suite is byte-identical).

>>> case = EvalCase(id="c1", question="How many genres?", datasources=["chinook"], sql="SELECT COUNT(*) FROM Genre",
...                 outcome={"viewer": "allowed"}, tables=["Genre"])
>>> case.answerable, case.roles
(True, ['viewer'])
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from nl2sql.errors import ConfigError, ConfigProblem, did_you_mean

if TYPE_CHECKING:
    from nl2sql.config.models import Config

Outcome = Literal["allowed", "refused", "unanswerable"]
#: Tags the Chinook suite draws from.
CHINOOK_TAGS = ("single-table", "filter", "join", "multi-join", "aggregation", "having", "order-limit", "offset",
                "ties", "date", "paraphrase", "keyword-in-question", "keyword-in-value", "data-range",
                "value-matching", "subquery", "window", "rbac-denial", "unanswerable")


class EvalCase(BaseModel):
    """One case: a question, where it should go, what each role should get, and the gold answer."""

    model_config = ConfigDict(extra="forbid")

    id: str
    question: str
    kind: Literal["answer", "routing"] = "answer"
    datasources: list[str] = Field(min_length=1)
    status: Literal["draft", "approved", "retired"] = "approved"
    origin: Literal["hand", "seeded"] = "hand"
    reviewed_by: str | None = None  # who approved a seeded draft (`nl2sql eval review`)
    difficulty: Literal["easy", "medium", "hard"] | None = None
    tags: list[str] = Field(default_factory=list)
    paraphrase_group: str | None = None
    outcome: dict[str, Outcome] = Field(default_factory=dict)
    tables: list[str] = Field(default_factory=list)
    columns: list[str] = Field(default_factory=list)
    order_matters: bool = False
    sql: str | None = None
    rows: list[dict[str, Any]] | None = None
    alt_sql: list[str] = Field(default_factory=list)
    alt_rows: list[list[dict[str, Any]]] = Field(default_factory=list)
    plan: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> EvalCase:
        if self.kind == "routing" and (self.sql or self.plan or self.rows):
            raise ValueError("a routing case has no sql, plan or rows: remove them, or make it kind: answer")
        allowed = [r for r, o in self.outcome.items() if o == "allowed"]
        if self.kind == "answer" and self.status == "approved" and allowed and not self.sql:
            raise ValueError(f"an approved answer case allowed for {', '.join(allowed)} needs sql (the gold answer)")
        if self.alt_rows and len(self.alt_rows) != len(self.alt_sql):
            raise ValueError("alt_rows needs one entry per alt_sql: run `nl2sql eval regenerate` to write them")
        return self

    @property
    def answerable(self) -> bool:
        """Whether some role gets an answer (an unanswerable case is unanswerable for every role)."""
        return "allowed" in self.outcome.values() or (not self.outcome and self.kind == "answer" and bool(self.sql))

    @property
    def roles(self) -> list[str]:
        """The roles the case runs for."""
        return list(self.outcome)

    @property
    def datasource(self) -> str:
        """The (first) datasource the case is about."""
        return self.datasources[0]

    def gold_rows(self) -> list[list[dict[str, Any]]]:
        """The accepted answers: rows, then every reviewed alternative's."""
        return [r for r in [self.rows, *self.alt_rows] if r is not None]


class EvalSuite(BaseModel):
    """A suite file: version 1 and its cases."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    description: str | None = None
    cases: list[EvalCase]

    def select(self, *, ids: Iterable[str] | None = None, tags: Iterable[str] | None = None,
               roles: Iterable[str] | None = None, include_drafts: bool = False) -> list[EvalCase]:
        """Approved cases (drafts too when asked), by ids, any of the tags, and roles they run for."""
        wanted_ids, wanted_tags, wanted_roles = (set(x) if x else None for x in (ids, tags, roles))
        out = []
        for case in self.cases:
            if case.status == "retired" or (case.status == "draft" and not include_drafts):
                continue
            if wanted_ids is not None and case.id not in wanted_ids:
                continue
            if wanted_tags is not None and not wanted_tags & set(case.tags):
                continue
            if wanted_roles is not None and not wanted_roles & set(case.outcome):
                continue
            out.append(case)
        return out


def suite_digest(path: Path) -> str:
    """SHA-256 of the suite file's bytes with LF line ends (the same on every checkout)."""
    return hashlib.sha256(path.read_bytes().replace(b"\r\n", b"\n")).hexdigest()


#: What to do about a case field of the wrong shape, by pydantic error kind.
FIELD_FIXES = {
    "missing": "add it (see the case format in docs/evals.md)",
    "extra_forbidden": "remove it, or check its spelling against the case format in docs/evals.md",
    "literal_error": "use one of the values listed",
    "too_short": "add at least one entry",
    "list_type": "write a YAML list (- item)",
    "dict_type": "write a YAML mapping (key: value)",
    "string_type": "write a quoted string",
    "bool_type": "write true or false",
    "bool_parsing": "write true or false",
    "value_error": "fix the case as the message says",
}


def load_suite(path: str | Path) -> EvalSuite:
    """Read and check a suite file (ConfigError listing every problem: file, case id, field, fix)."""
    from nl2sql.config.reading import UTF8_FIX, NotUTF8, load_yaml, read_text, yaml_problem

    path = Path(path)
    file = str(path)
    try:
        raw = load_yaml(read_text(path))
    except FileNotFoundError:
        raise ConfigError(ConfigProblem(file, "", "no such suite file",
                                        "pass --suite with a path to a suite YAML (e.g. suites/chinook.yaml)")) from None
    except NotUTF8 as exc:
        raise ConfigError(ConfigProblem(file, "", str(exc), UTF8_FIX)) from None
    except OSError as exc:
        raise ConfigError(ConfigProblem(file, "", f"cannot read the suite file ({exc.strerror})",
                                        "pass --suite with a path to a readable suite YAML file")) from None
    except yaml.YAMLError as exc:
        raise ConfigError(ConfigProblem(file, "", *yaml_problem(exc))) from None
    if not isinstance(raw, dict):
        raise ConfigError(ConfigProblem(file, "", "a suite is a mapping of version, description and cases",
                                        "start the file with `version: 1` and `cases:`"))
    problems: list[ConfigProblem] = []
    for key in sorted(str(k) for k in set(raw) - {"version", "description", "cases"}):
        problems.append(ConfigProblem(file, key, f"unknown key '{key}'", "a suite has version, description and cases"))
    if raw.get("version", 1) != 1 or isinstance(raw.get("version"), bool):
        problems.append(ConfigProblem(file, "version", f"unknown version {raw.get('version')!r}", "write version: 1"))
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        problems.append(ConfigProblem(file, "description", "the description is not text", "write a quoted string"))
    if not isinstance(raw.get("cases"), list):
        problems.append(ConfigProblem(file, "cases", "missing or not a list" if "cases" in raw else "missing",
                                      "write `cases:` with one mapping per case (- id: …)"))
        raise ConfigError(problems)
    cases = []
    seen: dict[str, str] = {}
    for i, item in enumerate(raw["cases"]):
        ident = item.get("id") if isinstance(item, dict) else None
        label = f"cases[{i}]" + (f" ({ident})" if isinstance(ident, str) and ident else "")
        if not isinstance(item, dict):
            problems.append(ConfigProblem(file, label, "a case is a mapping of fields",
                                          "write the case as `- id: …` with question, datasources, …"))
            continue
        try:
            case = EvalCase.model_validate(item)
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                field = ".".join(str(p) for p in err["loc"])
                message = err["msg"].removeprefix("Value error, ")
                if err["type"] == "missing":
                    message = f"required field '{field}' is missing"
                elif err["type"] == "extra_forbidden":
                    message = f"unknown field '{field}'"
                problems.append(ConfigProblem(file, f"{label}.{field}" if field else label, message,
                                              FIELD_FIXES.get(err["type"], "see the case format in docs/evals.md")))
            continue
        if case.id in seen:
            problems.append(ConfigProblem(file, f"{label}.id", f"the id {case.id!r} is used twice (also "
                                          f"{seen[case.id]})", "give every case its own id"))
        seen.setdefault(case.id, f"cases[{i}]")
        cases.append(case)
    if problems:
        raise ConfigError(problems)
    return EvalSuite(version=1, description=description, cases=cases)


#: A datasource's tables as the suite check needs them: lowercased table name → lowercased column names.
TableColumns = Mapping[str, set[str]]


def check_suite(suite: EvalSuite, config: Config, path: str | Path,
                tables: Mapping[str, TableColumns] | None = None) -> list[ConfigProblem]:
    """Problems of a loaded suite against a configuration: datasources and roles it names that do not exist,
    and (given each datasource's tables) tables and columns its cases name that the datasources lack.

    `tables` maps a datasource id to its tables; a datasource missing from it is not checked for tables.
    """
    file = str(path)
    ids = [ds.id for ds in config.datasources]
    roles = list(config.policies.roles)
    problems: list[ConfigProblem] = []
    for i, case in enumerate(suite.cases):
        label = f"cases[{i}] ({case.id})"
        for j, ds in enumerate(case.datasources):
            if ds not in ids:
                guess = did_you_mean(ds, ids)
                problems.append(ConfigProblem(file, f"{label}.datasources[{j}]", f"unknown datasource '{ds}'",
                                              f"did you mean '{guess}'?" if guess
                                              else f"datasources in {config.path or 'the configuration'}: "
                                              + ", ".join(ids)))
        for role in case.outcome:
            if role not in roles:
                guess = did_you_mean(role, roles)
                problems.append(ConfigProblem(file, f"{label}.outcome.{role}", f"unknown role '{role}'",
                                              f"did you mean '{guess}'?" if guess else f"roles: {', '.join(roles)}"))
        if tables is None or not all(ds in tables for ds in case.datasources):
            continue
        known: dict[str, set[str]] = {}
        for ds in case.datasources:
            for name, columns in tables[ds].items():
                known.setdefault(name, set()).update(columns)
        where = " or ".join(case.datasources)
        for j, table in enumerate(case.tables):
            if table.lower() not in known:
                guess = did_you_mean(table, known)
                problems.append(ConfigProblem(file, f"{label}.tables[{j}]", f"{where} has no table '{table}'",
                                              f"did you mean '{guess}'?" if guess else "name a table the datasource has "
                                              "(see `nl2sql schema DATASOURCE`)"))
        for j, column in enumerate(case.columns):
            table, _, name = column.rpartition(".")
            if not table or table.lower() not in known:
                problems.append(ConfigProblem(file, f"{label}.columns[{j}]", f"{where} has no table for '{column}'",
                                              "write columns as Table.Column, of a table the datasource has"))
            elif name.lower() not in known[table.lower()]:
                guess = did_you_mean(name, known[table.lower()])
                problems.append(ConfigProblem(file, f"{label}.columns[{j}]", f"table '{table}' has no column "
                                              f"'{name}'", f"did you mean '{guess}'?" if guess else
                                              f"see `nl2sql schema {case.datasource}`"))
    return problems


def reflected_tables(config: Config, suite: EvalSuite,
                     block_loader: Callable[[str], str] | None = None) -> dict[str, TableColumns]:
    """The tables (and their columns) of each datasource the suite's cases name tables in, as reflected now."""
    from nl2sql.datasources import DatasourceCatalog

    wanted = {ds for case in suite.cases if case.tables or case.columns for ds in case.datasources}
    known = {ds.id for ds in config.datasources}
    out: dict[str, TableColumns] = {}
    with DatasourceCatalog(config, block_loader=block_loader) as catalog:
        for ds in sorted(wanted & known):
            snapshot = catalog.get(ds).reflect()
            entry: dict[str, set[str]] = {}
            for t in snapshot.tables:
                columns = {c.name.lower() for c in t.columns}
                entry[t.name.lower()] = columns
                if t.schema_name:
                    entry[f"{t.schema_name}.{t.name}".lower()] = columns
            out[ds] = entry
    return out


def checked_suite(path: str | Path, config: Config, *, tables: Mapping[str, TableColumns] | None = None,
                  block_loader: Callable[[str], str] | None = None, reflect: bool = False) -> EvalSuite:
    """Load a suite and check it against the configuration (reflecting the datasources when `reflect`), raising
    one ConfigError for every problem before any case runs."""
    suite = load_suite(path)
    problems = check_suite(suite, config, path)
    if not problems and tables is None and reflect:
        tables = reflected_tables(config, suite, block_loader)
    if tables is not None and not problems:
        problems = check_suite(suite, config, path, tables)
    if problems:
        raise ConfigError(problems)
    return suite


class _Dumper(yaml.SafeDumper):
    """Block style, keys in the model's order, long strings kept on one line."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_suite(suite: EvalSuite) -> str:
    """The suite as YAML text: fields in the case format's order, defaults left out, stable."""
    cases = []
    for case in suite.cases:
        data = case.model_dump(mode="json", exclude_defaults=True)
        data = {"id": case.id, "question": case.question, **{k: v for k, v in data.items()
                                                               if k not in ("id", "question")}}
        cases.append(data)
    doc: dict[str, Any] = {"version": 1}
    if suite.description:
        doc["description"] = suite.description
    doc["cases"] = cases
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=10_000, default_flow_style=False)


def write_suite(suite: EvalSuite, path: str | Path) -> None:
    """Write a suite file (LF line ends)."""
    Path(path).write_text(dump_suite(suite), newline="\n")


def case_ids(cases: Sequence[EvalCase]) -> list[str]:
    """The ids of cases, in order."""
    return [c.id for c in cases]
