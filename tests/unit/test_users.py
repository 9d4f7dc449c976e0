"""Known identities: `policies.users`, the caller's role checks, approval tokens and the approver checks, and the
CLI commands that take --user and --role (no Prefect server: every check here runs before one is reached)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from nl2sql.config import Config
from nl2sql.config.models import PoliciesConfig
from nl2sql.errors import ConfigError
from nl2sql.hooks.approval import ApprovalRejected, ApprovalRequest, answer_message, check_approver
from nl2sql.index.store import StateStore
from nl2sql.policies.users import (
    PROOF_PREFIX,
    IdentityError,
    acting_role,
    acting_roles,
    new_token,
    same_secret,
    sign_answer,
    token_hash,
    token_matches,
    token_public_key,
)
from nl2sql.project import load_project
from tests.support.cli import run_cli

ROLES = {"admin": {}, "analyst": {"allow": ["chinook"]}, "viewer": {"allow": ["chinook.Genre"]}}
USERS = {"ann": {"roles": ["analyst", "admin"], "token_sha256": token_hash("ann-token")},
         "dba": {"roles": ["admin"], "token_sha256": token_hash("dba-token")},
         "carl": {"roles": ["viewer"], "token_sha256": token_hash("carl-token")},
         "dora": {"roles": ["admin"]}}


def policies(users: object = USERS) -> PoliciesConfig:
    return PoliciesConfig.model_validate({"roles": ROLES, "default_role": "viewer", "users": users})


def request(asker: str | None = "ann") -> ApprovalRequest:
    return ApprovalRequest.build(question="q", asker=asker, hook="sql_review", datasource_id="chinook",
                                 sub_query_id="sq1", sql="SELECT 1", reason="reads Invoice", approver_roles=["admin"])


# --- the caller's role -------------------------------------------------------------------------


def test_without_users_the_role_is_taken_as_given() -> None:
    open_policies = policies(None)
    assert acting_role(open_policies, None, "admin") == "admin"
    assert acting_role(open_policies, "anyone", None) is None
    assert acting_roles(open_policies, None, None) is None and acting_roles(open_policies, None, ["x"]) == ["x"]


def test_with_users_a_role_must_be_the_users_own() -> None:
    p = policies()
    assert acting_role(p, "ann", "admin") == "admin"
    assert acting_role(p, "ann", None) == "analyst"  # the first role listed
    assert acting_roles(p, "ann", None) == ["analyst", "admin"]
    assert acting_roles(p, "ann", ["analyst"]) == ["analyst"]


@pytest.mark.parametrize(("user", "role", "says"), [
    (None, "admin", "A user id is required"),
    ("", None, "A user id is required"),
    ("carl", "admin", "User 'carl' may not act in role 'admin'."),
    ("mallory", "admin", "User 'mallory' may not act in role 'admin'."),  # the same sentence for an unknown user
    ("mallory", None, "User 'mallory' is not a user policies.users knows."),
])
def test_a_missing_user_an_unknown_user_or_a_role_not_held_is_refused(user: str | None, role: str | None,
                                                                      says: str) -> None:
    with pytest.raises(IdentityError) as caught:
        acting_role(policies(), user, role)
    assert caught.value.message.startswith(says) and caught.value.code == "IDENTITY_ERROR"
    with pytest.raises(IdentityError):
        acting_roles(policies(), user, [role] if role else None)


def test_an_empty_users_mapping_lets_nobody_in() -> None:
    with pytest.raises(IdentityError):
        acting_role(policies({}), "ann", "analyst")


# --- configuration -----------------------------------------------------------------------------


def test_users_may_come_from_an_environment_variable_as_json(tmp_path: Path, demo_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    config = _project(tmp_path, demo_dir, "${env:H4_USERS}")
    monkeypatch.setenv("H4_USERS", json.dumps({"ann": {"roles": ["analyst"]}}))
    assert load_project(config).policies.users["ann"].roles == ["analyst"]
    monkeypatch.setenv("H4_USERS", "{not json")
    with pytest.raises(ConfigError, match="not a JSON object of users"):
        load_project(config)


@pytest.mark.parametrize(("users", "says"), [
    ({"ann": {"roles": ["superuser"]}}, "unknown role 'superuser'"),
    ({"ann": {"roles": []}}, "at least 1"),
    ({"ann": {"roles": ["admin"], "token_sha256": "ann-token"}}, "not a hex SHA-256"),
    ({"ann": {"roles": ["admin"], "token": "x"}}, "token"),
    ({"ann": {"roles": ["admin"], "token_public_key": "not-a-key"}}, "not an Ed25519 public key"),
    ({"ann": {"roles": ["admin"], "token_public_key": token_hash("x")}}, "not an Ed25519 public key"),
])
def test_bad_users_are_configuration_errors(tmp_path: Path, demo_dir: Path, users: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_project(_project(tmp_path, demo_dir, users))


def test_a_hash_is_kept_in_lowercase_and_matches_only_its_token() -> None:
    token = new_token()
    user = policies({"x": {"roles": ["admin"], "token_sha256": token_hash(token).upper()}}).users["x"]
    assert user.token_sha256 == token_hash(token)
    assert token_matches(user, token) and not token_matches(user, token + "x")
    assert not token_matches(user, "") and not token_matches(None, token)
    no_hash = policies().users["dora"]
    assert not token_matches(no_hash, "") and not token_matches(no_hash, "anything")


@pytest.mark.parametrize("presented", ["é" * 10, "\udcff\udc80", "dba-token\x00", "x" * 10_000, ""])
def test_any_text_compares_as_a_token_without_an_error(presented: str) -> None:
    """Tokens come from headers, forms and the environment (an undecodable byte there is a lone surrogate):
    any text is compared, in constant time, and is simply not the token."""
    dba = policies().users["dba"]
    assert not token_matches(dba, presented) and not same_secret(presented, "dba-token")
    assert token_hash(presented) and token_public_key(presented)
    unicode_user = policies({"u": {"roles": ["admin"], "token_sha256": token_hash("pässwörd-\udcff")}}).users["u"]
    assert token_matches(unicode_user, "pässwörd-\udcff") and not token_matches(unicode_user, "passwort")


def test_a_public_key_alone_checks_the_token_and_its_signatures() -> None:
    token = new_token()
    user = policies({"x": {"roles": ["admin"], "token_public_key": token_public_key(token)}}).users["x"]
    assert token_matches(user, token) and not token_matches(user, new_token())
    assert token_public_key(token) != token_public_key(token + "x") and token not in token_public_key(token)


# --- approvers ---------------------------------------------------------------------------------


def check(approver: str, token: str = "", role: str = "", approve: bool = True, asker: str | None = "ann",
          users: object = USERS, allow_self: bool = False) -> str:
    return check_approver(request(asker), approve=approve, approver=approver, role=role, token=token,
                          approver_roles=["admin"], policies=policies(users), allow_self_approval=allow_self)


@pytest.mark.parametrize(("answer", "says"), [
    ({"approver": ""}, "names no approver"),
    ({"approver": "  ", "token": "dba-token"}, "names no approver"),
    ({"approver": "dba"}, "token is missing or wrong"),
    ({"approver": "dba", "token": "guess"}, "token is missing or wrong"),
    ({"approver": "dba", "token": "ann-token"}, "token is missing or wrong"),  # another user's token
    ({"approver": "mallory", "token": "dba-token"}, "token is missing or wrong"),  # unknown: the same reason
    ({"approver": "dora", "token": ""}, "token is missing or wrong"),  # a user with no token
    ({"approver": "carl", "token": "carl-token"}, "holds none of the approver roles"),
    ({"approver": "dba", "token": "dba-token", "role": "analyst"}, "may not approve in role 'analyst'"),
    ({"approver": "ann", "token": "ann-token"}, "may not approve their own statement"),
    ({"approver": "carl", "token": "carl-token", "approve": False}, "holds none of the approver roles"),
])
def test_an_answer_without_a_valid_approver_credential_does_not_count(answer: dict, says: str) -> None:
    with pytest.raises(ApprovalRejected, match=says):
        check(**answer)


def test_a_valid_approver_acts_in_its_approver_role() -> None:
    assert check("dba", "dba-token") == "admin"
    assert check("dba", " dba-token"[1:], role="admin") == "admin"
    assert check("ann", "ann-token", allow_self=True) == "admin"  # self-approval, where allowed
    assert check("ann", "ann-token", approve=False) == "admin"  # an asker may withdraw its own statement
    assert check("ann", "ann-token", asker=None) == "admin"


SIGNING_USERS = {**USERS, "dba": {**USERS["dba"], "token_public_key": token_public_key("dba-token")},
                 "ann": {**USERS["ann"], "token_public_key": token_public_key("ann-token")}}


def signed(approver: str = "dba", token: str = "dba-token", *, approve: bool = True, role: str = "admin",
           for_request: ApprovalRequest | None = None, run_id: str = "") -> str:
    """What `nl2sql approve` puts in the answer's token field: the token's signature of this answer."""
    return sign_answer(token, answer_message(for_request or request(), approve=approve, approver=approver, role=role,
                                             run_id=run_id))


def test_a_signature_for_another_run_of_the_same_request_does_not_count() -> None:
    """The same question, asker and SQL asked again is a new run: a signature copied from the first run's answer
    does not approve it."""
    first = signed(run_id="run-1")
    assert check_approver(request(), approve=True, approver="dba", role="admin", token=first, run_id="run-1",
                          approver_roles=["admin"], policies=policies(SIGNING_USERS)) == "admin"
    with pytest.raises(ApprovalRejected, match="token is missing or wrong"):
        check_approver(request(), approve=True, approver="dba", role="admin", token=first, run_id="run-2",
                       approver_roles=["admin"], policies=policies(SIGNING_USERS))


def test_a_signed_answer_counts_in_place_of_the_token() -> None:
    proof = signed()
    assert proof.startswith(PROOF_PREFIX) and "dba-token" not in proof
    assert check("dba", proof, role="admin", users=SIGNING_USERS) == "admin"
    assert check("dba", signed(approve=False), role="admin", approve=False, users=SIGNING_USERS) == "admin"


@pytest.mark.parametrize(("answer", "proof"), [
    ({"approve": False}, {}),                                   # an approval's signature sent as a denial
    ({"role": ""}, {}),                                         # signed for a role, sent without it
    ({"approver": "ann"}, {}),                                  # another approver's name on dba's signature
    ({}, {"token": "ann-token"}),                               # signed with another user's token
    ({}, {"for_request": request(asker="carl")}),               # signed for another request
    ({"users": USERS}, {}),                                     # the user has no public key to check it with
])
def test_a_signature_of_another_answer_does_not_count(answer: dict, proof: dict) -> None:
    sent = {"approver": "dba", "role": "admin", "users": SIGNING_USERS, **answer}
    with pytest.raises(ApprovalRejected, match="token is missing or wrong"):
        check(token=signed(**proof), **sent)
    with pytest.raises(ApprovalRejected, match="token is missing or wrong"):
        check(token=PROOF_PREFIX + "not-base64!", **sent)


def test_without_users_an_approver_needs_a_name_and_a_role_but_no_token() -> None:
    assert check("root", role="admin", users=None) == "admin"
    assert check("root", role="analyst", users=None) == "analyst"  # the run then ends denied (approval_problem)
    with pytest.raises(ApprovalRejected, match="names no role"):
        check("root", users=None)
    with pytest.raises(ApprovalRejected, match="their own"):
        check("ann", role="admin", users=None)


# --- the CLI -----------------------------------------------------------------------------------


def _project(tmp_path: Path, demo_dir: Path, users: object) -> Path:
    """A copy of the demo project's config (its data where the demo has it) with `policies.users`."""
    raw = yaml.safe_load((demo_dir / "nl2sql.yaml").read_text())
    for ds in raw["datasources"]:
        if "url" in ds and ":///" in ds["url"] and not ds["url"].split(":///")[1].startswith("/"):
            ds["url"] = ds["url"].replace(":///", f":///{demo_dir}/")
    raw["policies"]["users"] = users
    raw.setdefault("settings", {}).setdefault("approvals", {})
    raw["storage"] = {"state_dir": str(tmp_path / "state")}
    path = tmp_path / "nl2sql.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture
