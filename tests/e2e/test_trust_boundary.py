"""The trust boundary as a user meets it, through the installed `nl2sql` in subprocesses: `index diff` shows a
caller only its tables, a statement that starts with '-' runs after `--`, a plan's numbers are bounded before
any SQL is written, `nl2sql ask` falls back when the desk resets the connection, an approval leaves no token in
any file of the state folder, and that folder is its owner's alone."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from nl2sql.demo import init_demo
from nl2sql.errors import GENERIC_REFUSAL
from nl2sql.index.service import IndexService
from nl2sql.index.store import StateStore
from nl2sql.policies.users import new_token, token_hash, token_public_key
from tests.support.loopback import LoopbackServer

NL2SQL = Path(sys.executable).parent / "nl2sql"
EARNED = "How much did we earn in each year?"  # a verified query on chinook.Invoice: no model needed


def nl2sql(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The installed executable, finished; `env` replaces the environment when given."""
    return subprocess.run([str(NL2SQL), *args], capture_output=True, text=True, timeout=timeout,
                          env={"COLUMNS": "200", **(os.environ if env is None else env)}, stdin=subprocess.DEVNULL)


def own_prefect_env() -> dict[str, str]:
    """The test's environment without its Prefect home or API: a command then keeps Prefect's home, and its
    temporary server's database, in the project's state folder, as a user's command does."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_HOME", "PREFECT_API_URL")}
    return {**env, "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def project_copy(demo_dir: Path, target: Path, state_dir: Path, **changes: object) -> Path:
    """The demo's configuration written into `target` (its data read where the demo has it), with its state
    folder at `state_dir` and top-level `changes`."""
    raw = yaml.safe_load((demo_dir / "nl2sql.yaml").read_text())
    for ds in raw["datasources"]:
        if "url" in ds and ":///" in ds["url"] and not ds["url"].split(":///")[1].startswith("/"):
            ds["url"] = ds["url"].replace(":///", f":///{demo_dir}/")
    raw["storage"] = {"state_dir": str(state_dir)}
    raw.update(changes)
    path = target / "nl2sql.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def indexed(demo_dir: Path, demo_index: IndexService, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's configuration over the session's built index (read it, do not write its state)."""
    return project_copy(demo_dir, tmp_path_factory.mktemp("indexed"), demo_index.store.state_dir)


# --- index diff: the caller's tables only ---------------------------------------------------------------------


def test_index_diff_shows_the_default_role_only_its_own_tables(indexed: Path) -> None:
    done = nl2sql("-c", str(indexed), "index", "diff", "chinook")  # no --role: policies.default_role (viewer)
    assert done.returncode == 0, done.stderr
    assert "table added: `Genre`" in done.stdout and "table added: `Track`" in done.stdout
    for denied in ("Employee", "Invoice", "Customer", "SupportRepId", "BillingCity"):
        assert denied not in done.stdout, denied


def test_index_diff_takes_the_role_and_the_user_as_the_other_commands(indexed: Path, tmp_path: Path,
                                                                     demo_dir: Path) -> None:
    analyst = json.loads(nl2sql("-c", str(indexed), "index", "diff", "chinook", "--role", "analyst",
                                "--json").stdout)
    assert analyst["role"] == "analyst" and "Invoice" in analyst["added_tables"]
    assert "Employee" not in json.dumps(analyst)
    admin = json.loads(nl2sql("-c", str(indexed), "index", "diff", "chinook", "--role", "admin", "--json").stdout)
    assert "Employee" in admin["added_tables"]
    refused = nl2sql("-c", str(indexed), "index", "diff", "support", "--role", "viewer")
    assert refused.returncode == 1 and GENERIC_REFUSAL in refused.stderr and "tickets" not in refused.stderr
    unknown = nl2sql("-c", str(indexed), "index", "diff", "chinook", "--role", "superuser")
    assert unknown.returncode == 2 and "UNKNOWN_NAME" in unknown.stderr
    raw = yaml.safe_load(indexed.read_text())
    raw["policies"]["users"] = {"vic": {"roles": ["viewer"]}}
    with_users = tmp_path / "users.yaml"
    with_users.write_text(yaml.safe_dump(raw, sort_keys=False))
    mallory = nl2sql("-c", str(with_users), "index", "diff", "chinook", "--user", "vic", "--role", "admin")
    assert mallory.returncode == 2 and "IDENTITY_ERROR" in mallory.stderr and "Employee" not in mallory.stdout
    vic = nl2sql("-c", str(with_users), "index", "diff", "chinook", "--user", "vic")
    assert vic.returncode == 0 and "Genre" in vic.stdout and "Invoice" not in vic.stdout


