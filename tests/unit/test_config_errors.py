"""Broken configurations and the ConfigError each one produces: file, key path, message and fix.

Every row starts from a small valid configuration (two datasources, three roles), breaks one
thing, and checks both the structured `ConfigError.problems` and the rendered message.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from nl2sql.errors import ConfigError, ConfigProblem
from nl2sql.project import load_project

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "nl2sql" / "demo" / "nl2sql.yaml"
MAIN = "nl2sql.yaml"

BASE: dict[str, Any] = {
    "version": 1,
    "datasources": [
        {"id": "chinook", "url": "sqlite:///data/chinook.sqlite", "description": "A music store."},
        {"id": "web", "url": "duckdb:///data/web.duckdb", "description": "Web analytics."},
    ],
    "policies": {
        "default_role": "viewer",
        "admin_roles": ["admin"],
        "roles": {
            "admin": {"description": "Sees everything."},
            "analyst": {"allow": ["chinook", "web"], "deny": ["chinook.Employee"]},
            "viewer": {"allow": ["chinook.Album", "chinook.Artist"]},
        },
    },
    "llm": {
        "models": {"small": {"provider": "openai", "model": "gpt-4o-mini"}},
        "default": "small",
        "nodes": {"planner": "small"},
    },
    "hooks": [{"use": "sql_review", "approver_roles": ["admin"]}],
    "observers": [{"use": "log"}, {"use": "audit"}],
    "settings": {"pipeline": {"row_limit": 500}, "routing": {"shortlist": 2}},
}


@dataclass
class Project:
    """The configuration being broken, the folder it lives in, and the environment."""

    cfg: dict[str, Any]
    root: Path
    env: pytest.MonkeyPatch
    main_text: str | None = None  # raw text for the main file instead of `cfg` dumped as YAML
    main_name: str = MAIN  # the file handed to load_project
    main_bytes: bytes | None = None  # raw bytes for the main file, written last

    def write(self, name: str, content: Any) -> None:
        """Write a side file (a section include): a string as is, anything else as YAML."""
        text = content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
        (self.root / name).write_text(text, encoding="utf-8")

    def load(self) -> Any:
        if self.main_text is not None:
            (self.root / MAIN).write_text(self.main_text, encoding="utf-8")
        else:
            self.write(MAIN, self.cfg)
        if self.main_bytes is not None:
            (self.root / MAIN).write_bytes(self.main_bytes)
        return load_project(self.root / self.main_name)


@dataclass(frozen=True)
class Case:
    id: str
    breaks: Callable[[Project], None]
    file: str  # the name of the file the problem must point at
    key: str  # the exact key path ("" for the whole file)
    fix: str  # a fragment of the fix
    message: str = ""  # a fragment of the message
    alone: bool = True  # the problem is the only one reported
    not_file: tuple[str, ...] = field(default=())  # file names no problem may point at


# --- ways to break the base configuration ------------------------------------------------------


def ds(index: int, **changes: Any) -> Callable[[Project], None]:
    def breaks(p: Project) -> None:
        for key, value in changes.items():
            if value is None:
                p.cfg["datasources"][index].pop(key, None)
            else:
                p.cfg["datasources"][index][key] = value

    return breaks


def at(path: str, value: Any) -> Callable[[Project], None]:
    """Set (or, with value None, delete) a dotted path; digits index lists."""

    def breaks(p: Project) -> None:
        *parents, last = path.split(".")
        node: Any = p.cfg
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        if value is None:
            del node[int(last) if last.isdigit() else last]
        elif last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value

    return breaks


def rename_section(old: str, new: str) -> Callable[[Project], None]:
    def breaks(p: Project) -> None:
        p.cfg = {(new if k == old else k): v for k, v in p.cfg.items()}

    return breaks


def rename_key(old: str, new: str, index: int) -> Callable[[Project], None]:
    def breaks(p: Project) -> None:
        entry = p.cfg["datasources"][index]
        p.cfg["datasources"][index] = {(new if k == old else k): v for k, v in entry.items()}

    return breaks


def unset_env(name: str, path: str) -> Callable[[Project], None]:
    def breaks(p: Project) -> None:
        p.env.delenv(name, raising=False)
        at(path, f"${{env:{name}}}")(p)

    return breaks


def include(section: str, name: str, content: Any = None) -> Callable[[Project], None]:
    """Move a section to its own file; content None leaves the file unwritten, ... keeps it as is."""

    def breaks(p: Project) -> None:
        original = p.cfg[section]
        p.cfg[section] = name
        if content is ...:
            p.write(name, original)
        elif callable(content):
            changed = copy.deepcopy(original)
            content(changed)
            p.write(name, changed)
        elif content is not None:
            p.write(name, content)

    return breaks


def main_text(text: str) -> Callable[[Project], None]:
    def breaks(p: Project) -> None:
        p.main_text = text

    return breaks


def main_name(name: str) -> Callable[[Project], None]:
    def breaks(p: Project) -> None:
        p.main_name = name

    return breaks


def write_bytes(name: str, content: bytes) -> Callable[[Project], None]:
    """A file holding raw bytes (the main file too: `main_text` is then ignored)."""

    def breaks(p: Project) -> None:
        if name == MAIN:
            p.main_bytes = content
        else:
            (p.root / name).write_bytes(content)

    return breaks


def both(*steps: Callable[[Project], None]) -> Callable[[Project], None]:
    def breaks(p: Project) -> None:
        for step in steps:
            step(p)

    return breaks


def typo_default_role(policies: dict[str, Any]) -> None:
    policies["default_role"] = "veiwer"


def typo_role_key(policies: dict[str, Any]) -> None:
    policies["roles"]["viewer"]["alow"] = policies["roles"]["viewer"].pop("allow")


CASES = [
    # datasources
    Case("dialect-typo", ds(1, url="postgress://host/db"), MAIN, "datasources[1].url",
         "did you mean 'postgresql'?", "unknown dialect 'postgress'"),
    Case("dialect-unknown", ds(1, url="oracle://host/db"), MAIN, "datasources[1].url",
         "use one of: duckdb, postgresql, sqlite", "unknown dialect 'oracle'"),
    Case("url-not-a-url", ds(0, url="data/chinook.sqlite"), MAIN, "datasources[0].url",
         "DIALECT://", "not a SQLAlchemy URL"),
    Case("url-and-block", ds(1, block="warehouse"), MAIN, "datasources[1]",
         "block: NAME", "exactly one of 'url' and 'block'"),
    Case("neither-url-nor-block", ds(0, url=None), MAIN, "datasources[0]",
         "set 'url: sqlite:///file.sqlite'", "exactly one of 'url' and 'block'"),
    Case("bad-datasource-id", ds(0, id="Chinook-DB"), MAIN, "datasources[0].id",
         "lowercase letters, digits and underscores", "'Chinook-DB' is not a plain lowercase name"),
    Case("duplicate-datasource-id", ds(1, id="chinook"), MAIN, "datasources[1].id",
         "give each datasource its own id", "duplicate datasource id 'chinook' (also datasources[0])",
         alone=False),
    Case("unknown-datasource-key", rename_key("url", "urll", 1), MAIN, "datasources[1].urll",
         "did you mean 'url'?", "unknown key 'urll'"),
    Case("datasource-missing-id", ds(0, id=None), MAIN, "datasources[0].id",
         "Short identifier", "required key 'id' is missing"),
    Case("datasources-missing", at("datasources", None), MAIN, "datasources",
         "add it", "required key 'datasources' is missing"),
    Case("datasources-empty", at("datasources", []), MAIN, "datasources",
         "add at least one entry"),
    Case("datasources-not-a-list", at("datasources", {"id": "chinook"}), MAIN, "datasources",
         "write a YAML list"),
    # top level
    Case("section-typo", rename_section("policies", "polices"), MAIN, "polices",
         "did you mean 'policies'?", "unknown section 'polices'"),
    Case("section-unknown", at("plugins", ["x"]), MAIN, "plugins",
         "top-level sections are: version, datasources, policies", "unknown section 'plugins'"),
    Case("version-wrong", at("version", 2), MAIN, "version", "use one of: 1", "'2' is not allowed here"),
    Case("main-not-a-mapping", main_text("- chinook\n- web\n"), MAIN, "",
         "start it with 'datasources:'", "not a mapping"),
    Case("yaml-syntax-error", main_text("version: 1\ndatasources:\n  - id: chinook\n    url: [oops\npolicies: {}\n"),
         MAIN, "", "fix the YAML syntax", "not valid YAML at line 5"),
    Case("main-file-not-found", main_name("missing.yaml"), "missing.yaml", "",
         "nl2sql init --demo", "file not found"),
    # policies
    Case("policies-missing", at("policies", None), MAIN, "policies",
         "add it", "required key 'policies' is missing"),
    Case("default-role-typo", at("policies.default_role", "veiwer"), MAIN, "policies.default_role",
         "did you mean 'viewer'?", "unknown role 'veiwer'"),
    Case("admin-role-unknown", at("policies.admin_roles", ["admin", "root"]), MAIN, "policies.admin_roles[1]",
         "define it under policies.roles (roles: admin, analyst, viewer)", "unknown role 'root'"),
    Case("pattern-unknown-datasource", at("policies.roles.viewer.allow", ["chinook.Album", "chinok.Artist"]),
         MAIN, "policies.roles.viewer.allow[1]", "did you mean 'chinook'?",
         "names unknown datasource 'chinok'"),
    Case("pattern-glob-matches-nothing", at("policies.roles.analyst.allow", ["sales_*"]), MAIN,
         "policies.roles.analyst.allow[0]", "datasources are: chinook, web", "matches no datasource"),
    Case("pattern-malformed", at("policies.roles.analyst.deny", ["a.b.c.d"]), MAIN,
         "policies.roles.analyst.deny[0]", "'warehouse.sales.orders'",
         "'a.b.c.d' is not 'datasource', 'datasource.table' or 'datasource.schema.table'"),
    Case("pattern-empty-part", at("policies.roles.analyst.deny", ["chinook..Employee"]), MAIN,
         "policies.roles.analyst.deny[0]", "globs * ? [] allowed", "'chinook..Employee'"),
    Case("role-unknown-key", at("policies.roles.viewer.alow", ["chinook"]), MAIN,
         "policies.roles.viewer.alow", "did you mean 'allow'?", "unknown key 'alow'"),
    Case("role-not-a-mapping", at("policies.roles.viewer", "everything"), MAIN, "policies.roles.viewer",
         "write a YAML mapping"),
    # settings, storage
    Case("row-limit-wrong-type", at("settings.pipeline.row_limit", "many"), MAIN, "settings.pipeline.row_limit",
         "write a whole number"),
    Case("row-limit-zero", at("settings.pipeline.row_limit", 0), MAIN, "settings.pipeline.row_limit",
         "raise the value", "greater than or equal to 1"),
    Case("timeout-negative", at("settings.pipeline.statement_timeout_s", -5), MAIN,
         "settings.pipeline.statement_timeout_s", "raise the value", "greater than 0"),
    Case("floor-ratio-too-big", at("settings.routing.floor_ratio", 1.5), MAIN, "settings.routing.floor_ratio",
         "lower the value", "less than or equal to 1"),
    Case("routing-unknown-key", at("settings.routing.shortlst", 5), MAIN, "settings.routing.shortlst",
         "did you mean 'shortlist'?", "unknown key 'shortlst'"),
    Case("settings-unknown-group", at("settings.routng", {"shortlist": 5}), MAIN, "settings.routng",
         "did you mean 'routing'?", "unknown key 'routng'"),
    Case("storage-keep-builds-zero", at("storage.keep_builds", 0), MAIN, "storage.keep_builds",
         "raise the value"),
    # llm
    Case("llm-default-undefined", at("llm.default", "big"), MAIN, "llm.default",
         "define it under llm.models first", "unknown model 'big'"),
    Case("llm-default-typo", at("llm.default", "smal"), MAIN, "llm.default",
         "did you mean 'small'?", "unknown model 'smal'"),
    Case("llm-node-unknown", at("llm.nodes.plannr", "small"), MAIN, "llm.nodes.plannr",
         "did you mean 'planner'?", "'plannr' is not allowed here"),
    Case("llm-node-model-undefined", at("llm.nodes.planner", "large"), MAIN, "llm.nodes.planner",
         "define it under llm.models first", "unknown model 'large'"),
    Case("llm-provider-unknown", at("llm.models.small.provider", "openia"), MAIN, "llm.models.small.provider",
         "did you mean 'openai'?", "unknown provider 'openia'"),
    Case("llm-structured-output-typo", at("llm.models.small.structured_output", "json_schem"), MAIN,
         "llm.models.small.structured_output", "did you mean 'json_schema'?"),
    # hooks, observers
    Case("hook-unknown", at("hooks.0.use", "sql_reveiw"), MAIN, "hooks[0].use",
         "did you mean 'sql_review'?", "unknown hook 'sql_reveiw'"),
    Case("hook-unknown-no-guess", at("hooks.0.use", "zzz"), MAIN, "hooks[0].use",
         "built-in hooks: deny_tables, question_rewriter, row_limit, sql_review", "unknown hook 'zzz'"),
    Case("hook-approver-role-unknown", at("hooks.0.approver_roles", ["admin", "dba"]), MAIN,
         "hooks[0].approver_roles[1]", "define it under policies.roles", "unknown role 'dba'"),
    Case("hook-point-typo", at("hooks.0.points", ["execute.befor"]), MAIN, "hooks[0].points[0]",
         "did you mean 'execute.before'?"),
    Case("observer-unknown", at("observers.1.use", "audti"), MAIN, "observers[1].use",
         "did you mean 'audit'?", "unknown observer 'audti'"),
    # environment
    Case("env-unset", unset_env("NOPE", "datasources.1.url"), MAIN, "datasources[1].url",
         "export NOPE=", "environment variable NOPE is not set"),
    Case("env-unset-in-description", unset_env("NOPE_TOO", "datasources.0.description"), MAIN,
         "datasources[0].description", "${env:NOPE_TOO:-DEFAULT}", "NOPE_TOO is not set"),
    # section includes
    Case("include-missing", include("policies", "policies.yaml"), "policies.yaml", "policies",
         "create it, or point 'policies' at an existing file", "file not found", not_file=(MAIN,)),
    Case("include-bad-yaml", include("policies", "policies.yaml", "roles: [admin\ndefault_role: viewer\n"),
         "policies.yaml", "policies", "fix the YAML syntax", "not valid YAML at line", not_file=(MAIN,)),
    Case("include-empty", include("policies", "policies.yaml", ""), "policies.yaml", "policies",
         "write the 'policies' section", "empty", not_file=(MAIN,)),
    Case("include-unknown-key", include("policies", "policies.yaml", typo_role_key), "policies.yaml",
         "policies.roles.viewer.alow", "did you mean 'allow'?", "unknown key 'alow'", not_file=(MAIN,)),
    Case("include-cross-check", include("policies", "policies.yaml", typo_default_role), "policies.yaml",
         "policies.default_role", "did you mean 'viewer'?", "unknown role 'veiwer'", not_file=(MAIN,)),
    Case("include-env-path-unset",
         both(include("llm", "llm.yaml", ...), at("llm", "${env:NOPE_DIR}/llm.yaml"),
              lambda p: p.env.delenv("NOPE_DIR", raising=False)),
         MAIN, "llm", "export NOPE_DIR=", "NOPE_DIR is not set"),
    # hostile or unreadable text, found when the file is read
    Case("main-not-utf8", write_bytes(MAIN, b"version: 1\n# caf\xe9\n"), MAIN, "",
         "save the file as UTF-8", "not UTF-8 text (byte 0xe9 at line 2, column 6)"),
    Case("include-not-utf8", both(include("policies", "policies.yaml"),
                                  write_bytes("policies.yaml", b"roles: {}\n# \xff\n")),
         "policies.yaml", "policies", "save the file as UTF-8", "not UTF-8 text", not_file=(MAIN,)),
    Case("main-too-deep", main_text("datasources: " + "[" * 20_000 + "]" * 20_000 + "\n"), MAIN, "",
         "at most 100 levels deep", "nested deeper than 100 levels"),
    Case("main-alias-bomb", main_text("".join(
        ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"]
        + [f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)])),
        MAIN, "", "write the repeated part out", "aliases expand to more than 100,000 extra nodes"),
    Case("yaml-impossible-date", main_text("version: 1\ndatasources:\n- id: a\n  description: 2021-02-30\n"), MAIN, "",
         "quote the value", "day is out of range for month"),
    # checks at load that used to wait for the first question
    Case("url-port-not-a-number", ds(1, url="postgresql://u@h:notaport/db"), MAIN, "datasources[1].url",
         "write the port as digits", "the port is not a number"),
    Case("url-driver-not-installed", ds(1, url="postgresql+psycopg2://u@h/db"), MAIN, "datasources[1].url",
         "pip install psycopg2-binary", "driver 'psycopg2' is not installed"),
    Case("url-driver-unknown", ds(1, url="postgresql+nodriver://u@h/db"), MAIN, "datasources[1].url",
         "name an installed driver", "unknown driver 'nodriver'"),
    Case("verified-sql-drop", ds(0, verified_queries=[{"question": "Drop it", "sql": "DROP TABLE Album"}]), MAIN,
         "datasources[0].verified_queries[0].sql", "Rewrite it as one SELECT", "this statement is a DROP"),
    Case("example-sql-delete", ds(0, example_questions=[{"question": "Empty it", "sql": "DELETE FROM Album"}]), MAIN,
         "datasources[0].example_questions[0].sql", "Rewrite it as one SELECT", "this statement is a DELETE"),
    Case("hook-option-typo", at("hooks.0.options", {"tabels": ["chinook.Invoice"]}), MAIN,
         "hooks[0].options.tabels", "did you mean 'tables'?", "unknown option 'tabels'"),
    Case("hook-option-missing", at("hooks", [{"use": "row_limit"}]), MAIN, "hooks[0].options.max_rows",
         "add it", "required option 'max_rows' is missing"),
    Case("hook-point-unsupported", at("hooks.0.points", ["plan.after"]), MAIN, "hooks[0].points",
         "remove the other points", "sql_review runs only at execute.before"),
    Case("observer-option-bad", at("observers.0.options", {"level": "LOUD"}), MAIN, "observers[0].options.level",
         "use one of", "unknown log level 'LOUD'"),
    Case("state-dir-is-a-file", both(lambda p: p.write("taken", "x"), at("storage.state_dir", "taken")), MAIN,
         "storage.state_dir", "point storage.state_dir at a folder", "'taken' is a file, not a folder"),
    Case("pattern-shape-and-unknown-datasource", at("policies.roles.viewer.allow", ["a.b.c.d", "chinok.Album"]),
         MAIN, "policies.roles.viewer.allow[1]", "did you mean 'chinook'?", "names unknown datasource 'chinok'",
         alone=False),
]


def _load_broken(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ConfigError:
    project = Project(copy.deepcopy(BASE), tmp_path, monkeypatch)
    case.breaks(project)
    with pytest.raises(ConfigError) as caught:
        project.load()
    return caught.value


def _matching(error: ConfigError, case: Case) -> list[ConfigProblem]:
    return [
        p
        for p in error.problems
        if Path(p.file).name == case.file and p.key == case.key and case.fix in (p.fix or "")
        and case.message in p.message
    ]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_broken_config(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    error = _load_broken(case, tmp_path, monkeypatch)
    rendered = str(error)
    listing = "\n".join(map(str, error.problems))

    # structured
    hits = _matching(error, case)
    assert hits, f"no problem at {case.file}: {case.key!r} with fix {case.fix!r}; got:\n{listing}"
    problem = hits[0]
    assert Path(problem.file).is_absolute() or problem.file.endswith(case.file)
    if case.alone:
        assert len(error.problems) == 1, f"expected one problem, got:\n{listing}"
    for name in case.not_file:
        assert all(Path(p.file).name != name for p in error.problems), listing

    # rendered: FILE: KEY: MESSAGE — FIX, every problem listed
    where = f"{case.file}: {case.key}: " if case.key else f"{case.file}: "
    assert where in rendered
    assert f" — {problem.fix}" in rendered
    assert case.fix in rendered
    assert str(problem) in rendered
    for other in error.problems:
        assert str(other) in rendered


def test_cases_cover_enough_rows() -> None:
    assert len(CASES) >= 20
    assert len({c.id for c in CASES}) == len(CASES)


def test_base_config_is_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = Project(copy.deepcopy(BASE), tmp_path, monkeypatch).load()
    assert [d.id for d in config.datasources] == ["chinook", "web"]
    assert set(config.policies.roles) == {"admin", "analyst", "viewer"}
    assert config.path == (tmp_path / MAIN).resolve()


def test_default_admin_role_need_not_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = copy.deepcopy(BASE)
    base["policies"].pop("admin_roles", None)
    base["policies"]["roles"].pop("admin")
    base["hooks"] = []
    config = Project(base, tmp_path, monkeypatch).load()
    assert config.policies.admin_roles == ["admin"] and "admin" not in config.policies.roles


def test_included_sections_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = Project(copy.deepcopy(BASE), tmp_path, monkeypatch)
    include("policies", "policies.yml", ...)(project)
    include("datasources", "datasources.yaml", ...)(project)
    config = project.load()
    assert config.policies.default_role == "viewer"
    assert [d.id for d in config.datasources] == ["chinook", "web"]


def test_several_problems_reported_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = Project(copy.deepcopy(BASE), tmp_path, monkeypatch)
    both(
        ds(1, url="postgress://host/db"),
        ds(0, id="Chinook"),
        at("settings.pipeline.row_limit", 0),
        at("settings.routing.shortlst", 5),
        at("obsevers", []),
    )(project)
    with pytest.raises(ConfigError) as caught:
        project.load()
    error = caught.value
    keys = {p.key for p in error.problems}
    assert {"datasources[1].url", "datasources[0].id", "settings.pipeline.row_limit",
            "settings.routing.shortlst", "obsevers"} <= keys
    rendered = str(error)
    assert rendered.startswith(f"{len(error.problems)} problems in the configuration:\n")
    assert len(error.problems) >= 3
    for problem in error.problems:
        assert f"  - {problem}" in rendered
    assert "did you mean 'postgresql'?" in rendered
    assert "did you mean 'observers'?" in rendered


def test_several_cross_section_problems_reported_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = Project(copy.deepcopy(BASE), tmp_path, monkeypatch)
    both(
        at("policies.default_role", "veiwer"),
        at("policies.roles.viewer.allow", ["chinok.Album"]),
        at("llm.default", "smal"),
        at("hooks.0.approver_roles", ["dba"]),
    )(project)
    with pytest.raises(ConfigError) as caught:
        project.load()
    keys = [p.key for p in caught.value.problems]
    assert keys == [
        "policies.default_role",
        "policies.roles.viewer.allow[0]",
        "llm.default",
        "hooks[0].approver_roles[0]",
    ]


def test_env_default_used_when_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NL2SQL_TEST_WEB_URL", raising=False)
    project = Project(copy.deepcopy(BASE), tmp_path, monkeypatch)
    at("datasources.1.url", "${env:NL2SQL_TEST_WEB_URL:-duckdb:///data/default.duckdb}")(project)
    at("settings.pipeline.row_limit", "${env:NL2SQL_TEST_ROWS:-250}")(project)
    config = project.load()
    assert config.datasources[1].url is not None
    assert config.datasources[1].url.get_secret_value() == "duckdb:///data/default.duckdb"
    assert config.settings.pipeline.row_limit == 250


def test_env_value_wins_over_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NL2SQL_TEST_WEB_URL", "duckdb:///data/from_env.duckdb")
    project = Project(copy.deepcopy(BASE), tmp_path, monkeypatch)
    at("datasources.1.url", "${env:NL2SQL_TEST_WEB_URL:-duckdb:///data/default.duckdb}")(project)
    config = project.load()
    assert config.datasources[1].url is not None
    assert config.datasources[1].url.get_secret_value() == "duckdb:///data/from_env.duckdb"


def test_demo_config_loads() -> None:
    config = load_project(DEMO_CONFIG)
    assert [d.id for d in config.datasources] == ["chinook", "support", "webanalytics"]
    assert config.policies.default_role == "viewer"


@pytest.mark.parametrize(
    "url",
    [
        "postgress://u:hunter2@h/db",
        "u:hunter2@h/db",
        "${env:NL2SQL_TEST_SECRET_URL}",
    ],
    ids=["unknown-dialect", "not-a-url", "from-env"],
)
def test_secrets_never_in_config_errors(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NL2SQL_TEST_SECRET_URL", "postgress://u:hunter2@h/db")
    project = Project(copy.deepcopy(BASE), tmp_path, monkeypatch)
    ds(1, url=url)(project)
    at("llm.models.small.api_key", "sk-hunter2")(project)
    at("llm.models.small.temprature", 0.2)(project)  # a second problem, in the model holding a key
    with pytest.raises(ConfigError) as caught:
        project.load()
    error = caught.value
    assert "hunter2" not in str(error)
    assert all("hunter2" not in str(p) for p in error.problems)
    assert {p.key for p in error.problems} == {"datasources[1].url", "llm.models.small.temprature"}
