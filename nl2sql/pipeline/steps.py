"""The steps of a question, each a plain function over the typed state (run-level: `(ctx, state)`;
per sub-query: `(ctx, state, sub_query)`). The declaration in `pipeline/declaration.py` orders them;
the executors (inline, Prefect) run them. Steps raise the engine's errors; the executors record them.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from nl2sql.aggregate import CombineSpec, Frame, JoinKeyPair, combine
from nl2sql.datasources.checked import run_checked_sql
from nl2sql.datasources.compare import result_key
from nl2sql.datasources.models import TableInfo
from nl2sql.errors import (
    IndexNotBuilt,
    NL2SQLError,
    QuestionNotAnswerable,
    QuestionTooBroad,
    ResultFlagged,
    SecurityViolation,
)
from nl2sql.index.chunks import qualified
from nl2sql.index.retrieve import LiveIndex, RetrievedSchema
from nl2sql.index.route import Routing, backed_by_routing, without_evidence
from nl2sql.llm.models import AnswerAbandoned, LLMParseError, Message
from nl2sql.pipeline import prompts
from nl2sql.pipeline.candidates import Candidate, choose_candidate, group_sizes
from nl2sql.pipeline.result import RunWarning
from nl2sql.pipeline.runtime import RunContext
from nl2sql.pipeline.state import ExpectedColumn, Flagged, RunState, SubQuery
from nl2sql.pipeline.words import ROWS_READY
from nl2sql.plan import PlanModel, ValidatedPlan, generate_sql, plan_from_sql, validate_plan
from nl2sql.plan.join_keys import Dtype, value_dtype
from nl2sql.plan.readings import read_against_question
from nl2sql.plan.shape import shape_answer
from nl2sql.policies import Scope, reachable_datasources, scope
from nl2sql.sanity import (
    RETRYABLE,
    Finding,
    LiteralFilter,
    Probe,
    check_fan_out,
    check_nulls,
    check_values,
    literal_filters,
    text_columns_elsewhere,
)
from nl2sql.sanity.values import plan_tables
from nl2sql.verified.match import match_verified

log = logging.getLogger("nl2sql.pipeline")

# --- before the sub-queries -----------------------------------------------------------------------


def _reachable(ctx: RunContext, state: RunState) -> list[str]:
    ids = [state.datasource_id] if state.datasource_id else [d.id for d in ctx.config.datasources]
    return reachable_datasources(ctx.config.policies, state.roles, ids)


def match_curated(ctx: RunContext, state: RunState) -> None:
    """Answer from a verified query the caller may run when one matches the question; refuse (the generic
    sentence, nothing of the query) when the closest is one over a table the caller may not read; nothing when
    verified queries only teach the planner (`settings.curated.answer` false)."""
    if not ctx.config.settings.curated.answer:
        return
    ids = [state.datasource_id] if state.datasource_id else [d.id for d in ctx.config.datasources]
    runtime = ctx.runtime
    readable, denied = runtime.verified.split(state.roles, ids)
    if not readable and not denied:
        return
    policies = ctx.config.policies
    match = match_verified(
        state.question, [(q.datasource_id, q.position, q.query) for q in readable],
        denied=[(q.datasource_id, q.position, q.query) for q in denied],
        embed=ctx.embed,
        lookup=lambda ds: lambda table, column: runtime.column_values(ds, table, column,
                                                                        scope(policies, state.roles, ds)),
        dialect_of=lambda ds: runtime.catalog.get(ds).name, min_similarity=ctx.config.settings.curated.min_similarity)
    if match is None:
        return
    tables = next(q.tables for q in readable if (q.datasource_id, q.position) == (match.datasource_id, match.position))
    state.datasource_ids = [match.datasource_id]
    state.sub_queries = [SubQuery(id="sq1", datasource_id=match.datasource_id, question=state.question,
                                  verified=match, sql=match.sql, plan_source="verified", tables=list(tables))]


def resolve_datasources(ctx: RunContext, state: RunState) -> None:
    """The caller's datasources first (none: refused, no search), then routing's picks; the model's answerability
    check (`settings.pipeline.answerability_check`) only where routing leaves the choice open (`models_needed`),
    and only to narrow."""
    reachable = _reachable(ctx, state)
    if not reachable:
        ctx.trace.publish("policy.decision", decision="deny", step="resolver", datasource_id=state.datasource_id,
                          roles=state.roles, rule="no role of the caller reaches any datasource asked about")
        raise SecurityViolation(node="resolver")
    index = ctx.index
    built = [ds for ds in reachable if ds not in index.unbuilt(reachable)]
    for ds in sorted(set(reachable) - set(built)):
        state.warnings.append(RunWarning(code="INDEX_NOT_BUILT", step="resolver", message=f"Datasource {ds} has no index build yet "
                                         "and was not considered. Run `nl2sql index build`."))
    if not built:
        raise IndexNotBuilt("No datasource this question could use has an index yet.",
                            fix="Run `nl2sql index build` first.", node="resolver")
    routing = index.route(state.question, state.roles, built)
    state.routing = routing.explanation()
    if without_evidence(routing, ctx.config.settings.routing.min_evidence):
        raise not_answerable(ctx, state, "resolver")
    picks = routing.picks or built[:1]
    settings = ctx.config.settings.routing
    if len(picks) > 1 and not models_needed(routing, settings.ask_models_above, settings.ask_models_named):
        picks = picks[:1]  # routing is sure of its first pick: no answerability check, no decomposer
        state.routing = {**(state.routing or {}), "models_skipped": True}
    state.datasource_ids = picks
    # one pick: the others fell below the floor, and a model's second opinion only loses answers it would have got
    if len(picks) > 1 and ctx.config.settings.pipeline.answerability_check and ctx.llm.configured("resolver"):
        state.datasource_ids = check_answerability(ctx, state, routing, picks)


def models_needed(routing: Routing, share: float, named: float) -> bool:
    """Whether routing leaves the datasources to a model (the answerability check, the decomposer): it picked more
    than one, and its second pick scores at least `share` of its first, or the question names at least `named`
    of the second pick's tables, columns or values (its lexical evidence), or a two-part question's parts went to
    two datasources (`settings.routing.ask_models_above` and `ask_models_named`; `share` 0: always)."""
    picks = routing.picks
    if len(picks) < 2:
        return False
    if routing.pair or share <= 0:
        return True
    by_id = {c.datasource_id: c for c in routing.candidates}
    first, second = by_id.get(picks[0]), by_id.get(picks[1])
    if first is None or second is None or first.score <= 0:
        return True
    return second.score >= share * first.score or second.evidence.get("lexical", 0.0) >= named


def check_answerability(ctx: RunContext, state: RunState, routing: Routing, picks: list[str]) -> list[str]:
    """The datasources of the shortlist the resolver model says the question needs (it reasons before its verdict),
    when one of them is a close call of routing's (`settings.routing.close_call`), else routing's first pick alone;
    routing's picks stand when it names none of them or says nothing answers (the planner decides that)."""
    index = ctx.index
    shortlist = answerability_shortlist(routing, picks, ctx.config.settings.routing.shortlist)
    described, schemas = [], {}
    for ds in shortlist:
        schemas[ds] = index.retrieve_schema(state.question, state.roles, ds)
        described.append((ds, ctx.config.datasource(ds).description, schemas[ds].table_names()[:8]))
    prefix = shared_prefix(ctx, state, shortlist[0], schemas[shortlist[0]])
    messages = prompts.resolver_messages(prefix, state.question, described)
    state.prompt_chars["resolver"] = sum(len(m.content) for m in messages)
    try:
        answer = ctx.llm.structured("resolver", messages, prompts.answerability_for(tuple(shortlist)))
    except LLMParseError:  # the check only narrows: an answer never read leaves routing's picks standing
        state.warnings.append(RunWarning(code="ANSWERABILITY_CHECK_UNREAD", step="resolver", message="The "
                                         "answerability check's answer could not be read; routing's picks stand."))
        return picks
    state.answerability = answer.model_dump()
    chosen = prompts.same_ids(answer.datasource_ids, shortlist) if answer.answerable else []  # never widens
    narrowed = narrowed_picks(chosen, picks, _close_calls(ctx, state))
    if chosen and not set(chosen) & set(narrowed):  # the model's choice was set aside for routing's first pick
        _rerouted(state, "resolver", chosen[0], picks[0])
    return narrowed