# --- a statement that starts with '-', and a plan's numbers --------------------------------------------------


def test_a_statement_that_starts_with_a_comment_runs_after_double_dash(demo_dir: Path) -> None:
    config, statement = str(demo_dir / "nl2sql.yaml"), "-- the first genre\nSELECT Name FROM Genre ORDER BY GenreId LIMIT 1"
    done = nl2sql("-c", config, "sql", "-d", "chinook", "--role", "viewer", "--json", "--", statement)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == [{"Name": "Rock"}]
    read_as_option = nl2sql("-c", config, "sql", statement, "-d", "chinook")
    assert read_as_option.returncode == 2 and "Traceback" not in read_as_option.stderr
    assert "goes after `--`" in read_as_option.stderr


@pytest.mark.parametrize(("change", "code"), [
    ({"limit": 10**19}, "BAD_LIMIT"),                  # the finding: past 64 bits, it failed in the database
    ({"limit": 100_001}, "BAD_LIMIT"),                 # past settings.resources.max_rows
    ({"offset": 10**19}, "BAD_LIMIT"),
    ({"where": {"kind": "compare", "op": ">", "left": {"kind": "column", "table": "g", "column": "GenreId"},
                "right": {"kind": "literal", "value": 10**30}}}, "BAD_NUMBER"),
])
def test_a_plans_numbers_are_bounded_before_any_sql_is_written(demo_dir: Path, tmp_path: Path, change: dict,
                                                               code: str) -> None:
    plan = {"select": [{"expr": {"kind": "column", "table": "g", "column": "Name"}, "alias": None}],
            "from": {"table": "Genre", "alias": "g"}, **change}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    done = nl2sql("-c", str(demo_dir / "nl2sql.yaml"), "plan", "run", str(path), "-d", "chinook", "--role",
                  "viewer")
    assert done.returncode == 2 and "PLAN_INVALID" in done.stderr and code in done.stderr, done.stderr
    assert "DATASOURCE_ERROR" not in done.stderr and "Traceback" not in done.stderr


# --- the state folder's modes ----------------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_older_projects_state_is_made_private_on_its_next_use(demo_dir: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    StateStore(state).close()
    home = state / "prefect"
    home.mkdir()
    (home / "prefect.db").write_bytes(b"")
    (home / "prefect.db-wal").write_bytes(b"")
    for path in (state, state / "index", home):
        path.chmod(0o755)  # as an older version left them
    for path in (state / "state.db", state / "state.db-wal", home / "prefect.db", home / "prefect.db-wal"):
        if path.exists():
            path.chmod(0o644)
    config = project_copy(demo_dir, tmp_path, state)
    done = nl2sql("-c", str(config), "index", "versions", "chinook", env=own_prefect_env())
    assert done.returncode == 0, done.stderr
    assert {p.name: mode(p) for p in (state, state / "index", home)} == {"state": 0o700, "index": 0o700,
                                                                       "prefect": 0o700}
    files = [p for p in (*state.glob("state.db*"), *home.glob("prefect.db*"))]
    assert files and {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}


# --- the desk resets: `nl2sql ask` asks here ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.prefect
def test_ask_falls_back_to_asking_here_when_the_desk_resets(demo_dir: Path, demo_index: IndexService,
                                                            tmp_path: Path) -> None:
    state = tmp_path / "state"
    shutil.copytree(demo_index.store.state_dir, state, ignore=shutil.ignore_patterns("prefect", "serve-desk.json"))
    config = project_copy(demo_dir, tmp_path, state)
    desk = LoopbackServer()
    try:
        (state / "serve-desk.json").write_text(json.dumps({"pid": os.getpid(), "port": desk.port, "token": "t"}))
        done = nl2sql("-c", str(config), "ask", EARNED, "--role", "analyst", "--json")
    finally:
        desk.sock.close()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "success" and result["sub_queries"][0]["source"] == "verified"
    assert desk.taken == 3  # the first try and two more, then asked here


