"""Eval seeding: draft cases a model proposes, each checked by the engine under the caller's scope before it is kept.

The `eval_seeder` model is shown the tables the caller may read (as the planner sees them) and asked for cases in
batches of `CASES_PER_BATCH`: a question, its difficulty, and its answer in the planner format configured (one
SELECT, or a plan). Every proposal then takes the engine's pinned-plan path (`pipeline.declaration.SEED`): the
plan.after hooks, the validator and the generator under the caller's scope, the execute.before hooks, a bounded
run, the execute.after hooks. A refusal, a hook's deny or failure, a statement waiting for an approver, an empty
or oversized answer drops the proposal, counted by reason. A kept one becomes a draft case (`status: draft`,
`origin: seeded`) with the plan that produced its SQL, gold rows written by the code of `eval regenerate`, and an
outcome per role derived from the policies.

Seeding stops when the count is reached, at the dollar cap, or when a batch got nothing usable from
`CALLS_PER_BATCH` calls. Drafts never go into a reviewed suite (`check_seed_target`); `eval review` moves the ones a
person approves.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from nl2sql.errors import ConfigError, ConfigProblem, NL2SQLError, SecurityViolation
from nl2sql.evaluation.regenerate import regenerate_case
from nl2sql.evaluation.suite import EvalCase, EvalSuite, load_suite, write_suite
from nl2sql.llm.budget import Budget
from nl2sql.llm.client import LLMClient
from nl2sql.llm.models import LimitReached, LLMError, Message
from nl2sql.llm.prices import price_for
from nl2sql.plan.model import PlanModel
from nl2sql.policies.scope import scope

if TYPE_CHECKING:
    from nl2sql.config.models import Config
    from nl2sql.pipeline.runtime import Runtime

CASES_PER_BATCH = 5
CALLS_PER_BATCH = 3  # a batch whose calls give nothing usable ends the seeding
RECENT_QUESTIONS = 10  # how many of the newest questions each call is shown
#: Seeding samples (each call its own seed): at the configured temperature, usually 0, a model asked again for new
#: cases wrote the same ones again (a 1.5B model: 12 of 17 proposals repeated a draft).
SEED_TEMPERATURE = 0.8
#: A draft's answer is meant to be read by a reviewer: more rows than this drops it.
MAX_DRAFT_ROWS = 200

StopReason = Literal["count_reached", "cost_cap", "call_limit"]

#: Why a proposal was dropped, by the error code that ended its check.
DROP_REASONS = {
    "SECURITY_VIOLATION": "refused", "PLAN_INVALID": "plan_invalid", "PLAN_UNSUPPORTED": "unsupported",
    "HOOK_DENIED": "hook_denied", "HOOK_FAILED": "hook_failed", "DATASOURCE_ERROR": "database_error",
    "QUERY_TIMEOUT": "database_error", "RESULT_TOO_LARGE": "too_many_rows", "SQL_REJECTED": "plan_invalid",
}

#: The result checks' findings that drop a proposal (`nl2sql.sanity`): its rows may be counted twice, or say nothing.
CHECK_DROPS = {"JOIN_FAN_OUT": "join_fan_out", "ALL_NULL_COLUMN": "all_null"}


class SeedProposal(BaseModel):
    """One case as the model proposes it (the `sql` planner format: its answer as one SELECT)."""

    question: str = Field(description="A question a data analyst would ask, in plain words.")
    difficulty: Literal["easy", "medium", "hard"]
    sql: str = Field(description="One SELECT statement in the database's dialect that answers it.")


class SeedPlanProposal(BaseModel):
    """One case as the model proposes it (the `plan` planner format: its answer as a plan)."""

    question: str = Field(description="A question a data analyst would ask, in plain words.")
    difficulty: Literal["easy", "medium", "hard"]
    plan: PlanModel


class SeedBatch(BaseModel):
    """The seeder's answer in the `sql` format."""

    cases: list[SeedProposal]


class SeedPlanBatch(BaseModel):
    """The seeder's answer in the `plan` format."""

    cases: list[SeedPlanProposal]


