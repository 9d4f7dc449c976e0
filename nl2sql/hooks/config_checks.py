"""The configuration's hooks checked against the hook registry: each exists, its options validate, it runs at
points its type supports, its name is its own, and its approver roles exist."""

from __future__ import annotations

from collections.abc import Callable

from nl2sql.config.load import checked_plugin, unknown_role
from nl2sql.config.models import Config
from nl2sql.errors import ConfigProblem
from nl2sql.hooks import hook_class, hook_names


def check_hooks(config: Config, file_of: Callable[[str], str], valid: set[str]) -> list[ConfigProblem]:
    """The problems of the `hooks` section (approver roles only when the policies are valid)."""
    if "hooks" not in valid:
        return []
    file = file_of("hooks")
    roles = list(config.policies.roles) if "policies" in valid else None
    known_hooks = tuple(hook_names())
    problems: list[ConfigProblem] = []
    names: dict[str, int] = {}
    for index, hook in enumerate(config.hooks):
        where = f"hooks[{index}]"
        for r_index, role in enumerate(hook.approver_roles or []):
            if roles is not None and role not in roles:
                problems.append(unknown_role(file, f"{where}.approver_roles[{r_index}]", role, roles))
        cls = checked_plugin(file, where, "hook", hook.use, hook.options, known_hooks, hook_class, problems)
        if cls is None:
            continue
        supported = getattr(cls, "points", None)
        if hook.points and supported and not set(hook.points) <= set(supported):
            problems.append(ConfigProblem(file, f"{where}.points", f"{hook.use} runs only at "
                                          f"{', '.join(sorted(supported))}", "remove the other points"))
        name = hook.name or hook.use
        if name in names:
            problems.append(ConfigProblem(file, f"{where}.name", f"a second hook named {name!r} (also "
                                          f"hooks[{names[name]}])", "give each hook of the same type its own name"))
        names.setdefault(name, index)
    return problems
