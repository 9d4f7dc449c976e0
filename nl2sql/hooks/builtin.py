"""The built-in hooks, registered like plugins: sql_review, deny_tables, question_rewriter, row_limit."""

from __future__ import annotations

import fnmatch
import re
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from nl2sql.hooks.context import Allow, Decision, Deny, HookContext, Modify, NeedsApproval


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _matches(patterns: list[str], tables: list[str]) -> list[str]:
    return [t for t in tables if any(fnmatch.fnmatchcase(t.lower(), p.lower()) for p in patterns)]


class SqlReviewOptions(_Options):
    """Which statements need an approver."""

    tables: list[str] = Field(default_factory=list, description="datasource.table patterns (globs) that need review")
    max_rows: int | None = Field(default=None, ge=1, description="review statements estimated to read more rows")


class SqlReview:
    """NeedsApproval when the SQL reads a listed table, or the database estimates it reads more than max_rows."""

    options_model: ClassVar[type[BaseModel]] = SqlReviewOptions
    points: ClassVar[frozenset[str]] = frozenset({"execute.before"})

    def __init__(self, options: SqlReviewOptions) -> None:
        self.options = options

    @classmethod
    def from_options(cls, options: BaseModel) -> SqlReview:
        """The hook from its checked options."""
        return cls(options)  # type: ignore[arg-type]

    def __call__(self, ctx: HookContext) -> Decision:
        """Ask for approval, or allow."""
        reviewed = _matches(self.options.tables, ctx.tables or [])
        if reviewed:
            return NeedsApproval(reason=f"reads {', '.join(reviewed)}")
        if self.options.max_rows is not None and ctx.estimate_rows is not None:
            estimate = ctx.estimate_rows()
            if estimate is not None and estimate > self.options.max_rows:
                return NeedsApproval(reason=f"estimated to read {estimate:,} rows (more than {self.options.max_rows:,})")
        return Allow()


class DenyTablesOptions(_Options):
    """Tables no question may read, whatever the role."""

    tables: list[str] = Field(min_length=1, description="datasource.table patterns (globs)")
    reason: str = "This data may not be queried."
    scope: str = Field(default="run", pattern="^(run|sub_query)$")


class DenyTables:
    """Deny a statement that reads a listed table."""

    options_model: ClassVar[type[BaseModel]] = DenyTablesOptions
    points: ClassVar[frozenset[str]] = frozenset({"execute.before"})

    def __init__(self, options: DenyTablesOptions) -> None:
        self.options = options

    @classmethod
    def from_options(cls, options: BaseModel) -> DenyTables:
        """The hook from its checked options."""
        return cls(options)  # type: ignore[arg-type]

    def __call__(self, ctx: HookContext) -> Decision:
        """Deny, or allow."""
        if _matches(self.options.tables, ctx.tables or []):
            return Deny(reason=self.options.reason, scope=self.options.scope)  # type: ignore[arg-type]
        return Allow()


class QuestionRewriterOptions(_Options):
    """Phrases replaced in the question."""

    replacements: dict[str, str] = Field(min_length=1, description="phrase → replacement (case-insensitive)")


class QuestionRewriter:
    """A toy to copy: rewrite phrases of the question at run.before (e.g. house jargon into the data's words)."""

    options_model: ClassVar[type[BaseModel]] = QuestionRewriterOptions
    points: ClassVar[frozenset[str]] = frozenset({"run.before"})

    def __init__(self, options: QuestionRewriterOptions) -> None:
        self.options = options

    @classmethod
    def from_options(cls, options: BaseModel) -> QuestionRewriter:
        """The hook from its checked options."""
        return cls(options)  # type: ignore[arg-type]

    def __call__(self, ctx: HookContext) -> Decision:
        """Modify the question when a phrase occurs, else allow."""
        question = ctx.question
        for phrase, replacement in self.options.replacements.items():
            question = re.sub(re.escape(phrase), replacement, question, flags=re.IGNORECASE)
        return Modify(question=question) if question != ctx.question else Allow()


class RowLimitOptions(_Options):
    """The most rows a plan may ask for."""

    max_rows: int = Field(ge=1)


class RowLimit:
    """Cap the plan's LIMIT at plan.after (the validator checks the plan again)."""

    options_model: ClassVar[type[BaseModel]] = RowLimitOptions
    points: ClassVar[frozenset[str]] = frozenset({"plan.after"})

    def __init__(self, options: RowLimitOptions) -> None:
        self.options = options

    @classmethod
    def from_options(cls, options: BaseModel) -> RowLimit:
        """The hook from its checked options."""
        return cls(options)  # type: ignore[arg-type]

    def __call__(self, ctx: HookContext) -> Decision:
        """Modify the plan's limit when it is missing or larger, else allow."""
        if ctx.plan is None or (ctx.plan.limit is not None and ctx.plan.limit <= self.options.max_rows):
            return Allow()
        return Modify(plan=ctx.plan.model_copy(update={"limit": self.options.max_rows}))


BUILTIN_HOOKS: dict[str, type] = {"sql_review": SqlReview, "deny_tables": DenyTables,
                                  "question_rewriter": QuestionRewriter, "row_limit": RowLimit}
