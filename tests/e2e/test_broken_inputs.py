"""A corpus of broken inputs run through the installed `nl2sql` executable: each one is a usage error (exit 2)
with one message naming the file and the key, never a traceback, and found before anything runs.

Each row writes a broken file (configuration, section include, eval suite or plan file) into its own
folder next to a valid copy of the demo project, runs one command, and checks what it printed. The
rows run concurrently in a small thread pool (one test), so the file stays fast on two cores.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

NL2SQL = Path(sys.executable).parent / "nl2sql"
CONFIG = "nl2sql.yaml"
WORKERS = 3

#: The classic "billion laughs": nine levels of nine aliases each (a few hundred bytes, 9⁹ strings expanded).
BILLION_LAUGHS = "".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n']
    + [f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
    + ["datasources: [*i]\n"]
)
DEEP_YAML = "datasources: " + "[" * 20_000 + "]" * 20_000 + "\n"
DEEP_PLAN = '{"select": ' + "[" * 5000 + "]" * 5000 + "}"
GOOD_PLAN = {"select": [{"expr": {"kind": "column", "table": "Genre", "column": "Name"}, "alias": None}],
             "from": {"table": "Genre", "alias": None}}
GOOD_CASE = {"id": "c1", "question": "How many genres are there?", "datasources": ["chinook"],
             "sql": "SELECT COUNT(*) FROM Genre", "outcome": {"viewer": "allowed"}, "tables": ["Genre"],
             "columns": ["Genre.GenreId"]}


@dataclass
class Folder:
    """One row's folder: the valid base configuration to break, and where files go."""

    root: Path
    base: dict[str, Any]

    def config(self) -> dict[str, Any]:
        return copy.deepcopy(self.base)

    def write(self, name: str, content: Any) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_text(yaml.safe_dump(content, sort_keys=False, allow_unicode=True), encoding="utf-8")


@dataclass(frozen=True)
class Broken:
    id: str
    writes: Callable[[Folder], None]
    file: str  # the file the message must name (relative to the row's folder)
    key: str  # the key path the message must name ("" when the whole file is wrong)
    says: str  # a fragment of the message (or of its fix)
    command: tuple[str, ...] = ("-c", "{dir}/" + CONFIG, "datasources", "list")
    env: dict[str, str] = field(default_factory=dict)


# --- ways to break things ------------------------------------------------------------------------


def cfg(change: Callable[[dict[str, Any]], Any]) -> Callable[[Folder], None]:
    """The base configuration with one change (the function edits it in place)."""

    def writes(folder: Folder) -> None:
        config = folder.config()
        change(config)
        folder.write(CONFIG, config)

    return writes


def raw(content: str | bytes, name: str = CONFIG) -> Callable[[Folder], None]:
    return lambda folder: folder.write(name, content)


def include(section: str, content: Any) -> Callable[[Folder], None]:
    """The section moved to `part.yaml`, which holds `content` (a callable edits the section instead)."""

    def writes(folder: Folder) -> None:
        config = folder.config()
        section_value = config.get(section, {})
        config[section] = "part.yaml"
        folder.write(CONFIG, config)
        if callable(content):
            content(section_value)
            folder.write("part.yaml", section_value)
        else:
            folder.write("part.yaml", content)

    return writes


def ds(index: int, **changes: Any) -> Callable[[Folder], None]:
    return cfg(lambda c: c["datasources"][index].update(changes))


def role(name: str, **changes: Any) -> Callable[[Folder], None]:
    return cfg(lambda c: c["policies"]["roles"][name].update(changes))


def hooks(*entries: dict[str, Any]) -> Callable[[Folder], None]:
    return cfg(lambda c: c.update(hooks=list(entries)))


def observers(*entries: dict[str, Any]) -> Callable[[Folder], None]:
    return cfg(lambda c: c.update(observers=list(entries)))


def verified(sql: str, **more: Any) -> Callable[[Folder], None]:
    return cfg(lambda c: c["datasources"][0]["verified_queries"].append({"question": "What now?", "sql": sql, **more}))


def settings(path: str, value: Any) -> Callable[[Folder], None]:
    def change(c: dict[str, Any]) -> None:
        node = c
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    return cfg(change)


SUITE_COMMAND = ("-c", "{dir}/" + CONFIG, "eval", "run", "--mode", "retrieval", "--suite", "{dir}/suite.yaml")