@dataclass
class SeedReport:
    """What a seeding run did: drafts written, proposals dropped by reason, calls, dollars, why it stopped."""

    datasource_id: str
    path: str
    wanted: int
    written: int = 0
    proposals: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    calls: int = 0
    cost_usd: float | None = None
    stopped: StopReason | None = None
    message: str = ""

    @property
    def exit_code(self) -> int:
        """0 when the count was reached, 3 at the dollar cap or the call limit."""
        return 0 if self.stopped == "count_reached" else 3

    def as_dict(self) -> dict[str, Any]:
        """A plain record (the CLI's --json, the flow's result)."""
        return {"datasource_id": self.datasource_id, "path": self.path, "wanted": self.wanted, "written": self.written,
                "proposals": self.proposals, "dropped": dict(sorted(self.dropped.items())), "calls": self.calls,
                "cost_usd": self.cost_usd, "stopped": self.stopped, "message": self.message,
                "exit_code": self.exit_code}


# --- before any call -------------------------------------------------------------------------------


def check_seed_target(path: Path, config: Config) -> None:
    """Drafts never go into reviewed cases: refuse a suite shipped inside the package, a suite the configuration
    names, and a file holding approved cases (ConfigError, a usage error)."""
    target = path.resolve()
    package = Path(__file__).resolve().parents[1]
    named = {(config.base_dir / s).resolve() for s in config.evals.suites}
    problem = None
    if target.is_relative_to(package):
        problem = "it is inside the nl2sql package"
    elif target in named:
        problem = "the configuration names it in evals.suites"
    elif target.exists():
        try:
            held = load_suite(target)
        except ConfigError:
            problem = "it exists and is not a suite of drafts"
        else:
            if any(c.status == "approved" for c in held.cases):
                problem = "it holds approved cases"
    if problem:
        raise ConfigError(ConfigProblem("--out", str(path), f"drafts cannot be written there: {problem}",
                                        "write drafts to a file of their own (e.g. drafts.yaml), then move the "
                                        "ones you approve with `nl2sql eval review`"))


def check_seed_caller(config: Config, datasource_id: str, roles: Sequence[str]) -> None:
    """A caller with no role, or whose roles read nothing in the datasource, is refused with the generic sentence
    before any call."""
    config.datasource(datasource_id)
    if not roles or not scope(config.policies, list(roles), datasource_id).reachable:
        raise SecurityViolation(datasource=datasource_id, node="eval_seeder")


def check_seeder_price(client: LLMClient) -> None:
    """A dollar cap needs a price for the seeder's model: ConfigError before any call when it has none."""
    name = client.model_name_for("eval_seeder")
    if name is None:
        client.wire_for("eval_seeder")  # raises LLM_NOT_CONFIGURED with how to add one
        return
    model = client.config.models[name].model
    if price_for(model, client.config.prices) is None:
        raise ConfigError(ConfigProblem(
            "nl2sql.yaml", f"llm.models.{name}", f"model '{model}' has no price, so the dollar cap of seeding "
            "(--max-cost) cannot be kept", f"add llm.prices.{model}: {{input: …, output: …}} (USD per 1M tokens)"))


# --- the model's side ------------------------------------------------------------------------------

SEEDER_SYSTEM = """You write test cases for a natural-language-to-SQL engine over one {dialect} database.
Each case is a question a data analyst would ask of the tables below, in plain words (never SQL), with its
difficulty and its answer: {answer}
Use only the tables and columns given. Vary the cases: counts, filters on values that exist, joins along the keys,
grouping, ordering with a limit, dates. Each answer should be small enough to read (a few dozen rows at most).
Never repeat a question that already exists, nor reword one."""

ANSWER_FORMS = {
    "sql": "one {dialect} SELECT statement (field sql).",
    "plan": "a query plan (field plan) in the plan language below.",
}


def seeder_messages(schema: str, dialect: str, planner_format: str, wanted: int, existing: int,
                    recent: Sequence[str]) -> list[Message]:
    """The seeder's prompt: the tables, how many questions exist and the newest of them, how many to write."""
    from nl2sql.pipeline.prompts import DIALECT_NAMES, PLAN_LANGUAGE

    name = DIALECT_NAMES.get(dialect, dialect)
    system = SEEDER_SYSTEM.format(dialect=name, answer=ANSWER_FORMS[planner_format].format(dialect=name))
    if planner_format == "plan":
        system += "\n\n" + PLAN_LANGUAGE
    written = ("\n".join(f"- {q}" for q in recent) if recent else "(none yet)")
    user = (f"Tables:\n{schema}\n\n{existing} questions exist already; the newest:\n{written}\n\n"
            f"Write {wanted} new cases.")
    return [Message("system", system), Message("user", user)]


