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
from collections.abc import Callable, Iterator, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from nl2sql.config.models import ID_PATTERN, SECTIONS, Config, _pattern_shape
from nl2sql.config.reading import UTF8_FIX, NotUTF8, load_yaml, read_text, yaml_problem
from nl2sql.errors import ConfigError, ConfigProblem, did_you_mean

ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")
LLM_PROVIDERS = ("openai", "anthropic")
#: A check of a configuration against something this package does not know, handed in by the caller:
#: (the config, the file a section is in, the sections that validated) → the problems found.
ConfigCheck = Callable[[Config, Callable[[str], str], set[str]], list[ConfigProblem]]


def load_config(path: str | Path, *, checks: Sequence[ConfigCheck] = ()) -> Config:
    """Read, expand and validate a configuration file, run `checks` too; raise ConfigError listing every problem.

    `nl2sql.project.load_project` is this with every check of the engine: what an application loads."""
    path = Path(path)
    label = str(path)
    raw = read_yaml(path, label)
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
            value = read_yaml(include, str(include), problems=problems, key=key)
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
    valid: set[str] | None = None
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        later.extend(problems_from_validation(exc, files, label))
        config, valid = _partial_config(data)
    config._path = path.resolve()
    later.extend(check_config(config, files, sections=valid, raw=data, checks=checks))
    problems.extend(p for p in later if not _repeats(p, covered))
    if problems or valid is not None:
        raise ConfigError(problems or [ConfigProblem(label, "", "the configuration is not valid")])
    return config


def _partial_config(data: dict[str, Any]) -> tuple[Config, set[str]]:
    """The sections that validate on their own (the rest left at their defaults), and their names.

    So that the checks across sections still run on what is well-formed, and every problem is
    reported at once rather than the cross-section ones only after the others are fixed.
    """
    good: dict[str, Any] = {}
    for name, field in Config.model_fields.items():
        if name not in data:
            if not field.is_required():
                good[name] = field.get_default(call_default_factory=True)
            continue
        try:
            kind = Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
            good[name] = TypeAdapter(kind).validate_python(data[name])
        except ValidationError:
            continue
    return Config.model_construct(**good), set(good)


def _repeats(problem: ConfigProblem, covered: set[tuple[str, str]]) -> bool:
    """Whether a problem lies at or under a key of the same file that is already reported."""
    return any(
        problem.file == file and (problem.key == key or problem.key.startswith((f"{key}.", f"{key}[")))
        for file, key in covered
        if key
    )


def read_yaml(
    path: Path, label: str, *, problems: list[ConfigProblem] | None = None, key: str = ""
) -> Any:
    """Parse one YAML file; a missing or broken file is a problem (raised at once for the main file)."""
    try:
        text = read_text(path)
    except NotUTF8 as exc:
        problem = ConfigProblem(label, key, str(exc), UTF8_FIX)
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
            return load_yaml(text)
        except yaml.YAMLError as exc:
            problem = ConfigProblem(label, key, *yaml_problem(exc))
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


def problems_from_validation(
    exc: ValidationError, files: dict[str, str], label: str
) -> Iterator[ConfigProblem]:
    """A pydantic ValidationError of the configuration as problems, each at its file and key with a fix."""
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


def check_config(
    config: Config,
    files: dict[str, str] | None = None,
    *,
    sections: set[str] | None = None,
    raw: dict[str, Any] | None = None,
    checks: Sequence[ConfigCheck] = (),
) -> list[ConfigProblem]:
    """Checks that span sections or need more than a type: unique ids, roles and patterns that exist, model
    references, the state folder, then each of `checks`.

    `sections` names the sections that are valid (all when None): checks needing another are skipped.
    `raw` is the expanded file content, so that policy patterns are checked even when a sibling is broken.
    `checks` are the checks against what this package does not know (adapters, the SQL guard, prices, the hook
    and observer registries): `nl2sql.project` hands them in.
    """
    files = files or {}
    label = str(config.path or "nl2sql.yaml")
    valid = set(SECTIONS) if sections is None else sections

    def file(section: str) -> str:
        return files.get(section, label)

    problems: list[ConfigProblem] = []
    if "datasources" in valid:
        problems.extend(_check_datasources(config, file("datasources")))
    ids = [ds.id for ds in config.datasources] if "datasources" in valid else _raw_ids(raw)
    if "policies" in valid:
        problems.extend(_check_roles(config, file("policies")))
        roles: Any = {name: {"allow": r.allow, "deny": r.deny} for name, r in config.policies.roles.items()}
    else:
        roles = ((raw or {}).get("policies") or {}).get("roles") if isinstance((raw or {}).get("policies"), dict) \
            else None
    if ids is not None and isinstance(roles, dict):
        problems.extend(_check_patterns(roles, ids, file("policies")))
    if "llm" in valid:
        problems.extend(check_llm_refs(config, file("llm")))
    if "storage" in valid:
        problems.extend(_check_state_dir(config, file("storage")))
    for check in checks:
        problems.extend(check(config, file, valid))
    return problems


