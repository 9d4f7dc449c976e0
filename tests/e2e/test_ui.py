"""The UI path in a real browser (Debian's Chromium driven by Playwright): a question submitted through the `ask`
deployment's run form completes with its task runs and artifact; a question a `sql_review` hook holds is approved
in the Resume form and finishes. Runs are served by `nl2sql serve` on a real `prefect server start`.

Set NL2SQL_UI_SCREENSHOTS=DIR to keep the screenshots (docs/images holds the ones the docs show)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect, sync_playwright

from nl2sql.config import Config
from nl2sql.llm.fake import FakeLLMServer
from tests.support.ask import ModelScript, write_ask_project

pytestmark = [pytest.mark.slow, pytest.mark.prefect]

CHROMIUM = Path("/usr/bin/chromium")
#: Chromium as root on a machine with no network beyond loopback: no sandbox, nothing fetched in the background.
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
REVIEW = [{"use": "sql_review", "options": {"tables": ["chinook.Invoice*"]}, "approver_roles": ["admin"]}]
ENDED = ("Completed", "Failed", "Crashed", "Cancelled")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (`apt-get install chromium`; .ci/run installs it)")

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def served(fake: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A project whose sql_review hook holds statements on invoices, served by `nl2sql serve` on a real server;
    the UI's address."""
    from tests.support.prefect_server import steady_prefect_server

    project: Config = write_ask_project(tmp_path_factory.mktemp("ui"), fake, hooks=REVIEW,
                                        approvals={"timeout_s": 600, "poll_interval_s": 1})
    with steady_prefect_server(tmp_path_factory.mktemp("prefect-server")) as (api, env):
        log = tmp_path_factory.mktemp("serve") / "serve.log"
        proc = subprocess.Popen([str(Path(sys.executable).parent / "nl2sql"), "-c", str(project.path), "serve"],
                                env={**env, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}, stdout=log.open("w"),
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while "deployments are being served" not in log.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(1)
            yield api
        finally:
            proc.terminate()
            proc.wait(timeout=30)


#: What the model says of the urgent tickets (the fake server, scripted).
ANSWER = "17 urgent tickets are still open: 9 open and 8 pending."


def _field(page: Any, name: str) -> Any:
    """A property of a Prefect run or resume form, by its label (`role`, `role (Optional)`)."""
    label = page.locator(".schema-form-property__label", has_text=re.compile(rf"^{name}( \(Optional\))?$"))
    return page.locator("div.schema-form-property", has=label)


def _state(page: Any) -> str | None:
    """The flow run page's state, read after a reload (the page does not always poll)."""
    page.reload()
    page.wait_for_timeout(1000)
    header = page.locator("body").inner_text().split("Logs")[0]
    found = re.search(r"\b(Completed|Suspended|Paused|Failed|Crashed|Cancelled|Running|Pending|Scheduled)\b", header)
    return found.group(1) if found else None


def _wait_for_state(page: Any, wanted: tuple[str, ...], timeout: float = 120) -> str | None:
    deadline, state = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        state = _state(page)
        if state in wanted:
            return state
    return state


def _wait_for_text(page: Any, text: re.Pattern[str], tab: str, timeout: float = 90) -> None:
    """Wait for `text` on a run page's tab, opening the tab again after a reload when it is not there yet (the
    tab reads its list once, and a loaded machine may serve it late); the page's text in the failure."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            page.get_by_text(text).first.wait_for(timeout=15_000)
            return
        except PlaywrightTimeout:
            if time.monotonic() > deadline:
                seen = page.locator("body").inner_text()
                raise AssertionError(f"{text.pattern} not seen on the {tab} tab:\n{seen}") from None
        page.reload()
        page.get_by_text(tab, exact=True).first.click()


def _runs_asking(api: str, question: str) -> set[str]:
    """The ids of the flow runs whose question is `question` (read from the API: the UI's lists refresh late)."""
    from prefect import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api}), get_client(sync_client=True) as client:
        return {str(run.id) for run in client.read_flow_runs(limit=50) if run.parameters.get("question") == question}


def _ask_in_the_run_form(page: Any, api: str, question: str, role: str, shots: Path) -> None:
    """Open the ask deployment, fill its custom run form, submit, and open the new flow run."""
    ui = api.removesuffix("/api")
    before = _runs_asking(api, question)
    page.goto(f"{ui}/deployments")
    page.get_by_role("link", name="ask", exact=True).first.click()
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_role("button", name="Custom run").click()
    _field(page, "Question").locator("textarea").fill(question)
    role_field = _field(page, "Role")  # a list of the project's roles, its default role chosen
    expect(role_field.locator(".p-select-button__value")).to_have_text("viewer")
    control = role_field.locator("button.p-select-button__control")
    options = page.get_by_role("option")
    for open_it in (lambda: control.click(), lambda: control.press("Enter"), lambda: control.press("ArrowDown"),
                    lambda: control.press(" ")):
        open_it()
        page.wait_for_timeout(400)
        if options.count():
            break
    assert {options.nth(i).inner_text().strip() for i in range(options.count())} >= {"admin", "analyst",
                                                                                     "viewer", "support"}
    page.screenshot(path=str(shots / "ui-ask-run-roles.png"))
    page.get_by_role("option", name=role, exact=True).click()
    expect(role_field.locator(".p-select-button__value")).to_have_text(role)
    form_text = page.locator("body").inner_text()  # plain fields, nothing internal
    assert "Property is type" not in form_text
    assert not {"execute", "config", "artifact"} & {line.split(" (")[0].strip().lower() for line in form_text.splitlines()}
    page.screenshot(path=str(shots / "ui-ask-run-form.png"))
    page.get_by_role("button", name="Submit").click()
    deadline, new = time.monotonic() + 60, set()
    while not new and time.monotonic() < deadline:
        new = _runs_asking(api, question) - before
        time.sleep(0.5)
    assert len(new) == 1, f"the run form created {len(new)} runs"
    page.goto(f"{ui}/runs/flow-run/{new.pop()}")


