"""The project's deployments, declared once: `nl2sql serve` serves them from one process (no work pool), `nl2sql
deployments write` writes them into a project's `prefect.yaml` for a work pool, and the repository's own
`prefect.yaml` lists the same ones (a test holds them equal).

Flows are named by module (`nl2sql.flows.ask:ask`), so an installed package serves them from any folder. The eval
deployments exist only where the configuration names a suite (`evals.suites`); they run its first suite, gated
against `evals.baseline_dir` when that folder exists. The project is `$NL2SQL_CONFIG` (or `./nl2sql.yaml`) unless a
run names one in `config`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nl2sql.config import Config
from nl2sql.errors import ConfigError, ConfigProblem, NL2SQLError
from nl2sql.project import load_project

#: Nightly schedules are in UTC.
TIMEZONE = "UTC"
#: The work pool a written `prefect.yaml` names unless told another.
WORK_POOL = "nl2sql"
#: Seconds `nl2sql serve` may spend stopping after SIGTERM or SIGINT (pausing its schedules, cancelling its runs)
#: before it exits without finishing: a Prefect server that is gone would hold those calls in retries for long.
STOP_GRACE_S = 3.0


@dataclass(frozen=True)
class DeploymentSpec:
    """One deployment: its name, the flow (`module.path:function`), what it is for, fixed parameters, and a
    cron schedule (UTC) where it runs by itself."""

    name: str
    entrypoint: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    cron: str | None = None

    @property
    def flow_name(self) -> str:
        """The flow's name (`prefect deployment run 'FLOW/DEPLOYMENT'`)."""
        return load_flow(self.entrypoint).name


#: The ask flow, whose run form is built from the project (`ask_run_form`).
ASK_ENTRYPOINT = "nl2sql.flows.ask:ask"
#: The deployments every project has.
CORE_DEPLOYMENTS: tuple[DeploymentSpec, ...] = (
    DeploymentSpec("ask", ASK_ENTRYPOINT,
                   "Answer a question for a user and role: every step a task run, the SQL and row counts as the "
                   "run's artifact; a run held for an approver waits in Suspended for the Resume form."),
    DeploymentSpec("index-build", "nl2sql.flows.index:index_build",
                   "Build (or incrementally rebuild) the schema index of each datasource."),
    DeploymentSpec("drift-check", "nl2sql.flows.drift:drift_check",
                   "Nightly: the live schema and data against the live index build; schema.drifted per new drift.",
                   cron="0 2 * * *"),
    DeploymentSpec("storage-purge", "nl2sql.flows.purge:storage_purge",
                   "Nightly: traces, resolved approvals, cached plans, old index builds and audit files past their "
                   "retention deleted; retention.purged with counts.",
                   cron="0 4 * * *"),
)


def eval_deployments(suite: str, baseline: str | None) -> tuple[DeploymentSpec, ...]:
    """The eval deployments on one suite, gated against `baseline` (a folder of records) when there is one."""
    named = Path(suite).name
    gated = f", gated against {Path(baseline).name}/" if baseline else ", ungated (no baseline records)"
    fixed = {"suite": suite, **({"baseline": baseline} if baseline else {})}
    return (
        DeploymentSpec("eval-retrieval", "nl2sql.flows.evals:eval_run",
                       f"Nightly: retrieval and routing on {named}{gated} (Failed when the gate fails).",
                       parameters={"mode": "retrieval", **fixed}, cron="0 3 * * *"),
        DeploymentSpec("eval-plans", "nl2sql.flows.evals:eval_run",
                       f"For CI: every gold plan of {named}{gated} (Failed when a case fails or the gate fails).",
                       parameters={"mode": "plans", **fixed}),
        DeploymentSpec("eval-full", "nl2sql.flows.evals:eval_full",
                       f"By hand: real models on {named}, capped in dollars (max_cost_usd, required){gated}.",
                       parameters={**fixed, "baseline": baseline}),
    )


def eval_sources(config: Config, relative_to: Path | None = None) -> tuple[str, str | None] | None:
    """The suite and baseline folder the eval deployments run on (`evals.suites[0]`, `evals.baseline_dir`, both
    relative to the configuration file), as paths relative to `relative_to` (else absolute); None when the
    configuration names no suite. The baseline is None when the default folder does not exist."""
    if not config.evals.suites:
        return None
    file = str(config.path or "nl2sql.yaml")
    suite = (config.base_dir / config.evals.suites[0]).resolve()
    if not suite.is_file():
        raise ConfigError(ConfigProblem(file, "evals.suites[0]", f"{suite} is not a file",
                                        "name a suite file, relative to the configuration file"))
    baseline: Path | None = (config.base_dir / config.evals.baseline_dir).resolve()
    if not baseline.is_dir():
        if "baseline_dir" in config.evals.model_fields_set:  # named on purpose: a typo must not turn the gate off
            raise ConfigError(ConfigProblem(file, "evals.baseline_dir", f"{baseline} is not a folder",
                                            "name the folder of committed eval records, relative to the "
                                            "configuration file"))
        baseline = None

    def shown(path: Path) -> str:
        return os.path.relpath(path, relative_to.resolve()) if relative_to is not None else str(path)

    return shown(suite), (shown(baseline) if baseline else None)