def answerability_shortlist(routing: Routing, picks: list[str], size: int) -> list[str]:
    """The datasources the answerability check shows its model: routing's picks, then the next-best candidates up
    to `size` (a question that needs two databases may rank the second below the similarity floor)."""
    ranked = [c.datasource_id for c in sorted(routing.candidates, key=lambda c: -c.score)]
    return list(dict.fromkeys([*picks, *ranked]))[: max(len(picks), size)]


def narrowed_picks(chosen: list[str], picks: list[str], close: list[str]) -> list[str]:
    """What the answerability check leaves of routing's picks: the datasources its model chose, routing's picks
    where it chose none, and routing's first pick alone where it chose only datasources routing ranks clearly
    below its first (not a close call: a small model names the sibling database of similar tables).

    >>> narrowed_picks(["web"], ["shop", "web"], ["shop", "web"]), narrowed_picks(["desk"], ["shop"], ["shop"])
    (['web'], ['shop'])
    >>> narrowed_picks([], ["shop", "web"], ["shop"])
    ['shop', 'web']
    """
    if chosen and not set(chosen) & set(close):
        return picks[:1]
    return chosen or picks


def _close_calls(ctx: RunContext, state: RunState) -> list[str]:
    """The datasources routing scored within `settings.routing.close_call` of its best, and the pair a two-part
    question's parts went to (from the run's routing)."""
    routing = state.routing or {}
    scores = {c["datasource_id"]: c["score"] for c in routing.get("candidates", [])}
    return backed_by_routing(scores, routing.get("pair"), ctx.config.settings.routing.close_call)


def _rerouted(state: RunState, step: str, named: str, first: str) -> None:
    state.warnings.append(RunWarning(code="SUB_QUERY_REROUTED", step=step, message=f"The {step} model named {named}, "
                                     f"which routing ranks well below {first}; the question went to {first}."))


def not_answerable(ctx: RunContext, state: RunState, node: str) -> QuestionNotAnswerable:
    """The refusal of a question no reachable data answers: a fixed sentence and the datasources the caller may ask
    about (a model's own words may name data the caller may not see, or be wrong)."""
    return QuestionNotAnswerable(
        "None of the data you can reach answers this question.",
        fix=f"Rephrase it in terms of the data you may ask about ({', '.join(_reachable(ctx, state))}; see "
        "`nl2sql datasources list`), or name one with --datasource.", node=node)


