"""The three modes of an eval run, as plain functions (the Prefect flow in flows/evals.py runs one task per
case and role over them; the inline path runs them in a loop).

- plans: the gold-plan model server answers every model node from the case, over the real wire;
  verified answers and the plan cache are off, so every code node is tested; all must pass.
- retrieval: no model: routing over every datasource and schema retrieval for the case's datasource.
- full: real models per named llm config, a dollar cap required, never in CI; the plan cache off.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nl2sql.config.models import Config, ExampleQuestionConfig, LLMConfig, ModelConfig, PriceConfig
from nl2sql.errors import ConfigError, ConfigProblem, EngineFault, NL2SQLError, did_you_mean
from nl2sql.evaluation.gold_llm import GoldModel
from nl2sql.evaluation.report import REPAIR_SUFFIX, CaseRecord, build_report
from nl2sql.evaluation.scorers import CaseRun, Score, score_run
from nl2sql.evaluation.suite import EvalCase, EvalSuite
from nl2sql.llm.fake import FakeLLMServer
from nl2sql.llm.prices import price_for
from nl2sql.pipeline.result import RunError

Mode = Literal["plans", "retrieval", "full"]
SCORERS_BY_MODE: dict[str, tuple[str, ...]] = {
    "plans": ("result_match", "outcome"),
    "retrieval": ("retrieval_recall", "routing"),
    "full": ("result_match", "outcome", "faithfulness"),
}
GOLD_MODEL = "gold-plan"


class CostCapReached(NL2SQLError):
    """The eval run's dollar cap stopped it (the report covers the cases that ran)."""

    code = "EVAL_COST_CAP"


@dataclass(frozen=True)
class EvalJob:
    """One run to make: a case, a role, a model config, a pass."""

    case: EvalCase
    role: str
    config_name: str
    pass_index: int = 0


def eval_jobs(cases: Sequence[EvalCase], mode: Mode, *, roles: Sequence[str] | None = None,
              configs: Sequence[str] = ("default",), passes: int = 1) -> list[EvalJob]:
    """Every run of the eval: per pass, config, case and role (mode retrieval: answerable roles and routing)."""
    jobs = []
    for pass_index in range(passes):
        for config_name in configs:
            for case in cases:
                case_roles = list(case.outcome) or ["admin"]
                if mode == "retrieval":
                    case_roles = [r for r, o in case.outcome.items() if o == "allowed"] or (
                        ["admin"] if case.kind == "routing" else [])
                elif case.kind == "routing":
                    continue
                for role in case_roles:
                    if roles is None or role in roles:
                        jobs.append(EvalJob(case, role, config_name, pass_index))
    return jobs


def eval_config(config: Config, llm: LLMConfig | None = None,
                examples: Sequence[EvalCase] = (), *, gold: bool = False) -> Config:
    """The project's configuration as an eval runs it: no verified answers, no plan cache, no hooks, no
    observers, and every row of a result kept for scoring. The project's verified queries are dropped (a suite's
    questions may be among them); its example questions stay, the worked examples a user's planner is shown
    (`examples_asking_the_suite` refuses one that asks a suite's question), unless `examples`, cases of another
    suite, replace them. With `gold`, the planner writes plans (the gold model answers with the cases' gold
    plans)."""
    update_pipeline: dict[str, Any] = {"plan_cache": False, "preview_rows": config.settings.pipeline.row_limit}
    if gold:
        update_pipeline["planner"] = config.settings.pipeline.planner.model_copy(update={"format": "plan"})
    pipeline = config.settings.pipeline.model_copy(update=update_pipeline)
    settings = config.settings.model_copy(update={"pipeline": pipeline})
    datasources = [ds.model_copy(update={"verified_queries": [], "example_questions": [
        ExampleQuestionConfig(question=c.question, sql=c.sql) for c in examples if c.datasources[0] == ds.id and c.sql
    ] if examples else ds.example_questions}) for ds in config.datasources]
    update: dict[str, Any] = {"settings": settings, "datasources": datasources, "hooks": [], "observers": []}
    if llm is not None:
        update["llm"] = llm
    return config.model_copy(update=update)


