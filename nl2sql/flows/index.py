"""The index build flow: per datasource a task (placed by the flow's task runner: threads, or a Dask cluster) running
reflect → profile → relate → entries → embed → commit (FAISS, live pointer, snapshot and diff), each stage a task
run, with progress and a summary as Prefect artifacts and index events on the bus."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner

from nl2sql.blocks import load_datasource_url
from nl2sql.config import Config
from nl2sql.datasources import DatasourceCatalog
from nl2sql.errors import DatasourceError, IndexBuildFailed, NL2SQLError
from nl2sql.events import EventBus
from nl2sql.events.prefect_events import forward_to_prefect
from nl2sql.flows.datasource_runs import open_datasource_run, run_bus, run_name
from nl2sql.index.build import BuildResult, build_datasource, publish_unreadable
from nl2sql.index.embed import shared_embedder
from nl2sql.index.store import StateStore
from nl2sql.project import load_project
from nl2sql.tasks import index as index_tasks
from nl2sql.tasks import step_task
from nl2sql.verified.match import index_entries_of

#: Process-local listeners of build progress (the CLI's progress bar): (datasource, stage, done, total).
PROGRESS_LISTENERS: list[Callable[[str, str, int, int], None]] = []
#: Datasources the default task runner builds at once (threads: reflection and profiling wait on databases).
PARALLEL_BUILDS = 2


class _Progress:
    """One progress artifact for the whole build, moved as each datasource finishes (stage by stage, the
    process's listeners hear it: the CLI's progress bars)."""

    def __init__(self, datasource_ids: list[str]) -> None:
        self.total = max(len(datasource_ids), 1)
        self.finished = 0
        self.artifact_id = create_progress_artifact(0.0, description=f"Index build of {', '.join(datasource_ids)}")

    def finished_one(self) -> None:
        """A datasource is done (built or failed)."""
        self.finished += 1
        update_progress_artifact(self.artifact_id, round(100 * self.finished / self.total, 1))


def build_one(config: Config, catalog: DatasourceCatalog, store: StateStore, datasource_id: str, *, full: bool,
              bus: EventBus, report: Callable[[str, int, int], None]) -> BuildResult:
    """One datasource's build, each stage a task run; events on the bus; the previous build stays live on any
    failure."""
    ds = config.datasource(datasource_id)
    try:
        adapter = catalog.get(datasource_id)
    except NL2SQLError as exc:
        bus.publish("index.started", datasource_id=datasource_id, full=full)
        publish_unreadable(bus.publish, datasource_id, exc)
        raise
    return build_datasource(adapter, store, shared_embedder(), profile=config.settings.profile,
                            keep=config.storage.keep_builds, sample_questions=ds.sample_questions,
                            verified=index_entries_of(ds), description=ds.description, full=full, progress=report,
                            publish=bus.publish, run_stage=index_tasks.run_stage)


def summary_markdown(results: list[BuildResult], failures: dict[str, str]) -> str:
    """The build's summary: one row per datasource, then what changed and what failed."""
    lines = ["# Index build", "", "| datasource | tables | entries | embedded / cached | index | seconds per stage |",
             "|---|---|---|---|---|---|"]
    for r in results:
        entries = ", ".join(f"{k} {v}" for k, v in sorted(r.counts.items()))
        stages = ", ".join(f"{k} {v:.2f}" for k, v in r.seconds.items())
        index = r.index_kind + (f", {r.segments_written} of {r.segments} segments written" if r.segments > 1 else "")
        lines.append(f"| {r.datasource_id} | {r.tables} | {entries} | {r.embedded} / {r.cached} | {index} | {stages} |")
    lines += ["", "## What changed", ""]
    lines += [f"- **{r.datasource_id}**: {r.diff.summary()}" + (f" (replaces build {r.replaced})" if r.replaced else
                                                              " (first build)") for r in results]
    if failures:
        lines += ["", "## Failed", ""] + [f"- **{ds}**: {message}" for ds, message in failures.items()]
    return "\n".join(lines)