def decompose(ctx: RunContext, state: RunState) -> None:
    """One sub-query per datasource needed, and how to combine them (no model call for a single datasource)."""
    if len(state.datasource_ids) == 1:
        _ask_whole(state, state.datasource_ids[0])
        return
    index = ctx.index
    limit = ctx.config.settings.routing.max_sub_queries
    first, *rest = state.datasource_ids
    prefix = shared_prefix(ctx, state, first, index.retrieve_schema(state.question, state.roles, first))
    # the others as table and column names: the decomposer writes questions for them, not queries, and every token
    # of theirs is read anew on each such question (only the first datasource's prefix is a model server's cache)
    others = [(ds, ctx.config.datasource(ds).description, index.retrieve_schema(state.question, state.roles, ds).outline())
              for ds in rest]
    messages = prompts.decomposer_messages(prefix, state.question, ctx.config.datasource(first).description, others,
                                           limit)
    state.prompt_chars["decomposer"] = sum(len(m.content) for m in messages)
    try:
        # a sub-query asked in SQL is no question for a planner of another database (a small model writes a
        # statement per database for a question one answers): the answer is cut as soon as one begins so
        plan = ctx.llm.structured("decomposer", messages, prompts.decomposition_for(tuple(state.datasource_ids)),
                                  abandon_when=prompts.sub_query_in_sql)
    except AnswerAbandoned:
        plan = None
    if plan is not None and len(plan.sub_queries) > limit:
        raise QuestionTooBroad(
            f"This question needs {len(plan.sub_queries)} separate queries; at most {limit} are allowed "
            "(settings.routing.max_sub_queries).", fix="Ask about fewer things at once.", node="decomposer")
    if plan is None or any(prompts.reads_as_sql(sq.question) for sq in plan.sub_queries):
        # set aside: the asker's question goes to routing's first pick
        state.warnings.append(RunWarning(code="DECOMPOSITION_DISCARDED", step="decomposer", message="The decomposer "
                                         "wrote a sub-query as SQL, not as a question; the question went to "
                                         f"{state.datasource_ids[0]}, routing's first pick."))
        _ask_whole(state, state.datasource_ids[0])
        return
    kept: list[SubQuery] = []
    positions: dict[int, str] = {}
    for i, sq in enumerate(plan.sub_queries):
        named = prompts.same_ids([sq.datasource_id], state.datasource_ids)
        if not named:  # the model may not add a datasource
            state.warnings.append(RunWarning(code="SUB_QUERY_DROPPED", step="decomposer", message="A sub-query for a datasource "
                                             "that routing did not choose was dropped."))
            continue
        sub_id = f"sq{len(kept) + 1}"
        positions[i] = sub_id
        kept.append(SubQuery(id=sub_id, datasource_id=named[0], question=sq.question,
                             expected_columns=[ExpectedColumn(c.name, c.description) for c in sq.expected_columns]))
    if not kept:
        raise QuestionNotAnswerable("The question could not be split into queries on the data you can reach.",
                                    node="decomposer")
    if len(kept) == 1:  # one database after all: it is asked the asker's own question, not a rewording of it
        chosen = kept[0].datasource_id
        picks = (state.routing or {}).get("picks") or []
        if picks and chosen not in _close_calls(ctx, state):
            _rerouted(state, "decomposer", chosen, picks[0])  # clear evidence against the model's pick
            chosen = picks[0]
        _ask_whole(state, chosen)
        return
    state.sub_queries = kept
    c = plan.combine
    if c is not None and c.left in positions and c.right in positions and c.left != c.right:
        state.combine = CombineSpec(kind=c.kind, left=positions[c.left], right=positions[c.right],
                                    join_keys=[JoinKeyPair(left=k.left, right=k.right) for k in c.join_keys])


def _ask_whole(state: RunState, datasource_id: str) -> None:
    """One sub-query: the asker's question, on one datasource."""
    state.datasource_ids = [datasource_id]
    state.sub_queries = [SubQuery(id="sq1", datasource_id=datasource_id, question=state.question)]


# --- per sub-query --------------------------------------------------------------------------------


def retrieve_schema(ctx: RunContext, state: RunState, sq: SubQuery) -> None:
    """The tables and columns the planner sees for this sub-query (only what the caller may read); refused when the
    question speaks of sales this datasource records only outside the caller's scope (`settings.pipeline.
    scope_evidence`)."""
    if ctx.config.settings.pipeline.scope_evidence and ctx.index.needs_unreadable_records(
            sq.question, state.roles, sq.datasource_id):
        raise SecurityViolation(datasource=sq.datasource_id, node="schema_retrieval")
    sq.retrieved = ctx.index.retrieve_schema(sq.question, state.roles, sq.datasource_id)


def _scope_key(ctx: RunContext, state: RunState, datasource_id: str) -> str:
    caller = scope(ctx.config.policies, state.roles, datasource_id)  # the rules, not the role names, decide
    return json.dumps(sorted([r.admin, list(r.allow), list(r.deny)] for r in caller.roles))


def plan_cache_key(ctx: RunContext, state: RunState, sq: SubQuery, fingerprint: str) -> str:
    """The plan cache's key: question, datasource, schema fingerprint, the caller's scope, and the engine's plan
    rules (`plan_rules_revision`), so an engine that reads a model's plans differently never serves a plan an
    earlier one kept."""
    parts = [" ".join(sq.question.lower().split()), sq.datasource_id, fingerprint,
             _scope_key(ctx, state, sq.datasource_id), ",".join(c.name for c in sq.expected_columns),
             plan_rules_revision()]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


#: The code that turns a model's answer into the plan that runs: its prompts, the plan language, validation,
#: repairs, readings against the question, the answer's shape, and the result checks that send a plan back.
PLAN_RULES = ("nl2sql/plan", "nl2sql/pipeline/prompts.py", "nl2sql/pipeline/steps.py", "nl2sql/sanity")


@functools.cache
def plan_rules_revision() -> str:
    """A digest of the engine's version and the source of `PLAN_RULES`: it changes with any change to them."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256(_engine_version().encode())
    for part in PLAN_RULES:
        path = root / part
        for source in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(source.relative_to(root).as_posix().encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:16]


def _engine_version() -> str:
    try:
        return importlib.metadata.version("nl2sql-engine")
    except importlib.metadata.PackageNotFoundError:  # a checkout run without installing it
        return "unknown"


def _fingerprint(ctx: RunContext, datasource_id: str) -> str:
    build = ctx.store.live_build(datasource_id)
    return build.fingerprint if build and build.fingerprint else ""


def plan_sub_query(ctx: RunContext, state: RunState, sq: SubQuery) -> None:
    """The sub-query's plan, from the plan cache or the planner model."""
    cached = None
    if ctx.config.settings.pipeline.plan_cache:
        cached = ctx.store.cached_plan(plan_cache_key(ctx, state, sq, _fingerprint(ctx, sq.datasource_id)))
        ctx.trace.publish("plan_cache.lookup", sub_query_id=sq.id, datasource_id=sq.datasource_id,
                          hit=cached is not None)
    if cached is not None:
        sq.plan, sq.plan_source = PlanModel.model_validate_json(cached), "plan_cache"
        return
    assert sq.retrieved is not None
    messages = sq.planner_messages = planner_messages(ctx, state, sq)
    sq.prompt_chars["planner"] = sum(len(m.content) for m in messages)
    sq.plan_source = "planner"
    if _writes_sql(ctx):
        written = prompts.sql_answer(ctx.llm.text("planner", messages))
        if written.cannot_answer and not written.sql.strip():  # a statement written stands: words are not a verdict
            raise not_answerable(ctx, state, "planner")
        sql = written.sql
        if candidates_drawn(ctx, state) > 1:
            drafts = sampled_candidates(ctx, sq, lambda seed: sampled_statement(ctx, messages, seed))
            sql = chosen_by_execution(ctx, state, sq, [sql, *drafts])
        _read_written_sql(ctx, sq, sql)
        return
    answer = ctx.llm.structured("planner", messages, prompts.PlannerPlan, schema_name="PlanModel",
                                enums=_table_enum(sq))
    if answer.cannot_answer and not answer.select:  # a plan written stands (a strict schema makes the field required)
        raise not_answerable(ctx, state, "planner")
    sq.plan = PlanModel.model_validate(answer.model_dump(by_alias=True, exclude={"cannot_answer"}))
    if candidates_drawn(ctx, state) > 1:
        drafts = [sq.plan.model_dump_json(by_alias=True),
                  *sampled_candidates(ctx, sq, lambda seed: sampled_plan(ctx, sq, messages, seed))]
        sq.plan = PlanModel.model_validate_json(chosen_by_execution(ctx, state, sq, drafts))