def gold_llm_config(server: FakeLLMServer) -> LLMConfig:
    """Every node on the gold-plan server (free)."""
    return LLMConfig(models={"gold": ModelConfig(provider="openai", model=GOLD_MODEL, base_url=server.base_url,
                                                 api_key="gold")},  # type: ignore[arg-type]
                     default="gold", prices={GOLD_MODEL: PriceConfig(input=0, output=0)})


def check_prices(configs: dict[str, LLMConfig]) -> None:
    """Refuse, before any call, a config whose models have no price (mode full's dollar cap needs them)."""
    problems = []
    for name, llm in configs.items():
        for model_name, model in llm.models.items():
            if price_for(model.model, llm.prices) is None:
                problems.append(ConfigProblem(f"--llm {name}", f"llm.models.{model_name}.model",
                                              f"model '{model.model}' has no price, so the dollar cap cannot hold",
                                              f"add llm.prices.{model.model}: {{input: …, output: …}}"))
    if problems:
        raise ConfigError(problems)


def result_digest(run: CaseRun) -> str | None:
    """A digest of a run's SQL and rows (equal across passes when the run is deterministic)."""
    if run.result is None:
        return None
    payload = [(sq.sql, sq.rows) for sq in run.result.sub_queries]
    return hashlib.sha256(json.dumps(payload, default=str).encode()).hexdigest()[:16]


def first_error(run: CaseRun) -> RunError | None:
    """The error a run's result ended with: its first run error, else its first sub-query error."""
    if run.result is None:
        return None
    errors = [*run.result.errors, *(sq.error for sq in run.result.sub_queries if sq.error is not None)]
    return errors[0] if errors else None


def error_code_of(run: CaseRun) -> str | None:
    """The code of the error a run ended with: an engine fault's, else `first_error`'s (None for a run without
    one)."""
    if run.error_code is not None:
        return run.error_code
    error = first_error(run)
    return error.code if error else None


def record_of(job: EvalJob, run: CaseRun, scores: dict[str, Score]) -> CaseRecord:
    """The slim verdict of one run."""
    result = run.result
    usage = result.usage if result else {}
    asked = result is not None or run.error is not None  # the pipeline ran (not mode retrieval)
    counts = run.trace_counts
    warnings = [w.code for w in result.warnings] if result else []
    ended = first_error(run)
    return CaseRecord(
        case_id=job.case.id, role=job.role, config=job.config_name, pass_index=job.pass_index, tags=job.case.tags,
        outcome=job.case.outcome.get(job.role, "allowed"), status=result.status if result else None,
        scores={name: {"passed": s.passed, "detail": s.detail} for name, s in scores.items()},
        latency_s=round(run.latency_s or 0.0, 4), cost_usd=result.cost_usd if result else None,
        tokens={"input": usage.get("input_tokens"), "cached_input": usage.get("cached_input_tokens"),
                "output": usage.get("output_tokens")},
        sql=[sq.sql for sq in result.sub_queries if sq.sql] if result else [], rows_digest=result_digest(run),
        answer=(result.answer.content or None) if result and result.status == "success" else None, error=run.error,
        error_code=error_code_of(run), error_details=ended.details if ended else [],
        parse_retries=counts.get("parse_retries", 0) if asked else None,
        refiner_rounds=counts.get("refiner_rounds", 0) if asked else None,
        repairs=sum(code.endswith(REPAIR_SUFFIX) for code in warnings) if asked else None, warnings=warnings,
        llm_calls=(result.llm_calls if result else counts.get("llm_calls", 0)) if asked else None,
        time_to_sql_s=_seconds(result.time_to_sql_ms) if result else None,
        time_to_rows_s=_seconds(result.time_to_rows_ms) if result else None,
        model_s=_seconds(result.model_ms) if result else None)


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else round(ms / 1000, 3)


#: The trace events an eval counts per run, and under which name.
COUNTED_EVENTS = {"llm.call": "llm_calls", "llm.parse_retry": "parse_retries"}


