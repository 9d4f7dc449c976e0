"""The one exception hierarchy of nl2sql: every error has a code, a message a person can act on, and a fix.

>>> err = UnknownNameError("adapter", "postgress", ["sqlite", "duckdb", "postgresql"])
>>> err.code, str(err)
('UNKNOWN_NAME', "Unknown adapter 'postgress'. Did you mean 'postgresql'? Known: duckdb, postgresql, sqlite.")
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

#: The one sentence a refused asker sees. It names no table, column or datasource on purpose.
GENERIC_REFUSAL = "You do not have access to the data needed to answer this question."


def did_you_mean(name: str, choices: Iterable[str]) -> str | None:
    """The closest known name to `name` (case-insensitive), or None when nothing is close.

    >>> did_you_mean("postgress", ["sqlite", "postgresql"])
    'postgresql'
    """
    choices = list(choices)
    by_lower = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[hits[0]] if hits else None


class NL2SQLError(Exception):
    """Root of every error the engine raises on purpose."""

    code = "NL2SQL_ERROR"

    def __init__(
        self,
        message: str,
        *,
        fix: str | None = None,
        node: str | None = None,
        datasource: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.node = node
        self.datasource = datasource

    def __str__(self) -> str:
        if not self.fix:
            return self.message
        return f"{self.message}\n{self.fix}" if "\n" in self.message else f"{self.message} {self.fix}"

    @property
    def details(self) -> list[str]:
        """What exactly failed, as codes (a subclass's problem codes; none here)."""
        return []

    def to_dict(self) -> dict[str, str | None]:
        """The error as a plain record for results, traces and `--json` output."""
        return {"code": self.code, "message": str(self), "node": self.node, "datasource": self.datasource}


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong in a configuration: where (file, key path), what, and how to fix it."""

    file: str
    key: str
    message: str
    fix: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}: {self.key}" if self.key else self.file
        text = f"{where}: {self.message}"
        return f"{text} — {self.fix}" if self.fix else text


class ConfigError(NL2SQLError):
    """A configuration (or a CLI argument naming something in it) is wrong; lists every problem at once."""

    code = "CONFIG_ERROR"

    def __init__(self, problems: list[ConfigProblem] | ConfigProblem | str) -> None:
        if isinstance(problems, str):
            problems = [ConfigProblem(file="", key="", message=problems)]
        elif isinstance(problems, ConfigProblem):
            problems = [problems]
        self.problems = problems
        if len(problems) == 1:
            message = str(problems[0])
        else:
            message = f"{len(problems)} problems in the configuration:\n" + "\n".join(
                f"  - {p}" for p in problems
            )
        super().__init__(message)


class UnknownNameError(NL2SQLError):
    """A name looked up in a registry (adapter, role, datasource, observer…) is not there."""

    code = "UNKNOWN_NAME"

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        known = sorted(known)
        guess = did_you_mean(name, known)
        hint = f" Did you mean '{guess}'?" if guess else ""
        super().__init__(f"Unknown {kind} '{name}'.{hint} Known: {', '.join(known) or '(none)'}.")
        self.kind, self.name, self.known, self.guess = kind, name, known, guess


class SecurityViolation(NL2SQLError):
    """The asker's role may not read what the question or statement needs. The message names nothing."""

    code = "SECURITY_VIOLATION"

    def __init__(self, message: str = GENERIC_REFUSAL, **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]


class SQLRejected(NL2SQLError):
    """The SQL guard refused a statement: only a single read-only SELECT may reach a database."""

    code = "SQL_REJECTED"


class PlanUnsupported(NL2SQLError):
    """A model's SQL says something the plan language cannot, or does not parse; `construct` names what.

    The message says which construct and how to write the question instead: a refiner is shown it.
    """

    code = "PLAN_UNSUPPORTED"

    def __init__(self, message: str, *, construct: str, fix: str | None = None, **kwargs: object) -> None:
        super().__init__(message, fix=fix, **kwargs)  # type: ignore[arg-type]
        self.construct = construct

    @property
    def details(self) -> list[str]:
        """The construct the plan language lacks."""
        return [self.construct]


class DatasourceError(NL2SQLError):
    """A datasource could not be reached, reflected or queried."""

    code = "DATASOURCE_ERROR"


class QueryTimeout(DatasourceError):
    """A statement ran past its time limit and was cancelled."""

    code = "QUERY_TIMEOUT"


class ResultTooLarge(DatasourceError):
    """A statement's result went past the datasource's byte budget and was stopped."""

    code = "RESULT_TOO_LARGE"


class ResultFlagged(NL2SQLError):
    """A result check found a mistake a corrected plan can fix (VALUE_NOT_FOUND, JOIN_FAN_OUT): the sub-query goes
    back to the refiner once, and its result stands with a warning when no corrected plan runs."""

    code = "RESULT_FLAGGED"

    def __init__(self, code: str, message: str, **kwargs: str | None) -> None:
        super().__init__(message, **kwargs)
        self.code = code


class IndexBuildFailed(NL2SQLError):
    """No datasource of an index build could be built."""

    code = "INDEX_BUILD_FAILED"


class EngineFault(NL2SQLError):
    """An unexpected exception escaped a step: reported by its type only (its text could hold a row value)."""

    code = "ENGINE_FAULT"

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"The engine failed unexpectedly ({type(cause).__name__}).",
                         fix="The run's run.failed event in the audit log has the details.")


class QuestionNotAnswerable(NL2SQLError):
    """No datasource the asker may read can answer the question."""

    code = "QUESTION_NOT_ANSWERABLE"


class QuestionTooBroad(NL2SQLError):
    """The question needs more sub-queries than `settings.routing.max_sub_queries` allows."""

    code = "QUESTION_TOO_BROAD"


class IndexNotBuilt(NL2SQLError):
    """A datasource has no live index build to route or retrieve with."""

    code = "INDEX_NOT_BUILT"


class HandedOverError(NL2SQLError):
    """An error of a question that ran in `nl2sql serve`'s process, told back to the `nl2sql ask` that handed it
    over: its code, message, fix, and the exit code it has there."""

    def __init__(self, code: str, message: str, *, fix: str | None = None, exit_code: int = 1) -> None:
        super().__init__(message, fix=fix)
        self.code = code
        self.exit_code = exit_code


#: Errors that are a refused or failed run (exit 1); every other NL2SQLError is a usage error (exit 2).
RUN_FAILURES: tuple[type[NL2SQLError], ...] = (SecurityViolation, DatasourceError, IndexBuildFailed, EngineFault)


def exit_code_of(error: NL2SQLError) -> int:
    """The command line's exit code for an error: 1 a refused or failed run, 2 a usage error."""
    if isinstance(error, HandedOverError):
        return error.exit_code
    return 1 if isinstance(error, RUN_FAILURES) else 2