def candidates_drawn(ctx: RunContext, state: RunState) -> int:
    """`planner.candidates`, where the candidates may run: a run that executes, with no hook watching execute.before
    (an approver sees every statement that runs; a candidate's would run before any approval); else 1."""
    if not state.execute or ctx.hooks.at("execute.before"):
        return 1
    return ctx.config.settings.pipeline.planner.candidates


def sampled_candidates(ctx: RunContext, sq: SubQuery, draw: Callable[[int], str]) -> list[str]:
    """The planner's further candidates: `planner.candidates` - 1 drawn by `draw(seed)`, each its own seed, as many
    as the run's model calls allow."""
    drafts = []
    for _ in range(ctx.config.settings.pipeline.planner.candidates - 1):
        if ctx.llm.budget.calls_left() == 0:
            break
        sq.samples += 1
        drafts.append(draw(sq.samples))
    return drafts


def sampled_statement(ctx: RunContext, messages: list[Message], seed: int) -> str:
    """A statement from the planner sampled at `planner.resample_temperature` (the `sql` format)."""
    text = ctx.llm.text("planner", messages, temperature=ctx.config.settings.pipeline.planner.resample_temperature,
                        seed=seed)
    return prompts.sql_answer(text).sql


def sampled_plan(ctx: RunContext, sq: SubQuery, messages: list[Message], seed: int) -> str:
    """A plan from the planner sampled at `planner.resample_temperature`, as JSON ("" for an answer that cannot
    answer or does not read: a candidate that did not read)."""
    try:
        answer = ctx.llm.structured("planner", messages, prompts.PlannerPlan, schema_name="PlanModel",
                                    enums=_table_enum(sq), seed=seed, max_parse_retries=0,
                                    temperature=ctx.config.settings.pipeline.planner.resample_temperature)
    except LLMParseError:
        return ""
    if answer.cannot_answer and not answer.select:
        return ""
    return json.dumps(answer.model_dump(by_alias=True, exclude={"cannot_answer"}))


def chosen_by_execution(ctx: RunContext, state: RunState, sq: SubQuery, drafts: list[str]) -> str:
    """The candidate the sub-query goes on with (`candidates.choose_candidate`), each of `drafts` (the first the
    planner's own answer) read into a plan, validated under the caller's scope and run read-only within the usual
    bounds; one that fails is never run further, and is not offered again by the refiner."""
    outcomes = [_ran_candidate(ctx, state, sq, i, draft) for i, draft in enumerate(drafts)]
    chosen = choose_candidate(outcomes)
    failures = Counter(c.error_code for c in outcomes if c.error_code is not None)
    ctx.trace.publish("planner.candidates", sub_query_id=sq.id, datasource_id=sq.datasource_id, drawn=len(outcomes),
                      ran=sum(c.ran for c in outcomes), groups=group_sizes(outcomes), chosen=chosen,
                      failures=dict(failures))
    key = _sql_key if _writes_sql(ctx) else (lambda draft: _plan_key(json.loads(draft)) if draft else "")
    sq.tried_plans.update(key(c.written) for c in outcomes if c.error_code is not None and c.index != chosen)
    return drafts[chosen]


def _ran_candidate(ctx: RunContext, state: RunState, sq: SubQuery, index: int, draft: str) -> Candidate:
    """One candidate read into a plan, validated under the caller's scope and run like the sub-query's own statement
    (guarded, read-only, the row limit, the statement timeout within the run's time)."""
    live = ctx.index.live(sq.datasource_id)
    if not draft.strip():
        return Candidate(index, draft, error_code="PLAN_UNSUPPORTED")  # no statement (or plan) in the answer
    if live is None or live.snapshot is None:
        return Candidate(index, draft, error_code=IndexNotBuilt.code)
    caller = scope(ctx.config.policies, state.roles, sq.datasource_id)
    try:
        plan = _plan_of_sql(ctx, sq.datasource_id, draft) if _writes_sql(ctx) else PlanModel.model_validate_json(draft)
        validated = validate_plan(plan, live.snapshot, caller, sq.question)
        sql = generate_sql(validated.plan, _dialect(ctx, sq), schemas=validated.schemas)
        rows = read_only_rows(ctx, state, sq.datasource_id, sql, ctx.config.settings.pipeline.row_limit)
    except NL2SQLError as exc:
        return Candidate(index, draft, error_code=exc.code)
    except ValueError:  # a sampled plan that does not read as a plan
        return Candidate(index, draft, error_code="PLAN_INVALID")
    return Candidate(index, draft, result=result_key(rows), rows=len(rows))


def shared_prefix(ctx: RunContext, state: RunState, datasource_id: str, schema: RetrievedSchema) -> prompts.SharedPrefix:
    """The beginning of every model call about `datasource_id` for this caller (`prompts.SharedPrefix`): its tables
    as the planner reads them (`schema`, what retrieval gives the question: the whole readable schema where it fits)
    and, with `planner.examples_chosen: fixed`, the worked examples."""
    fmt = ctx.config.settings.pipeline.planner.format
    dialect = ctx.catalog.get(datasource_id).name
    tables = schema.render_ddl(dialect) if fmt == "sql" else schema.render()
    fixed = ctx.config.settings.pipeline.planner.examples_chosen == "fixed"
    examples = worked_examples(ctx, state, datasource_id) if fixed else []
    return prompts.shared_prefix(datasource_id, fmt, dialect, tables, examples)