def users_project(tmp_path: Path, demo_dir: Path) -> Path:
    users = {"ann": {"roles": ["analyst"], "token_sha256": token_hash("ann-token")},
             "dba": {"roles": ["admin"], "token_sha256": token_hash("dba-token")},
             "vic": {"roles": ["viewer"]}}
    return _project(tmp_path, demo_dir, users)


SECRET_SQL = "SELECT FirstName FROM Employee"


@pytest.mark.parametrize("who", [[], ["--user", "vic", "--role", "admin"], ["--user", "mallory", "--role", "admin"],
                                 ["--user", "mallory"]])
def test_sql_refuses_a_caller_who_is_not_who_it_says(capsys: pytest.CaptureFixture[str], users_project: Path,
                                                     who: list[str]) -> None:
    code, out, err = run_cli(capsys, "-c", str(users_project), "sql", SECRET_SQL, "-d", "chinook", *who)
    assert code == 2 and "IDENTITY_ERROR" in err and not out
    assert "Employee" not in err and "FirstName" not in err and "chinook" not in err


def test_sql_and_schema_run_in_the_users_own_role(capsys: pytest.CaptureFixture[str], users_project: Path) -> None:
    code, out, _ = run_cli(capsys, "-c", str(users_project), "sql", "SELECT Name FROM Genre LIMIT 1", "-d",
                           "chinook", "--user", "vic", "--json")
    assert code == 0 and json.loads(out)["rows"]
    code, _, err = run_cli(capsys, "-c", str(users_project), "sql", SECRET_SQL, "-d", "chinook", "--user", "vic")
    assert code == 1 and "SECURITY_VIOLATION" in err  # the viewer's scope, as the user's only role
    code, out, _ = run_cli(capsys, "-c", str(users_project), "schema", "chinook", "--user", "vic", "--json")
    assert code == 0 and {t["name"] for t in json.loads(out)} >= {"Genre"} and "Employee" not in out


