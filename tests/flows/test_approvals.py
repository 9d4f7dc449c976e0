"""Approval as a paused flow run, against a real `prefect server start` on loopback (started here)."""

from __future__ import annotations

import contextvars
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from nl2sql.config import Config
from nl2sql.index.store import StateStore
from nl2sql.llm.fake import FakeLLMServer
from nl2sql.pipeline import QueryResult
from nl2sql.policies.users import token_hash, token_public_key
from tests.support.ask import INVOICE_PLAN, ModelScript, write_ask_project
from tests.support.prefect_server import steady_prefect_server

pytestmark = pytest.mark.prefect
QUESTION = "What is the total of all invoices ever?"
REVIEW = [{"use": "sql_review", "options": {"tables": ["chinook.Invoice*"]}, "approver_roles": ["admin"]}]
#: Known users: ann asks (and could approve, but not her own), dba approves, carl holds no approver role.
USERS = {name: {"roles": roles, "token_sha256": token_hash(f"{name}-token"),
                "token_public_key": token_public_key(f"{name}-token")}
         for name, roles in (("ann", ["analyst", "admin"]), ("dba", ["admin"]), ("carl", ["analyst"]))}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with steady_prefect_server(tmp_path_factory.mktemp("prefect-server")) as (api, env), \
            temporary_settings(updates={PREFECT_API_URL: api}):
        yield api, env
        _drain_workers()  # while the server still answers: a worker left holding its events blocks later drains


def _drain_workers() -> None:
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all()
    EventsWorker.drain_all()


