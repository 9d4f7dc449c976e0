"""Roles, scopes and the generic refusal. Pure functions over the `policies` config section."""

from nl2sql.errors import GENERIC_REFUSAL, SecurityViolation
from nl2sql.policies.scope import RoleRules, Scope, reachable_datasources, role_rules, scope

__all__ = [
    "GENERIC_REFUSAL",
    "RoleRules",
    "Scope",
    "SecurityViolation",
    "reachable_datasources",
    "role_rules",
    "scope",
]