_SQL_WORDS = re.compile(r"^\s*(SELECT|WITH)\b|\bFROM\s+\w+\s+(WHERE|GROUP|ORDER|JOIN)\b", re.I)


def reads_as_sql(question: str) -> bool:
    """Whether a 'question' is a statement rather than words."""
    return bool(_SQL_WORDS.search(question))


# --- the engine's side -----------------------------------------------------------------------------


@dataclass
class Checked:
    """A proposal after the engine's check: the draft case, or why it was dropped."""

    case: EvalCase | None = None
    dropped: str | None = None


def role_outcomes(config: Config, datasource_id: str, tables: Sequence[tuple[str, str | None]]) -> dict[str, str]:
    """allowed for each role whose own scope reads every table, refused for the others."""
    return {role: "allowed" if all(scope(config.policies, [role], datasource_id).allows(t, s) for t, s in tables)
            else "refused" for role in config.policies.roles}


def check_proposal(runtime: Runtime, datasource_id: str, question: str, plan: PlanModel, difficulty: str,
                   case_id: str, roles: Sequence[str], user_id: str | None) -> Checked:
    """A proposal through the pinned-plan path under the caller's scope (no model call), then its gold rows."""
    from nl2sql.pipeline.declaration import SEED
    from nl2sql.pipeline.inline import run_parallel
    from nl2sql.pipeline.run import drive, fail_run, finish_run, invoke_step, start_run
    from nl2sql.pipeline.state import SubQuery

    ctx, state = start_run(runtime, question, roles=roles, user_id=user_id, datasource_id=datasource_id)
    state.datasource_ids = [datasource_id]
    sub_query = SubQuery(id="sq1", datasource_id=datasource_id, question=question, plan=plan, plan_source="seeded")
    state.sub_queries = [sub_query]
    try:
        with ctx.trace.entered():
            drive(ctx, state, invoke_step, run_parallel, pipeline=SEED)
            result = finish_run(ctx, state)
    except BaseException as exc:
        fail_run(ctx, state, exc)
        raise
    if result.status == "needs_approval":
        return Checked(dropped="needs_approval")
    if result.status != "success":
        codes = [e.code for e in result.errors] + [sq.error.code for sq in result.sub_queries if sq.error]
        return Checked(dropped=next((DROP_REASONS[c] for c in codes if c in DROP_REASONS), "failed"))
    ran = result.sub_queries[0]
    if sub_query.dropped or not ran.sql or sub_query.plan is None:
        return Checked(dropped="hook_denied")
    if not ran.total_rows:
        return Checked(dropped="no_rows")
    if ran.truncated or ran.total_rows > MAX_DRAFT_ROWS:
        return Checked(dropped="too_many_rows")
    flagged = next((w.code for w in result.warnings if w.code in CHECK_DROPS), None)
    if flagged is not None:  # a result the checks doubt is no gold answer
        return Checked(dropped=CHECK_DROPS[flagged])
    live = runtime.index.live(datasource_id)
    tables = [(t.name, t.schema_name) for t in live.snapshot.tables if t.name in sub_query.tables] \
        if live is not None and live.snapshot is not None else [(t, None) for t in sub_query.tables]
    case = EvalCase(id=case_id, question=question, datasources=[datasource_id], status="draft", origin="seeded",
                    difficulty=difficulty, outcome=role_outcomes(runtime.config, datasource_id, tables),  # type: ignore[arg-type]
                    tables=sorted(sub_query.tables), sql=ran.sql,
                    plan=sub_query.plan.model_dump(mode="json", by_alias=True, exclude_none=True))
    try:
        return Checked(case=regenerate_case(case, runtime.catalog, Path("drafts"), 0))
    except ConfigError:  # the gold run failed or its columns share a name
        return Checked(dropped="gold_rows")


# --- the whole run ---------------------------------------------------------------------------------

#: Runs one batch: (batch number, how many cases wanted) → None. The flow hands in a task run; inline: a call.
RunBatch = Callable[[int, int], None]