def planner_messages(ctx: RunContext, state: RunState, sq: SubQuery) -> list[Message]:
    """What the planner is asked: the datasource's shared prefix, the worked examples nearest to the question (with
    `planner.examples_chosen: nearest`), then the question (the refiner and the answer continue from it)."""
    assert sq.retrieved is not None
    prefix = shared_prefix(ctx, state, sq.datasource_id, sq.retrieved)
    nearest = ctx.config.settings.pipeline.planner.examples_chosen == "nearest"
    examples = worked_examples(ctx, state, sq.datasource_id, sq.question) if nearest else []
    return prompts.planner_messages(prefix, sq.question, [c.name for c in sq.expected_columns], examples)


def worked_examples(ctx: RunContext, state: RunState, datasource_id: str,
                    question: str | None = None) -> list[tuple[str, str]]:
    """(question, answer) pairs for the planner's prompt: the example questions, then the verified queries that take
    no parameters, of the datasource, that the caller may read, nearest to `question` first (None: in that order),
    each as the planner must answer (its SQL in the `sql` format, its plan read from that SQL in the `plan`
    format)."""
    wanted = ctx.config.settings.pipeline.planner.examples
    candidates = ctx.verified.examples(state.roles, datasource_id) + [
        q for q in ctx.verified.readable(state.roles, [datasource_id]) if not q.query.parameters]
    if not wanted or not candidates:
        return []
    if question is None:
        chosen = candidates  # the configuration's order: the same examples, in the same order, for every question
    else:
        vectors = ctx.embed([question] + [q.query.question for q in candidates])
        chosen = [q for _, q in sorted(zip((vectors[1:] @ vectors[0]).tolist(), candidates, strict=True),
                                       key=lambda p: -p[0])]
    examples: list[tuple[str, str]] = []
    for curated in chosen:
        if _writes_sql(ctx):
            examples.append((curated.query.question, curated.query.sql.strip()))
        else:
            try:
                plan = _plan_of_sql(ctx, datasource_id, curated.query.sql)
            except NL2SQLError:  # a verified statement the plan language cannot say teaches nothing here
                continue
            examples.append((curated.query.question, plan.model_dump_json(by_alias=True)))
        if len(examples) == wanted:
            break
    return examples


def _table_enum(sq: SubQuery) -> dict[tuple[str, str], list[str]]:
    """The plan's table names as an enum of the tables the planner was shown (all the caller may read of them):
    a constrained decoder can then name no other table; what it writes is still validated like any plan."""
    assert sq.retrieved is not None
    return {("TableRef", "table"): sq.retrieved.table_names()}


def _writes_sql(ctx: RunContext) -> bool:
    return ctx.config.settings.pipeline.planner.format == "sql"


def _read_written_sql(ctx: RunContext, sq: SubQuery, sql: str) -> None:
    """The model's statement, kept as written and read into the sub-query's plan (PLAN_UNSUPPORTED: the refiner
    sees what the plan language cannot say). The statement that runs is the one generated from the plan."""
    sq.written_sql, sq.plan = sql, None
    sq.plan = _plan_of_sql(ctx, sq.datasource_id, sql)


def _plan_of_sql(ctx: RunContext, datasource_id: str, sql: str) -> PlanModel:
    """A statement read into a plan in the datasource's dialect (in SQLite, a double-quoted name that no column of
    the live schema has is a string, as SQLite reads it)."""
    live = ctx.index.live(datasource_id)
    columns = live.snapshot.column_names() if live is not None and live.snapshot is not None else None
    return plan_from_sql(sql, ctx.catalog.get(datasource_id).name, columns)


def _dialect(ctx: RunContext, sq: SubQuery) -> str:
    return ctx.catalog.get(sq.datasource_id).name


def validate(ctx: RunContext, state: RunState, sq: SubQuery) -> None:
    """Every table and column against the live snapshot, every table against the caller's scope."""
    live = ctx.index.live(sq.datasource_id)
    if live is None or live.snapshot is None:
        raise IndexNotBuilt(f"Datasource {sq.datasource_id} has no index build.", fix="Run `nl2sql index build`.",
                            node="validator")
    assert sq.plan is not None
    caller = scope(ctx.config.policies, state.roles, sq.datasource_id)
    validated = validate_plan(sq.plan, live.snapshot, caller, sq.question if sq.plan_source == "planner" else None)
    if sq.plan_source == "planner" and not sq.plan_hooked:  # a model's plan against its question and labels
        read, readings = read_against_question(validated.plan, sq.question, {t.name: t for t in validated.tables})
        validated = replace(validated, plan=read, repairs=[*validated.repairs, *readings])
    for repair in validated.repairs:
        state.warnings.append(RunWarning(code="PLAN_REPAIRED", step="validator", sub_query_id=sq.id, message=repair.message,
                                         detail={"repair": repair.code, "at": repair.path}))
    if sq.plan_source == "planner":  # a model's plan; a verified, cached or resumed one stays as it was
        validated = _with_answer_shape(ctx, state, sq, validated, live, caller)
    sq.plan, sq.schemas = validated.plan, validated.schemas
    sq.tables = [t.name for t in validated.tables]


def _with_answer_shape(ctx: RunContext, state: RunState, sq: SubQuery, validated: ValidatedPlan,
                       live: LiveIndex, caller: Scope) -> ValidatedPlan:
    """The validated plan with what its answer needs (`planner.answer_shape`: columns to read it by, a key to break
    ties on), validated again; the plan as it was when the additions do not validate."""
    rules = ctx.config.settings.pipeline.planner.answer_shape
    assert live.snapshot is not None
    readable = {t.name: t for t in live.snapshot.tables if caller.allows(t.name, t.schema_name)}
    shaped, added = shape_answer(validated.plan, {t.name: t for t in validated.tables}, rules,
                                 live.repeating(), readable=readable, question=sq.question)
    if not added:
        return validated
    try:
        reshaped = validate_plan(shaped, live.snapshot, caller)
    except NL2SQLError:
        return validated
    state.warnings.append(RunWarning(code="ANSWER_SHAPED", step="validator", sub_query_id=sq.id, message="Added to the answer: "
                                     f"{', '.join(added)} (settings.pipeline.planner.answer_shape).",
                                     detail={"added": added}))
    return reshaped


