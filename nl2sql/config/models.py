"""Pydantic models of `nl2sql.yaml` and its sections. Unknown keys are errors everywhere."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from nl2sql.adapters import adapter_names
from nl2sql.errors import did_you_mean

#: The dialects an adapter exists for (the registry may add more through entry points).
BUILTIN_DIALECTS = ("sqlite", "duckdb", "postgresql")
#: The pipeline's model-calling nodes, each configurable in `llm.nodes`.
LLM_NODES = ("resolver", "decomposer", "planner", "refiner", "synthesizer", "eval_seeder")
#: The six hook points of a question's run.
HOOK_POINTS = ("run.before", "datasources.after", "plan.after", "execute.before", "execute.after", "answer.after")

ID_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")


def config_error(message: str, fix: str | None = None) -> PydanticCustomError:
    """A validation error whose fix travels to the ConfigError message."""
    return PydanticCustomError("nl2sql", "{message}", {"message": message, "fix": fix or ""})


class Strict(BaseModel):
    """Base of every config model: unknown keys are errors, values are not coerced silently."""

    model_config = ConfigDict(extra="forbid", validate_default=True)


# --- datasources -------------------------------------------------------------------------------


#: Types a verified query's parameter may have.
PARAMETER_TYPES = ("text", "integer", "number", "date", "year")
PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*)\}")


class ParameterConfig(Strict):
    """A named, typed parameter of a verified query (`:name` in its SQL, `{name}` in its question)."""

    type: Literal[PARAMETER_TYPES] = "text"  # type: ignore[valid-type]
    column: str | None = Field(
        default=None, description="`Table.Column` whose values a text parameter takes (matched in the question)."
    )
    default: str | int | float | None = Field(default=None, description="Value used when the question names none.")
    description: str = ""


class VerifiedQueryConfig(Strict):
    """A question with reviewed SQL that answers it; matched by meaning, its parameters read from the question."""

    question: str = Field(description="The question, with `{name}` where a parameter goes.")
    sql: str = Field(description="One SELECT, with `:name` where a parameter's value goes.")
    parameters: dict[str, ParameterConfig] = Field(default_factory=dict)
    description: str = ""

    @model_validator(mode="after")
    def _placeholders_match(self) -> VerifiedQueryConfig:
        in_question = set(PLACEHOLDER.findall(self.question))
        in_sql = set(re.findall(r"(?<!:):([a-z][a-z0-9_]*)", self.sql))
        declared = set(self.parameters)
        for name in sorted(in_question - declared):
            raise config_error(f"the question's {{{name}}} is not a declared parameter",
                               f"add parameters.{name} (type text, integer, number, date or year) or remove it")
        for name in sorted(in_sql - declared):
            raise config_error(f"the SQL's :{name} is not a declared parameter",
                               f"add parameters.{name} or remove :{name} from the SQL")
        for name in sorted(declared - in_sql):
            raise config_error(f"parameter {name!r} is not used in the SQL", f"write :{name} in the SQL or drop it")
        for name, param in self.parameters.items():
            if name not in in_question and param.default is None:
                raise config_error(f"parameter {name!r} is neither in the question nor has a default",
                                   f"write {{{name}}} in the question or give it a default")
        return self


class ExampleQuestionConfig(Strict):
    """A question with reviewed SQL that the planner is shown as a worked example and never answers from."""

    question: str = Field(description="The question, as an asker would put it.")
    sql: str = Field(description="One SELECT in the datasource's dialect that answers it.")
    description: str = Field(default="", description="What it teaches (for the people who keep it).")

    @property
    def parameters(self) -> dict[str, ParameterConfig]:
        """None: an example is shown as written, never filled in."""
        return {}


class DatasourceConfig(Strict):
    """One database the engine may query."""

    id: str = Field(description="Short identifier used in policies, routing and the CLI (lowercase, a-z0-9_).")
    url: SecretStr | None = Field(
        default=None, description="SQLAlchemy URL; relative SQLite/DuckDB paths are relative to nl2sql.yaml."
    )
    block: str | None = Field(default=None, description="Name of a saved DatasourceBlock holding the URL.")
    description: str = Field(default="", description="What the database holds, in a sentence or two.")
    schemas: list[str] | None = Field(default=None, description="Schemas to reflect (default: the default schema).")
    sample_questions: list[str] = Field(default_factory=list, description="Questions this datasource answers.")
    verified_queries: list[VerifiedQueryConfig] = Field(
        default_factory=list, description="Reviewed questions and SQL, answered without a model."
    )
    example_questions: list[ExampleQuestionConfig] = Field(
        default_factory=list, description="Reviewed questions and SQL shown to the planner as worked examples, never "
        "answered from; a caller is shown one only when it may read every table its SQL reads "
        "(settings.pipeline.planner.examples).")
    max_result_bytes: int | None = Field(default=None, ge=1024, description="Bytes of result one statement may "
                                         "fetch here (default: settings.resources.max_result_bytes).")

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if not ID_PATTERN.match(value):
            raise config_error(
                f"datasource id {value!r} is not a plain lowercase name",
                "use lowercase letters, digits and underscores, starting with a letter (e.g. 'sales_dw')",
            )
        return value

    @field_validator("url")
    @classmethod
    def _known_dialect(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        raw = value.get_secret_value()
        match = re.match(r"^([A-Za-z][A-Za-z0-9_]*)(\+[A-Za-z0-9_]+)?://", raw)
        if not match:
            raise config_error(
                "not a SQLAlchemy URL",
                "write it as DIALECT://…, e.g. 'sqlite:///data/chinook.sqlite' or "
                "'postgresql+psycopg://user@host/db'",
            )
        dialect = match.group(1).lower()
        known = adapter_names()
        if dialect not in known:
            guess = did_you_mean(dialect, known)
            fix = f"did you mean '{guess}'?" if guess else f"use one of: {', '.join(known)}"
            raise config_error(f"unknown dialect '{dialect}'", fix)
        return value

    @model_validator(mode="after")
    def _url_or_block(self) -> DatasourceConfig:
        if (self.url is None) == (self.block is None):
            raise config_error(
                "needs exactly one of 'url' and 'block'",
                "set 'url: sqlite:///file.sqlite' (or any SQLAlchemy URL), or 'block: NAME' of a saved DatasourceBlock",
            )
        return self

    @property
    def dialect(self) -> str | None:
        """The URL's dialect name (None when the URL lives in a block)."""
        if self.url is None:
            return None
        return re.split(r"[+:]", self.url.get_secret_value(), maxsplit=1)[0].lower()