class Seeding:
    """One seeding run over a datasource: batches of proposals, each checked, drafts collected in order."""

    def __init__(self, runtime: Runtime, datasource_id: str, *, count: int, roles: Sequence[str],
                 user_id: str | None, max_cost_usd: float, out: Path, existing: Sequence[str] = ()) -> None:
        config = runtime.config
        check_seed_caller(config, datasource_id, roles)
        check_seed_target(out, config)
        self.runtime, self.datasource_id, self.roles, self.user_id = runtime, datasource_id, list(roles), user_id
        self.count = count
        self.format = config.settings.pipeline.planner.format
        self.client = LLMClient(config.llm, budget=Budget(max_cost_usd=max_cost_usd), block_loader=runtime.llm_block_loader)
        check_seeder_price(self.client)
        self.max_cost_usd = max_cost_usd
        self.out = out
        self.saved = 0  # drafts already appended to `out`
        self.report = SeedReport(datasource_id=datasource_id, path=str(out), wanted=count)
        self.drafts: list[EvalCase] = []
        self.questions = list(existing)
        live = runtime.index.live(datasource_id)
        if live is None or live.snapshot is None:
            from nl2sql.errors import IndexNotBuilt

            raise IndexNotBuilt(f"Datasource {datasource_id} has no index build.", fix="Run `nl2sql index build`.",
                                node="eval_seeder")
        self.dialect = live.snapshot.dialect
        self.schema = self._visible_schema()

    def _visible_schema(self) -> str:
        """The tables the caller may read, rendered as the planner sees them (every one of them)."""
        from nl2sql.index.service import IndexService

        config = self.runtime.config
        whole = config.settings.retrieval.model_copy(update={"whole_schema_columns": 1_000_000})
        seen = config.model_copy(update={"settings": config.settings.model_copy(update={"retrieval": whole})})
        index = self.runtime.index
        retrieved = IndexService(seen, index.store, index.retriever).retrieve_schema("", self.roles, self.datasource_id)
        return retrieved.render_ddl(self.dialect) if self.format == "sql" else retrieved.render()

    @property
    def done(self) -> bool:
        """Whether the run has stopped (count reached, cost cap, call limit)."""
        return self.report.stopped is not None

    def run(self, run_batch: RunBatch | None = None) -> SeedReport:
        """Batches until the run stops; `run_batch` runs one (default: `self.batch` in place)."""
        batch_no = 0
        try:
            while not self.done:
                batch_no += 1
                wanted = min(CASES_PER_BATCH, self.count - len(self.drafts))
                (run_batch or self.batch)(batch_no, wanted)
        finally:  # a batch that raised still closes the seeder's connections
            self.client.close()
        self.report.written = len(self.drafts)
        self.report.calls = self.client.budget.calls
        self.report.cost_usd = self.client.cost_usd()
        return self.report

    def batch(self, batch_no: int, wanted: int) -> None:
        """Up to CALLS_PER_BATCH calls until one gives a usable proposal (its drafts appended to the file at once:
        a run that dies later keeps them); stop the run at the cap or the limit."""
        try:
            self._batch(batch_no, wanted)
        finally:
            if len(self.drafts) > self.saved:
                write_drafts(self.out, self.drafts[self.saved:], self.datasource_id)
                self.saved = len(self.drafts)

    def _batch(self, batch_no: int, wanted: int) -> None:
        for _ in range(CALLS_PER_BATCH):
            try:
                proposals = self._propose(wanted)
            except LimitReached:
                self._stop("cost_cap", f"Seeding reached its dollar cap of ${self.max_cost_usd:.2f} (--max-cost).")
                return
            except LLMError:  # an answer that never parsed, a timeout: this call gave nothing usable
                self.report.dropped["invalid_answer"] += 1
                continue
            kept = sum(self._keep(p) for p in proposals)
            if len(self.drafts) >= self.count:
                self._stop("count_reached", f"{len(self.drafts)} drafts written.")
                return
            if kept:
                return
        self._stop("call_limit", f"Batch {batch_no} got nothing usable from {CALLS_PER_BATCH} model calls.")

    def _stop(self, reason: StopReason, message: str) -> None:
        if self.report.stopped is None:
            self.report.stopped, self.report.message = reason, message

    def _propose(self, wanted: int) -> list[tuple[str, str, PlanModel | str]]:
        """(question, difficulty, plan or SQL) of each case the seeder proposes."""
        messages = seeder_messages(self.schema, self.dialect, self.format, wanted, len(self.questions),
                                   self.questions[-RECENT_QUESTIONS:][::-1])
        sampling = {"temperature": SEED_TEMPERATURE, "seed": self.client.budget.calls + 1}
        if self.format == "sql":
            answer = self.client.structured("eval_seeder", messages, SeedBatch, schema_name="SeedBatch", **sampling)
            return [(c.question, c.difficulty, c.sql) for c in answer.cases]
        plans = self.client.structured("eval_seeder", messages, SeedPlanBatch, schema_name="SeedBatch", **sampling)
        return [(c.question, c.difficulty, c.plan) for c in plans.cases]

    def _keep(self, proposal: tuple[str, str, PlanModel | str]) -> bool:
        """Check one proposal; keep it as a draft or count why it was dropped."""
        from nl2sql.plan.from_sql import plan_from_sql

        if len(self.drafts) >= self.count:
            return False
        question, difficulty, answer = proposal
        question = " ".join(question.split())
        self.report.proposals += 1
        if not question or reads_as_sql(question):
            self.report.dropped["invalid_question"] += 1
            return False
        if question.lower() in {q.lower() for q in self.questions}:
            self.report.dropped["duplicate"] += 1
            return False
        try:
            plan = plan_from_sql(answer, self.dialect) if isinstance(answer, str) else answer
        except NL2SQLError as exc:
            self.report.dropped[DROP_REASONS.get(exc.code, "plan_invalid")] += 1
            return False
        case_id = f"seeded_{self.datasource_id}_{len(self.questions) + 1:03d}"
        checked = check_proposal(self.runtime, self.datasource_id, question, plan, difficulty, case_id, self.roles,
                                 self.user_id)
        if checked.case is None:
            self.report.dropped[checked.dropped or "failed"] += 1
            return False
        self.drafts.append(checked.case)
        self.questions.append(question)
        return True