class TraceCounter:
    """Counts each run's model calls, parse retries and refiner rounds from its events, by trace id (a listener
    on the runtime, so every run's bus delivers to it)."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    def __call__(self, event: Any) -> None:
        if event.name in COUNTED_EVENTS:
            key = COUNTED_EVENTS[event.name]
        elif event.name == "node.started" and event.data.get("node") == "refiner":
            key = "refiner_rounds"
        else:
            return
        with self._lock:
            counts = self._counts.setdefault(event.trace_id or "", {})
            counts[key] = counts.get(key, 0) + 1

    def pop(self, trace_id: str) -> dict[str, int]:
        """What a finished run counted (forgotten afterwards)."""
        with self._lock:
            return self._counts.pop(trace_id, {})


class EvalSession:
    """What an eval's runs share: the runtimes (one per model config), the gold server, the cost so far."""

    def __init__(self, mode: Mode, config: Config, cases: Sequence[EvalCase], *,
                 llm: dict[str, LLMConfig] | None = None, max_cost_usd: float | None = None,
                 block_loader: Callable[[str], str] | None = None, examples: Sequence[EvalCase] = ()) -> None:
        from nl2sql.pipeline import Runtime

        self.mode = mode
        self.config = config
        self.max_cost_usd = max_cost_usd
        self.spent_usd = 0.0
        self.most_expensive = 0.0
        self.stopped: str | None = None
        self.gold: FakeLLMServer | None = None
        self.runtimes: dict[str, Runtime] = {}
        self.counter = TraceCounter()
        if mode == "full":
            check_mode_full(max_cost_usd)
            configs = llm or {"default": config.llm}
            check_prices(configs)
            for name, llm_config in configs.items():
                self.runtimes[name] = Runtime(eval_config(config, llm_config, examples), observers=[],
                                              block_loader=block_loader)
        elif mode == "plans":
            self.gold = FakeLLMServer().start()
            GoldModel(self.gold, cases)
            self.runtimes["default"] = Runtime(eval_config(config, gold_llm_config(self.gold), gold=True), observers=[],
                                               block_loader=block_loader)
        else:
            self.runtimes["default"] = Runtime(eval_config(config), observers=[], block_loader=block_loader)
        for runtime in self.runtimes.values():
            runtime.listeners.append(self.counter)

    def over_budget(self) -> bool:
        """Whether the next case could pass the dollar cap (the first case always runs)."""
        if self.max_cost_usd is None or self.most_expensive == 0.0:
            return False
        return self.spent_usd + self.most_expensive > self.max_cost_usd

    def run(self, job: EvalJob) -> CaseRecord:
        """Run one job and score it."""
        run = self._retrieval(job) if self.mode == "retrieval" else self._ask(job)
        record = record_of(job, run, score_run(run, SCORERS_BY_MODE[self.mode]))
        if record.cost_usd:
            self.spent_usd += record.cost_usd
            self.most_expensive = max(self.most_expensive, record.cost_usd)
        return record

    def _ask(self, job: EvalJob) -> CaseRun:
        from nl2sql.pipeline import ask_inline

        trace_id = str(uuid.uuid4())
        started = time.perf_counter()
        # mode plans measures plans, not routing (mode retrieval does): a case on one datasource is asked there
        pinned = job.case.datasources[0] if self.mode == "plans" and len(job.case.datasources) == 1 else None
        try:
            result = ask_inline(self.runtimes[job.config_name], job.case.question, roles=[job.role],
                                trace_id=trace_id, datasource_id=pinned)
        except Exception as exc:  # an engine fault: scored as a failed run, the eval goes on
            return CaseRun(job.case, job.role, latency_s=time.perf_counter() - started,
                           error=f"{type(exc).__name__}: {exc}",
                           error_code=exc.code if isinstance(exc, NL2SQLError) else EngineFault.code,
                           trace_counts=self.counter.pop(trace_id))
        return CaseRun(job.case, job.role, result=result, latency_s=time.perf_counter() - started,
                       trace_counts=self.counter.pop(trace_id))

    def _retrieval(self, job: EvalJob) -> CaseRun:
        index = self.runtimes["default"].index
        started = time.perf_counter()
        retrieval: dict[str, Any] = {}
        if job.case.kind == "answer":
            schema = index.retrieve_schema(job.case.question, [job.role], job.case.datasource)
            retrieval["tables_sent"] = schema.table_names()
            retrieval["columns_sent"] = [f"{t.name}.{c.name}" for t in schema.tables for c in t.columns]
        routing = index.route(job.case.question, [job.role])
        ranked = [c.datasource_id for c in sorted(routing.candidates, key=lambda c: -c.score)]
        retrieval["picks"] = routing.picks or ranked[:1]
        retrieval["shortlist"] = routing.picks
        return CaseRun(job.case, job.role, retrieval=retrieval, latency_s=time.perf_counter() - started)

    def close(self) -> None:
        """Close the runtimes and stop the gold server."""
        for runtime in self.runtimes.values():
            runtime.close()
        if self.gold is not None:
            self.gold.stop()