def suite(content: Any) -> Callable[[Folder], None]:
    def writes(folder: Folder) -> None:
        folder.write(CONFIG, folder.config())
        folder.write("suite.yaml", content)

    return writes


def cases(*changes: dict[str, Any]) -> Callable[[Folder], None]:
    """A suite of GOOD_CASE variants: each change updates a copy (a None value removes the field)."""
    items = []
    for change in changes:
        case = {**GOOD_CASE, **change}
        items.append({k: v for k, v in case.items() if v is not None})
    return suite({"version": 1, "cases": items})


def plan(name: str, content: Any) -> Callable[[Folder], None]:
    return lambda folder: folder.write(name, content)


def plan_command(name: str) -> tuple[str, ...]:
    return ("plan", "render", "{dir}/" + name)


def shadow_psycopg(folder: Folder) -> None:
    """A config naming PostgreSQL, run where importing psycopg fails as when the extra is not installed."""
    folder.write("shadow/psycopg.py", "raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n")
    ds(1, url="postgresql://reader@db.internal/sales")(folder)


def state_dir_file(folder: Folder) -> None:
    folder.write("taken", "not a folder")
    settings("storage.state_dir", "taken")(folder)


def state_dir_under_file(folder: Folder) -> None:
    folder.write("taken", "not a folder")
    settings("storage.state_dir", "taken/state")(folder)


def config_is_a_folder(folder: Folder) -> None:
    (folder.root / CONFIG).mkdir()


LATIN1 = "version: 1\n# Café\n".encode("latin-1")