def generate(ctx: RunContext, state: RunState, sq: SubQuery) -> None:
    """The SQL of the validated plan, in the datasource's dialect."""
    assert sq.plan is not None
    sq.sql = generate_sql(sq.plan, _dialect(ctx, sq), schemas=sq.schemas)


def statement_timeout(ctx: RunContext) -> float:
    """A statement's timeout: `settings.pipeline.statement_timeout_s`, within what is left of the run's time."""
    limit = ctx.config.settings.pipeline.statement_timeout_s
    remaining = ctx.trace.remaining_s()
    return limit if remaining is None else max(0.1, min(limit, remaining))


def execute(ctx: RunContext, state: RunState, sq: SubQuery) -> None:
    """Run the SQL read-only (guard, scope, row limit, statement timeout within the run's time)."""
    assert sq.sql is not None
    caller = scope(ctx.config.policies, state.roles, sq.datasource_id)
    sq.result = run_checked_sql(ctx.catalog.get(sq.datasource_id), sq.sql, caller,
                                row_limit=ctx.config.settings.pipeline.row_limit, timeout_s=statement_timeout(ctx))
    result = sq.result
    ctx.trace.publish("result.manifest", sub_query_id=sq.id, datasource_id=sq.datasource_id,
                      columns=[c.name for c in result.columns], total_rows=result.row_count,
                      truncated=result.truncated)
    if result.truncated:
        state.warnings.append(RunWarning(code="RESULT_TRUNCATED", step="executor", sub_query_id=sq.id,
                                         message=f"Only the first {result.row_count} rows were read "
                                         "(settings.pipeline.row_limit).", detail={"rows": result.row_count}))
    if sq.plan is not None and sq.plan_source == "planner" and ctx.config.settings.pipeline.plan_cache:
        fingerprint = _fingerprint(ctx, sq.datasource_id)
        ctx.store.cache_plan(plan_cache_key(ctx, state, sq, fingerprint), sq.datasource_id, fingerprint,
                                     sq.plan.model_dump_json())


def check_result(ctx: RunContext, state: RunState, sq: SubQuery) -> None:
    """The result checks (`nl2sql.sanity`): each finding a warning; a VALUE_NOT_FOUND (with a likely value) or
    JOIN_FAN_OUT that a corrected plan may fix sends the sub-query to the refiner once (raised as that code), its
    result kept in case no corrected plan runs. A check that fails reports nothing but a log line."""
    assert sq.result is not None
    findings = result_findings(ctx, state, sq)
    retry = next((f for f in findings if f.code in RETRYABLE and f.fixable and _may_retry(ctx, state, sq, f.code)),
                 None)
    for code, count in Counter(f.code for f in findings).items():
        ctx.trace.publish("sanity.flagged", sub_query_id=sq.id, code=code, count=count,
                          retry=retry is not None and retry.code == code)
    warnings = [RunWarning(code=f.code, step="sanity", message=f.message, sub_query_id=sq.id, detail=f.detail)
                for f in findings]
    if sq.flagged is not None:  # this result comes from a corrected plan: what it no longer shows was fixed
        codes = {f.code for f in findings}
        state.warnings += [w.model_copy(update={"detail": {**w.detail, "recovered": True}})
                           for w in sq.flagged.warnings if w.code not in codes]
        sq.flagged = None
    if retry is None:
        state.warnings += warnings
        return
    sq.sanity_retried.add(retry.code)
    sq.flagged = Flagged(plan=sq.plan, plan_source=sq.plan_source, sql=sq.sql, written_sql=sq.written_sql,
                         schemas=sq.schemas, tables=list(sq.tables), result=sq.result, warnings=warnings)
    raise ResultFlagged(retry.code, retry.message, node="sanity")


def restore_flagged(state: RunState, sq: SubQuery) -> None:
    """Put back the result a check sent to the refiner, with its findings as warnings: no corrected plan ran."""
    flagged, failed = sq.flagged, sq.error
    assert flagged is not None and failed is not None
    sq.flagged, sq.error = None, None
    sq.plan, sq.plan_source, sq.sql, sq.written_sql = flagged.plan, flagged.plan_source, flagged.sql, flagged.written_sql
    sq.schemas, sq.tables, sq.result = flagged.schemas, flagged.tables, flagged.result
    state.warnings += [w.model_copy(update={"detail": {**w.detail, "retry_failed": failed.code}})
                       for w in flagged.warnings]


def _may_retry(ctx: RunContext, state: RunState, sq: SubQuery, code: str) -> bool:
    """Whether a finding may send the sub-query to the refiner: once per code, for a model's plan (never a verified,
    seeded or approved one), while a retry and a model call are left."""
    calls_left = ctx.llm.budget.calls_left()
    return (code not in sq.sanity_retried and sq.verified is None and sq.plan_source in ("planner", "plan_cache")
            and not state.resumed and sq.retrieved is not None and ctx.llm.configured("refiner")
            and sq.attempts < ctx.config.settings.pipeline.max_retries and calls_left != 0)


def result_findings(ctx: RunContext, state: RunState, sq: SubQuery) -> list[Finding]:
    """What the checks find in a sub-query's result: all-null columns always; a missing filter value (an empty
    result) and join fan-out (a result with rows) only when no hook watches execute.before, since their probes are
    SQL no approver saw."""
    assert sq.result is not None
    checks: list[tuple[str, Callable[[], list[Finding]]]] = [("nulls", lambda: check_nulls(sq.result.frame))]
    live = ctx.index.live(sq.datasource_id)
    if sq.plan is not None and live is not None and live.snapshot is not None and not ctx.hooks.at("execute.before"):
        snapshot, schemas = live.snapshot, sq.schemas or {}
        def lookup(name: str) -> TableInfo | None:
            return snapshot.table(name, schemas.get(name))

        tables = plan_tables(sq.plan, lookup)
        probe = _probe(ctx, state, sq)
        plan = sq.plan
        caller = scope(ctx.config.policies, state.roles, sq.datasource_id)
        readable = [t for t in snapshot.tables if caller.allows(t.name, t.schema_name)]
        if sq.result.row_count == 0 or not sq.result.frame.notna().to_numpy().any():
            checks.append(("values", lambda: check_values(
                literal_filters(plan, tables, lookup), probe=probe, samples=lambda item: profiled_values(live, item),
                elsewhere=lambda item: text_columns_elsewhere(item, readable))))
        if sq.result.row_count:
            checks.append(("fan-out", lambda: check_fan_out(plan, tables, dialect=_dialect(ctx, sq),
                                                            schemas=sq.schemas, probe=probe)))
    findings: list[Finding] = []
    for name, check in checks:
        try:
            findings += check()
        except Exception as exc:  # a check never fails the run: it reports nothing
            log.warning("The %s check of %s failed and reports nothing: %s", name, sq.id, type(exc).__name__)
    return findings


