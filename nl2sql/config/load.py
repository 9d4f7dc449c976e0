"""Reading `nl2sql.yaml`: section includes, `${env:VAR}` expansion, validation, and one ConfigError for all.

A top-level section may be written inline or as a path to its own YAML file
(`policies: policies.yaml`), resolved against the main file's folder. Strings may hold
`${env:VAR}` or `${env:VAR:-default}`. Every problem found is reported at once, each with
the file it is in, the key path, what is wrong and how to fix it.
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from nl2sql.config.models import SECTIONS, Config
from nl2sql.errors import ConfigError, ConfigProblem, did_you_mean

ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")
LLM_PROVIDERS = ("openai", "anthropic")


def load_config(path: str | Path) -> Config:
    """Read, expand and validate a configuration file; raise ConfigError listing every problem."""
    path = Path(path)
    label = str(path)
    raw = _read_yaml(path, label)
    if not isinstance(raw, dict):
        raise ConfigError(
            ConfigProblem(label, "", "the file is not a mapping of sections", "start it with 'datasources:'")
        )
    problems: list[ConfigProblem] = []
    files: dict[str, str] = {}
    data: dict[str, Any] = {}
    guesses: set[str] = set()
    for key, value in raw.items():
        key = str(key)
        if key not in SECTIONS:
            guess = did_you_mean(key, SECTIONS)
            fix = f"did you mean '{guess}'?" if guess else f"top-level sections are: {', '.join(SECTIONS)}"
            problems.append(ConfigProblem(label, key, f"unknown section '{key}'", fix))
            guesses.update([guess] if guess else [])
            continue
        files[key] = label
        if isinstance(value, str) and value.endswith((".yaml", ".yml")) and key != "version":
            before = len(problems)
            target = _expand_env_string(value, label, key, problems)
            if len(problems) > before:  # an unset variable in the path: reading '/x.yaml' would mislead
                continue
            include = path.parent / target
            files[key] = str(include)
            value = _read_yaml(include, str(include), problems=problems, key=key)
            if len(problems) > before:
                continue
            if value is None:
                problems.append(
                    ConfigProblem(
                        str(include),
                        key,
                        "the file is empty",
                        f"write the '{key}' section in it, or inline in {path.name}",
                    )
                )
                continue
        data[key] = expand_env(value, files[key], key, problems)
    # What is reported so far (unset variables, broken includes, misspelt sections) blanks or drops
    # a key; what validation then says at or under that key only repeats it, so it is left out.
    covered = {(p.file, p.key) for p in problems}
    covered.update((files.get(g, label), g) for g in guesses if g not in data)
    later: list[ConfigProblem] = []
    config = None
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        later.extend(_problems_from_validation(exc, files, label))
    if config is not None:
        config._path = path.resolve()
        later.extend(check_config(config, files))
    problems.extend(p for p in later if not _repeats(p, covered))
    if problems:
        raise ConfigError(problems)
    assert config is not None
    return config


def _repeats(problem: ConfigProblem, covered: set[tuple[str, str]]) -> bool:
    """Whether a problem lies at or under a key of the same file that is already reported."""
    return any(
        problem.file == file and (problem.key == key or problem.key.startswith((f"{key}.", f"{key}[")))
        for file, key in covered
        if key
    )


def _read_yaml(
    path: Path, label: str, *, problems: list[ConfigProblem] | None = None, key: str = ""
) -> Any:
    """Parse one YAML file; a missing or broken file is a problem (raised at once for the main file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        fix = (
            f"create it, or point '{key}' at an existing file"
            if key
            else "run `nl2sql init --demo DIR` to create a project, or pass --config PATH (or set NL2SQL_CONFIG)"
        )
        problem = ConfigProblem(label, key, "file not found", fix)
    except OSError as exc:
        problem = ConfigProblem(label, key, f"cannot read the file ({exc.strerror})", "check its permissions")
    else:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            reason = getattr(exc, "problem", None) or "invalid YAML"
            problem = ConfigProblem(label, key, f"not valid YAML{where}: {reason}", "fix the YAML syntax there")
    if problems is None:
        raise ConfigError(problem)
    problems.append(problem)
    return None


def _expand_env_string(text: str, file: str, key: str, problems: list[ConfigProblem]) -> str:
    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = os.environ.get(name)
        if value is not None:
            return value
        if default is not None:
            return default
        problems.append(
            ConfigProblem(
                file,
                key,
                f"environment variable {name} is not set",
                f"export {name}=… before running, or write ${{env:{name}:-DEFAULT}}",
            )
        )
        return ""

    return ENV_REF.sub(replace, text)


def expand_env(value: Any, file: str, key: str, problems: list[ConfigProblem]) -> Any:
    """Expand `${env:VAR}` in every string of a section, recording unset variables."""
    if isinstance(value, str):
        return _expand_env_string(value, file, key, problems)
    if isinstance(value, list):
        return [expand_env(v, file, f"{key}[{i}]", problems) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: expand_env(v, file, f"{key}.{k}", problems) for k, v in value.items()}
    return value


# --- pydantic errors → problems ----------------------------------------------------------------


def key_path(loc: tuple[Any, ...]) -> str:
    """Render a pydantic location as a key path: `datasources[1].url`.

    >>> key_path(("datasources", 1, "url"))
    'datasources[1].url'
    """
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def _unwrap(annotation: Any) -> list[Any]:
    """The concrete types behind Optional / Union / Annotated."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) for t in _unwrap(arg)]
    return [annotation]


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The config model that the location points into (to list its allowed keys)."""
    current: list[Any] = [Config]
    for part in loc:
        following: list[Any] = []
        for candidate in current:
            origin = typing.get_origin(candidate)
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                field = candidate.model_fields.get(part) if isinstance(part, str) else None
                if field is not None:
                    following.extend(_unwrap(field.annotation))
            elif origin is list and isinstance(part, int):
                following.extend(_unwrap(typing.get_args(candidate)[0]))
            elif origin is dict and isinstance(part, str):
                following.extend(_unwrap(typing.get_args(candidate)[1]))
        current = following
    models = [c for c in current if isinstance(c, type) and issubclass(c, BaseModel)]
    return models[0] if models else None


def _problems_from_validation(
    exc: ValidationError, files: dict[str, str], label: str
) -> Iterator[ConfigProblem]:
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        file = files.get(str(loc[0]), label) if loc else label
        where = key_path(loc)
        kind = error["type"]
        ctx = error.get("ctx") or {}
        if kind == "nl2sql":
            yield ConfigProblem(file, where, ctx["message"], ctx.get("fix") or None)
        elif kind == "extra_forbidden":
            model = _model_at(loc[:-1])
            allowed = list(model.model_fields) if model else []
            guess = did_you_mean(str(loc[-1]), allowed)
            fix = f"did you mean '{guess}'?" if guess else f"allowed keys: {', '.join(allowed)}"
            yield ConfigProblem(file, where, f"unknown key '{loc[-1]}'", fix)
        elif kind == "missing":
            model = _model_at(loc[:-1])
            field = model.model_fields.get(str(loc[-1])) if model else None
            hint = f" ({field.description})" if field is not None and field.description else ""
            yield ConfigProblem(file, where, f"required key '{loc[-1]}' is missing", f"add it{hint}")
        elif kind == "literal_error":
            expected = ctx.get("expected", "")
            given = str(error.get("input"))
            choices = re.findall(r"'([^']*)'", expected)
            guess = did_you_mean(given, choices)
            fix = f"did you mean '{guess}'?" if guess else f"use one of: {expected}"
            yield ConfigProblem(file, where, f"'{given}' is not allowed here", fix)
        else:
            yield ConfigProblem(file, where, error["msg"].rstrip("."), fix_for(kind))


def fix_for(kind: str) -> str:
    """What to do about a pydantic error of this kind, in the configuration's words."""
    fixes = {
        "too_short": "add at least one entry",
        "list_type": "write a YAML list (- item)",
        "dict_type": "write a YAML mapping (key: value)",
        "model_type": "write a YAML mapping (key: value)",
        "string_type": "write a quoted string",
        "int_parsing": "write a whole number",
        "int_type": "write a whole number",
        "float_parsing": "write a number",
        "float_type": "write a number",
        "bool_parsing": "write true or false",
        "bool_type": "write true or false",
        "greater_than": "raise the value",
        "greater_than_equal": "raise the value",
        "less_than": "lower the value",
        "less_than_equal": "lower the value",
    }
    return fixes.get(kind, "see docs/configuration.md for this key")


# --- checks across sections --------------------------------------------------------------------


def _is_glob(text: str) -> bool:
    return any(ch in text for ch in "*?[")


def check_config(config: Config, files: dict[str, str] | None = None) -> list[ConfigProblem]:
    """Checks that span sections: unique ids, roles and patterns that exist, model references."""
    files = files or {}
    label = str(config.path or "nl2sql.yaml")

    def file(section: str) -> str:
        return files.get(section, label)

    problems: list[ConfigProblem] = []
    seen: dict[str, int] = {}
    for index, ds in enumerate(config.datasources):
        if ds.id in seen:
            problems.append(
                ConfigProblem(
                    file("datasources"),
                    f"datasources[{index}].id",
                    f"duplicate datasource id '{ds.id}' (also datasources[{seen[ds.id]}])",
                    "give each datasource its own id",
                )
            )
        seen.setdefault(ds.id, index)

    policies = config.policies
    roles = list(policies.roles)
    ids = list(seen)
    if policies.default_role not in policies.roles:
        problems.append(_unknown_role(file("policies"), "policies.default_role", policies.default_role, roles))
    # The default ['admin'] need not exist; roles the user listed must.
    explicit_admins = policies.admin_roles if "admin_roles" in policies.model_fields_set else []
    for index, role in enumerate(explicit_admins):
        if role not in policies.roles:
            problems.append(_unknown_role(file("policies"), f"policies.admin_roles[{index}]", role, roles))
    for role_name, role in policies.roles.items():
        for field in ("allow", "deny"):
            for index, pattern in enumerate(getattr(role, field)):
                head = pattern.split(".")[0]
                if not _is_glob(head) and head not in ids:
                    guess = did_you_mean(head, ids)
                    fix = f"did you mean '{guess}'?" if guess else f"datasources are: {', '.join(ids)}"
                    problems.append(
                        ConfigProblem(
                            file("policies"),
                            f"policies.roles.{role_name}.{field}[{index}]",
                            f"pattern {pattern!r} names unknown datasource '{head}'",
                            fix,
                        )
                    )
                elif _is_glob(head) and not any(fnmatchcase(i, head) for i in ids):
                    problems.append(
                        ConfigProblem(
                            file("policies"),
                            f"policies.roles.{role_name}.{field}[{index}]",
                            f"pattern {pattern!r} matches no datasource",
                            f"datasources are: {', '.join(ids)}",
                        )
                    )

    llm = config.llm
    model_names = list(llm.models)
    refs = [("llm.default", llm.default)] + [(f"llm.nodes.{node}", name) for node, name in llm.nodes.items()]
    for where, name in refs:
        if name is not None and name not in llm.models:
            guess = did_you_mean(name, model_names)
            fix = f"did you mean '{guess}'?" if guess else "define it under llm.models first"
            problems.append(ConfigProblem(file("llm"), where, f"unknown model '{name}'", fix))
    for name, model in llm.models.items():
        if model.provider not in LLM_PROVIDERS:
            guess = did_you_mean(model.provider, LLM_PROVIDERS)
            fix = f"did you mean '{guess}'?" if guess else f"use one of: {', '.join(LLM_PROVIDERS)}"
            problems.append(
                ConfigProblem(file("llm"), f"llm.models.{name}.provider", f"unknown provider '{model.provider}'", fix)
            )

    if config.settings.pipeline.max_cost_usd is not None:
        from nl2sql.llm.prices import price_for

        for name, model in llm.models.items():
            if model.block is None and price_for(model.model, llm.prices) is None:
                problems.append(ConfigProblem(
                    file("llm"), f"llm.models.{name}.model",
                    f"model '{model.model}' has no price, so settings.pipeline.max_cost_usd cannot be kept",
                    f"add llm.prices.{model.model}: {{input: …, output: …}} (USD per 1M tokens), or unset "
                    "settings.pipeline.max_cost_usd"))

    from nl2sql.hooks import hook_names  # built-ins and plugins' entry points

    known_hooks = tuple(hook_names())
    for index, hook in enumerate(config.hooks):
        if hook.use not in known_hooks:
            problems.append(_unknown_plugin(file("hooks"), f"hooks[{index}].use", "hook", hook.use, known_hooks))
        for r_index, role in enumerate(hook.approver_roles or []):
            if role not in policies.roles:
                problems.append(
                    _unknown_role(file("hooks"), f"hooks[{index}].approver_roles[{r_index}]", role, roles)
                )
    from nl2sql.observers import observer_names  # built-ins and plugins' entry points

    known_observers = tuple(observer_names())
    for index, observer in enumerate(config.observers):
        if observer.use not in known_observers:
            problems.append(
                _unknown_plugin(file("observers"), f"observers[{index}].use", "observer", observer.use, known_observers)
            )
    return problems


def _unknown_role(file: str, where: str, role: str, roles: list[str]) -> ConfigProblem:
    guess = did_you_mean(role, roles)
    fix = f"did you mean '{guess}'?" if guess else f"define it under policies.roles (roles: {', '.join(roles)})"
    return ConfigProblem(file, where, f"unknown role '{role}'", fix)


def _unknown_plugin(file: str, where: str, kind: str, name: str, known: tuple[str, ...]) -> ConfigProblem:
    guess = did_you_mean(name, known)
    fix = f"did you mean '{guess}'?" if guess else f"built-in {kind}s: {', '.join(known)}"
    return ConfigProblem(file, where, f"unknown {kind} '{name}'", fix)
