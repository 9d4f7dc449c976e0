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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from nl2sql.errors import ConfigError, ConfigProblem

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


def load_suite(path: str | Path) -> EvalSuite:
    """Read and check a suite file (ConfigError listing every problem: file, case id, field, fix)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(ConfigProblem(str(path), "", "no such suite file",
                                        "pass --suite with a path to a suite YAML (e.g. suites/chinook.yaml)"))
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(ConfigProblem(str(path), "", f"not valid YAML: {exc}", "fix the YAML syntax")) from None
    problems: list[ConfigProblem] = []
    if not isinstance(raw, dict) or not isinstance(raw.get("cases"), list):
        raise ConfigError(ConfigProblem(str(path), "cases", "a suite is a mapping with a list of cases",
                                        "write `version: 1` and `cases:` with one mapping per case"))
    cases = []
    seen: set[str] = set()
    for i, item in enumerate(raw["cases"]):
        label = f"cases[{i}]" + (f" ({item.get('id')})" if isinstance(item, dict) and item.get("id") else "")
        try:
            case = EvalCase.model_validate(item)
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                field = ".".join(str(p) for p in err["loc"])
                problems.append(ConfigProblem(str(path), f"{label}.{field}" if field else label,
                                              err["msg"].removeprefix("Value error, ")))
            continue
        if case.id in seen:
            problems.append(ConfigProblem(str(path), f"{label}.id", f"the id {case.id!r} is used twice",
                                          "give every case its own id"))
        seen.add(case.id)
        cases.append(case)
    extra = set(raw) - {"version", "description", "cases"}
    for key in sorted(extra):
        problems.append(ConfigProblem(str(path), key, "unknown key", "a suite has version, description and cases"))
    if raw.get("version", 1) != 1:
        problems.append(ConfigProblem(str(path), "version", f"unknown version {raw.get('version')!r}", "use 1"))
    if problems:
        raise ConfigError(problems)
    return EvalSuite(version=1, description=raw.get("description"), cases=cases)


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
