"""Eval seeding through the fake model server: drafts checked by the engine under the caller's scope, drops counted
by reason, the call limit and the dollar cap, targets that are never written, and the `eval-seed` flow."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from nl2sql.config import Config
from nl2sql.errors import GENERIC_REFUSAL, ConfigError, SecurityViolation
from nl2sql.evaluation.seed import CALLS_PER_BATCH, Seeding, check_seed_target, existing_questions
from nl2sql.evaluation.suite import load_suite
from nl2sql.llm.fake import FakeLLMServer
from nl2sql.pipeline import Runtime
from nl2sql.project import load_project
from tests.support.ask import write_ask_project

ROOT = Path(__file__).resolve().parents[2]
#: Tables of chinook a viewer may read (the music catalog).
CATALOG = {"Album", "Artist", "Genre", "MediaType", "Playlist", "PlaylistTrack", "Track"}
DENIED_BY_HOOK = "How much revenue did each invoice bring?"


@pytest.fixture(scope="module")
def project(fake: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Config:
    """The demo with the fake model, the `sql` planner format, and a hook that denies reading invoices."""
    return write_ask_project(tmp_path_factory.mktemp("seed"), fake, planner={"format": "sql"},
                             hooks=[{"use": "deny_tables", "options": {"tables": ["chinook.Invoice"]}}])


def album_cases(start: int = 1) -> Any:
    """Endless distinct proposals over the catalog: the tracks of album `start`, `start` + 1, …"""
    for n in itertools.count(start):
        yield {"question": f"How many tracks does album {n} hold?", "difficulty": "easy",
               "sql": f"SELECT COUNT(*) AS tracks FROM Track WHERE AlbumId = {n}"}


def scripted(fake: FakeLLMServer, cases: Any, *, extra: list[dict] | None = None) -> None:
    """The seeder answers five of `cases` a call, `extra` added to the first batch."""
    fake.reset()
    first = [True]

    def answer(body: dict) -> dict:
        batch = [next(cases) for _ in range(5)]
        if first[0] and extra:
            batch = [*extra, *batch][:5]
        first[0] = False
        return {"cases": batch}

    fake.respond_with("SeedBatch", answer)


def seeding(project: Config, out: Path, *, roles: list[str], count: int, max_cost_usd: float = 5.0,
            config: Config | None = None, datasource: str = "chinook") -> Seeding:
    return Seeding(Runtime(config or project, observers=[]), datasource, count=count, roles=roles, user_id=None,
                   max_cost_usd=max_cost_usd, out=out, existing=existing_questions(out))


def test_twenty_drafts_are_written_checked_and_scoped_and_a_hook_deny_is_counted(
        project: Config, fake: FakeLLMServer, tmp_path: Path) -> None:
    out = tmp_path / "drafts.yaml"
    invoice = {"question": DENIED_BY_HOOK, "difficulty": "medium",
               "sql": "SELECT InvoiceId, Total FROM Invoice ORDER BY Total DESC LIMIT 5"}
    as_sql = {"question": "SELECT * FROM Track", "difficulty": "easy", "sql": "SELECT TrackId FROM Track LIMIT 3"}
    scripted(fake, album_cases(), extra=[invoice, as_sql])
    report = seeding(project, out, roles=["analyst"], count=20).run()

    assert (report.written, report.stopped, report.exit_code) == (20, "count_reached", 0)
    assert report.dropped == {"hook_denied": 1, "invalid_question": 1}
    assert report.proposals == 22 and report.calls == fake.calls("SeedBatch") == 5
    # every call samples, each with its own seed (asked again at temperature 0 a model repeats itself)
    assert [(r["temperature"], r["seed"]) for r in fake.requests] == [(0.8, n) for n in range(1, 6)]
    assert report.cost_usd is not None and report.cost_usd > 0
    drafts = load_suite(out).cases
    assert len(drafts) == 20 and len({c.id for c in drafts}) == 20
    first = drafts[0]
    assert (first.status, first.origin, first.datasources, first.tables) == ("draft", "seeded", ["chinook"], ["Track"])
    assert first.plan is not None and first.sql is not None and "Track" in first.sql
    assert first.rows == [{"tracks": 10}]  # album 1 holds ten tracks: the gold rows, run by the engine
    # an outcome per role from the policies: the catalog is the viewer's and the analyst's, not the support desk's
    assert first.outcome == {"admin": "allowed", "analyst": "allowed", "viewer": "allowed", "support": "refused"}
    assert DENIED_BY_HOOK not in {c.question for c in drafts}

    # a second run adds to the file and is shown the questions written so far (the newest ten)
    scripted(fake, album_cases(100), extra=[{**next(album_cases()), "question": "how many tracks does  album 1 hold?"}])
    again = seeding(project, out, roles=["analyst"], count=3).run()
    assert again.written == 3 and again.dropped == {"duplicate": 1}  # the same question, whatever its case and spaces
    assert len(load_suite(out).cases) == 23
    shown = fake.requests[0]["messages"][-1]["content"]
    assert "20 questions exist already" in shown and "album 20 hold?" in shown and "album 10 hold?" not in shown


def test_a_proposal_the_result_checks_doubt_is_dropped(project: Config, fake: FakeLLMServer, tmp_path: Path) -> None:
    counted_twice = {"question": "How many albums have tracks?", "difficulty": "easy",
                     "sql": "SELECT COUNT(a.AlbumId) AS albums FROM Album a JOIN Track t ON t.AlbumId = a.AlbumId"}
    nothing = {"question": "Who composed the first tracks without a composer?", "difficulty": "easy",
               "sql": "SELECT Composer FROM Track WHERE Composer IS NULL ORDER BY TrackId LIMIT 3"}
    scripted(fake, album_cases(), extra=[counted_twice, nothing])
    # no hook at execute.before here, so the fan-out check may run its probe
    report = seeding(project, tmp_path / "drafts.yaml", roles=["analyst"], count=3,
                     config=project.model_copy(update={"hooks": []})).run()
    assert report.written == 3 and report.dropped == {"join_fan_out": 1, "all_null": 1}
    assert {c.question for c in load_suite(tmp_path / "drafts.yaml").cases}.isdisjoint(
        {counted_twice["question"], nothing["question"]})


def test_a_model_answering_nothing_usable_stops_at_the_call_limit(project: Config, fake: FakeLLMServer,
                                                                  tmp_path: Path) -> None:
    def nothing_usable() -> Any:
        for n in itertools.count(1):
            yield {"question": f"What is in the table nowhere {n}?", "difficulty": "easy",
                   "sql": f"SELECT thing FROM nowhere_{n}"}

    scripted(fake, nothing_usable())
    out = tmp_path / "drafts.yaml"
    report = seeding(project, out, roles=["analyst"], count=10).run()
    assert (report.written, report.stopped, report.exit_code) == (0, "call_limit", 3)
    assert fake.calls("SeedBatch") == CALLS_PER_BATCH and report.dropped == {"refused": 15}
    assert not out.exists()


def test_the_dollar_cap_stops_seeding_and_keeps_what_was_written(project: Config, fake: FakeLLMServer,
                                                                 tmp_path: Path) -> None:
    scripted(fake, album_cases())
    out = tmp_path / "drafts.yaml"
    report = seeding(project, out, roles=["analyst"], count=50, max_cost_usd=0.000001).run()
    assert (report.stopped, report.exit_code, report.calls) == ("cost_cap", 3, 1)
    assert report.written == 5 and len(load_suite(out).cases) == 5  # the first call's drafts were kept


def test_a_viewer_is_shown_and_gets_only_catalog_tables(project: Config, fake: FakeLLMServer, tmp_path: Path) -> None:
    customers = {"question": "How many customers live in France?", "difficulty": "easy",
                 "sql": "SELECT COUNT(*) AS customers FROM Customer WHERE Country = 'France'"}
    scripted(fake, album_cases(), extra=[customers])
    out = tmp_path / "drafts.yaml"
    report = seeding(project, out, roles=["viewer"], count=6).run()
    assert report.written == 6 and report.dropped == {"refused": 1}
    assert all(set(c.tables) <= CATALOG for c in load_suite(out).cases)
    prompt = fake.requests[0]["messages"][-1]["content"]
    assert "CREATE TABLE" in prompt and "Track" in prompt
    assert "Customer" not in prompt and "Invoice" not in prompt and "Employee" not in prompt


def test_refusals_before_any_call(project: Config, fake: FakeLLMServer, tmp_path: Path) -> None:
    fake.reset()
    out = tmp_path / "drafts.yaml"
    with pytest.raises(SecurityViolation) as refused:  # the viewer reads nothing of the web analytics
        seeding(project, out, roles=["viewer"], count=5, datasource="webanalytics")
    assert refused.value.message == GENERIC_REFUSAL
    with pytest.raises(SecurityViolation):
        seeding(project, out, roles=[], count=5)
    raw = yaml.safe_load(project.path.read_text())
    raw["llm"]["prices"] = {}
    unpriced = project.path.parent / "unpriced.yaml"
    unpriced.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(ConfigError, match="has no price"):
        seeding(project, out, roles=["analyst"], count=5, config=load_project(unpriced))
    assert fake.calls() == 0


def test_drafts_never_go_into_a_reviewed_suite(project: Config, tmp_path: Path) -> None:
    for target in (ROOT / "suites" / "chinook.yaml", ROOT / "nl2sql" / "evaluation" / "presets" / "drafts.yaml"):
        with pytest.raises(ConfigError, match="drafts cannot be written there"):
            check_seed_target(target, project)
    named = project.model_copy(update={"evals": project.evals.model_copy(update={"suites": ["mine.yaml"]})})
    with pytest.raises(ConfigError, match=r"names it in evals\.suites"):
        check_seed_target(project.base_dir / "mine.yaml", named)
    check_seed_target(tmp_path / "drafts.yaml", project)  # a new file is fine


@pytest.mark.prefect
def test_the_eval_seed_flow_runs_a_task_per_batch_and_fails_short_of_its_count(
        prefect_server: None, project: Config, fake: FakeLLMServer, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from nl2sql.flows.seed import eval_seed

    scripted(fake, album_cases())
    out = tmp_path / "drafts.yaml"
    state = eval_seed("chinook", str(out), 1.0, ["analyst"], count=7, config=str(project.path), return_state=True)
    report = state.result()
    assert state.is_completed() and report["written"] == 7 and report["exit_code"] == 0
    assert len(load_suite(out).cases) == 7
    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
    assert sorted(t.name for t in tasks) == ["batch 1 (5 wanted)", "batch 2 (2 wanted)"]

    fake.reset()
    fake.respond_with("SeedBatch", lambda body: {"cases": []})
    failed = eval_seed("chinook", str(tmp_path / "none.yaml"), 1.0, ["analyst"], count=3, config=str(project.path),
                       return_state=True)
    assert failed.is_failed() and failed.result(raise_on_failure=False)["stopped"] == "call_limit"


def test_review_moves_approved_drafts_into_a_suite_and_drops_the_rest(project: Config, fake: FakeLLMServer,
                                                                      tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    scripted(fake, album_cases())
    drafts = tmp_path / "drafts.yaml"
    seeding(project, drafts, roles=["analyst"], count=5).run()
    into = tmp_path / "mine.yaml"
    answers = "a\ne\nHow many songs are on album 2?\na\nd\nx\ns\nq\n"  # approve, edit+approve, drop, skip, stop
    proc = subprocess.run([str(Path(sys.executable).parent / "nl2sql"), "-c", str(project.path), "eval", "review",
                           str(drafts), "--into", str(into), "--reviewer", "ann"], input=answers, text=True,
                          capture_output=True, timeout=120, env={**os.environ, "COLUMNS": "300"})
    assert proc.returncode == 0, proc.stderr
    assert "Answer a, e, d, s or q." in proc.stderr and "Traceback" not in proc.stderr
    assert "2 approved into" in proc.stdout and "1 dropped" in proc.stdout and "2 drafts left" in proc.stdout
    approved = load_suite(into).cases
    assert [c.question for c in approved] == ["How many tracks does album 1 hold?", "How many songs are on album 2?"]
    assert all((c.status, c.reviewed_by, c.origin) == ("approved", "ann", "seeded") for c in approved)
    assert approved[1].rows == [{"tracks": 1}]  # the gold rows go with it, unchanged
    left = load_suite(drafts).cases
    assert [c.question for c in left] == ["How many tracks does album 4 hold?", "How many tracks does album 5 hold?"]

    from nl2sql.evaluation.seed import Verdict, review_drafts

    with pytest.raises(ConfigError, match="back into the drafts file"):
        review_drafts(drafts, drafts, "ann", lambda case: Verdict("approve"))