# --- policies ----------------------------------------------------------------------------------


def _pattern_shape(pattern: str) -> str:
    """Check one pattern (per item, so an error's key path names the item: `allow[2]`)."""
    parts = pattern.split(".")
    if not pattern.strip() or len(parts) > 3 or any(not p for p in parts):
        raise config_error(
            f"pattern {pattern!r} is not 'datasource', 'datasource.table' or 'datasource.schema.table'",
            "write e.g. 'chinook.*', 'chinook.Invoice*' or 'warehouse.sales.orders' (globs * ? [] allowed)",
        )
    return pattern


#: A policy pattern: `datasource`, `datasource.table` or `datasource.schema.table`, globs allowed.
Pattern = Annotated[str, AfterValidator(_pattern_shape)]


class RoleConfig(Strict):
    """What one role may read: glob patterns `datasource`, `datasource.table` or `datasource.schema.table`."""

    description: str = ""
    allow: list[Pattern] = Field(default_factory=list)
    deny: list[Pattern] = Field(default_factory=list)
    database_role: str | dict[str, str] | None = Field(
        default=None, description="PostgreSQL: the database role this role's statements run as (SET LOCAL ROLE), "
        "one name for every PostgreSQL datasource or a map datasource id → name; it should hold SELECT on exactly "
        "the tables the role may read.")


