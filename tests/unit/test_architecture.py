"""The architecture's contracts (`[tool.importlinter]` in pyproject.toml) hold, and they do fail: an upward import
or a cycle added to a copy of the package breaks them, and the failure names the import to remove."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the package found under `root` (a copy, or the repository)."""
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", str(root / "pyproject.toml")], cwd=root,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})


@pytest.fixture
def copy_of_the_package(tmp_path: Path) -> Path:
    """The package's Python files and pyproject.toml, copied: the graph is read from the sources alone."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for source in (ROOT / "nl2sql").rglob("*.py"):
        target = tmp_path / source.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    return tmp_path


def add_import(root: Path, module: str, statement: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{statement}  # noqa\n")


def test_the_contracts_hold(copy_of_the_package: Path) -> None:
    result = lint_imports(copy_of_the_package)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def test_an_upward_import_breaks_the_layers_and_names_the_import(copy_of_the_package: Path) -> None:
    add_import(copy_of_the_package, "nl2sql.config.models", "import nl2sql.cli.options")
    result = lint_imports(copy_of_the_package)
    assert result.returncode == 1
    assert "Layers: each package imports only packages below it BROKEN" in result.stdout
    assert "Domain packages never import Prefect, flows, tasks, blocks or the CLI BROKEN" in result.stdout
    assert "nl2sql.config.models -> nl2sql.cli.options" in result.stdout


def test_prefect_in_a_domain_package_breaks_the_contract(copy_of_the_package: Path) -> None:
    add_import(copy_of_the_package, "nl2sql.plan.model", "import prefect")
    result = lint_imports(copy_of_the_package)
    assert result.returncode == 1
    assert "nl2sql.plan.model -> prefect" in result.stdout


def test_a_cycle_between_modules_breaks_the_contract(copy_of_the_package: Path) -> None:
    add_import(copy_of_the_package, "nl2sql.evaluation.stats", "import nl2sql.evaluation.report")
    result = lint_imports(copy_of_the_package)
    assert result.returncode == 1
    assert "No import cycles between the modules of any package BROKEN" in result.stdout
    assert "nl2sql.evaluation" in result.stdout and ".stats -> .report" in result.stdout


def test_the_architecture_page_lists_the_layers_of_the_contract() -> None:
    import re
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c["layers"] for c in config["contracts"] if c["type"] == "layers")
    contract = [sorted(name.strip().removeprefix("nl2sql.") for name in layer.split("|")) for layer in layers]
    page = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| \d+ \| (.+?) \|", page, flags=re.M)
    documented = [sorted(name.strip(" `") for name in row.split("·")) for row in rows]
    assert documented == contract
