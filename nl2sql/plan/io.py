"""Reading plans from files (JSON or YAML, bare or under a `plan` key), with errors that name the key."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from pydantic import ValidationError

from nl2sql.config.load import key_path
from nl2sql.config.reading import MAX_DEPTH, UTF8_FIX, NotUTF8, load_yaml, loads_json, read_text, yaml_problem
from nl2sql.errors import NL2SQLError
from nl2sql.plan.model import PlanModel

PLAN_DOCS = "docs/plans.md"


class PlanFileError(NL2SQLError):
    """A plan file that cannot be read or is not a valid PlanModel."""

    code = "PLAN_FILE_INVALID"


def parse_plan(data: object, *, source: str = "plan") -> PlanModel:
    """Validate a plan given as plain data (a bare plan or a mapping with a `plan` key)."""
    if isinstance(data, dict) and "plan" in data and "select" not in data:
        data = data["plan"]
    try:
        return PlanModel.model_validate(data)
    except ValidationError as exc:
        lines = [f"{source}: {key_path(tuple(e['loc'])) or '(top)'}: {e['msg']}" for e in exc.errors(include_url=False)]
        shown = lines[:10] + ([f"… and {len(lines) - 10} more"] if len(lines) > 10 else [])
        raise PlanFileError("Not a valid plan:\n" + "\n".join(f"  - {line}" for line in shown),
                            fix=f"See {PLAN_DOCS} for the plan format.") from exc


def load_plan_file(path: Path) -> PlanModel:
    """Read a plan from a .json, .yaml or .yml file (UTF-8, nested at most MAX_DEPTH levels)."""
    kind = "JSON" if path.suffix == ".json" else "YAML"
    try:
        text = read_text(path)
    except NotUTF8 as exc:
        raise PlanFileError(f"{path}: {exc}.", fix=UTF8_FIX[0].upper() + UTF8_FIX[1:] + ".") from None
    except OSError as exc:
        raise PlanFileError(f"{path}: cannot read the file ({exc.strerror}).",
                            fix="Pass the path of a readable plan file (JSON or YAML).") from None
    try:
        data = loads_json(text) if kind == "JSON" else load_yaml(text)
    except json.JSONDecodeError as exc:
        fix = f"Nest at most {MAX_DEPTH} levels deep" if exc.msg.startswith("nested deeper") else "Fix the JSON there"
        raise PlanFileError(f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}.",
                            fix=f"{fix}; see {PLAN_DOCS} for the plan format.") from None
    except yaml.YAMLError as exc:
        message, fix = yaml_problem(exc)
        raise PlanFileError(f"{path}: {message}.", fix=f"{fix[0].upper()}{fix[1:]}; see {PLAN_DOCS} for the plan "
                            "format.") from None
    return parse_plan(data, source=str(path))