def project_deployments(config: Config, relative_to: Path | None = None) -> tuple[DeploymentSpec, ...]:
    """Every deployment of a project: the core ones, and the eval ones where its configuration names a suite
    (paths relative to `relative_to`, else absolute)."""
    sources = eval_sources(config, relative_to)
    return CORE_DEPLOYMENTS + (eval_deployments(*sources) if sources else ())


def load_flow(entrypoint: str) -> Any:
    """The flow an entrypoint (`module.path:function`) names, imported."""
    from prefect.flows import load_flow_from_entrypoint

    return load_flow_from_entrypoint(entrypoint, use_placeholder_flow=False)


# --- prefect.yaml --------------------------------------------------------------------------------


def prefect_yaml(config: Config, folder: Path, *, work_pool: str = WORK_POOL) -> str:
    """The text of a `prefect.yaml` in `folder` deploying a project's deployments to a process work pool: runs
    start in `folder`, on the project's configuration (NL2SQL_CONFIG); suites and records relative to it."""
    import prefect

    folder = folder.resolve()
    config_file = os.path.relpath((config.path or Path("nl2sql.yaml")).resolve(), folder)
    deployments = []
    for spec in project_deployments(config, relative_to=folder):
        entry: dict[str, Any] = {"name": spec.name, "entrypoint": spec.entrypoint, "description": spec.description,
                                 "work_pool": {"name": work_pool,
                                               "job_variables": {"env": {"NL2SQL_CONFIG": config_file}}}}
        if spec.parameters:
            entry["parameters"] = spec.parameters
        if spec.cron:
            entry["schedules"] = [{"cron": spec.cron, "timezone": TIMEZONE}]
        deployments.append(entry)
    document = {"name": "nl2sql", "prefect-version": prefect.__version__, "build": None, "push": None,
                "pull": [{"prefect.deployments.steps.set_working_directory": {"directory": str(folder)}}],
                "deployments": deployments}
    header = (f"# nl2sql's deployments of {config_file}, for the process work pool {work_pool!r}: from this folder,\n"
              f"#   prefect work-pool create {work_pool} --type process\n"
              "#   prefect --no-prompt deploy --all\n"
              "#   nl2sql deployments forms    (the ask run form: the project's roles and datasources as choices)\n"
              f"#   prefect worker start --pool {work_pool}\n"
              "# Written by `nl2sql deployments write`; write it again after changing evals in the configuration.\n")
    return header + yaml.safe_dump(document, sort_keys=False, width=1000, allow_unicode=True)


# --- serving ---------------------------------------------------------------------------------------


def held_by_work_pools(specs: tuple[DeploymentSpec, ...]) -> dict[str, str]:
    """The deployments of the same names that a work pool runs (`prefect deploy --all`): `flow/deployment` → the
    pool's name."""
    import httpx
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import PREFECT_API_URL

    held = {}
    try:
        with get_client(sync_client=True) as client:
            for spec in specs:
                name = f"{spec.flow_name}/{spec.name}"
                try:
                    existing = client.read_deployment_by_name(name)
                except ObjectNotFound:
                    continue
                if existing.work_pool_name:
                    held[name] = existing.work_pool_name
    except httpx.HTTPError as exc:
        raise NL2SQLError(f"The Prefect server at {PREFECT_API_URL.value()} did not answer ({type(exc).__name__}).",
                          fix="Start it (`prefect server start`) or point PREFECT_API_URL at a running one, then "
                          "run `nl2sql serve` again.") from exc
    return held


def take_over_from_work_pools(names: list[str]) -> None:
    """Delete these work-pool deployments so that this process serves them (a served deployment cannot also be a
    work pool's): new ids; their past runs stay."""
    from prefect import get_client

    with get_client(sync_client=True) as client:
        for name in names:
            client.delete_deployment(client.read_deployment_by_name(name).id)


#: The ask flow's parameters a person fills in the run form; the others (execute, config, artifact, in_words) stay
#: internal.
ASK_FORM_FIELDS = ("question", "role", "user_id", "datasource_id")


