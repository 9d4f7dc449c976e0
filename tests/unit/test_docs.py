"""Every configuration key and CLI command is documented."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from nl2sql.config.models import Config

ROOT = Path(__file__).resolve().parents[2]


def _keys(model: type[BaseModel]) -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        keys.add(name)
        for arg in [field.annotation, *getattr(field.annotation, "__args__", ())]:
            for inner in [arg, *getattr(arg, "__args__", ())]:
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    keys |= _keys(inner)
    return keys


def test_every_config_key_is_documented() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    forms = ("`{k}`", ".{k}`", "`{k}.", "## {k}\n", "\n{k}:")
    missing = sorted(k for k in _keys(Config) if not any(f.format(k=k) in text for f in forms))
    assert not missing, f"undocumented keys in docs/configuration.md: {missing}"


def test_every_cli_command_is_in_the_readme() -> None:
    import typer

    from nl2sql.cli.main import app, register_commands

    register_commands()
    readme = (ROOT / "README.md").read_text()
    group = typer.main.get_command(app)
    names = []
    for name, command in group.commands.items():
        sub = getattr(command, "commands", None)
        names += [f"nl2sql {name} {s}" for s, c in sub.items() if not c.hidden] if sub else [f"nl2sql {name}"]
    assert not [n for n in names if n not in readme]


def test_the_readmes_library_section_runs_as_written(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import doctest

    from nl2sql.demo import init_demo

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## As a library\n", 1)[1].split("\n## ", 1)[0]
    code = "".join(block.split("```", 1)[0] for block in section.split("```python\n")[1:])
    init_demo(tmp_path / "demo", env={})
    monkeypatch.chdir(tmp_path)
    test = doctest.DocTestParser().get_doctest(code, {}, "README.md: As a library", "README.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert test.examples and runner.failures == 0, f"{runner.failures} of {len(test.examples)} examples failed"