def build_where_placed(config: str, datasource_id: str, full: bool, trace_id: str) -> BuildResult:
    """One datasource's build wherever the task runner put it (a thread here, a Dask worker elsewhere): the
    project, its adapter and the state store are opened there, events go out under the flow run's trace id."""
    cfg = load_project(Path(config))
    bus = run_bus(forward_to_prefect, trace_id)

    def report(stage: str, done: int, total: int) -> None:
        for listener in PROGRESS_LISTENERS:  # the listeners of this process (a Dask worker has none)
            listener(datasource_id, stage, done, total)

    with DatasourceCatalog(cfg, block_loader=load_datasource_url) as catalog:
        return build_one(cfg, catalog, StateStore(cfg.state_dir), datasource_id, full=full, bus=bus, report=report)


build_datasource_task = step_task(build_where_placed, name="build-datasource", task_run_name="build · {datasource_id}")


@flow(name="index-build", flow_run_name=run_name("index"), log_prints=False,
      task_runner=ThreadPoolTaskRunner(max_workers=PARALLEL_BUILDS))
def index_build(datasource_ids: list[str] | None = None, config: str | None = None, full: bool = False) -> dict[str, Any]:
    """Build (or incrementally rebuild) the index of each datasource, each a task the flow's task runner places
    (`PARALLEL_BUILDS` threads by default; `nl2sql index build --dask-workers N` runs them on a Dask cluster); the
    previous build serves until commit."""
    cfg, ids = open_datasource_run(config, datasource_ids)
    logger = get_run_logger()
    progress = _Progress(ids)
    results: list[BuildResult] = []
    failures: dict[str, str] = {}
    trace_id = str(flow_run.get_id())
    futures = [(ds, build_datasource_task.submit(str(cfg.path), ds, full, trace_id)) for ds in ids]
    for ds, future in futures:
        try:
            results.append(future.result())
        except (NL2SQLError, DatasourceError) as exc:
            failures[ds] = str(exc)
            logger.error("index build of %s failed: %s", ds, exc)
        progress.finished_one()
    create_markdown_artifact(summary_markdown(results, failures), key="index-build-summary",
                             description="What the index build did")
    outcome = {"builds": [_as_dict(r) for r in results], "failures": failures}
    if failures and not results:
        raise IndexBuildFailed("Every datasource failed to build: " + "; ".join(f"{k}: {v}" for k, v in failures.items()))
    return outcome


def on_dask(workers: int) -> Any:
    """The index-build flow with its datasources placed on a local Dask cluster of `workers` processes, one
    thread each (prefect-dask, the `dask` extra): for many datasources on a machine with the cores for them."""
    import os

    try:
        from prefect_dask import DaskTaskRunner
    except ImportError as exc:
        raise NL2SQLError("Building on Dask needs prefect-dask.",
                          fix="pip install 'nl2sql-engine[dask]', or build without --dask-workers.") from exc
    if not os.environ.get("PREFECT_API_URL"):  # each worker process would start a temporary server of its own
        raise NL2SQLError("Building on Dask needs a Prefect server its worker processes reach.",
                          fix="Start one (`prefect server start`) and export PREFECT_API_URL=http://127.0.0.1:4200/api.")
    return index_build.with_options(task_runner=DaskTaskRunner(cluster_kwargs={
        "n_workers": workers, "threads_per_worker": 1, "processes": True, "dashboard_address": None,
        "preload": ["nl2sql.flows.dask_worker"]}))


def _as_dict(result: BuildResult) -> dict[str, Any]:
    return {"datasource_id": result.datasource_id, "build_id": result.build_id, "replaced": result.replaced,
            "fingerprint": result.fingerprint, "tables": result.tables, "counts": result.counts,
            "embedded": result.embedded, "cached": result.cached, "index_kind": result.index_kind,
            "recall_at_20": result.recall_at_20, "seconds": result.seconds, "changes": result.diff.summary(),
            "changed_tables": result.changed_tables, "segments": result.segments,
            "segments_written": result.segments_written}
