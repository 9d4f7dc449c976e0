"""`nl2sql eval run|regenerate|publish`: suites in three modes, gated against committed records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markdown import Markdown
from rich.markup import escape

from nl2sql.cli.options import (
    app,
    block_loader,
    console,
    drain_prefect,
    err_console,
    print_table,
    quiet_prefect,
)

eval_app = typer.Typer(help="Evaluation: run suites, gate against a baseline, keep records.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")


@eval_app.command("run")
def eval_run_command(
    ctx: typer.Context,
    mode: Annotated[str, typer.Option("--mode", help="plans, retrieval or full.")] = "plans",
    suite: Annotated[Path, typer.Option("--suite", help="The suite file.")] = Path("suites/chinook.yaml"),
    config: Annotated[Path | None, typer.Option("--config", help="nl2sql.yaml (default: -c, $NL2SQL_CONFIG, "
                                                "./nl2sql.yaml).")] = None,
    role: Annotated[list[str] | None, typer.Option("--role", help="Only these roles (repeat).")] = None,
    user: Annotated[str | None, typer.Option("--user", help="Your user id (required with policies.users: the "
                                              "roles run are then yours, all of them unless --role).")] = None,
    llm: Annotated[list[str] | None, typer.Option("--llm", help="Mode full: NAME=PRESET or NAME=FILE (repeat).")]
    = None,
    passes: Annotated[int, typer.Option("--passes", min=1, help="Runs of each case (mode full).")] = 1,
    max_cost: Annotated[float | None, typer.Option("--max-cost", help="Mode full: the dollar cap (required).")]
    = None,
    baseline: Annotated[Path | None, typer.Option("--baseline", help="A report, a record, or a folder of records "
                                                  "(the newest comparable one is used).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the report as JSON.")] = None,
    case: Annotated[list[str] | None, typer.Option("--case", help="Only this case id (repeat).")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="Only cases with this tag (repeat: any of them).")]
    = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N selected cases, in suite "
                                              "order.")] = None,
    examples: Annotated[Path | None, typer.Option("--examples", help="Mode full: another suite whose cases (question "
                                                  "and SQL) are the planner's worked examples; none of them may ask "
                                                  "a question of the suite run.")] = None,
) -> None:
    """Run a suite (or a slice of it: --case, --tag, --limit); exit 0 ok, 1 a regression (or, in mode plans, a
    failing run), 2 usage or series break, 3 the dollar cap stopped the run."""
    from nl2sql.config import config_path
    from nl2sql.evaluation.run import select_cases
    from nl2sql.evaluation.suite import checked_suite
    from nl2sql.prefect_env import prepare_prefect_env
    from nl2sql.project import load_project

    if mode not in ("plans", "retrieval", "full"):
        raise typer.BadParameter("use plans, retrieval or full", param_hint="--mode")
    if mode == "full":
        from nl2sql.evaluation.run import check_mode_full

        check_mode_full(max_cost)
    if baseline is not None and not baseline.exists():
        raise typer.BadParameter(f"{baseline} does not exist (a report, a record, or a folder of records)",
                                 param_hint="--baseline")
    path = Path(config_path(config or ctx.obj.config_option))
    cfg = load_project(path)
    from nl2sql.policies.users import acting_roles

    role = acting_roles(cfg.policies, user, role)
    _check_roles(cfg, role)
    # every problem before any case runs: the suite, the selection, the model configs
    loaded = checked_suite(suite, cfg, reflect=True, block_loader=block_loader)
    select_cases(loaded, ids=case, tags=tag, limit=limit)
    if examples is not None:
        from nl2sql.evaluation.run import worked_examples_from

        checked_suite(examples, cfg, reflect=True, block_loader=block_loader)
        worked_examples_from(examples, loaded, mode)  # type: ignore[arg-type]
    if llm and mode != "full":
        raise typer.BadParameter("model configs are for mode full", param_hint="--llm")
    _check_llm_specs(llm or [])
    prepare_prefect_env(cfg.state_dir)
    quiet_prefect()
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from nl2sql.flows.evals import eval_run

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        state = eval_run(mode, str(suite.resolve()), config=str(path), roles=role, llm=llm, passes=passes,
                         max_cost_usd=max_cost, ids=case, tags=tag, limit=limit,
                         examples=str(examples.resolve()) if examples else None,
                         baseline=str(baseline.resolve()) if baseline else None, return_state=True)
        report = state.result(raise_on_failure=False)
        drain_prefect()
    if isinstance(report, BaseException):
        raise report
    gate = report.pop("gate")
    code = report.pop("exit_code")
    if out:
        out.write_text(json.dumps(report, indent=2) + "\n")
    from nl2sql.evaluation.gate import GateResult
    from nl2sql.evaluation.report import EvalReport

    console.print(Markdown(EvalReport.model_validate(report).markdown()))
    console.print_json(json.dumps(report["metrics"]))
    if report.get("stopped"):
        err_console.print(f"[yellow]stopped[/]: {escape(str(report['stopped']))}")
    elif mode == "plans" and any(b["failures"] for b in report["boards"].values()):
        err_console.print("[red]mode plans: every case must pass for every role[/]")
    if gate is not None and not report.get("stopped"):
        verdict = GateResult.model_validate(gate)
        out_to = err_console if verdict.exit_code == 2 else console  # a series break is a usage error
        first, *rest = verdict.lines(bool(report["suite"].get("selection")))
        out_to.print(f"[{'green' if verdict.ok else 'red'}]{escape(first)}[/]")
        for line in rest:
            out_to.print(escape(line))
    raise typer.Exit(code)


def _check_llm_specs(specs: list[str]) -> None:
    """Every --llm loads (all problems at once, a usage error before anything runs)."""
    from nl2sql.errors import ConfigError
    from nl2sql.evaluation.run import load_llm

    problems = []
    for spec in specs:
        try:
            load_llm(spec)
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)


def _check_roles(config: object, roles: list[str] | None) -> None:
    """Each --role names a role of the configuration (a usage error, exit 2, before anything runs)."""
    from nl2sql.config.load import unknown_role
    from nl2sql.errors import ConfigError

    known = list(config.policies.roles)  # type: ignore[attr-defined]
    problems = [unknown_role("", "--role", name, known) for name in roles or [] if name not in known]
    if problems:
        raise ConfigError(problems)


@eval_app.command("regenerate")
def eval_regenerate_command(ctx: typer.Context, suite: Annotated[Path, typer.Argument(help="The suite file.")]) -> None:
    """Run every case's sql and alt_sql and write their rows into the suite (never type rows by hand)."""
    from nl2sql.evaluation.regenerate import regenerate
    from nl2sql.evaluation.suite import checked_suite

    config = ctx.obj.config()
    checked_suite(suite, config, reflect=True, block_loader=block_loader)
    result = regenerate(suite, config)
    console.print(f"Wrote the rows of {len(result.cases)} cases into {escape(str(suite))}.")


