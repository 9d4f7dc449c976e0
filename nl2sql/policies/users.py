"""Known identities: `policies.users` maps each user id to the roles it may act in and, for an approver, what
checks a personal approval token: its SHA-256 and the Ed25519 public key derived from it.

Without `policies.users` a caller's role is taken as given (the trust model of a single team). With it, a
caller names its user id, its role must be one of that user's roles, and an approver proves who it is with
its token, compared in constant time against the stored hash (the token itself is never stored), or with a
signature the token makes over one answer (`sign_answer`), checked against the stored public key: what
`nl2sql approve` sends, so the token itself never reaches Prefect's database.

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
>>> signer = PoliciesConfig.model_validate({"roles": {"admin": {}}, "default_role": "admin", "users": {
...     "dba": {"roles": ["admin"], "token_public_key": token_public_key("s3cret")}}}).users["dba"]
>>> proof = sign_answer("s3cret", b"approve request 1")
>>> proof_matches(signer, proof, b"approve request 1"), proof_matches(signer, proof, b"approve request 2")
(True, False)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nl2sql.config.models import PoliciesConfig, UserConfig
from nl2sql.errors import NL2SQLError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

#: The environment variable `nl2sql approve` and `nl2sql deny` read an approver's token from.
TOKEN_ENV = "NL2SQL_APPROVAL_TOKEN"
_NO_TOKEN = hashlib.sha256(b"").hexdigest()
#: How a signed answer starts (`sign_answer`): what the token field of an answer holds in place of the token.
PROOF_PREFIX = "ed25519:"
#: Separates the signing key derived from a token from any other use of the token.
_SIGNING_KEY_LABEL = b"nl2sql approval signing key v1\0"


class IdentityError(NL2SQLError):
    """A caller's user id and role do not go together under `policies.users`, or no user id was given.

    The message names only what the caller typed: never a table, a datasource or another user's roles."""

    code = "IDENTITY_ERROR"


def users_configured(policies: PoliciesConfig) -> bool:
    """Whether `policies.users` is set (callers and approvers are then checked)."""
    return policies.users is not None


def secret_bytes(text: str) -> bytes:
    """A secret's bytes as it is hashed and compared: UTF-8, keeping a lone surrogate (an undecodable byte of an
    environment variable or a header) instead of failing on it."""
    return text.encode("utf-8", "surrogatepass")


def token_hash(token: str) -> str:
    """The hex SHA-256 of an approval token, as `token_sha256` holds it."""
    return hashlib.sha256(secret_bytes(token)).hexdigest()


def same_secret(given: str, expected: str) -> bool:
    """Whether two secrets are equal, compared in constant time over their SHA-256 digests: any text of any
    length compares (never an error), and the time taken tells nothing about either length."""
    return hmac.compare_digest(hashlib.sha256(secret_bytes(given)).digest(),
                               hashlib.sha256(secret_bytes(expected)).digest())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


def _signing_key(token: str) -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # ≈30 ms: only when used

    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(_SIGNING_KEY_LABEL + secret_bytes(token)).digest())


def token_public_key(token: str) -> str:
    """The Ed25519 public key an approval token derives (URL-safe base64, 43 characters), as `token_public_key`
    holds it: it checks the token's signatures and, unlike the token, may be read by anyone."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return _b64(_signing_key(token).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def sign_answer(token: str, message: bytes) -> str:
    """A proof that the holder of `token` sends `message` (one approver's answer to one request): valid for that
    message only, so a copy of it approves nothing else."""
    return PROOF_PREFIX + _b64(_signing_key(token).sign(message))


def is_proof(token: str | None) -> bool:
    """Whether an answer's token field holds a signature (`sign_answer`) rather than the token itself."""
    return bool(token) and token.startswith(PROOF_PREFIX)  # type: ignore[union-attr]


def proof_matches(user: UserConfig | None, proof: str | None, message: bytes) -> bool:
    """Whether `proof` is the user's signature of `message` (False for no user, no public key or no proof)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    key = _unb64(user.token_public_key) if user is not None and user.token_public_key else None
    signature = _unb64(proof[len(PROOF_PREFIX):]) if is_proof(proof) else None  # type: ignore[index]
    if key is None or signature is None:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def new_token() -> str:
    """A fresh approval token (256 random bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def token_matches(user: UserConfig | None, token: str | None) -> bool:
    """Whether `token` is the user's approval token, by its `token_sha256` or its `token_public_key` (False for
    no user, nothing stored or an empty token)."""
    expected = user.token_sha256 if user is not None and user.token_sha256 else _NO_TOKEN
    same = hmac.compare_digest(token_hash(token or ""), expected)  # always compared: no early answer to time
    by_hash = same and expected != _NO_TOKEN
    stored_key = user.token_public_key if user is not None and user.token_public_key else ""
    by_key = hmac.compare_digest(token_public_key(token or ""), stored_key) and bool(stored_key)
    return bool(token) and (by_hash or by_key)


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
