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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nl2sql.config.models import Config, LLMConfig, ModelConfig, PriceConfig
from nl2sql.errors import ConfigError, ConfigProblem, NL2SQLError
from nl2sql.evaluation.gold_llm import GoldModel
from nl2sql.evaluation.report import CaseRecord, build_report
from nl2sql.evaluation.scorers import CaseRun, Score, score_run
from nl2sql.evaluation.suite import EvalCase
from nl2sql.llm.fake import FakeLLMServer
from nl2sql.llm.prices import price_for

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


def eval_config(config: Config, llm: LLMConfig | None = None) -> Config:
    """The project's configuration as an eval runs it: no verified answers, no plan cache, no hooks, no
    observers, and every row of a result kept for scoring."""
    pipeline = config.settings.pipeline.model_copy(update={"plan_cache": False,
                                                           "preview_rows": config.settings.pipeline.row_limit})
    settings = config.settings.model_copy(update={"pipeline": pipeline})
    datasources = [ds.model_copy(update={"verified_queries": []}) for ds in config.datasources]
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


def record_of(job: EvalJob, run: CaseRun, scores: dict[str, Score]) -> CaseRecord:
    """The slim verdict of one run."""
    result = run.result
    usage = result.usage if result else {}
    return CaseRecord(
        case_id=job.case.id, role=job.role, config=job.config_name, pass_index=job.pass_index, tags=job.case.tags,
        outcome=job.case.outcome.get(job.role, "allowed"), status=result.status if result else None,
        scores={name: {"passed": s.passed, "detail": s.detail} for name, s in scores.items()},
        latency_s=round(run.latency_s or 0.0, 4), cost_usd=result.cost_usd if result else None,
        tokens={"input": usage.get("input_tokens"), "output": usage.get("output_tokens")},
        sql=[sq.sql for sq in result.sub_queries if sq.sql] if result else [], rows_digest=result_digest(run),
        answer=(result.answer.content or None) if result and result.status == "success" else None, error=run.error)


class EvalSession:
    """What an eval's runs share: the runtimes (one per model config), the gold server, the cost so far."""

    def __init__(self, mode: Mode, config: Config, cases: Sequence[EvalCase], *,
                 llm: dict[str, LLMConfig] | None = None, max_cost_usd: float | None = None,
                 block_loader: Callable[[str], str] | None = None) -> None:
        from nl2sql.pipeline import Runtime

        self.mode = mode
        self.config = config
        self.max_cost_usd = max_cost_usd
        self.spent_usd = 0.0
        self.most_expensive = 0.0
        self.stopped: str | None = None
        self.gold: FakeLLMServer | None = None
        self.runtimes: dict[str, Runtime] = {}
        if mode == "full":
            check_mode_full(max_cost_usd)
            configs = llm or {"default": config.llm}
            check_prices(configs)
            for name, llm_config in configs.items():
                self.runtimes[name] = Runtime(eval_config(config, llm_config), observers=[],
                                              block_loader=block_loader)
        elif mode == "plans":
            self.gold = FakeLLMServer().start()
            GoldModel(self.gold, cases)
            self.runtimes["default"] = Runtime(eval_config(config, gold_llm_config(self.gold)), observers=[],
                                               block_loader=block_loader)
        else:
            self.runtimes["default"] = Runtime(eval_config(config), observers=[], block_loader=block_loader)

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

        started = time.perf_counter()
        try:
            result = ask_inline(self.runtimes[job.config_name], job.case.question, roles=[job.role])
        except Exception as exc:  # an engine fault: scored as a failed run, the eval goes on
            return CaseRun(job.case, job.role, latency_s=time.perf_counter() - started,
                           error=f"{type(exc).__name__}: {exc}")
        return CaseRun(job.case, job.role, result=result, latency_s=time.perf_counter() - started)

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
    """`NAME=PRESET_OR_FILE` (or just a preset/file) → (name, llm section), `${env:…}` expanded."""
    import yaml

    from nl2sql.config.load import expand_env

    name, _, source = spec.partition("=") if "=" in spec else (spec, "", spec)
    path = Path(source)
    if not path.exists():
        path = PRESETS_DIR / f"{source}.yaml"
    if not path.exists():
        raise ConfigError(ConfigProblem("--llm", spec, f"no preset or file named {source!r}",
                                        f"use NAME=PRESET with a preset of {', '.join(preset_names())}, or a path "
                                        "to an llm section in YAML"))
    problems: list[ConfigProblem] = []
    raw = expand_env(yaml.safe_load(path.read_text()) or {}, str(path), "llm", problems)
    if problems:
        raise ConfigError(problems)
    try:
        return Path(name).stem if name == source else name, LLMConfig.model_validate(raw)
    except Exception as exc:
        raise ConfigError(ConfigProblem(str(path), "llm", str(exc), "see docs/models.md")) from None


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


def evaluate(mode: Mode, config: Config, suite_path: str, *, roles: Sequence[str] | None = None,
             llm: dict[str, LLMConfig] | None = None, passes: int = 1, max_cost_usd: float | None = None,
             ids: Sequence[str] | None = None, tags: Sequence[str] | None = None,
             run_job: JobRunner = run_here, block_loader: Callable[[str], str] | None = None) -> Any:
    """Run a suite in a mode and report it (an EvalReport)."""
    from nl2sql.evaluation.suite import checked_suite, suite_digest

    path = Path(suite_path)
    suite = checked_suite(path, config)
    cases = suite.select(ids=ids, tags=tags)
    session = EvalSession(mode, config, cases, llm=llm, max_cost_usd=max_cost_usd, block_loader=block_loader)
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
                "max_cost_usd": max_cost_usd}
    return build_report(mode, suite={"name": path.name, "path": str(path), "digest": suite_digest(path),
                                     "cases": len(cases)},
                        database=database_identity(config, cases), settings=settings, records=records,
                        planned=planned, stopped=session.stopped)