# --- an approval leaves no token behind -------------------------------------------------------------------------


def _run_state(prefect_db: Path, run_id: str) -> str | None:
    """The state type Prefect's database holds for a flow run (read beside its temporary server)."""
    try:
        with sqlite3.connect(f"file:{prefect_db}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute("SELECT state_type FROM flow_run WHERE id = ?", (run_id,)).fetchone()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def _files_holding(folder: Path, needle: bytes) -> list[str]:
    return [str(p.relative_to(folder)) for p in sorted(folder.rglob("*")) if p.is_file() and needle in p.read_bytes()]


@pytest.mark.slow
@pytest.mark.prefect
def test_an_approval_through_the_cli_leaves_no_token_in_the_state_folder(tmp_path: Path) -> None:
    """`nl2sql approve` signs its answer: no project file holds the token afterwards, the state is private, and
    an approval that comes after the run's own time limit (settings.pipeline.timeout_s) still runs the statement."""
    token = new_token()
    target = tmp_path / "project"
    config = init_demo(target, env={})
    raw = yaml.safe_load(config.read_text())
    raw["hooks"] = [{"use": "sql_review", "options": {"tables": ["chinook.Invoice*"]}, "approver_roles": ["admin"]}]
    raw.setdefault("settings", {})["approvals"] = {"timeout_s": 240, "poll_interval_s": 1}
    raw["settings"]["pipeline"] = {"timeout_s": 15}  # the approval comes after it: waiting is not the run's time
    raw["policies"]["users"] = {"ann": {"roles": ["analyst"]},
                                "dba": {"roles": ["admin"], "token_sha256": token_hash(token),
                                        "token_public_key": token_public_key(token)}}
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    env, state = own_prefect_env(), target / ".nl2sql"
    built = nl2sql("-c", str(config), "index", "build", "-d", "chinook", env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    asking = subprocess.Popen([str(NL2SQL), "-c", str(config), "ask", EARNED, "--user", "ann", "--role", "analyst",
                               "-d", "chinook", "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, stdin=subprocess.DEVNULL)
    try:
        deadline, pending = time.monotonic() + 180, []
        while not pending or _run_state(state / "prefect" / "prefect.db", pending[0]["trace_id"]) != "PAUSED":
            assert time.monotonic() < deadline and asking.poll() is None, asking.communicate(timeout=5)
            time.sleep(1)
            pending = StateStore(state).approvals()
        run_id = pending[0]["trace_id"]
        time.sleep(16)  # past the run's own 15 s
        approved = nl2sql("-c", str(config), "approve", run_id, "--user", "dba",
                          env={**env, "NL2SQL_APPROVAL_TOKEN": token})
        assert approved.returncode == 0 and "Approved" in approved.stdout, approved.stdout + approved.stderr
        assert not _files_holding(state, token.encode())  # while the run goes on (its -wal in use)
        out, err = asking.communicate(timeout=240)
    finally:
        if asking.poll() is None:
            asking.kill()
    assert asking.returncode == 0, out[-2000:] + err[-3000:]
    result = json.loads(out)
    assert result["status"] == "success" and [row[0] for row in result["sub_queries"][0]["rows"]][:1] == [2007]
    resolved = StateStore(state).approvals(status="approved", trace_id=run_id)[0]
    assert (resolved["approver"], resolved["role"]) == ("dba", "admin")  # the signed answer counted
    assert not _files_holding(target, token.encode()), "the approval token's plaintext is in a project file"
    prefect_home = state / "prefect"
    assert {p.name: mode(p) for p in (state, state / "index", prefect_home)} == {
        ".nl2sql": 0o700, "index": 0o700, "prefect": 0o700}
    databases = [*state.glob("state.db*"), *prefect_home.glob("prefect.db*")]
    assert {p.name for p in databases} >= {"state.db", "prefect.db"}
    assert {p.name: mode(p) for p in databases} == {p.name: 0o600 for p in databases}
    audit = state / "audit"
    if audit.exists():
        assert mode(audit) == 0o700 and all(mode(p) == 0o600 for p in audit.iterdir())