@pytest.fixture(scope="module")
def project(fake: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Config:
    return write_ask_project(tmp_path_factory.mktemp("approvals"), fake, hooks=REVIEW, plan_cache=False,
                             approvals={"timeout_s": 120, "poll_interval_s": 1})


@pytest.fixture
def model(fake: FakeLLMServer) -> ModelScript:
    script = ModelScript(fake)
    script.plan(QUESTION, INVOICE_PLAN)
    return script


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll until `check()` gives something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


class Asking:
    """A question asked through the ask flow on a thread (the flow blocks while it is paused)."""

    def __init__(self, config_path: Path, role: str = "analyst", user: str = "ann") -> None:
        self.result: QueryResult | None = None
        self.error: BaseException | None = None
        self.store = StateStore(config_path.parent / ".nl2sql")
        self.known = {a["trace_id"] for a in self.store.approvals(status=None)}

        def go() -> None:
            from nl2sql.flows.ask import ask_here

            try:
                self.result = ask_here(QUESTION, role=role, user_id=user, config=str(config_path))
            except BaseException as exc:  # reported by finish()
                self.error = exc

        context = contextvars.copy_context()  # the settings pointing at the test's server travel with it
        self.thread = threading.Thread(target=context.run, args=(go,), daemon=True)
        self.thread.start()

    def request(self) -> dict:
        """The request the run waits on, once its flow run is paused."""
        from prefect import get_client

        item = wait_for("an approval request", lambda: next(
            (a for a in self.store.approvals() if a["trace_id"] not in self.known), None))
        with get_client(sync_client=True) as client:
            wait_for("the paused state", lambda: client.read_flow_run(item["trace_id"]).state.is_paused())
        return item

    def finish(self) -> QueryResult:
        self.thread.join(120)
        assert self.error is None, self.error
        assert self.result is not None
        return self.result


def resume(item: dict, **answer: Any) -> None:
    from prefect.flow_runs import resume_flow_run

    request = item["request"]
    run_input = {"approve": True, "approver": "root", "role": "admin", "comment": "",
                 "request_id": request["id"], "sql_sha256": request["sql_sha256"], **answer}
    resume_flow_run(item["trace_id"], run_input=run_input)


def _pause_key(run_id: str) -> str | None:
    from prefect import get_client

    with get_client(sync_client=True) as client:
        state = client.read_flow_run(run_id).state
    return state.state_details.pause_key if state is not None and state.is_paused() else None


def paused_again(run_id: str, old_key: str | None) -> str:
    """Wait until the run has read an answer that did not count and paused again (under a new key)."""
    return wait_for("the run to pause again", lambda: (k := _pause_key(run_id)) and k != old_key and k, timeout=60)


def post_resume(api: str, run_id: str, run_input: dict | None) -> str:
    """POST to the Prefect API's resume endpoint as any client could; the orchestration status it answers."""
    import httpx

    body = {} if run_input is None else {"run_input": run_input}
    response = httpx.post(f"{api}/flow_runs/{run_id}/resume", json=body, timeout=30)
    response.raise_for_status()
    return response.json()["status"]


def test_a_reviewed_table_pauses_and_a_valid_approver_runs_the_sql(server: Any, project: Config,
                                                                   model: ModelScript) -> None:
    from prefect import get_client

    asking = Asking(project.path)
    item = asking.request()
    assert item["request"]["reason"] == "reads chinook.Invoice" and item["request"]["asker"] == "ann"
    resume(item, comment="quarterly close")
    result = asking.finish()
    assert result.status == "success", result.errors
    assert result.sub_queries[0].rows == [[2328.6]] or round(result.sub_queries[0].rows[0][0], 2) == 2328.6
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(result.trace_id).state.is_completed()
    assert asking.store.approvals(status="approved", trace_id=result.trace_id)[0]["approver"] == "root"


def test_an_approver_without_the_role_ends_the_run_denied(server: Any, project: Config, model: ModelScript) -> None:
    asking = Asking(project.path)
    item = asking.request()
    key = _pause_key(item["trace_id"])
    resume(item, approver="", role="")  # empty: no answer at all, the run keeps waiting (it used to fail)
    paused_again(item["trace_id"], key)
    assert asking.store.approvals(trace_id=item["trace_id"])[0]["status"] == "pending"
    resume(item, role="analyst")
    result = asking.finish()
    assert result.status == "error" and [e.code for e in result.errors] == ["HOOK_DENIED"]
    assert "role 'analyst' may not approve" in result.errors[0].message and not result.sub_queries[0].rows


def test_a_tampered_sql_hash_is_refused(server: Any, project: Config, model: ModelScript) -> None:
    asking = Asking(project.path)
    resume(asking.request(), sql_sha256="0" * 64)
    result = asking.finish()
    assert [e.code for e in result.errors] == ["HOOK_DENIED"]
    assert "not the SQL that would run" in result.errors[0].message


def test_a_denial_ends_the_run_with_the_reason(server: Any, project: Config, model: ModelScript) -> None:
    asking = Asking(project.path)
    resume(asking.request(), approve=False, comment="not before the audit")
    result = asking.finish()
    assert result.errors[0].message == "The statement was not approved: denied by root: not before the audit."


def test_no_answer_in_time_leaves_the_question_needs_approval(server: Any, project: Config,
                                                              model: ModelScript) -> None:
    raw = yaml.safe_load(project.path.read_text())
    raw["settings"]["approvals"]["timeout_s"] = 2
    quick = project.path.with_name("quick.yaml")
    quick.write_text(yaml.safe_dump(raw, sort_keys=False))
    asking = Asking(quick)
    result = asking.finish()
    assert result.status == "needs_approval" and result.approvals[0].reason == "reads chinook.Invoice"
    assert "nl2sql approve" in result.answer.content


def test_an_approval_after_the_run_time_limit_still_runs_the_statement(server: Any, project: Config,
                                                                       model: ModelScript) -> None:
    """The wait for an approver is bounded by settings.approvals.timeout_s alone: the run's own time limit
    (settings.pipeline.timeout_s) stands still while it waits."""
    raw = yaml.safe_load(project.path.read_text())
    raw["settings"].setdefault("pipeline", {})["timeout_s"] = 4
    short = project.path.with_name("short_run.yaml")
    short.write_text(yaml.safe_dump(raw, sort_keys=False))
    asking = Asking(short)
    item = asking.request()
    time.sleep(6)  # past the run's 4 s
    resume(item)
    result = asking.finish()
    assert result.status == "success", result.errors
    assert round(result.sub_queries[0].rows[0][0], 2) == 2328.6


class _Receiver(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[float, dict]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _Receiver.received.append((time.time(), json.loads(body or b"{}")))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_automation_calls_the_webhook_when_approval_is_requested(server: Any, project: Config,
                                                                     model: ModelScript) -> None:
    from nl2sql.events.prefect_automations import apply_approval_automation

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{receiver.server_address[1]}/approvers"
        first, created = apply_approval_automation(url)
        again, created_again = apply_approval_automation(url)  # idempotent: the same automation, updated
        assert created and not created_again and first == again
        time.sleep(2)  # the server loads new automations on its next refresh
        asking = Asking(project.path)
        item = asking.request()
        requested_at = item_time = time.time()
        got = wait_for("the webhook call", lambda: [b for t, b in _Receiver.received
                                                    if b.get("request_id") == item["request"]["id"]], timeout=30)
        delay = min(t for t, b in _Receiver.received if b.get("request_id") == item["request"]["id"]) - requested_at
        assert delay <= 5 and item_time
        body = got[0]
        assert body["run_id"] == item["trace_id"] and body["reason"] == "reads chinook.Invoice"
        assert body["approver_roles"] == ["admin"] and body["run_url"].endswith(item["trace_id"])
        resume(item, approve=False)
        asking.finish()
    finally:
        receiver.shutdown()


def test_a_deployment_run_suspends_and_resumes_without_a_second_planner_call(server: Any, project: Config,
                                                                             model: ModelScript,
                                                                             tmp_path: Path) -> None:
    from prefect import get_client
    from prefect.deployments import run_deployment

    _, env = server
    serve_env = {**env, "PREFECT_HOME": str(tmp_path / "runner-home"), "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    code = ("from nl2sql.flows.ask import ask\n"
            "ask.with_options(persist_result=True).serve(name='approvals-test', limit=2)\n")
    runner = subprocess.Popen([sys.executable, "-c", code], env=serve_env, cwd=str(Path(__file__).parents[2]),
                              stdout=subprocess.DEVNULL, stderr=(tmp_path / "runner.log").open("w"))
    try:
        with get_client(sync_client=True) as client:
            wait_for("the deployment", lambda: _deployment(client, "ask/approvals-test"), timeout=90)
            run = run_deployment("ask/approvals-test", timeout=0, parameters={
                "question": QUESTION, "role": "analyst", "user_id": "ann", "config": str(project.path)})
            store = StateStore(project.state_dir)
            item = wait_for("the request", lambda: next(iter(store.approvals(trace_id=str(run.id))), None),
                            timeout=120)
            wait_for("the suspension", lambda: client.read_flow_run(run.id).state.name == "Suspended")
            assert model.fake.calls("PlanModel") == 1
            assert store.pinned_run(str(run.id)) is not None
            key = _pause_key(str(run.id))
            resume(item, approver="", role="")  # no answer: the restarted run reads it, then suspends again
            paused_again(str(run.id), key)
            assert client.read_flow_run(run.id).state.name == "Suspended"
            resume(item)
            final = wait_for("the completed run", lambda: (s := client.read_flow_run(run.id).state).is_final() and s,
                             timeout=120)
        assert final.is_completed(), (tmp_path / "runner.log").read_text()[-3000:]
        assert model.fake.calls("PlanModel") == 1  # the resumed run planned nothing again
        trace = store.trace(str(run.id))
        assert trace["status"] == "success" and trace["sub_queries"][0]["total_rows"] == 1
    finally:
        runner.terminate()
        runner.wait(30)


def _deployment(client: Any, name: str) -> Any:
    try:
        return client.read_deployment_by_name(name)
    except Exception:
        return None


@pytest.fixture(scope="module")
def users_config(project: Config) -> Path:
    """The approvals project with `policies.users` (same folder, same index and state)."""
    raw = yaml.safe_load(project.path.read_text())
    raw["policies"]["users"] = USERS
    path = project.path.with_name("users.yaml")
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.mark.slow
def test_with_users_no_resume_without_a_valid_approver_credential_runs_the_statement(
        server: Any, users_config: Path, model: ModelScript, capsys: pytest.CaptureFixture[str]) -> None:
    from prefect import get_client

    from nl2sql.cli.main import main

    api, _ = server
    asking = Asking(users_config, role="analyst", user="ann")
    item = asking.request()
    run_id, request = item["trace_id"], item["request"]
    filled = {"request_id": request["id"], "sql_sha256": request["sql_sha256"]}
    approve = {"approve": True, **filled}
    no_answers = [
        None,                                                                 # no run_input at all
        {},                                                                   # nothing filled in
        {**approve, "approver": "", "role": "", "token": ""},                 # empty strings
        {**approve, "approver": "dba", "role": "admin"},                      # no token
        {**approve, "approver": "dba", "role": "admin", "token": "guess"},    # a wrong token
        {**approve, "approver": "carl", "token": "carl-token"},               # right token, no approver role
        {**approve, "approver": "carl", "role": "admin", "token": "carl-token"},
        {**approve, "approver": "dba", "role": "admin", "token": "carl-token"},  # another user's token
        {**approve, "approver": "ann", "role": "admin", "token": "ann-token"},   # the asker's own: self-approval
        {**approve, "approver": "mallory", "role": "admin", "token": "dba-token"},  # not a configured user
        {"approve": False, **filled, "approver": "carl", "token": "carl-token"},  # nor may a non-approver deny
    ]
    for run_input in no_answers:
        key = _pause_key(run_id)
        assert post_resume(api, run_id, run_input) == "ACCEPT"
        paused_again(run_id, key)
        assert asking.thread.is_alive() and asking.result is None, run_input
    for off_form in ({**approve, "approver": "dba", "tokn": "dba-token"},        # not a field of the form
                     {**approve, "approve": "yes", "approver": "dba", "token": "dba-token"}):  # not a boolean
        key = _pause_key(run_id)
        assert post_resume(api, run_id, off_form) == "REJECT" and _pause_key(run_id) == key
    assert asking.store.approvals(trace_id=run_id)[0]["status"] == "pending"
    assert post_resume(api, run_id, {**approve, "approver": "dba", "token": "dba-token", "comment": "ok"}) == "ACCEPT"
    result = asking.finish()
    assert result.status == "success", result.errors
    assert round(result.sub_queries[0].rows[0][0], 2) == 2328.6
    resolved = asking.store.approvals(status="approved", trace_id=run_id)[0]
    assert (resolved["approver"], resolved["role"]) == ("dba", "admin")
    with get_client(sync_client=True) as client:  # no answer, hence no token, is left in the Prefect API
        inputs = client.filter_flow_run_input(run_id, key_prefix="paused-", limit=100, exclude_keys=set())
        assert inputs and not [i for i in inputs if "-token" in i.value]

    # `nl2sql approve` on a run that is no longer paused (or unknown to Prefect): one line, exit 1.
    from uuid import uuid4

    from nl2sql.hooks.approval import ApprovalRequest

    capsys.readouterr()  # the run's own log lines so far: only the command's output is read below
    for target in (run_id, str(uuid4())):
        stale = ApprovalRequest.build(question=QUESTION, asker="ann", hook="sql_review", datasource_id="chinook",
                                      sub_query_id="sq1", sql=f"SELECT 1 -- {target}", reason="reads chinook.Invoice",
                                      approver_roles=["admin"])
        asking.store.save_approval(target, stale.id, stale.model_dump())
        try:
            main(["-c", str(users_config), "approve", target, "--user", "dba", "--token", "dba-token"])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        _, err = capsys.readouterr()
        assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert ("is not paused (state: Completed)" if target == run_id else "not known to the Prefect API") in err