CORPUS = [
    # the main file as text
    Broken("main-not-utf8", raw(LATIN1 + b"datasources: []\n"), CONFIG, "", "not UTF-8 text (byte 0xe9 at line 2"),
    Broken("main-yaml-syntax", raw("version: 1\ndatasources: [oops\n"), CONFIG, "", "not valid YAML at line"),
    Broken("main-deep-flow", raw(DEEP_YAML), CONFIG, "", "nested deeper than 100 levels"),
    Broken("main-deep-block", raw("datasources:\n" + "".join("  " * i + "-\n" for i in range(1, 400))), CONFIG, "",
           "nested deeper than 100 levels"),
    Broken("main-alias-bomb", raw(BILLION_LAUGHS), CONFIG, "", "aliases expand to more than"),
    Broken("main-self-alias", raw("datasources: &d [*d]\n"), CONFIG, "", "refers to the node that contains it"),
    Broken("main-impossible-date", raw("version: 1\ndatasources:\n- id: a\n  description: 2021-02-30\n"), CONFIG, "",
           "day is out of range"),
    Broken("main-huge-int", raw("version: " + "7" * 5000 + "\n"), CONFIG, "", "cannot be read"),
    Broken("main-python-tag", raw("version: !!python/object/apply:os.system [ls]\n"), CONFIG, "",
           "could not determine a constructor"),
    Broken("main-not-a-mapping", raw("- chinook\n- support\n"), CONFIG, "", "start it with 'datasources:'"),
    Broken("main-is-a-folder", config_is_a_folder, CONFIG, "", "cannot read the file"),
    Broken("main-missing", lambda folder: None, CONFIG, "", "file not found"),
    # datasources
    Broken("url-port-not-a-number", ds(1, url="postgresql://u:hunter2@h:notaport/db"), CONFIG, "datasources[1].url",
           "the port is not a number"),
    Broken("url-driver-missing", ds(1, url="postgresql+psycopg2://u@h/db"), CONFIG, "datasources[1].url",
           "pip install psycopg2-binary"),
    Broken("url-psycopg-missing", shadow_psycopg, CONFIG, "datasources[1].url",
           'pip install "nl2sql-engine[postgres]"', env={"PYTHONPATH": "{dir}/shadow"}),
    Broken("url-unknown-driver", ds(1, url="postgresql+nodriver://u@h/db"), CONFIG, "datasources[1].url",
           "unknown driver 'nodriver'"),
    Broken("datasource-duplicate-id", ds(1, id="chinook"), CONFIG, "datasources[1].id", "duplicate datasource id"),
    Broken("verified-drop-table", verified("DROP TABLE Album"), CONFIG, "datasources[0].verified_queries[7].sql",
           "this statement is a DROP"),
    Broken("example-delete", cfg(lambda c: c["datasources"][0]["example_questions"].insert(
        0, {"question": "Empty the albums", "sql": "DELETE FROM Album"})), CONFIG,
        "datasources[0].example_questions[0].sql", "this statement is a DELETE"),
    Broken("verified-two-statements", verified("SELECT 1; DELETE FROM Album"), CONFIG,
           "datasources[0].verified_queries[7].sql", "Only one statement"),
    Broken("verified-unparsable", verified("SELEC Name FROM"), CONFIG, "datasources[0].verified_queries[7].sql",
           "could not be parsed as sqlite SQL"),
    Broken("verified-undeclared-parameter", verified("SELECT * FROM Album WHERE AlbumId = :album"), CONFIG,
           "datasources[0].verified_queries[7]", "the SQL's :album is not a declared parameter"),
    # policies
    Broken("two-bad-patterns", role("viewer", allow=["a.b.c.d", "chinok.Album"]), CONFIG,
           "policies.roles.viewer.allow[1]", "did you mean 'chinook'?"),
    Broken("pattern-glob-matches-nothing", role("analyst", allow=["sales_*"]), CONFIG,
           "policies.roles.analyst.allow[0]", "matches no datasource"),
    # models
    Broken("llm-provider-unknown", cfg(lambda c: c.update(llm={"models": {"m": {"provider": "openia", "model": "x"}}})),
           CONFIG, "llm.models.m.provider", "did you mean 'openai'?"),
    Broken("llm-structured-output-typo", cfg(lambda c: c.update(llm={"models": {"m": {
        "provider": "openai", "model": "x", "structured_output": "json_schem"}}})), CONFIG,
        "llm.models.m.structured_output", "did you mean 'json_schema'?"),
    # hooks
    Broken("hook-option-typo", hooks({"use": "sql_review", "options": {"tabels": ["chinook.Invoice"]}}), CONFIG,
           "hooks[0].options.tabels", "did you mean 'tables'?"),
    Broken("hook-option-wrong-type", hooks({"use": "sql_review", "options": {"max_rows": "many"}}), CONFIG,
           "hooks[0].options.max_rows", "write a whole number"),
    Broken("hook-option-missing", hooks({"use": "row_limit"}), CONFIG, "hooks[0].options.max_rows",
           "required option 'max_rows'"),
    Broken("hook-options-not-a-mapping", hooks({"use": "sql_review", "options": ["chinook.Invoice"]}), CONFIG,
           "hooks[0].options", "write a YAML mapping"),
    Broken("hook-point-unsupported", hooks({"use": "sql_review", "points": ["plan.after"]}), CONFIG,
           "hooks[0].points", "sql_review runs only at execute.before"),
    Broken("hook-duplicate-name", hooks({"use": "row_limit", "options": {"max_rows": 5}},
                                        {"use": "row_limit", "options": {"max_rows": 9}}), CONFIG,
           "hooks[1].name", "a second hook named 'row_limit'"),
    Broken("hook-approver-role-unknown", hooks({"use": "sql_review", "approver_roles": ["dba"]}), CONFIG,
           "hooks[0].approver_roles[0]", "unknown role 'dba'"),
    # observers
    Broken("observer-log-level", observers({"use": "log", "options": {"level": "LOUD"}}), CONFIG,
           "observers[0].options.level", "unknown log level 'LOUD'"),
    Broken("observer-audit-option-typo", observers({"use": "audit", "options": {"max_age": 3}}), CONFIG,
           "observers[0].options.max_age", "did you mean 'max_age_days'?"),
    Broken("observer-otel-option-type", observers({"use": "otel", "options": {"metrics": "maybe"}}), CONFIG,
           "observers[0].options.metrics", "write true or false"),
    # settings and storage
    Broken("state-dir-is-a-file", state_dir_file, CONFIG, "storage.state_dir", "'taken' is a file"),
    Broken("state-dir-under-a-file", state_dir_under_file, CONFIG, "storage.state_dir", "which is a file"),
    # section includes
    Broken("include-missing", lambda f: (f.write(CONFIG, {**f.config(), "policies": "nowhere.yaml"})),
           "nowhere.yaml", "policies", "file not found"),
    Broken("include-empty", include("policies", ""), "part.yaml", "policies", "the file is empty"),
    Broken("include-not-utf8", include("policies", LATIN1), "part.yaml", "policies", "not UTF-8 text"),
    Broken("include-yaml-syntax", include("policies", "roles: [admin\n"), "part.yaml", "policies", "not valid YAML"),
    Broken("include-deep", include("policies", "roles: " + "{a: " * 5000 + "}" * 5000), "part.yaml", "policies",
           "nested deeper than 100 levels"),
    Broken("include-alias-bomb", include("policies", BILLION_LAUGHS), "part.yaml", "policies",
           "aliases expand to more than"),
    Broken("include-bad-key", include("policies", lambda p: p.update(default_rol="viewer")), "part.yaml",
           "policies.default_rol", "did you mean 'default_role'?"),
    # eval suites: found before any case runs, before Prefect
    Broken("suite-not-yaml", suite("version: 1\ncases: [\n"), "suite.yaml", "", "not valid YAML at line",
           SUITE_COMMAND),
    Broken("suite-not-a-mapping", suite([GOOD_CASE]), "suite.yaml", "", "a suite is a mapping", SUITE_COMMAND),
    Broken("suite-wrong-version", suite({"version": 2, "cases": [GOOD_CASE]}), "suite.yaml", "version",
           "unknown version 2", SUITE_COMMAND),
    Broken("suite-no-cases", suite({"version": 1, "description": "empty"}), "suite.yaml", "cases",
           "write `cases:`", SUITE_COMMAND),
    Broken("suite-case-not-a-mapping", suite({"version": 1, "cases": ["How many genres?"]}), "suite.yaml",
           "cases[0]", "a case is a mapping", SUITE_COMMAND),
    Broken("suite-case-missing-question", cases({"question": None}), "suite.yaml", "cases[0] (c1).question",
           "required field 'question' is missing", SUITE_COMMAND),
    Broken("suite-case-unknown-field", cases({"tabels": ["Genre"]}), "suite.yaml", "cases[0] (c1).tabels",
           "unknown field 'tabels'", SUITE_COMMAND),
    Broken("suite-case-bad-outcome", cases({"outcome": {"viewer": "maybe"}}), "suite.yaml",
           "cases[0] (c1).outcome.viewer", "'allowed', 'refused' or 'unanswerable'", SUITE_COMMAND),
    Broken("suite-duplicate-ids", cases({}, {}), "suite.yaml", "cases[1] (c1).id", "used twice", SUITE_COMMAND),
    Broken("suite-unknown-datasource", cases({"datasources": ["chinok"]}), "suite.yaml",
           "cases[0] (c1).datasources[0]", "did you mean 'chinook'?", SUITE_COMMAND),
    Broken("suite-unknown-role", cases({"outcome": {"veiwer": "allowed"}}), "suite.yaml", "cases[0] (c1).outcome.veiwer",
           "did you mean 'viewer'?", SUITE_COMMAND),
    Broken("suite-unknown-table", cases({"tables": ["Genres"]}), "suite.yaml", "cases[0] (c1).tables[0]",
           "chinook has no table 'Genres'", SUITE_COMMAND),
    Broken("suite-unknown-column", cases({"columns": ["Genre.Title"]}), "suite.yaml", "cases[0] (c1).columns[0]",
           "table 'Genre' has no column 'Title'", SUITE_COMMAND),
    Broken("suite-not-utf8", suite(b"version: 1\ncases: []\n# \xff\n"), "suite.yaml", "", "not UTF-8 text",
           SUITE_COMMAND),
    Broken("suite-deep", suite("version: 1\ncases: " + "[" * 5000 + "]" * 5000 + "\n"), "suite.yaml", "",
           "nested deeper than 100 levels", SUITE_COMMAND),
    Broken("suite-alias-bomb", suite(BILLION_LAUGHS.replace("datasources", "cases")), "suite.yaml", "",
           "aliases expand", SUITE_COMMAND),
    Broken("suite-missing", lambda f: f.write(CONFIG, f.config()), "suite.yaml", "", "no such suite file",
           SUITE_COMMAND),
    # plan files (`nl2sql plan render`)
    Broken("plan-deep-json", plan("p.json", DEEP_PLAN), "p.json", "", "nested deeper than 100 levels",
           plan_command("p.json")),
    Broken("plan-not-utf8", plan("p.json", b'{"select": "\xff"}'), "p.json", "", "not UTF-8 text",
           plan_command("p.json")),
    Broken("plan-bad-json", plan("p.json", '{"select": [}'), "p.json", "", "not valid JSON at line 1",
           plan_command("p.json")),
    Broken("plan-huge-int", plan("p.json", '{"select": [], "limit": ' + "9" * 5000 + "}"), "p.json", "",
           "cannot be read", plan_command("p.json")),
    Broken("plan-deep-yaml", plan("p.yaml", "select: " + "[" * 5000 + "]" * 5000), "p.yaml", "",
           "nested deeper than 100 levels", plan_command("p.yaml")),
    Broken("plan-yaml-bomb", plan("p.yaml", BILLION_LAUGHS), "p.yaml", "", "aliases expand", plan_command("p.yaml")),
    Broken("plan-missing-select", plan("p.yaml", {"from": GOOD_PLAN["from"]}), "p.yaml", "select", "Field required",
           plan_command("p.yaml")),
    Broken("plan-missing-file", lambda f: None, "p.json", "", "cannot read the file", plan_command("p.json")),
]