@pytest.fixture
def shots(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    keep = os.environ.get("NL2SQL_UI_SCREENSHOTS")
    if keep:
        for png in tmp_path.glob("*.png"):
            shutil.copy(png, Path(keep) / png.name)


def test_a_question_from_the_run_form_completes_with_its_steps(browser: Any, served: str, shots: Path,
                                                               fake: FakeLLMServer) -> None:
    ModelScript(fake).answers["How many urgent tickets are still open?"] = ANSWER
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    _ask_in_the_run_form(page, served, "How many urgent tickets are still open?", "support", shots)
    assert _wait_for_state(page, ENDED) == "Completed"
    assert "How many urgent tickets are still open?" in page.locator("body").inner_text()  # named after it
    page.get_by_text("✓ verified queries").first.wait_for(timeout=30_000)  # its Logs tab: the steps in words
    expect(page.get_by_text("Asked by").first).to_be_visible()
    page.screenshot(path=str(shots / "ui-ask-run.png"))
    page.get_by_text("Task Runs", exact=True).click()
    page.get_by_text("verified queries").first.wait_for()  # its steps, each a task run, named as the CLI names them
    assert "ran · sq1 (support)" in page.locator("body").inner_text()
    page.get_by_text("Artifacts", exact=True).click()
    _wait_for_text(page, re.compile(r"rows-[0-9a-f-]{36}"), "Artifacts")  # the rows, a table of their own
    page.screenshot(path=str(shots / "ui-ask-artifacts.png"), full_page=True)
    page.get_by_text(re.compile(r"answer-[0-9a-f-]{36}")).first.click()  # the answer, as a person reads it
    answer = page.get_by_text(ANSWER).first
    answer.wait_for()
    expect(answer).to_be_visible()
    expect(page.get_by_text("still_open").first).to_be_visible()  # the first rows, in a table
    page.screenshot(path=str(shots / "ui-ask-answer.png"), full_page=True)
    page.close()


def test_a_held_question_is_approved_in_the_resume_form(browser: Any, served: str, shots: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    _ask_in_the_run_form(page, served, "How much did we earn in each year?", "analyst", shots)
    assert _wait_for_state(page, ("Suspended", *ENDED)) == "Suspended"
    page.get_by_role("button", name="Resume").click()
    form = page.locator("[role=dialog], .p-modal").first
    form.get_by_text("FROM Invoice").wait_for()  # the request: the SQL, the datasource, the approver roles
    page.wait_for_timeout(500)
    page.screenshot(path=str(shots / "ui-approval-request.png"))
    request = form.locator(".schema-form-property__description").first  # above the fields, inside the form
    for seen in ("Asked by:", "Question:", "How much did we earn in each year?", "reads chinook.Invoice",
                 "FROM Invoice", "Approver roles:"):  # what a person sees on opening the form, not scrolled to
        expect(request.get_by_text(seen).first).to_be_in_viewport()
    assert "Approver roles: admin" in form.inner_text()
    switch = _field(page, "Approve").locator("input[type=checkbox]")
    for _ in range(25):  # a styled switch, clicked in script: it may render before it listens
        if switch.is_checked():
            break
        switch.evaluate("box => box.click()")
        page.wait_for_timeout(200)
    expect(switch).to_be_checked()
    for name, value in (("Approver", "dba"), ("Role", "admin"), ("Comment", "Invoice totals are fine to show "
                                                                            "analysts.")):
        box = _field(page, name).locator("textarea")
        box.fill(value)
        expect(box).to_have_value(value)
    page.screenshot(path=str(shots / "ui-approval-resume.png"))
    page.get_by_role("button", name="Submit").click()
    try:  # the form closes once the server took the input; a refused input leaves it open with the reason
        form.wait_for(state="hidden", timeout=30_000)
    except PlaywrightTimeout:
        page.screenshot(path=str(shots / "ui-approval-refused.png"))
        pytest.fail(f"the Resume form stayed open after Submit: {page.locator('body').inner_text()[-2000:]}")
    assert _wait_for_state(page, ENDED) == "Completed"
    page.screenshot(path=str(shots / "ui-approval-done.png"))
    page.close()