# --- model configs for mode full -------------------------------------------------------------------

PRESETS_DIR = Path(__file__).resolve().parent / "presets"


def preset_names() -> list[str]:
    """The llm presets shipped with the package."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def load_llm(spec: str) -> tuple[str, LLMConfig]:
    """`NAME=PRESET_OR_FILE` (or just a preset/file) → (name, llm section), `${env:…}` expanded.

    The file holds an llm section as a configuration has it: bare (`models:`, `default:`…) or under `llm:` (so
    a project's nl2sql.yaml works too: its llm section is read, the rest ignored). Every problem is a
    ConfigProblem naming the file and the key."""
    from pydantic import BaseModel, ValidationError

    from nl2sql.config.load import check_llm_refs, expand_env, problems_from_validation, read_yaml

    name, _, source = spec.partition("=") if "=" in spec else (spec, "", spec)
    path = Path(source)
    if not path.exists():
        path = PRESETS_DIR / f"{source}.yaml"
    if not source or not path.is_file():
        raise ConfigError(ConfigProblem("--llm", spec, f"no preset or file named {source!r}",
                                        f"use NAME=PRESET with a preset of {', '.join(preset_names())}, or a path "
                                        "to an llm section in YAML"))
    if not name:
        raise ConfigError(ConfigProblem("--llm", spec, "the model config has no name", "write NAME=PRESET_OR_FILE"))
    label = str(path)
    raw = read_yaml(path, label)
    raw = {} if raw is None else raw
    if isinstance(raw, dict) and "llm" in raw:
        raw = raw["llm"] if raw["llm"] is not None else {}
    if not isinstance(raw, dict):
        raise ConfigError(ConfigProblem(label, "llm", "the file must hold an llm section (a mapping: models, "
                                        "default, nodes, prices), bare or under `llm:`", "see docs/models.md"))
    problems: list[ConfigProblem] = []
    raw = expand_env(raw, label, "llm", problems)
    if problems:
        raise ConfigError(problems)

    class _Section(BaseModel):  # the llm section at the key a configuration has it, for the same key paths
        llm: LLMConfig

    try:
        llm = _Section.model_validate({"llm": raw}).llm
    except ValidationError as exc:
        raise ConfigError(list(problems_from_validation(exc, {}, label))) from None
    problems = check_llm_refs(Config.model_construct(llm=llm), label)
    if problems:
        raise ConfigError(problems)
    return Path(name).stem if name == source else name, llm


# --- selecting cases -------------------------------------------------------------------------------


def select_cases(suite: EvalSuite, *, ids: Sequence[str] | None = None, tags: Sequence[str] | None = None,
                 limit: int | None = None) -> list[EvalCase]:
    """The cases a run covers: approved ones with any of `ids` (all without) and any of `tags` (all without), then
    the first `limit` of them, in suite order. An id or tag the suite lacks, an id of a draft or retired case, or
    a selection of nothing is a ConfigError (a usage error) before any case runs."""
    problems: list[ConfigProblem] = []
    known = {c.id: c for c in suite.cases}
    for case_id in dict.fromkeys(ids or []):
        if case_id not in known:
            guess = did_you_mean(case_id, list(known))
            problems.append(ConfigProblem("", "--case", f"unknown case '{case_id}'",
                                          f"did you mean '{guess}'?" if guess else "see the ids in the suite file"))
        elif known[case_id].status != "approved":
            problems.append(ConfigProblem("", "--case", f"case '{case_id}' is {known[case_id].status}",
                                          "only approved cases run: approve it in the suite first"))
    all_tags = sorted({t for c in suite.cases for t in c.tags})
    for tag in dict.fromkeys(tags or []):
        if tag not in all_tags:
            guess = did_you_mean(tag, all_tags)
            problems.append(ConfigProblem("", "--tag", f"no case has the tag '{tag}'",
                                          f"did you mean '{guess}'?" if guess else f"tags: {', '.join(all_tags)}"))
    if limit is not None and limit < 1:
        problems.append(ConfigProblem("", "--limit", f"{limit} is not a number of cases", "pass --limit 1 or more"))
    if problems:
        raise ConfigError(problems)
    cases = suite.select(ids=ids or None, tags=tags or None)
    if limit is not None:
        cases = cases[:limit]
    if not cases and tags:
        raise ConfigError(ConfigProblem("", "--tag", "no approved case has these tags"
                                        + (" among the cases named with --case" if ids else ""),
                                        "widen the selection"))
    return cases


def selection_of(ids: Sequence[str] | None, tags: Sequence[str] | None, limit: int | None,
                 cases: Sequence[EvalCase], total: int) -> dict[str, Any] | None:
    """How a run was sliced (None when it covers every approved case, whatever selected them): what selected it,
    and how many of the approved cases ran."""
    if (not ids and not tags and limit is None) or len(cases) >= total:
        return None
    return {"ids": list(ids) if ids else None, "tags": list(tags) if tags else None, "limit": limit,
            "cases": len(cases), "of": total}


# --- the whole run ---------------------------------------------------------------------------------


def check_mode_full(max_cost_usd: float | None) -> None:
    """Mode full calls real models: never under CI, never without a dollar cap (ConfigError otherwise)."""
    if os.environ.get("CI"):
        raise ConfigError(ConfigProblem("--mode", "full", "mode full calls real models and costs money, "
                                        "so it never runs in CI (CI is set)", "run it by hand"))
    if max_cost_usd is None:
        raise ConfigError(ConfigProblem("--max-cost", "", "mode full needs a dollar cap", "pass --max-cost USD"))


def database_identity(config: Config, cases: Sequence[EvalCase]) -> dict[str, Any]:
    """The datasource(s) a suite is about, with their live index fingerprint and size."""
    from nl2sql.index.store import StateStore

    ids = sorted({ds for c in cases for ds in c.datasources})
    store = StateStore(config.state_dir)
    fingerprints, tables, columns, engines = [], 0, 0, []
    for ds in ids:
        build = store.live_build(ds)
        fingerprints.append(build.fingerprint if build and build.fingerprint else "unbuilt")
        snapshot = store.snapshot(ds, build.fingerprint) if build and build.fingerprint else None
        if snapshot is not None:
            tables += len(snapshot.tables)
            columns += sum(len(t.columns) for t in snapshot.tables)
        engines.append(config.datasource(ds).dialect or "block")
    store.close()
    fingerprint = fingerprints[0] if len(fingerprints) == 1 else hashlib.sha256(
        "|".join(fingerprints).encode()).hexdigest()[:16]
    return {"datasource_id": "+".join(ids), "engine": "+".join(engines), "schema_fingerprint": fingerprint,
            "tables": tables, "columns": columns}


#: How one job runs: in place, or as a Prefect task run (flows/evals.py).
JobRunner = Callable[["EvalSession", EvalJob], CaseRecord]


def run_here(session: EvalSession, job: EvalJob) -> CaseRecord:
    """Run one job in this thread."""
    return session.run(job)


def run_in_order(session: EvalSession, jobs: Sequence[EvalJob], run_job: JobRunner = run_here) -> list[CaseRecord]:
    """Run the jobs one after another, stopping before one that could pass the dollar cap."""
    records = []
    for job in jobs:
        if session.over_budget():
            session.stopped = f"max_cost: ${session.spent_usd:.4f} spent of ${session.max_cost_usd}"
            break
        records.append(run_job(session, job))
    return records


def worked_examples_from(path: str | Path, suite: EvalSuite, mode: Mode) -> list[EvalCase]:
    """The approved cases of the suite at `path` with SQL, as the planner's worked examples in mode full; refused
    (ConfigError) in another mode, or when one asks a question of the suite being run: a suite measures only what
    the engine has not seen."""
    from nl2sql.evaluation.suite import load_suite

    if mode != "full":
        raise ConfigError([ConfigProblem("--examples", "--examples", "worked examples are for mode full",
                                         "leave --examples out")])
    examples = [c for c in load_suite(Path(path)).select() if c.sql and c.kind == "answer"]
    seen = examples_asking_the_suite({c.id: c.question for c in examples}, suite)
    if seen:
        named = ", ".join(seen[:5]) + (f" and {len(seen) - 5} more" if len(seen) > 5 else "")
        raise ConfigError([ConfigProblem(str(path), "cases", f"{named} ask a question of the suite run",
                                         "take the suite's own questions out of the examples")])
    return examples


def examples_asking_the_suite(examples: Mapping[str, str], suite: EvalSuite) -> list[str]:
    """The names of the worked examples (name: question) that ask one of the suite's questions (case and spacing
    aside): a suite measures only what the engine has not been shown."""
    asked = {" ".join(c.question.lower().split()) for c in suite.cases}
    return [name for name, question in examples.items() if " ".join(question.lower().split()) in asked]


def project_examples_checked(config: Config, suite: EvalSuite) -> None:
    """Refuse (ConfigError) a run whose project shows the planner, as an example question, one the suite asks."""
    named = {f"datasources[{i}].example_questions[{j}]": example.question
             for i, ds in enumerate(config.datasources) for j, example in enumerate(ds.example_questions)}
    seen = examples_asking_the_suite(named, suite)
    if seen:
        raise ConfigError([ConfigProblem(str(config.path or "nl2sql.yaml"), where, "asks a question of the suite run",
                                         "take it out of the example questions, or the case out of the suite")
                           for where in seen])


def evaluate(mode: Mode, config: Config, suite_path: str, *, roles: Sequence[str] | None = None,
             llm: dict[str, LLMConfig] | None = None, passes: int = 1, max_cost_usd: float | None = None,
             ids: Sequence[str] | None = None, tags: Sequence[str] | None = None, limit: int | None = None,
             run_job: JobRunner = run_here, block_loader: Callable[[str], str] | None = None,
             examples: str | None = None) -> Any:
    """Run a suite in a mode and report it (an EvalReport); `ids`, `tags` and `limit` slice it (select_cases);
    `examples`, another suite's file, gives the planner worked examples in mode full (worked_examples_from)."""
    from nl2sql.evaluation.suite import checked_suite, suite_digest

    path = Path(suite_path)
    suite = checked_suite(path, config)
    cases = select_cases(suite, ids=ids, tags=tags, limit=limit)
    selection = selection_of(ids, tags, limit, cases, len(suite.select()))
    if examples:
        shown = worked_examples_from(examples, suite, mode)
    else:
        project_examples_checked(config, suite)
        shown = []
    session = EvalSession(mode, config, cases, llm=llm, max_cost_usd=max_cost_usd, block_loader=block_loader,
                          examples=shown)
    try:
        configs = list(session.runtimes)
        jobs = eval_jobs(cases, mode, roles=roles, configs=configs, passes=passes)
        records = run_in_order(session, jobs, run_job)
    finally:
        session.close()
    planned = {name: sum(1 for j in jobs if j.config_name == name) for name in configs}
    models = {name: {node: (rt.config.llm.models[m].model if (m := rt.config.llm.nodes.get(node)  # type: ignore[call-overload]
                                                             or rt.config.llm.default) else None)
                     for node in ("resolver", "decomposer", "planner", "refiner", "synthesizer")}
              for name, rt in session.runtimes.items()}
    retrieval = config.settings.retrieval
    settings = {"passes": passes, "roles": list(roles) if roles else None, "models": models,
                "retrieval": retrieval.model_dump(), "routing": config.settings.routing.model_dump(),
                "max_cost_usd": max_cost_usd,
                "examples": {"suite": Path(examples).name, "digest": suite_digest(Path(examples)),
                             "cases": len(shown)} if examples else None}
    return build_report(mode, suite={"name": path.name, "path": str(path), "digest": suite_digest(path),
                                     "cases": len(cases), "selection": selection},
                        database=database_identity(config, cases), settings=settings, records=records,
                        planned=planned, stopped=session.stopped)