def profiled_values(live: LiveIndex, item: LiteralFilter) -> list[str]:
    """A column's sample values as the live index build profiled them."""
    return list(live.facts().samples.get((qualified(item.table), item.column), []))


def _probe(ctx: RunContext, state: RunState, sq: SubQuery) -> Probe:
    """Runs a check's probe like the sub-query's own statement: guarded, under the caller's scope, read-only,
    within the statement timeout and the run's time."""
    dialect = ctx.catalog.get(sq.datasource_id).dialect

    def probe(tree: Any, limit: int) -> list[tuple[Any, ...]]:
        return read_only_rows(ctx, state, sq.datasource_id, tree.sql(dialect=dialect), limit)

    return probe


def read_only_rows(ctx: RunContext, state: RunState, datasource_id: str, sql: str, limit: int) -> list[tuple[Any, ...]]:
    """The rows of a statement the engine runs for itself (a check's probe, a planner's candidate), run like the
    sub-query's own: guarded, under the caller's scope, read-only, within the statement timeout and the run's time."""
    result = run_checked_sql(ctx.catalog.get(datasource_id), sql, scope(ctx.config.policies, state.roles, datasource_id),
                             row_limit=limit, timeout_s=statement_timeout(ctx))
    return [tuple(row) for row in result.plain_frame().values.tolist()]


def refine(ctx: RunContext, state: RunState, sq: SubQuery) -> None:
    """Ask the refiner for a corrected plan, given the failed plan (as the model writes it: aliases, not field
    names) and its error; a plan the sub-query already tried ends the refining, the error standing."""
    assert sq.error is not None and sq.retrieved is not None
    if _writes_sql(ctx):
        refine_sql(ctx, state, sq)
        return
    failed = sq.plan.model_dump(mode="json", by_alias=True) if sq.plan else None
    if failed is not None:
        sq.tried_plans.add(_plan_key(failed))
    asked = sq.planner_messages or planner_messages(ctx, state, sq)  # a cached plan's sub-query asked none
    messages = prompts.refiner_messages(asked, json.dumps(failed, separators=(",", ":")) if failed else None,
                                        [f"{sq.error.code}: {sq.error.message}"], fmt="plan")
    sq.prompt_chars["refiner"] = sq.prompt_chars.get("refiner", 0) + sum(len(m.content) for m in messages)
    refined = ctx.llm.structured("refiner", messages, PlanModel, schema_name="RefinedPlan", enums=_table_enum(sq))
    key = _plan_key(refined.model_dump(mode="json", by_alias=True))
    if key in sq.tried_plans:
        state.warnings.append(RunWarning(code="REFINER_REPEATED", step="refiner", sub_query_id=sq.id,
                                         message="The refiner returned a plan that had already failed; refining "
                                         "stopped.", detail={"attempt": sq.attempts}))
        sq.attempts = ctx.config.settings.pipeline.max_retries  # no further round: the next would repeat too
        return
    sq.tried_plans.add(key)
    sq.plan = refined
    sq.plan_source, sq.plan_hooked = "planner", False  # the model's again: read against its question
    sq.sql = None
    sq.error = None


def refine_sql(ctx: RunContext, state: RunState, sq: SubQuery) -> None:
    """`refine` in the `sql` format: the planner's conversation goes on with its statement and the error; when the
    refiner gives back a statement that failed before, the planner is sampled instead (`resampled_sql`), and
    refining ends when no sample validates either."""
    assert sq.error is not None and sq.retrieved is not None
    if sq.written_sql:
        sq.tried_plans.add(_sql_key(sq.written_sql))
    asked = sq.planner_messages or planner_messages(ctx, state, sq)  # a cached plan's sub-query asked none
    messages = prompts.refiner_messages(asked, sq.written_sql, [f"{sq.error.code}: {sq.error.message}"])
    sq.prompt_chars["refiner"] = sq.prompt_chars.get("refiner", 0) + sum(len(m.content) for m in messages)
    sql = prompts.sql_answer(ctx.llm.text("refiner", messages)).sql
    if _sql_key(sql) in sq.tried_plans:
        state.warnings.append(RunWarning(code="REFINER_REPEATED", step="refiner", sub_query_id=sq.id,
                                         message="The refiner returned a statement that had already failed.",
                                         detail={"attempt": sq.attempts}))
        sampled = resampled_sql(ctx, state, sq, asked)
        if sampled is None:
            sq.attempts = ctx.config.settings.pipeline.max_retries  # no further round: the next would repeat too
            return
        sql = sampled
    sq.tried_plans.add(_sql_key(sql))
    sq.plan_source, sq.sql, sq.error = "planner", None, None
    _read_written_sql(ctx, sq, sql)


def resampled_sql(ctx: RunContext, state: RunState, sq: SubQuery, asked: list[Message]) -> str | None:
    """A statement from the planner asked again at `planner.resample_temperature`: the first of at most
    `planner.resamples` samples that is new, reads into a plan and validates under the caller's scope (a sample
    that does not is dropped unseen, whatever it names); None when none does or no model call is left."""
    settings = ctx.config.settings.pipeline.planner
    live = ctx.index.live(sq.datasource_id)
    if live is None or live.snapshot is None:
        return None
    caller = scope(ctx.config.policies, state.roles, sq.datasource_id)
    for _ in range(settings.resamples):
        if ctx.llm.budget.calls_left() == 0:
            return None
        sq.samples += 1  # each sample its own seed: a later round draws new ones
        sql = sampled_statement(ctx, asked, sq.samples)
        if not sql or _sql_key(sql) in sq.tried_plans:
            continue
        sq.tried_plans.add(_sql_key(sql))
        try:
            validate_plan(_plan_of_sql(ctx, sq.datasource_id, sql), live.snapshot, caller)
        except NL2SQLError:
            continue
        state.warnings.append(RunWarning(code="PLANNER_RESAMPLED", step="refiner", sub_query_id=sq.id, message="The planner was "
                                         f"asked again (sample {sq.samples}, settings.pipeline.planner.resamples).",
                                         detail={"sample": sq.samples}))
        return sql
    return None