@pytest.mark.parametrize("command", [["schema", "chinook"], ["retrieve", "How many genres?"],
                                     ["ask", "How many genres?"]])
def test_every_command_taking_a_role_checks_the_user(capsys: pytest.CaptureFixture[str], users_project: Path,
                                                     command: list[str]) -> None:
    for who in ([], ["--user", "vic", "--role", "analyst"]):
        code, _, err = run_cli(capsys, "-c", str(users_project), *command, *who)
        assert code == 2 and "IDENTITY_ERROR" in err, (command, who, err)


def test_plan_run_and_eval_run_check_the_user(capsys: pytest.CaptureFixture[str], users_project: Path) -> None:
    plan = sorted((Path(__file__).parents[1] / "data" / "plans" / "chinook").glob("*.json"))[0]
    code, _, err = run_cli(capsys, "-c", str(users_project), "plan", "run", str(plan), "-d", "chinook",
                           "--role", "admin", "--user", "vic")
    assert code == 2 and "IDENTITY_ERROR" in err
    code, _, err = run_cli(capsys, "-c", str(users_project), "eval", "run", "--mode", "plans", "--role", "admin",
                           "--user", "vic")
    assert code == 2 and "IDENTITY_ERROR" in err


def _waiting(project: Path, trace_id: str, asker: str) -> dict:
    config: Config = load_project(project)
    req = request(asker)
    StateStore(config.state_dir).save_approval(trace_id, req.id, req.model_dump())
    return req.model_dump()