def existing_questions(path: Path) -> list[str]:
    """The questions of a drafts file being added to (none when it does not exist yet)."""
    return [c.question for c in load_suite(path).cases] if path.exists() else []


def write_drafts(path: Path, drafts: Sequence[EvalCase], datasource_id: str) -> EvalSuite:
    """Append the drafts to the file (created when missing), ids kept unique."""
    return append_cases(path, drafts, f"Draft cases seeded over {datasource_id}: review them with `nl2sql eval "
                        "review`.")


def append_cases(path: Path, cases: Sequence[EvalCase], description: str | None = None) -> EvalSuite:
    """Append cases to a suite file (created with `description` when missing), each id made unique in it."""
    held = load_suite(path) if path.exists() else EvalSuite(description=description, cases=[])
    ids = {c.id for c in held.cases}
    kept = list(held.cases)
    for case in cases:
        n, case_id = 0, case.id
        while case_id in ids:
            n += 1
            case_id = f"{case.id}_{n}"
        ids.add(case_id)
        kept.append(case.model_copy(update={"id": case_id}))
    suite = held.model_copy(update={"cases": kept})
    write_suite(suite, path)
    return suite


# --- review ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A reviewer's decision on one draft: approve (with the question as edited, if it was), drop, skip, or stop."""

    action: Literal["approve", "drop", "skip", "quit"]
    question: str | None = None


@dataclass
class ReviewReport:
    """What a review did."""

    approved: int = 0
    dropped: int = 0
    left: int = 0


def review_drafts(drafts_path: Path, into: Path, reviewer: str, decide: Callable[[EvalCase], Verdict]) -> ReviewReport:
    """Walk the drafts of a file in order: an approved one moves into `into` (`status: approved`, the reviewer's
    id), a dropped one leaves the drafts file, a skipped one stays. Both files are written after each decision."""
    if into.resolve() == drafts_path.resolve():
        raise ConfigError(ConfigProblem("--into", str(into), "approved cases cannot go back into the drafts file",
                                        "name the suite the approved cases join (e.g. suites/mine.yaml)"))
    if not reviewer.strip():
        raise ConfigError(ConfigProblem("--reviewer", "", "the reviewer's id is empty", "pass --reviewer YOUR_ID"))
    drafts = load_suite(drafts_path)
    report = ReviewReport()
    remaining = list(drafts.cases)
    for case in list(drafts.cases):
        if case.status != "draft":
            continue
        verdict = decide(case)
        if verdict.action == "quit":
            break
        if verdict.action == "skip":
            continue
        if verdict.action == "approve":
            question = " ".join((verdict.question or case.question).split())
            append_cases(into, [case.model_copy(update={"status": "approved", "reviewed_by": reviewer,
                                                        "question": question})])
            report.approved += 1
        else:
            report.dropped += 1
        remaining.remove(case)
        write_suite(drafts.model_copy(update={"cases": remaining}), drafts_path)
    report.left = sum(1 for c in remaining if c.status == "draft")
    return report