@pytest.fixture(scope="module")
def base_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo project's configuration, its database paths made absolute so it works from any folder."""
    demo = tmp_path_factory.mktemp("demo")
    done = subprocess.run([str(NL2SQL), "init", "--demo", str(demo), "--force"], capture_output=True, text=True,
                          timeout=120, env=_env(demo))
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load((demo / CONFIG).read_text(encoding="utf-8"))
    for entry in config["datasources"]:
        entry["url"] = re.sub(r"^(\w+):///(?!/)", lambda m: f"{m.group(1)}:///{demo}/", entry["url"])
    return config


def _env(root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NL2SQL_CONFIG", "PYTHONPATH")}
    env.update({"PREFECT_HOME": str(root / "prefect-home"), "COLUMNS": "400", "NO_COLOR": "1"})
    env.update({k: v.format(dir=root) for k, v in (extra or {}).items()})
    return env


def _run(case: Broken, root: Path, base: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    folder = root / case.id
    folder.mkdir()
    case.writes(Folder(folder, base))
    args = [a.format(dir=folder) for a in case.command]
    return subprocess.run([str(NL2SQL), *args], capture_output=True, text=True, timeout=120, cwd=folder,
                          env=_env(folder, case.env))


def _verdict(case: Broken, root: Path, done: subprocess.CompletedProcess[str]) -> str | None:
    """What is wrong with the command's output for this row, or None."""
    out = done.stdout + done.stderr
    errors = re.findall(r"^error\b", done.stderr, re.MULTILINE)
    where = str(root / case.id / case.file)
    if done.returncode != 2:
        return f"exit code {done.returncode}, not 2"
    if "Traceback" in out:
        return "a traceback"
    if len(errors) != 1 or done.stdout.strip():
        return f"{len(errors)} error messages (stdout: {done.stdout.strip()[:80]!r})"
    if where not in done.stderr:
        return f"the message does not name {where}"
    if case.key and f": {case.key}" not in done.stderr:
        return f"the message does not name the key {case.key!r}"
    if case.says not in done.stderr:
        return f"the message does not say {case.says!r}"
    if "hunter2" in out:
        return "a password from the configuration was printed"
    return None


def test_every_broken_input_is_one_clear_usage_error(base_config: dict[str, Any], tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        results = list(pool.map(lambda case: (case, _run(case, tmp_path, base_config)), CORPUS))
    failures = []
    for case, done in results:
        problem = _verdict(case, tmp_path, done)
        if problem:
            failures.append(f"{case.id}: {problem}\n    stderr: {done.stderr.strip()[-600:]}")
    assert not failures, f"{len(failures)} of {len(CORPUS)} broken inputs misreported:\n" + "\n".join(failures)


def test_the_corpus_is_large_and_named_once() -> None:
    assert len(CORPUS) >= 60
    assert len({c.id for c in CORPUS}) == len(CORPUS)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs a user that permissions apply to")
def test_a_state_dir_that_is_not_writable(base_config: dict[str, Any], tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    case = Broken("state-dir-not-writable", settings("storage.state_dir", str(locked / "state")), CONFIG,
                  "storage.state_dir", "is not writable")
    locked.chmod(0o500)
    try:
        done = _run(case, tmp_path, base_config)
    finally:
        locked.chmod(0o700)
    assert _verdict(case, tmp_path, done) is None, done.stderr
