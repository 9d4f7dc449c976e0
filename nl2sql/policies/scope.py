"""Who may read what: a role's scope over one datasource, from glob patterns in `policies`.

Patterns are `datasource`, `datasource.table` or `datasource.schema.table`, with shell globs
(`*`, `?`, `[…]`), matched without regard to case as SQL names are. A table is allowed for a
role when an allow pattern matches it and no deny pattern of that role does; with several
roles, any role that allows it is enough; admin roles see everything.

>>> from nl2sql.config.models import PoliciesConfig
>>> policies = PoliciesConfig.model_validate({
...     "roles": {"admin": {}, "analyst": {"allow": ["chinook"], "deny": ["chinook.Employee"]}},
...     "default_role": "analyst"})
>>> s = scope(policies, ["analyst"], "chinook")
>>> s.allows("Invoice"), s.allows("employee")
(True, False)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from nl2sql.config.models import PoliciesConfig
from nl2sql.errors import UnknownNameError


def pattern_matches(pattern: str, datasource: str, table: str, schema: str | None = None) -> bool:
    """Whether a policy pattern (`datasource`, `datasource.table`, `datasource.schema.table`, globs) matches a table."""
    parts = [p.lower() for p in pattern.split(".")]
    if not fnmatchcase(datasource.lower(), parts[0]):
        return False
    if len(parts) == 1:
        return True
    if len(parts) == 2:
        return fnmatchcase(table.lower(), parts[1])
    return fnmatchcase((schema or "").lower(), parts[1]) and fnmatchcase(table.lower(), parts[2])


@dataclass(frozen=True)
class RoleRules:
    """One role's patterns."""

    name: str
    admin: bool
    allow: tuple[str, ...]
    deny: tuple[str, ...]
    database_role: str | tuple[tuple[str, str], ...] | None = None

    def database_role_in(self, datasource: str) -> str | None:
        """The database role this role's statements run as in `datasource` (None: the connection's own)."""
        if self.database_role is None or isinstance(self.database_role, str):
            return self.database_role
        return dict(self.database_role).get(datasource)

    def allows(self, datasource: str, table: str, schema: str | None = None) -> bool:
        """Whether this role may read the table."""
        if self.admin:
            return True
        if not any(pattern_matches(p, datasource, table, schema) for p in self.allow):
            return False
        return not any(pattern_matches(p, datasource, table, schema) for p in self.deny)

    def reaches(self, datasource: str) -> bool:
        """Whether any table of the datasource could be allowed (its name matches an allow pattern)."""
        if self.admin:
            return True
        if any(len(p.split(".")) == 1 and fnmatchcase(datasource.lower(), p.lower()) for p in self.deny):
            return False
        return any(fnmatchcase(datasource.lower(), p.split(".")[0].lower()) for p in self.allow)


@dataclass(frozen=True)
class Scope:
    """What a caller with these roles may read in one datasource."""

    datasource: str
    roles: tuple[RoleRules, ...]

    @property
    def is_admin(self) -> bool:
        """Whether one of the roles is an admin role (sees everything)."""
        return any(r.admin for r in self.roles)

    @property
    def reachable(self) -> bool:
        """Whether the caller may read anything at all in this datasource."""
        return any(r.reaches(self.datasource) for r in self.roles)

    @property
    def database_roles(self) -> tuple[str, ...]:
        """The database roles the caller's statements run as here (none for admins or where none is set)."""
        if self.is_admin:
            return ()
        return tuple(sorted({name for r in self.roles if (name := r.database_role_in(self.datasource))}))

    def allows(self, table: str, schema: str | None = None) -> bool:
        """Whether the caller may read `table` (optionally in `schema`)."""
        return any(r.allows(self.datasource, table, schema) for r in self.roles)

    def allowed(self, tables: Iterable[str]) -> list[str]:
        """The tables of `tables` the caller may read, in their order."""
        return [t for t in tables if self.allows(t)]


def role_rules(policies: PoliciesConfig, role: str) -> RoleRules:
    """The rules of one role, or UnknownNameError naming the roles that exist."""
    config = policies.roles.get(role)
    if config is None:
        raise UnknownNameError("role", role, policies.roles)
    database_role = config.database_role
    if isinstance(database_role, dict):
        database_role = tuple(sorted(database_role.items()))
    return RoleRules(role, role in policies.admin_roles, tuple(config.allow), tuple(config.deny), database_role)


def scope(policies: PoliciesConfig, roles: Sequence[str] | str | None, datasource: str) -> Scope:
    """The scope of a caller with `roles` (default: the default role) in `datasource`."""
    if isinstance(roles, str):
        roles = [roles]
    names = list(roles) if roles else [policies.default_role]
    return Scope(datasource, tuple(role_rules(policies, name) for name in names))


def reachable_datasources(
    policies: PoliciesConfig, roles: Sequence[str] | str | None, datasource_ids: Iterable[str]
) -> list[str]:
    """The datasources in which the caller may read at least one table, in the given order."""
    return [ds for ds in datasource_ids if scope(policies, roles, ds).reachable]