def _sql_key(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").lower()


def _plan_key(plan: dict[str, Any]) -> str:
    return json.dumps(plan, sort_keys=True)


# --- after the sub-queries ------------------------------------------------------------------------


def column_dtype(values: list[Any]) -> Dtype:
    """The dtype of a result column: its first non-null value's (`other` when all are null)."""
    return next((d for v in values if (d := value_dtype(v)) is not None), "other")


def result_rows(sq: SubQuery) -> tuple[list[str], list[list[Any]]]:
    """A sub-query's columns and rows as plain Python values (NULL as None)."""
    if sq.result is None:
        return [], []
    frame = sq.result.plain_frame()
    return list(map(str, frame.columns)), frame.values.tolist()


def aggregate(ctx: RunContext, state: RunState) -> None:
    """Combine the sub-queries' results across databases (join, compare or union) with DuckDB."""
    assert state.combine is not None
    frames = {}
    for sq in state.sub_queries:
        columns, rows = result_rows(sq)
        dtypes = [column_dtype([r[i] for r in rows]) for i in range(len(columns))]
        frames[sq.id] = Frame(sub_query_id=sq.id, datasource_id=sq.datasource_id, columns=columns, dtypes=dtypes,
                              rows=[tuple(r) for r in rows])
    state.combined = combine(frames, state.combine, row_limit=ctx.config.settings.pipeline.row_limit)
    for w in state.combined.warnings:
        state.warnings.append(RunWarning(code=w.code, step="aggregator", message=w.message, detail=w.detail,
                                         sub_query_id=w.detail.get("sub_query_id")))
    ctx.trace.publish("result.manifest", columns=state.combined.columns, total_rows=state.combined.total_rows,
                      truncated=state.combined.truncated)


def shown_result(ctx: RunContext, state: RunState) -> tuple[list[str], list[list[Any]], int]:
    """The result the answer speaks about: combined, else the first answered sub-query's."""
    if state.combined is not None:
        return state.combined.columns, [list(r) for r in state.combined.rows], state.combined.total_rows
    for sq in state.sub_queries:
        if sq.result is not None:
            columns, rows = result_rows(sq)
            return columns, rows, len(rows)
    return [], [], 0


def plain_answer(columns: list[str], rows: list[list[Any]], total: int) -> str:
    """An answer without a model: the result's size and, for a single value or row, the values themselves."""
    if total == 0:
        return "The query returned no rows."
    if total == 1 and len(columns) == 1:
        return f"{columns[0]}: {rows[0][0]}."
    if total == 1:
        return "One row: " + ", ".join(f"{c} {v}" for c, v in zip(columns, rows[0], strict=False)) + "."
    head = ", ".join(f"{c} {v}" for c, v in zip(columns, rows[0], strict=False))
    return f"{total} rows ({', '.join(columns)}); the first: {head}."


def rows_ready(state: RunState, columns: list[str], rows: list[list[Any]], total: int) -> dict[str, Any]:
    """The asker's SQL and rows before the answer in words: each sub-query's statement, the rows shown (values as
    JSON takes them) and how many there are."""
    from pydantic_core import to_jsonable_python

    return {"sub_queries": [{"id": sq.id, "datasource_id": sq.datasource_id, "source": sq.plan_source, "sql": sq.sql}
                            for sq in state.sub_queries if sq.sql],
            "columns": columns, "rows": to_jsonable_python(rows, fallback=str), "total_rows": total}


def _planner_conversation(ctx: RunContext, state: RunState) -> tuple[list[Message], str] | None:
    """The planner's messages and the statement it wrote, when the answer may follow them
    (`settings.pipeline.synthesizer_follows_planner`): the run's one sub-query, planned in the `sql` format in
    this run, on the question as asked."""
    if not ctx.config.settings.pipeline.synthesizer_follows_planner or len(state.sub_queries) != 1:
        return None
    sq = state.sub_queries[0]
    if sq.plan_source != "planner" or not sq.planner_messages or not sq.written_sql or sq.question != state.question:
        return None
    return sq.planner_messages, sq.written_sql


def synthesize(ctx: RunContext, state: RunState) -> None:
    """The answer in words, streamed from the synthesizer model (or a plain summary when none is configured)."""
    if not state.execute:
        state.answer = "The SQL was written but not run (execute is off)."
        state.summary = state.answer
        return
    columns, rows, total = shown_result(ctx, state)
    notes = [w.message for w in state.warnings if not w.detail.get("recovered")]
    if not state.in_words or not ctx.llm.configured("synthesizer"):
        state.answer = plain_answer(columns, rows, total)
        if notes:
            state.answer += "\n\nData notes:\n" + "\n".join(f"- {n}" for n in notes)
        state.summary = state.answer.split("\n")[0]
        return
    limits = ctx.config.settings.pipeline
    shown = rows[: min(limits.preview_rows, limits.answer_rows)]  # what the sentence is written from
    asked = _planner_conversation(ctx, state)
    if asked is not None:
        messages = prompts.synthesizer_turn(asked[0], asked[1], columns, shown, total, notes)
    else:
        messages = prompts.synthesizer_messages(state.question, columns, shown, total, notes)
    state.prompt_chars["synthesizer"] = sum(len(m.content) for m in messages)
    # a hook at answer.after may still deny the answer: then nothing of it is shown before it decides
    stream = None if ctx.hooks.at("answer.after") else (lambda text: ctx.trace.publish("answer.delta",
                                                                                                text=text))
    if stream is not None:  # the SQL and rows to the asker now, the sentence after
        ctx.trace.tell_asker(ROWS_READY, **rows_ready(state, columns, rows[: limits.preview_rows], total))
    state.answer = ctx.llm.text("synthesizer", messages, on_delta=stream).strip()
    state.summary = state.answer.split("\n")[0].split(". ")[0].rstrip(".") + "."