def ask_run_form(schema: dict[str, Any], config: Config) -> dict[str, Any]:
    """The ask deployment's run form for a person: the question with help, the role as a choice of the project's
    roles (its default role first chosen), the user, and the datasource as a choice (empty: the engine routes);
    plain fields, not the str/None toggles an optional parameter gets; nothing internal. Built from the project's
    configuration when it is served."""
    policies, ids = config.policies, [ds.id for ds in config.datasources]
    roles = list(policies.roles)
    fields: dict[str, dict[str, Any]] = {
        "question": {"title": "Question", "type": "string", "description": "Your question, in plain words, e.g. "
                     "*How much did we earn in each year?* The answer, the SQL and (where the project allows it) "
                     "the first rows show on the run's Artifacts tab."},
        "role": {"title": "Role", "type": "string", "enum": roles, "default": policies.default_role
                 if policies.default_role in roles else roles[0] if roles else "",
                 "description": "The role you ask as: the answer uses only what it may read."},
        "user_id": {"title": "User", "type": "string", "default": "",
                    "description": "Your user id (needed when the project lists its users; the role must be one of "
                    "yours)."},
        "datasource_id": {"title": "Datasource", "type": "string", "enum": ["", *ids], "default": "",
                          "description": "Leave empty to let the engine choose the database(s)."},
    }
    properties = schema.get("properties", {})
    for position, name in enumerate(ASK_FORM_FIELDS):
        fields[name]["position"] = properties.get(name, {}).get("position", position)
    return {**schema, "properties": fields, "required": ["question"]}


def apply_ask_run_form(config: Config) -> str:
    """Give the `ask` deployment on the Prefect server (one `prefect deploy` made from a written prefect.yaml, which
    takes its form from the flow's signature) the project's run form; its `flow/deployment` name."""
    from prefect import get_client
    from prefect.client.schemas.actions import DeploymentUpdate
    from prefect.exceptions import ObjectNotFound

    spec = next(s for s in project_deployments(config) if s.entrypoint == ASK_ENTRYPOINT)
    name = f"{spec.flow_name}/{spec.name}"
    with get_client(sync_client=True) as client:
        try:
            deployment = client.read_deployment_by_name(name)
        except ObjectNotFound:
            raise NL2SQLError(f"No deployment {name} on the Prefect server.", fix="Deploy first (`prefect --no-prompt "
                              "deploy --all` beside the prefect.yaml `nl2sql deployments write` wrote).") from None
        form = ask_run_form(deployment.parameter_openapi_schema or {}, config)
        client.update_deployment(deployment.id, DeploymentUpdate(parameter_openapi_schema=form))
    return name


def serve_deployments(config: Path, specs: tuple[DeploymentSpec, ...], *, limit: int | None = None,
                      on_ready: Callable[[], None] | None = None,
                      on_forced_stop: Callable[[], None] | None = None) -> None:
    """Serve the deployments from this process until SIGTERM or SIGINT: schedules run, and runs started from the
    UI or `prefect deployment run` run here, each on `config` unless it names another; `on_ready` once they are
    registered with the server. A stop not finished STOP_GRACE_S after the signal (or a second signal) ends the
    process at once, `on_forced_stop` first."""
    from prefect.exceptions import TerminationSignal
    from prefect.runner import Runner
    from prefect.schedules import Cron
    from prefect.types.entrypoint import EntrypointType

    os.environ["NL2SQL_CONFIG"] = str(config.resolve())
    runner = Runner(pause_on_shutdown=True, limit=limit)
    graceful_stop = runner.handle_sigterm
    signalled = threading.Event()

    def force_stop() -> None:
        if on_forced_stop is not None:
            on_forced_stop()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(0)

    def stop(signum: int, frame: Any) -> None:
        if signalled.is_set():  # asked twice: no more waiting
            force_stop()
        signalled.set()
        watchdog = threading.Timer(STOP_GRACE_S, force_stop)
        watchdog.daemon = True  # it must not hold up an exit that finishes in time
        watchdog.start()
        graceful_stop()

    # Runner.start installs `handle_sigterm` as SIGTERM's handler; SIGINT gets the same path, not a
    # KeyboardInterrupt that would unwind the runner through the same server calls without a deadline
    runner.handle_sigterm = stop  # type: ignore[method-assign]
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    project = load_project(config)
    for spec in specs:
        deployment = load_flow(spec.entrypoint).to_deployment(
            name=spec.name, description=spec.description, parameters=spec.parameters,
            schedules=[Cron(spec.cron, timezone=TIMEZONE)] if spec.cron else None,
            entrypoint_type=EntrypointType.MODULE_PATH)
        if spec.entrypoint == ASK_ENTRYPOINT:
            form = ask_run_form(deployment._parameter_openapi_schema.model_dump(), project)
            deployment._parameter_openapi_schema = type(deployment._parameter_openapi_schema)(**form)
        runner.add_deployment(deployment)
    if on_ready is not None:
        on_ready()
    try:
        with contextlib.suppress(KeyboardInterrupt, TerminationSignal, SystemExit):  # a stop asked for: not an error
            asyncio.run(runner.start())
    except Exception as exc:  # the runner's own calls failed: the server went away (or never answered)
        if signalled.is_set():
            return
        raise NL2SQLError(f"Serving stopped: the Prefect server stopped answering ({type(exc).__name__}).",
                          fix="Check that the Prefect server is up (PREFECT_API_URL), then run `nl2sql serve` "
                          "again.") from None
    if not signalled.is_set():
        raise NL2SQLError("Serving stopped without being asked to (the runner ended).",
                          fix="Check that the Prefect server is up, then run `nl2sql serve` again.")