def _raw_ids(raw: dict[str, Any] | None) -> list[str] | None:
    """Datasource ids as written, when the datasources section itself did not validate (None unless every
    entry has a well-formed id: patterns checked against a partial list would only repeat that problem)."""
    entries = (raw or {}).get("datasources")
    if not isinstance(entries, list) or not entries:
        return None
    ids = [e.get("id") if isinstance(e, dict) else None for e in entries]
    return ids if all(isinstance(i, str) and ID_PATTERN.match(i) for i in ids) else None  # type: ignore[return-value]


def _check_datasources(config: Config, file: str) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    seen: dict[str, int] = {}
    for index, ds in enumerate(config.datasources):
        if ds.id in seen:
            problems.append(ConfigProblem(file, f"datasources[{index}].id",
                                          f"duplicate datasource id '{ds.id}' (also datasources[{seen[ds.id]}])",
                                          "give each datasource its own id"))
        seen.setdefault(ds.id, index)
    return problems


def _check_roles(config: Config, file: str) -> list[ConfigProblem]:
    policies = config.policies
    roles = list(policies.roles)
    problems = []
    if policies.default_role not in policies.roles:
        problems.append(unknown_role(file, "policies.default_role", policies.default_role, roles))
    # The default ['admin'] need not exist; roles the user listed must.
    explicit_admins = policies.admin_roles if "admin_roles" in policies.model_fields_set else []
    for index, role in enumerate(explicit_admins):
        if role not in policies.roles:
            problems.append(unknown_role(file, f"policies.admin_roles[{index}]", role, roles))
    return problems


def _check_patterns(roles: dict[str, Any], ids: list[str], file: str) -> list[ConfigProblem]:
    """Every well-formed pattern names a datasource (or, as a glob, matches one); malformed ones are reported
    by validation."""
    problems = []
    for role_name, role in roles.items():
        if not isinstance(role, dict):
            continue
        for field in ("allow", "deny"):
            patterns = role.get(field)
            for index, pattern in enumerate(patterns if isinstance(patterns, list) else []):
                if not isinstance(pattern, str):
                    continue
                try:
                    _pattern_shape(pattern)
                except ValueError:
                    continue
                where = f"policies.roles.{role_name}.{field}[{index}]"
                head = pattern.split(".")[0]
                if not _is_glob(head) and head not in ids:
                    guess = did_you_mean(head, ids)
                    fix = f"did you mean '{guess}'?" if guess else f"datasources are: {', '.join(ids)}"
                    problems.append(ConfigProblem(file, where, f"pattern {pattern!r} names unknown datasource "
                                                  f"'{head}'", fix))
                elif _is_glob(head) and not any(fnmatchcase(i, head) for i in ids):
                    problems.append(ConfigProblem(file, where, f"pattern {pattern!r} matches no datasource",
                                                  f"datasources are: {', '.join(ids)}"))
    return problems


def check_llm_refs(config: Config, file: str) -> list[ConfigProblem]:
    """The `llm` section's model references and providers exist."""
    llm = config.llm
    problems = []
    model_names = list(llm.models)
    refs = [("llm.default", llm.default)] + [(f"llm.nodes.{node}", name) for node, name in llm.nodes.items()]
    for where, name in refs:
        if name is not None and name not in llm.models:
            guess = did_you_mean(name, model_names)
            fix = f"did you mean '{guess}'?" if guess else "define it under llm.models first"
            problems.append(ConfigProblem(file, where, f"unknown model '{name}'", fix))
    for name, model in llm.models.items():
        if model.provider not in LLM_PROVIDERS:
            guess = did_you_mean(model.provider, LLM_PROVIDERS)
            fix = f"did you mean '{guess}'?" if guess else f"use one of: {', '.join(LLM_PROVIDERS)}"
            problems.append(
                ConfigProblem(file, f"llm.models.{name}.provider", f"unknown provider '{model.provider}'", fix))
    return problems


