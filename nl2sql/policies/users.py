"""Known identities: `policies.users` maps each user id to the roles it may act in and, for an approver, the
SHA-256 of a personal approval token.

Without `policies.users` a caller's role is taken as given (the trust model of a single team). With it, a
caller names its user id, its role must be one of that user's roles, and an approver proves who it is with
its token, compared in constant time against the stored hash (the token itself is never stored).

>>> from nl2sql.config.models import PoliciesConfig
>>> policies = PoliciesConfig.model_validate({
...     "roles": {"admin": {}, "analyst": {"allow": ["chinook"]}}, "default_role": "analyst",
...     "users": {"ann": {"roles": ["analyst"]}, "dba": {"roles": ["admin"], "token_sha256": token_hash("s3cret")}}})
>>> acting_role(policies, "ann", None), acting_role(policies, "dba", "admin")
('analyst', 'admin')
>>> acting_role(policies, "ann", "admin")
Traceback (most recent call last):
...
nl2sql.policies.users.IdentityError: User 'ann' may not act in role 'admin'. Use a role policies.users gives you.
>>> token_matches(policies.users["dba"], "s3cret"), token_matches(policies.users["dba"], "guess")
(True, False)
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence

from nl2sql.config.models import PoliciesConfig, UserConfig
from nl2sql.errors import NL2SQLError

#: The environment variable `nl2sql approve` and `nl2sql deny` read an approver's token from.
TOKEN_ENV = "NL2SQL_APPROVAL_TOKEN"
_NO_TOKEN = hashlib.sha256(b"").hexdigest()


class IdentityError(NL2SQLError):
    """A caller's user id and role do not go together under `policies.users`, or no user id was given.

    The message names only what the caller typed: never a table, a datasource or another user's roles."""

    code = "IDENTITY_ERROR"


def users_configured(policies: PoliciesConfig) -> bool:
    """Whether `policies.users` is set (callers and approvers are then checked)."""
    return policies.users is not None


def token_hash(token: str) -> str:
    """The hex SHA-256 of an approval token, as `token_sha256` holds it."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh approval token (256 random bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def token_matches(user: UserConfig | None, token: str | None) -> bool:
    """Whether `token` is the user's approval token (False for no user, no stored hash or an empty token)."""
    expected = user.token_sha256 if user is not None and user.token_sha256 else _NO_TOKEN
    same = hmac.compare_digest(token_hash(token or ""), expected)  # always compared: no early answer to time
    return same and bool(token) and expected != _NO_TOKEN


def _refused(user: str, role: str | None) -> IdentityError:
    if role is None:
        return IdentityError(f"User {user!r} is not a user policies.users knows.",
                             fix="Ask with your own user id (--user).")
    return IdentityError(f"User {user!r} may not act in role {role!r}.", fix="Use a role policies.users gives you.")


def acting_role(policies: PoliciesConfig, user: str | None, role: str | None) -> str | None:
    """The role a caller acts in: `role` as given without `policies.users`; with it, `role` when the user holds
    it, or the user's first role when none is given. IdentityError for a missing user id, an unknown user or a
    role the user lacks (the same sentence for both, naming nothing but what was typed)."""
    if policies.users is None:
        return role
    if not user:
        raise IdentityError("A user id is required: policies.users lists who may ask.",
                            fix="Pass --user with your user id.")
    known = policies.users.get(user)
    if known is None or (role is not None and role not in known.roles):
        raise _refused(user, role)
    return role if role is not None else known.roles[0]


def acting_roles(policies: PoliciesConfig, user: str | None, roles: Sequence[str] | None) -> list[str] | None:
    """`acting_role` for several roles (`eval run --role …`): each must be the user's; none given means every
    role of the user (all roles, as before, without `policies.users`)."""
    if policies.users is None:
        return list(roles) if roles else None
    if not roles:
        acting_role(policies, user, None)
        return list(policies.users[user].roles)  # type: ignore[index]
    return [acting_role(policies, user, role) for role in roles]  # type: ignore[misc]