@eval_app.command("seed")
def eval_seed_command(
    ctx: typer.Context,
    datasource: Annotated[str, typer.Argument(help="The datasource to draft cases about.")],
    out: Annotated[Path, typer.Option("--out", help="The drafts file (created, or added to; never a reviewed "
                                      "suite).")],
    max_cost: Annotated[float, typer.Option("--max-cost", min=0, help="The dollar cap of the run (required).")],
    count: Annotated[int, typer.Option("--count", min=1, help="How many drafts to write.")] = 20,
    role: Annotated[str | None, typer.Option("--role", "-r", help="Draft as this role: only the tables it may read "
                                             "are shown and used (default: policies.default_role).")] = None,
    user: Annotated[str | None, typer.Option("--user", help="Your user id (required with policies.users).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Draft eval cases with the eval_seeder model, each checked and run by the engine as your role; exit 0 the
    count reached, 3 the dollar cap or a batch with nothing usable, 2 a refusal or a usage error."""
    import os

    from nl2sql.errors import ConfigError, ConfigProblem, SecurityViolation
    from nl2sql.evaluation.seed import check_seed_caller, check_seed_target
    from nl2sql.policies.users import acting_role

    if os.environ.get("CI"):
        raise ConfigError(ConfigProblem("eval seed", datasource, "seeding calls a real model and costs money, so it "
                                        "never runs in CI (CI is set)", "run it by hand"))
    config = ctx.obj.config()
    acting = acting_role(config.policies, user, role) or config.policies.default_role
    if role is not None:
        _check_roles(config, [role])
    check_seed_target(out, config)
    try:
        check_seed_caller(config, datasource, [acting])
    except SecurityViolation as exc:  # a refusal before any call: exit 2, as every refusal of seeding
        err_console.print(f"[bold red]error[/] [dim]{exc.code}[/]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from nl2sql.flows.seed import eval_seed

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        state = eval_seed(datasource, str(out.resolve()), max_cost, [acting], count=count, user_id=user,
                          config=str(config.path), return_state=True)
        report = state.result(raise_on_failure=False)
        drain_prefect()
    if isinstance(report, SecurityViolation):
        err_console.print(f"[bold red]error[/] [dim]{report.code}[/]: {escape(str(report))}", soft_wrap=True)
        raise typer.Exit(2)
    if isinstance(report, BaseException):
        raise report
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        from nl2sql.flows.seed import report_lines

        for line in report_lines(report):
            console.print(escape(line))
    raise typer.Exit(report["exit_code"])


@eval_app.command("review")
def eval_review_command(
    drafts: Annotated[Path, typer.Argument(help="A drafts file written by `nl2sql eval seed`.")],
    into: Annotated[Path, typer.Option("--into", help="The suite approved cases join (created when missing).")],
    reviewer: Annotated[str, typer.Option("--reviewer", help="Your id, kept on each case you approve.")],
) -> None:
    """Walk the drafts one by one: see the question, its SQL and first rows, then approve, edit the question, drop
    or skip it (q stops; each decision is written at once)."""
    from rich.table import Table

    from nl2sql.evaluation.seed import Verdict, review_drafts
    from nl2sql.evaluation.suite import EvalCase

    def decide(case: EvalCase) -> Verdict:
        console.rule(f"{escape(case.id)} · {case.difficulty or ''} · {', '.join(case.tables)}")
        console.print(f"[bold]{escape(case.question)}[/]")
        console.print(escape(case.sql or ""), soft_wrap=True)
        rows = case.rows or []
        if rows:
            table = Table(*[escape(str(k)) for k in rows[0]])
            for row in rows[:5]:
                table.add_row(*[escape(str(v)) for v in row.values()])
            print_table(table)
        console.print(f"{len(rows)} row{'s' if len(rows) != 1 else ''} · outcome: "
                      + ", ".join(f"{role} {o}" for role, o in case.outcome.items()))
        question = None
        while True:
            choice = typer.prompt("[a]pprove, [e]dit question, [d]rop, [s]kip, [q]uit", default="s").strip().lower()
            if choice in ("a", "approve"):
                return Verdict("approve", question)
            if choice in ("e", "edit"):
                question = typer.prompt("Question", default=question or case.question)
                console.print(f"[bold]{escape(question)}[/] (approve to keep it)")
                continue
            if choice in ("d", "drop"):
                return Verdict("drop")
            if choice in ("s", "skip"):
                return Verdict("skip")
            if choice in ("q", "quit"):
                return Verdict("quit")
            err_console.print("Answer a, e, d, s or q.")

    report = review_drafts(drafts, into, reviewer, decide)
    console.print(f"{report.approved} approved into {escape(str(into))}, {report.dropped} dropped, "
                  f"{report.left} drafts left in {escape(str(drafts))}.")


@eval_app.command("publish")
def eval_publish_command(
    reports: Annotated[list[Path] | None, typer.Argument(help="Reports (`eval run --out`) to record first.")] = None,
    root: Annotated[Path, typer.Option("--root", help="The records folder.")] = Path("benchmarks"),
    note: Annotated[str | None, typer.Option("--note", help="What changed, kept in the records.")] = None,
) -> None:
    """Write records for the reports, then rebuild docs/benchmarks.md and the README's results from every record."""
    from nl2sql.evaluation.records import check_recordable, publish, write_records

    loaded = [(report, json.loads(report.read_text())) for report in reports or []]
    for report, data in loaded:  # every report checked before any record is written
        check_recordable(data, str(report))
    for _report, data in loaded:
        for path in write_records(data, root, note=note):
            console.print(f"recorded {escape(str(path))}")
    publish(root, Path("docs/benchmarks.md"), Path("README.md"))
    console.print("Rebuilt docs/benchmarks.md and the README's results.")