def checked_plugin(file: str, where: str, kind: str, use: str, options: Any, known: Sequence[str],
                    load: Callable[[str], Any], problems: list[ConfigProblem]) -> Any | None:
    """The class of a plugin (a hook, an observer) named `use` from its registry (`known`, `load`), its options
    validated; problems appended, None when it cannot be loaded."""
    if use not in known:
        problems.append(unknown_plugin(file, f"{where}.use", kind, use, known))
        return None
    try:
        cls = load(use)
    except Exception as exc:
        problems.append(ConfigProblem(file, f"{where}.use", f"{kind} plugin '{use}' could not be loaded "
                                      f"({type(exc).__name__})", "check that its package is installed"))
        return None
    model = getattr(cls, "options_model", None)
    if isinstance(model, type) and issubclass(model, BaseModel):
        try:
            model.model_validate(options)
        except ValidationError as exc:
            problems.extend(option_problems(exc, file, f"{where}.options", model))
    return cls


def option_problems(exc: ValidationError, file: str, where: str, model: type[BaseModel]) -> list[ConfigProblem]:
    """A plugin's options that do not validate, as problems at `WHERE.KEY` with a fix each."""
    problems = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        at = f"{where}.{key_path(loc)}" if loc else where
        kind, ctx = error["type"], error.get("ctx") or {}
        if kind == "nl2sql":
            problems.append(ConfigProblem(file, at, ctx["message"], ctx.get("fix") or None))
        elif kind == "extra_forbidden":
            allowed = list(model.model_fields)
            guess = did_you_mean(str(loc[-1]), allowed)
            fix = f"did you mean '{guess}'?" if guess else f"allowed options: {', '.join(allowed) or '(none)'}"
            problems.append(ConfigProblem(file, at, f"unknown option '{loc[-1]}'", fix))
        elif kind == "missing":
            field = model.model_fields.get(str(loc[-1])) if len(loc) == 1 else None
            hint = f" ({field.description})" if field is not None and field.description else ""
            problems.append(ConfigProblem(file, at, f"required option '{loc[-1]}' is missing", f"add it{hint}"))
        elif kind == "model_type" and not loc:
            problems.append(ConfigProblem(file, at, "options must be a mapping", "write a YAML mapping (key: value)"))
        else:
            message = error["msg"].removeprefix("Value error, ").rstrip(".")
            problems.append(ConfigProblem(file, at, message, fix_for(kind)))
    return problems


def _check_state_dir(config: Config, file: str) -> list[ConfigProblem]:
    """The state folder is a folder this process can write, or can be created as one."""
    target = config.state_dir
    probe = target
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    where, value = "storage.state_dir", config.storage.state_dir
    if not probe.is_dir():
        what = "is a file" if probe == target else f"lies under {probe}, which is a file"
        return [ConfigProblem(file, where, f"{value!r} {what}, not a folder",
                              "point storage.state_dir at a folder (it is created when missing)")]
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == target else f"cannot be created: {probe} is not writable"
        return [ConfigProblem(file, where, f"{value!r} {what}",
                              "point storage.state_dir at a folder this user can write, or fix its permissions")]
    return []


def unknown_role(file: str, where: str, role: str, roles: list[str]) -> ConfigProblem:
    guess = did_you_mean(role, roles)
    fix = f"did you mean '{guess}'?" if guess else f"define it under policies.roles (roles: {', '.join(roles)})"
    return ConfigProblem(file, where, f"unknown role '{role}'", fix)


def unknown_plugin(file: str, where: str, kind: str, name: str, known: tuple[str, ...]) -> ConfigProblem:
    guess = did_you_mean(name, known)
    fix = f"did you mean '{guess}'?" if guess else f"built-in {kind}s: {', '.join(known)}"
    return ConfigProblem(file, where, f"unknown {kind} '{name}'", fix)
