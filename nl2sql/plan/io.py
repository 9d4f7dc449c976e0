"""Reading plans from files (JSON or YAML, bare or under a `plan` key), with errors that name the key."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from pydantic import ValidationError

from nl2sql.config.load import key_path
from nl2sql.errors import NL2SQLError
from nl2sql.plan.model import PlanModel


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
                            fix="See docs/plans.md for the plan format.") from exc


def load_plan_file(path: Path) -> PlanModel:
    """Read a plan from a .json, .yaml or .yml file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanFileError(f"{path}: cannot read the file ({exc.strerror}).") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise PlanFileError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from exc
    return parse_plan(data, source=str(path))
