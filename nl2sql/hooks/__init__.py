"""Hooks at the six points of a question's run: context, decisions, the runner, the built-ins, approvals.

Hooks are configured in the `hooks` section (in order); the built-ins are registered exactly as a
plugin's entry point (group `nl2sql.hooks`) would be.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from nl2sql.config.models import HOOK_POINTS, Config
from nl2sql.errors import ConfigError, ConfigProblem, UnknownNameError

if TYPE_CHECKING:
    from nl2sql.hooks.approval import ApprovalAnswer, ApprovalRequest, approval_problem
    from nl2sql.hooks.context import (
        Allow,
        Decision,
        Deny,
        Hook,
        HookContext,
        HookPoint,
        Modify,
        NeedsApproval,
    )
    from nl2sql.hooks.runner import HookBinding, HookRunner, HookVerdict

ENTRY_POINT_GROUP = "nl2sql.hooks"
#: The names below are imported on first use (PEP 562): an approval request (a field of every result) is read
#: without loading the hooks' plan and datasource dependencies.
_WHERE = {"ApprovalAnswer": "approval", "ApprovalRequest": "approval", "approval_problem": "approval",
          "Allow": "context", "Decision": "context", "Deny": "context", "Hook": "context", "HookContext": "context",
          "HookPoint": "context", "Modify": "context", "NeedsApproval": "context", "HookBinding": "runner",
          "HookRunner": "runner", "HookVerdict": "runner"}


def __getattr__(name: str) -> Any:
    if name == "HOOKS":  # the registry: the built-ins, then the entry points found by hook_class
        from nl2sql.hooks.builtin import BUILTIN_HOOKS

        globals()["HOOKS"] = registry = dict(BUILTIN_HOOKS)
        return registry
    if name in _WHERE:
        return getattr(importlib.import_module(f"nl2sql.hooks.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'nl2sql.hooks' has no attribute {name!r}")


def _registry() -> dict[str, type]:
    return globals()["HOOKS"] if "HOOKS" in globals() else __getattr__("HOOKS")


def hook_names() -> list[str]:
    """Every registered hook name: the built-ins and the `nl2sql.hooks` entry points."""
    return sorted(set(_registry()) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def hook_class(name: str) -> type:
    """A registered hook class (built-in or from the `nl2sql.hooks` entry point group)."""
    hooks = _registry()
    if name not in hooks:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name == name:
                hooks[name] = ep.load()
    if name not in hooks:
        raise UnknownNameError("hook", name, hooks)
    return hooks[name]


def build_hooks(config: Config) -> HookRunner:
    """The configured hooks, in order (every problem in one ConfigError)."""
    from nl2sql.hooks.runner import HookBinding, HookRunner

    file = str(config.path or "nl2sql.yaml")
    problems: list[ConfigProblem] = []
    bindings: list[HookBinding] = []
    seen: set[str] = set()
    for i, hook in enumerate(config.hooks):
        where = f"hooks[{i}]"
        try:
            cls = hook_class(hook.use)
        except UnknownNameError as exc:
            problems.append(ConfigProblem(file, f"{where}.use", exc.message, exc.fix))
            continue
        try:
            options = cls.options_model(**hook.options)
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                key = ".".join(str(p) for p in err["loc"])
                problems.append(ConfigProblem(file, f"{where}.options{'.' + key if key else ''}", err["msg"]))
            continue
        points = frozenset(hook.points or cls.points)
        if not points <= cls.points:
            problems.append(ConfigProblem(file, f"{where}.points", f"{hook.use} runs only at "
                                          f"{', '.join(sorted(cls.points))}", "remove the other points"))
            continue
        name = hook.name or hook.use
        if name in seen:
            problems.append(ConfigProblem(file, f"{where}.name", f"a second hook named {name!r}",
                                          "give each hook of the same type its own name"))
            continue
        seen.add(name)
        roles = tuple(hook.approver_roles or config.policies.admin_roles)
        bindings.append(HookBinding(name, cls.from_options(options), points, hook.on_error, roles))
    if problems:
        raise ConfigError(problems)
    return HookRunner(bindings)


__all__ = ["HOOKS", "HOOK_POINTS", "Allow", "ApprovalAnswer", "ApprovalRequest", "Decision", "Deny", "Hook",
           "HookBinding", "HookContext", "HookPoint", "HookRunner", "HookVerdict", "Modify", "NeedsApproval",
           "approval_problem", "build_hooks", "hook_class", "hook_names"]
