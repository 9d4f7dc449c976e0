"""Approval requests and the check of an approver's answer.

A request's id is the SHA-256 of the canonical JSON of its identifying fields (the question, the
asker, the hook, the datasource, the sub-query and the SQL with its hash), so an approval given for
one statement can never cover another; the answer is accepted only from an approver holding one of
the hook's approver roles, for the same request id and the same SQL hash. With `policies.users`, an
approver is a configured user holding one of those roles who proves it with its approval token, or with
the token's signature of the answer (`answer_message`: what `nl2sql approve` sends, so the token never
reaches Prefect's database) (`check_approver`); an answer that does not is no answer at all, and the run
keeps waiting.

>>> request = ApprovalRequest.build(question="q", asker="ann", hook="sql_review", datasource_id="chinook",
...                                 sub_query_id="sq1", sql="SELECT 1", reason="reads Invoice",
...                                 approver_roles=["dba"])
>>> request.id == request.expected_id(), request.sql_sha256[:12]
(True, 'e004ebd5b553')
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from nl2sql.config.models import PoliciesConfig
from nl2sql.errors import NL2SQLError
from nl2sql.plan.generate import readable_sql
from nl2sql.policies.users import is_proof, proof_matches, token_matches

#: The fields the id covers (reason and approver roles are for display).
REQUEST_ID_FIELDS = ("question", "asker", "hook", "point", "datasource_id", "sub_query_id", "sql", "sql_sha256")


def sha256_text(text: str) -> str:
    """Hex SHA-256 of a text."""
    return hashlib.sha256(text.encode()).hexdigest()


class ApprovalRequest(BaseModel):
    """A statement waiting for an approver."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    question: str
    asker: str | None
    hook: str
    point: Literal["execute.before"] = "execute.before"
    datasource_id: str
    sub_query_id: str
    sql: str
    sql_sha256: str
    reason: str
    approver_roles: list[str]

    @classmethod
    def build(cls, *, question: str, asker: str | None, hook: str, datasource_id: str, sub_query_id: str, sql: str,
              reason: str, approver_roles: list[str]) -> ApprovalRequest:
        """A request with its SQL hash and id computed."""
        fields = {"question": question, "asker": asker, "hook": hook, "point": "execute.before",
                  "datasource_id": datasource_id, "sub_query_id": sub_query_id, "sql": sql,
                  "sql_sha256": sha256_text(sql)}
        return cls(id=_request_id(fields), reason=reason, approver_roles=list(approver_roles), **fields)

    def expected_id(self) -> str:
        """The id its identifying fields give (differs from `id` when the request was edited)."""
        return _request_id({name: getattr(self, name) for name in REQUEST_ID_FIELDS})

    def markdown(self) -> str:
        """The request as an approver reads it."""
        # items apart by blank lines: the Prefect UI joins the single line breaks of a field's description
        return (f"### Approval needed: {self.reason}\n\n"
                f"- **Asked by:** {self.asker or 'no user id given'}\n\n- **Question:** {self.question}\n\n"
                f"- **Datasource:** {self.datasource_id} · **hook:** {self.hook}\n\n"
                f"- **Approver roles:** {', '.join(self.approver_roles)}\n\n```\n{readable_sql(self.sql)}\n```\n\n"
                f"Request `{self.id[:16]}…` · SQL SHA-256 `{self.sql_sha256[:16]}…`")


def _request_id(fields: dict) -> str:
    return sha256_text(json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


class ApprovalAnswer(BaseModel):
    """An approver's answer to a request."""

    model_config = ConfigDict(extra="forbid")

    approve: bool = Field(description="Approve (run the SQL) or deny.")
    approver: str = Field(min_length=1, description="The approver's user id.")
    role: str = Field(min_length=1, description="The role the approver acts in (one of the hook's approver roles).")
    comment: str = ""
    request_id: str = Field(description="The id of the request approved (filled in).")
    sql_sha256: str = Field(description="The SHA-256 of the SQL approved (filled in).")


def approval_problem(request: ApprovalRequest, answer: ApprovalAnswer, approver_roles: list[str]) -> str | None:
    """Why an answer cannot stand for a request (None when it can): an edited request, another request or SQL,
    or an approver without one of the hook's roles."""
    if request.expected_id() != request.id or sha256_text(request.sql) != request.sql_sha256:
        return "the request was changed after it was made"
    if answer.request_id != request.id:
        return "the answer is for another request"
    if answer.sql_sha256 != request.sql_sha256:
        return "the SQL approved is not the SQL that would run"
    if answer.role not in approver_roles:
        return f"role {answer.role!r} may not approve this hook's requests (approver roles: {', '.join(approver_roles)})"
    return None


def answer_message(request: ApprovalRequest, *, approve: bool, approver: str, role: str,
                   run_id: str = "") -> bytes:
    """What an approver's signature covers (`nl2sql.policies.users.sign_answer`): this request and its SQL in this
    run (the same question asked again is a new run), the decision, who decides and in which role. A signature of
    one answer is worth nothing for any other."""
    return json.dumps({"v": 1, "run_id": run_id, "request_id": request.id, "sql_sha256": request.sql_sha256,
                       "approve": approve, "approver": approver.strip(), "role": role.strip()},
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class ApprovalRejected(NL2SQLError):
    """An answer that cannot count as an approver's: no approver, no (valid) token, a role the approver does not
    hold or that may not approve, or an asker approving their own statement. The run keeps waiting."""

    code = "APPROVAL_REJECTED"


def check_approver(request: ApprovalRequest, *, approve: bool, approver: str, role: str, token: str,
                   approver_roles: list[str], policies: PoliciesConfig, allow_self_approval: bool = False,
                   run_id: str = "") -> str:
    """The role an answer's approver acts in, or ApprovalRejected saying why the answer does not count.

    Without `policies.users` the approver and role are taken as given (both must be there). With it, the
    approver must be a configured user whose token matches its `token_sha256` or `token_public_key`, or whose
    token signed this very answer (`answer_message`, checked with `token_public_key`) — one reason for an unknown
    user, a missing and a wrong token or signature alike — holding one of the hook's approver roles (`role`, or
    the first such role of the user when empty; a signature must name `run_id`, the run that waits). Unless
    `allow_self_approval`, the asker may not approve its own statement."""
    approver, role = approver.strip(), role.strip()
    if not approver:
        raise ApprovalRejected("the answer names no approver")
    if policies.users is None:
        if not role:
            raise ApprovalRejected("the answer names no role")
        acting = role
    else:
        user = policies.users.get(approver)
        message = answer_message(request, approve=approve, approver=approver, role=role, run_id=run_id)
        proven = proof_matches(user, token, message) if is_proof(token) else token_matches(user, token)
        if not proven:
            raise ApprovalRejected("the approver's token is missing or wrong")
        assert user is not None
        eligible = [r for r in user.roles if r in approver_roles]
        if role and role not in eligible:
            raise ApprovalRejected(f"{approver} may not approve in role {role!r}")
        if not eligible:
            raise ApprovalRejected(f"{approver} holds none of the approver roles ({', '.join(approver_roles)})")
        acting = role or eligible[0]
    if approve and not allow_self_approval and request.asker is not None and approver == request.asker:
        raise ApprovalRejected("an asker may not approve their own statement")
    return acting