def test_approvals_list_shows_only_what_the_caller_may_approve(capsys: pytest.CaptureFixture[str],
                                                               users_project: Path) -> None:
    _waiting(users_project, "run-of-ann", "ann")
    _waiting(users_project, "run-of-dba", "dba")
    code, _, err = run_cli(capsys, "-c", str(users_project), "approvals", "list")
    assert code == 2 and "user id is required" in err
    listed = {}
    for user in ("dba", "ann", "vic"):
        code, out, err = run_cli(capsys, "-c", str(users_project), "approvals", "list", "--user", user, "--json")
        assert code == 0, err
        listed[user] = [item["trace_id"] for item in json.loads(out)]
    assert listed == {"dba": ["run-of-ann"], "ann": [], "vic": []}  # not its own; ann and vic are no approvers


def test_approve_checks_the_credential_before_reaching_prefect(capsys: pytest.CaptureFixture[str],
                                                               users_project: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _waiting(users_project, "run-1", "ann")
    base = ["-c", str(users_project), "approve", "run-1"]
    for args, says in [(["--user", "dba"], "token is missing or wrong"),
                       (["--user", "dba", "--token", "guess"], "token is missing or wrong"),
                       (["--user", "ann", "--token", "ann-token"], "holds none of the approver roles"),
                       (["--user", "dba", "--token", "dba-token", "--role", "analyst"], "may not approve in role")]:
        code, _, err = run_cli(capsys, *base, *args)
        assert code == 2 and "APPROVAL_REJECTED" in err and says in err, (args, err)
        assert "Traceback" not in err
    monkeypatch.setenv("NL2SQL_APPROVAL_TOKEN", "guess")
    code, _, err = run_cli(capsys, *base, "--user", "dba")
    assert code == 2 and "token is missing or wrong" in err


def test_an_undecodable_token_in_the_environment_is_a_wrong_token(capsys: pytest.CaptureFixture[str],
                                                                   users_project: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _waiting(users_project, "run-1", "ann")
    monkeypatch.setenv("NL2SQL_APPROVAL_TOKEN", "dba-\udcff")  # how Python reads a byte no encoding decodes
    code, _, err = run_cli(capsys, "-c", str(users_project), "approve", "run-1", "--user", "dba")
    assert code == 2 and "token is missing or wrong" in err and "Traceback" not in err


def test_approve_without_a_public_key_names_the_line_to_add_and_sends_nothing(
        capsys: pytest.CaptureFixture[str], users_project: Path) -> None:
    """`nl2sql approve` sends the token's signature, never the token: a user whose entry holds only the hash is
    told the public key to add (derived from the token just checked), before Prefect is reached."""
    _waiting(users_project, "run-1", "ann")
    code, _, err = run_cli(capsys, "-c", str(users_project), "approve", "run-1", "--user", "dba", "--token",
                           "dba-token")
    assert code == 2 and "CONFIG_ERROR" in err and "Traceback" not in err
    assert "policies.users.dba.token_public_key" in err
    assert f"token_public_key: {token_public_key('dba-token')}" in err.replace("\n", "")
    assert "dba-token" not in err


def test_approvals_token_prints_a_token_and_the_hash_to_paste(capsys: pytest.CaptureFixture[str],
                                                              users_project: Path) -> None:
    code, out, _ = run_cli(capsys, "-c", str(users_project), "approvals", "token", "--user", "dba")
    assert code == 0
    token = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("token: "))
    digest = next(line.split(": ", 1)[1] for line in out.splitlines() if "token_sha256: " in line)
    key = next(line.split(": ", 1)[1] for line in out.splitlines() if "token_public_key: " in line)
    assert token_hash(token) == digest and token_public_key(token) == key and len(token) >= 40


def test_the_demo_project_has_no_users_and_keeps_the_old_trust_model(demo_config: Config) -> None:
    assert demo_config.policies.users is None and not demo_config.settings.approvals.allow_self_approval