class UserConfig(Strict):
    """One known user: the roles it may act in and, for an approver, the SHA-256 of its approval token."""

    description: str = ""
    roles: Annotated[list[str], Field(min_length=1)]
    token_sha256: str | None = Field(default=None, description="Hex SHA-256 of the user's approval token "
                                     "(`nl2sql approvals token` makes one); approvers need it or "
                                     "token_public_key.")
    token_public_key: str | None = Field(default=None, description="The Ed25519 public key the user's approval "
                                         "token derives (`nl2sql approvals token` prints it): checks the signed "
                                         "answers `nl2sql approve` sends in place of the token.")
    mcp_token_sha256: str | None = Field(default=None, description="Hex SHA-256 of the user's bearer token for the "
                                         "MCP server over HTTP (`nl2sql mcp token` makes one); without it the user "
                                         "cannot reach that server.")

    @field_validator("token_sha256", "mcp_token_sha256")
    @classmethod
    def _hex_digest(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", value):
            raise config_error("is not a hex SHA-256 (64 hex digits)",
                               "paste the hash `nl2sql approvals token` (or `nl2sql mcp token`) prints, never the "
                               "token itself")
        return value.lower() if value else value

    @field_validator("token_public_key")
    @classmethod
    def _public_key(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]", value):
            raise config_error("is not an Ed25519 public key (43 URL-safe base64 characters)",
                               "paste the token_public_key line `nl2sql approvals token` prints, never the token "
                               "itself")
        return value


class PoliciesConfig(Strict):
    """Roles and who sees what. Admin roles see everything."""

    roles: dict[str, RoleConfig]
    default_role: str
    admin_roles: list[str] = Field(default_factory=lambda: ["admin"])
    users: dict[str, UserConfig] | None = Field(default=None, description="Known users: user id → roles (and an "
                                                "approver's token hash); inline, or a JSON string from ${env:…}.")

    @field_validator("users", mode="before")
    @classmethod
    def _users_from_json(cls, value: Any) -> Any:
        if isinstance(value, str):  # `users: ${env:NL2SQL_USERS}` holding a JSON object
            import json

            try:
                return json.loads(value) if value.strip() else None
            except ValueError as exc:
                raise config_error("is not a JSON object of users", "write the users inline, or put a JSON "
                                   "object {user: {roles: [...]}} in the variable") from exc
        return value

    @model_validator(mode="after")
    def _user_roles_exist(self) -> PoliciesConfig:
        for user, config in (self.users or {}).items():
            for role in config.roles:
                if role not in self.roles:
                    raise config_error(f"user {user!r} names unknown role {role!r}",
                                       f"define it under policies.roles, or use one of: {', '.join(self.roles)}")
        return self


# --- models ------------------------------------------------------------------------------------


#: Answer caps when llm.models.<name>.max_tokens is unset: plain text, and structured output (plans are long JSON,
#: and reasoning models spend part of the cap thinking).
DEFAULT_MAX_TOKENS = 1024
DEFAULT_MAX_STRUCTURED_TOKENS = 4096


class ModelConfig(Strict):
    """One model endpoint."""

    provider: str = Field(description="Provider wire: 'openai' (any OpenAI-compatible server) or 'anthropic'.")
    model: str
    base_url: str | None = None
    api_key: SecretStr | None = None
    block: str | None = Field(default=None, description="Name of a saved LLMBlock holding provider, model and key.")
    temperature: float | Literal["none"] | None = Field(
        default=0.0, description="Sampling temperature; 'none' for models that reject the parameter."
    )
    structured_output: Literal["json_schema", "json_object", "tools"] | None = None
    timeout_s: float = Field(
        default=60.0, gt=0, description="Deadline of one request, connect to last byte; past it the request is cancelled."
    )
    max_retries: int = Field(default=2, ge=0)
    max_tokens: int | None = Field(
        default=None, gt=0,
        description=f"Answer length cap sent on every call; unset: {DEFAULT_MAX_TOKENS} for text answers, "
        f"{DEFAULT_MAX_STRUCTURED_TOKENS} for structured ones.",
    )
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = Field(
        default="max_tokens", description="The field the openai wire sends the cap in (OpenAI's o-series and gpt-5 "
        "take only max_completion_tokens)."
    )
    max_concurrent: int | None = Field(
        default=None, ge=1, description="Calls to this model at once from one process; unset: no limit. Set 1 for a "
        "server that serves one request at a time (llama-cpp-python's server drops the request it is answering when "
        "the next one arrives, and a question's sub-queries are planned in parallel).")
    stream_all: bool = Field(
        default=False, description="Stream every call, not only those that show text as it comes, so a server that "
        "only notices a client gone mid-stream (llama-cpp-python's) stops generating when a call times out."
    )
    cache_prefix: bool = Field(
        default=True, description="Anthropic: mark the end of the prefix that a datasource's calls share "
        "(cache_control), so later calls read it from the cache at the cached rate (writing it costs the cache-write "
        "rate once per 5 minutes). OpenAI and local servers cache prefixes by themselves.")


class PriceConfig(Strict):
    """USD per million tokens, overriding the built-in price table for one model."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)


class LLMConfig(Strict):
    """Named models, the default one, and per-node overrides."""

    models: dict[str, ModelConfig] = Field(default_factory=dict)
    default: str | None = Field(default=None, description="Name of the model every node uses unless overridden.")
    nodes: dict[Literal[LLM_NODES], str] = Field(default_factory=dict)  # type: ignore[valid-type]
    prices: dict[str, PriceConfig] = Field(default_factory=dict)


# --- hooks, observers, evals -------------------------------------------------------------------


class HookConfig(Strict):
    """One hook: a registered hook type, where it runs, and its options."""

    use: str = Field(description="Registered hook name, e.g. 'sql_review' or 'deny_tables'.")
    name: str | None = None
    points: list[Literal[HOOK_POINTS]] | None = None  # type: ignore[valid-type]
    on_error: Literal["closed", "open"] = "closed"
    approver_roles: list[str] | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class ObserverConfig(Strict):
    """One observer of the engine's events."""

    use: str = Field(description="Registered observer name: 'log', 'audit', 'otel' or a plugin's.")
    options: dict[str, Any] = Field(default_factory=dict)


class GateConfig(Strict):
    """How much regression the eval gate tolerates in mode full."""

    max_regressions: int = Field(default=0, ge=0)
    alpha: float = Field(default=0.05, gt=0, lt=1)


class EvalsConfig(Strict):
    """Eval suites and the gate."""

    suites: list[str] = Field(default_factory=list)
    baseline_dir: str = "benchmarks"
    gate: GateConfig = Field(default_factory=GateConfig)


# --- settings and storage ----------------------------------------------------------------------


class RoutingSettings(Strict):
    """How a question is routed across datasources."""

    strategy: Literal["evidence", "votes", "best", "normalized", "votes+best", "normalized+best"] = Field(
        default="evidence", description="How datasources are ranked (see docs/index.md).")
    shortlist: int = Field(default=3, ge=1)
    floor_ratio: float | None = Field(default=None, ge=0, le=1, description="Unset: the strategy's own (0.6 for "
                                      "evidence, 0.8 for the vote strategies).")
    vote_k: int = Field(default=20, ge=1)
    rrf_k: int = Field(default=60, ge=1)
    max_sub_queries: int = Field(default=3, ge=1)
    close_call: float = Field(default=0.85, ge=0, le=1, description="A model (the answerability check, the "
                              "decomposer) may send a question to a datasource scoring at least this share of the "
                              "best one; one that scores less does not overrule routing's first pick.")
    ask_models_above: float = Field(
        default=0.8, ge=0, le=1, description="The answerability check and the decomposer are asked only when "
        "routing's second pick scores at least this share of its first, or the question names enough of it "
        "(`ask_models_named`), or a two-part question's parts went to two datasources; otherwise the question goes "
        "to the first pick alone, with no model call before the planner. 0: whenever routing picks more than one. "
        "Measured: benchmarks/routing/model_skips.py (docs/index.md).")
    ask_models_named: float = Field(
        default=2.0, ge=0, description="The question names at least this much of the second pick's tables, columns "
        "and values (routing's lexical evidence: a word naming one is a point) for the models to be asked below "
        "`ask_models_above`.")
    pairs: bool = Field(default=True, description="A question about two things (\"refunds alongside web sessions\", "
                        "\"compare X with Y\") is also routed in its two parts; when they go clearly to two "
                        "datasources, that pair leads the picks, and a model may send the question to either (see "
                        "docs/index.md).")
    min_evidence: float = Field(default=0.28, ge=0, le=1, description="A question that names nothing of any "
                                "datasource (no table, column, value or entry word) and whose best datasource's "
                                "dense evidence is below this is not answerable, refused before any model call "
                                "(evidence strategy only; 0 turns it off).")


class RetrievalSettings(Strict):
    """How much schema the planner sees."""

    table_k: int = Field(default=8, ge=1)
    planning_k: int = Field(default=4, ge=1)
    wide_table_columns: int = Field(default=3, ge=1)
    mmr_lambda: float = Field(default=1.0, ge=0, le=1)
    whole_schema_columns: int = Field(default=100, ge=0, description="A datasource whose tables the caller may read "
                                      "have at most this many columns in all is sent whole (every table, every "
                                      "column, in the same order for every question); 0 always retrieves.")


class CuratedSettings(Strict):
    """How verified queries are matched to questions."""

    min_similarity: float = Field(default=0.9, ge=0, le=1, description="Least similarity of question and "
                                  "verified question (parameters filled in) for the verified SQL to answer.")
    answer: bool = Field(default=True, description="Verified queries answer the questions they match; false: they "
                         "only serve as the planner's worked examples (settings.pipeline.planner.examples).")


class ApprovalSettings(Strict):
    """How long a statement waits for an approver, and who is told."""

    timeout_s: int = Field(default=3600, ge=1, description="A question waits this long, then ends needs_approval.")
    poll_interval_s: int = Field(default=5, ge=1, description="How often a paused run looks for an answer.")
    webhook_url: SecretStr | None = Field(default=None, description="Called (POST) when a statement needs an "
                                          "approver, by the Prefect automation `nl2sql automations apply` makes.")
    allow_self_approval: bool = Field(default=False, description="Whether an asker may approve their own "
                                      "statement.")


class ProfileSettings(Strict):
    """Bounds on column profiling."""

    sample_rows: int = Field(default=100_000, ge=100)
    max_sample_values: int = Field(default=20, ge=0)
    low_cardinality: int = Field(default=50, ge=0)
    dominant_share: float = Field(default=0.5, ge=0.0, le=1.0, description="A text column with more distinct "
                                  "values gets its most frequent ones as sample values when they make up this share "
                                  "of its rows (1: never).")
    max_name_values: int = Field(default=1000, ge=0, description="A text column with no sample values and at most "
                                 "this many distinct values keeps them as name values: matched against the names a "
                                 "question spells, never shown to a model (0: none).")
    max_name_values_total: int = Field(default=100_000, ge=0, description="About how many name values a "
                                       "datasource's build keeps in all: once they are reached, a column keeps none.")
    infer_keys: bool = Field(default=True, description="Infer the keys and references of tables that declare none "
                             "from names and a sample of values (nl2sql.schema.inferred_keys; docs/index.md).")


#: What the engine adds to a model's plan (nl2sql.plan.shape).
AnswerShapeRule = Literal["measure", "groups", "names", "key", "ties", "distinct"]


class PlannerSettings(Strict):
    """How the planner model writes a sub-query's plan."""

    format: Literal["plan", "sql"] = Field(
        default="sql", description="'sql': one SELECT in the datasource's dialect, read into a plan by the engine "
        "(nl2sql.plan.from_sql), then validated and rendered like any plan (measured best: docs/models.md); "
        "'plan': the typed plan as JSON (the plan language is shown in the prompt).")
    examples: int = Field(default=3, ge=0, le=10, description="Worked examples in the planner's prompt: the example "
                          "questions, then the verified queries (those without parameters), of the sub-query's "
                          "datasource that the caller may read, chosen as `examples_chosen` says, as plans or SQL in "
                          "the format; 0 shows none.")
    examples_chosen: Literal["nearest", "fixed"] = Field(
        default="fixed", description="Which worked examples: 'fixed', the first of them in the configuration's "
        "order, the same for every question and part of the prefix every call about the datasource shares (a model "
        "server reads them once, not per question); 'nearest', those nearest to the question, after that prefix.")
    resamples: int = Field(default=3, ge=0, le=10, description="When the refiner gives back a statement (or plan) "
                           "that already failed, the planner is asked again this many times at most, sampled at "
                           "`resample_temperature`, and its first answer that validates goes on; 0: refining stops "
                           "there.")
    resample_temperature: float = Field(default=0.7, gt=0, le=2, description="The temperature of those samples.")
    candidates: int = Field(default=1, ge=1, le=8, description="Statements (or plans) the planner proposes for a "
                            "sub-query: its first answer and samples at `resample_temperature`, each read, validated "
                            "under the caller's scope and run read-only; the sub-query goes on with one of the largest "
                            "group that agree on their result (nl2sql.pipeline.candidates). 1: the first answer alone, "
                            "one model call (each candidate is one more).")
    answer_shape: list[AnswerShapeRule] = Field(
        default_factory=lambda: ["groups", "names", "ties", "distinct"], description="What the engine adds to a "
        "model's plan (nl2sql.plan.shape): 'groups', the group keys of a grouped plan that shows only aggregates; "
        "'names', a row's name where the plan shows only the foreign key that stands for it; 'ties', a "
        "key to break ties on where a LIMIT cuts the rows; 'distinct', DISTINCT on a list whose rows a join repeats; "
        "'measure' (not by default), what a ranking ranks by and the aggregate a HAVING filters on; 'key' (not by "
        "default), the FROM table's key in front of a plain list of its rows. The default is the measured one "
        "(docs/models.md): columns the question did not ask for cost more answers than they helped. [] keeps the "
        "plan as written.")


class PipelineSettings(Strict):
    """Limits of one question's run and of each statement."""

    row_limit: int = Field(default=1000, ge=1)
    preview_rows: int = Field(default=20, ge=1)
    answer_rows: int = Field(default=5, ge=1, description="The rows of a result the answer in words is written "
                             "from (its prompt shows these and how many there are in all), whatever the result "
                             "carries (`preview_rows`): a sentence names a few values, the asker sees the rows, and "
                             "each row is read by the model before it writes.")
    statement_timeout_s: float = Field(default=30.0, gt=0)
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    max_llm_calls: int = Field(default=12, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)
    plan_cache: bool = Field(default=True, description="Reuse a plan that ran for the same question, schema and "
                             "scope instead of calling the planner again.")
    planner: PlannerSettings = Field(default_factory=PlannerSettings)
    synthesizer_follows_planner: bool = Field(
        default=True, description="When the planner wrote the run's one statement, the answer in words is asked as "
        "the next turn of the planner's conversation (its instructions, tables and question, then the statement and "
        "the result): a model server that keeps the last prompt cached reads only the statement and the rows again. "
        "Off: the answer is asked in a prompt of its own.")
    answerability_check: bool = Field(
        default=True, description="Ask the resolver model which datasources a question needs when routing's "
        "evidence is weak (more than one pick): its answer can only narrow the shortlist, never widen it or refuse "
        "(the planner says when the tables it is shown cannot answer). Off: routing's picks go to the decomposer.")
    scope_evidence: bool = Field(
        default=True, description="Refuse, before any model call, a question that speaks of sales (sold, revenue, "
        "spent, bought…) on a datasource that records them only in tables the caller may not read "
        "(`index/scope_evidence.py`): a model shown only the readable tables would answer another question. Off: "
        "the planner decides from the tables it is shown.")
    sanity_checks: bool = Field(
        default=True, description="Check each result for the usual mistakes: a filter value the column does not "
        "hold (VALUE_NOT_FOUND), a join that repeats the rows an aggregate counts (JOIN_FAN_OUT), a column with only "
        "NULL (ALL_NULL_COLUMN). The first two send the plan back to the refiner once; every finding is a warning "
        "on the result. The checks' own queries run only when no hook watches execute.before.")


def parse_bytes(text: str) -> int:
    """Bytes in a size such as '768MB', '1GiB' or '512 KB' (decimal and binary units alike, as DuckDB reads them).

    >>> parse_bytes("768MB"), parse_bytes("1GiB")
    (768000000, 1073741824)
    """
    number = text.strip().upper().rstrip("B").rstrip()
    binary = number.endswith("I")
    number = number.rstrip("I")
    scale = 1024 if binary else 1000
    powers = {"K": 1, "M": 2, "G": 3, "T": 4}
    if number and number[-1] in powers:
        return int(float(number[:-1]) * scale ** powers[number[-1]])
    return int(float(number))


class ResourceSettings(Strict):
    """What one statement may use: rows, bytes, memory and threads. No CLI flag lifts these."""

    max_rows: int = Field(default=100_000, ge=1, description="Hard cap on the rows one statement returns; "
                          "`settings.pipeline.row_limit` and `--limit` are bounded by it.")
    max_result_bytes: int = Field(default=64 * 2**20, ge=1024, description="Bytes of result one statement may "
                                  "fetch (rows are read in batches against it); a datasource may set its own.")
    sqlite_max_value_bytes: int = Field(default=16 * 2**20, ge=1024, description="SQLite: the longest string or "
                                        "blob a statement may build (the connection's SQLITE_LIMIT_LENGTH).")
    duckdb_memory_limit: str = Field(default="512MB", pattern=r"^\d+(\.\d+)?\s*[KMGT]?i?B$",
                                     description="DuckDB: `memory_limit` of each connection, e.g. '512MB'.")
    duckdb_threads: int = Field(default=2, ge=1, description="DuckDB: `threads` of each connection.")
    duckdb_max_temp_directory_size: str = Field(
        default="0B", pattern=r"^\d+(\.\d+)?\s*[KMGT]?i?B$",
        description="DuckDB: the most a statement may spill to disk past its memory limit (DuckDB spills beside the "
        "database file, `<file>.tmp`: its external access is off, so no other folder can be set); '0B', the "
        "default, makes a statement over the limit fail instead.")
    statement_process_memory: str = Field(
        default="768MB", pattern=r"^\d+(\.\d+)?\s*[KMGT]?i?B$",
        description="SQLite and DuckDB: callers' statements run in worker processes, each of whose private memory "
        "(RLIMIT_DATA) is bounded by this: what DuckDB allocates outside `duckdb_memory_limit` (strings from "
        "repeat() or string_agg(), lists, regex results) fails there with an out-of-memory error, and a statement "
        "that overruns its timeout by 2 s is stopped with its process. Must exceed `duckdb_memory_limit` by at least "
        "128 MiB (the process's own memory).")
    statement_processes: int = Field(default=2, ge=1, le=64, description="SQLite and DuckDB: how many worker "
                                     "processes may run one datasource's statements at once (more wait for one).")

    @model_validator(mode="after")
    def _process_holds_duckdb(self) -> ResourceSettings:
        if parse_bytes(self.statement_process_memory) < parse_bytes(self.duckdb_memory_limit) + 128 * 2**20:
            raise ValueError(f"statement_process_memory ({self.statement_process_memory}) must exceed "
                             f"duckdb_memory_limit ({self.duckdb_memory_limit}) by at least 128 MiB: the worker "
                             "process holds DuckDB's memory and its own")
        return self


class PrefectSettings(Strict):
    """What the engine puts into Prefect, whose UI and API anyone who reaches the server reads."""

    artifact_rows: bool = Field(default=False, description="Put row values into Prefect artifacts: the ask flow's "
                                "answer text and first rows, the eval flow's failure details. Off: question, status, "
                                "SQL, row counts and codes only.")
    failures_webhook_url: SecretStr | None = Field(default=None, description="Called (POST) when an eval or "
                                                   "drift-check run fails, by the Prefect automation "
                                                   "`nl2sql automations apply` makes.")


class DeskSettings(Strict):
    """The question desk that a first `nl2sql ask` starts in the background: the engine and Prefect kept warm, so
    the next questions skip their start."""

    background: bool = Field(default=True, description="A `nl2sql ask` that finds no desk starts one in the "
                             "background and hands it the question (`--no-desk` asks in the command's own process; "
                             "NL2SQL_BACKGROUND_DESK=0 turns this off for a shell or a CI job).")
    idle_stop_s: int = Field(default=900, ge=10, description="A background desk stops after this many seconds "
                             "without a question (a question waiting for an approver keeps it).")


class Settings(Strict):
    """Tunable behaviour, with defaults that suit a small team."""

    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    curated: CuratedSettings = Field(default_factory=CuratedSettings)
    approvals: ApprovalSettings = Field(default_factory=ApprovalSettings)
    profile: ProfileSettings = Field(default_factory=ProfileSettings)
    pipeline: PipelineSettings = Field(default_factory=PipelineSettings)
    resources: ResourceSettings = Field(default_factory=ResourceSettings)
    prefect: PrefectSettings = Field(default_factory=PrefectSettings)
    desk: DeskSettings = Field(default_factory=DeskSettings)


class StorageConfig(Strict):
    """Where the engine keeps its state (index builds, traces, audit logs, Prefect's home)."""

    state_dir: str = ".nl2sql"
    keep_builds: int = Field(default=3, ge=1)
    audit_max_age_days: int = Field(default=30, ge=1)
    max_age_days: int = Field(default=30, ge=1, description="Run traces, resolved approvals, cached plans and the "
                              "records of failed or pruned builds older than this are deleted by the nightly "
                              "`storage-purge` deployment.")


def _default_observers() -> list[ObserverConfig]:
    return [ObserverConfig(use="log"), ObserverConfig(use="audit")]


# --- the whole file ----------------------------------------------------------------------------


class Config(Strict):
    """The whole of `nl2sql.yaml`."""

    version: Literal[1] = 1
    datasources: Annotated[list[DatasourceConfig], Field(min_length=1)]
    policies: PoliciesConfig
    llm: LLMConfig = Field(default_factory=LLMConfig)
    hooks: list[HookConfig] = Field(default_factory=list)
    observers: list[ObserverConfig] = Field(default_factory=_default_observers)
    evals: EvalsConfig = Field(default_factory=EvalsConfig)
    settings: Settings = Field(default_factory=Settings)
    storage: StorageConfig = Field(default_factory=StorageConfig)

    _path: Path | None = PrivateAttr(default=None)

    @property
    def path(self) -> Path | None:
        """The file this configuration was read from (None when built in code)."""
        return self._path

    @property
    def base_dir(self) -> Path:
        """The folder relative paths in the configuration are resolved against."""
        return self._path.parent if self._path else Path.cwd()

    @property
    def state_dir(self) -> Path:
        """The state folder, absolute."""
        return (self.base_dir / self.storage.state_dir).resolve()

    def datasource(self, datasource_id: str) -> DatasourceConfig:
        """The datasource with this id, or UnknownNameError with a suggestion."""
        from nl2sql.errors import UnknownNameError

        for ds in self.datasources:
            if ds.id == datasource_id:
                return ds
        raise UnknownNameError("datasource", datasource_id, [d.id for d in self.datasources])


#: Top-level sections that may be written as a path to their own YAML file.
SECTIONS: dict[str, Any] = {name: field.annotation for name, field in Config.model_fields.items()}
