"""Statements built to exhaust memory or time, run through the installed `nl2sql sql` as a user would: each must
end with a clear error (or a bounded result) with the whole process tree (the CLI and the worker processes that run
DuckDB statements) under 1 GiB of resident memory, and within the statement timeout + 5 s of a plain `SELECT 1` run
the same way (the process's own floor). The corpus is `memory_probes.yaml` beside this file; the slow test
`tests/security/test_memory_probes.py` runs the same probes.

    .venv/bin/python benchmarks/perf/memory_probes.py [--out benchmarks/perf/memory_probes.json] [--only PREFIX]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

NL2SQL = Path(sys.executable).parent / "nl2sql"
CORPUS = Path(__file__).with_name("memory_probes.yaml")
LIMIT_MIB = 1024
#: Seconds a probe may run past the statement timeout, beyond the floor's own time.
SLACK_S = 5.0


def load_corpus(path: Path = CORPUS) -> dict:
    """The probe corpus: `timeout_s` and `probes` (id, datasource, kind, sql, optional args)."""
    return yaml.safe_load(path.read_text())


def make_project(folder: Path, timeout_s: float) -> Path:
    """A demo project whose statements time out after `timeout_s`; its config file."""
    subprocess.run([str(NL2SQL), "init", "--demo", str(folder), "--force"], check=True, capture_output=True)
    config = folder / "nl2sql.yaml"
    raw = yaml.safe_load(config.read_text())
    raw.setdefault("settings", {}).setdefault("pipeline", {})["statement_timeout_s"] = timeout_s
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    return config


def _tree_rss_kib(pid: int) -> int:
    """The resident memory of a process and all its descendants now, in KiB (0 once it is gone)."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            for task in Path(f"/proc/{current}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration, ValueError):
            continue
    return total


def run_probe(config: Path, datasource: str, role: str, sql: str, args: list[str] = ()) -> dict:
    """One probe in its own process: exit code, the last line it printed, the peak RSS of its process tree (MiB:
    sampled every 10 ms, and never below what the kernel reports for the CLI and its reaped children), seconds."""
    command = [str(NL2SQL), "-c", str(config), "sql", sql, "-d", datasource, "-r", role, *args]
    peak = 0
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=out, stderr=err, env={**os.environ, "COLUMNS": "200"})
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _tree_rss_kib(proc.pid))
                done.wait(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)  # the CLI's rusage: itself and the children it reaped
        seconds = time.perf_counter() - started
        done.set()
        sampler.join()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    said = (stderr.strip() or stdout.strip()).splitlines()
    return {"exit": os.waitstatus_to_exitcode(status), "message": said[-1][:160] if said else "",
            "traceback": "Traceback" in stderr + stdout,
            "rss_mib": round(max(peak, usage.ru_maxrss) / 1024, 1), "seconds": round(seconds, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="Write the figures as JSON.")
    parser.add_argument("--only", default="", help="Run only the probes whose id starts with this.")
    options = parser.parse_args()
    corpus = load_corpus()
    timeout_s = float(corpus["timeout_s"])
    with tempfile.TemporaryDirectory() as folder:
        config = make_project(Path(folder), timeout_s)
        floor = {"id": "floor", "kind": "floor", **run_probe(config, "chinook", "admin", "SELECT 1")}
        results = [floor]
        print(f"{'floor: SELECT 1':34s} exit {floor['exit']}  {floor['rss_mib']:7.1f} MiB  {floor['seconds']:6.2f} s")
        for probe in corpus["probes"]:
            if not probe["id"].startswith(options.only):
                continue
            result = {"id": probe["id"], "kind": probe["kind"],
                      **run_probe(config, probe["datasource"], "admin", probe["sql"], probe.get("args", []))}
            result["beyond_floor_s"] = round(result["seconds"] - floor["seconds"], 2)
            results.append(result)
            print(f"{probe['id']:34s} exit {result['exit']}  {result['rss_mib']:7.1f} MiB  {result['seconds']:6.2f} s"
                  f"  {result['message'][:90]}", flush=True)
    probes = results[1:]
    worst = max(r["rss_mib"] for r in probes)
    slowest = max(r["beyond_floor_s"] for r in probes)
    print(f"{len(probes)} probes; peak RSS of any probe's process tree: {worst:.1f} MiB (limit {LIMIT_MIB} MiB), "
          f"ratio to the SELECT 1 floor: {worst / floor['rss_mib']:.2f}; the slowest ended {slowest:.2f} s after the "
          f"floor (limit: timeout {timeout_s:g} s + {SLACK_S:g} s)")
    if options.out:
        options.out.write_text(json.dumps({"limit_mib": LIMIT_MIB, "timeout_s": timeout_s, "slack_s": SLACK_S,
                                           "floor": floor, "probes": probes}, indent=2) + "\n")
    if worst >= LIMIT_MIB or slowest > timeout_s + SLACK_S or any(r["traceback"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
