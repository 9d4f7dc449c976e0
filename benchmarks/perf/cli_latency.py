"""A question from the command line, end to end, as a user waits for it: the installed `nl2sql ask` of a verified
question (no model) in a fresh process, timed from the outside, with its peak memory.

The ways, each `--runs` times on a fresh demo project (index built first):

- `desk_first` and `desk_second`: as a person meets it, nothing started by hand (no Prefect server set): the first
  `nl2sql ask` starts the question desk in the background and is answered there, the second is handed to the warm
  desk (the desk stopped before each pair); `desk_waiting_line_s`: when the first one's first line appeared;
- `temporary`: no Prefect server set and no desk (`--no-desk`): each process starts Prefect's temporary server,
  `temporary_waiting_line_s` when its first line appeared;
- `server`: a running `prefect server start` (PREFECT_API_URL): imports, embedder and index still load per
  process;
- `served`: `nl2sql ask` with `nl2sql serve` running on the project: the question is handed to its warm
  process (the engine, index and embedder loaded once) and runs there as a flow run of `ask`;
- `deployment_run`: `prefect deployment run 'ask/ask' --watch` answered by the same `nl2sql serve` (each such
  run a subprocess the serving process starts), for comparison.

Targets: a waiting line within 0.5 s of a cold `nl2sql ask`; a second verified question ≤ 1.5 s with nothing
started by hand, and with `nl2sql serve` running; ≤ 4 s with a Prefect server and no desk. Prints p50/max per way and writes cli_latency.json beside this file.

`--against DIR` also times the `server` way with the `nl2sql` package of another checkout (an earlier commit:
`git worktree add /tmp/before <commit>`), its runs interleaved with this one's, and prints the ratio: on a
shared machine whose CPU is taken away at times, the ratio holds where seconds drift.

    .venv/bin/python benchmarks/perf/cli_latency.py [--runs N] [--against DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent
QUESTION = "How much did we earn in each year?"  # a verified query on chinook: no model


def timed(args: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float, int]:
    """(seconds, peak RSS in MB of the command's own process, exit code) of one command (GNU time reads the RSS:
    a temporary Prefect server the command starts is a process of its own, not counted)."""
    started = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    peak = int(proc.stderr.strip().splitlines()[-1]) / 1024
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
    return seconds, peak, proc.returncode


def first_line_and_end(args: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(seconds to the first line on stderr, seconds to the end, exit code) of one command."""
    started = time.perf_counter()
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    proc.stderr.readline()  # type: ignore[union-attr]
    first = time.perf_counter() - started
    out, err = proc.communicate()
    if proc.returncode != 0:
        print(out[-2000:], err[-2000:], file=sys.stderr)
    return first, time.perf_counter() - started, proc.returncode


def seconds_summary(seconds: list[float]) -> dict[str, float]:
    return {"p50_s": round(statistics.median(seconds), 2), "max_s": round(max(seconds), 2)}


def summary(samples: list[tuple[float, float, int]]) -> dict[str, float]:
    seconds = [s for s, _, _ in samples]
    return {"p50_s": round(statistics.median(seconds), 2), "max_s": round(max(seconds), 2),
            "peak_rss_mb": round(max(m for _, m, _ in samples)), "failed": sum(1 for *_, c in samples if c)}


def git_commit(checkout: Path) -> str:
    """The commit a checkout is at."""
    return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_suffix(".json"))
    parser.add_argument("--against", type=Path, help="another checkout whose nl2sql package is timed alongside")
    args = parser.parse_args()
    from tests.support.prefect_server import steady_prefect_server

    work = Path(tempfile.mkdtemp(prefix="nl2sql-cli-latency-"))
    nl2sql = str(BIN / "nl2sql")
    # the ways without a desk ask in their own process (`nl2sql serve`'s desk is the `served` way)
    base = {**os.environ, "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "NL2SQL_BACKGROUND_DESK": "0"}
    base.pop("PREFECT_API_URL", None)
    subprocess.run([nl2sql, "init", "--demo", str(work / "demo")], env=base, check=True, capture_output=True)
    config = str(work / "demo" / "nl2sql.yaml")
    subprocess.run([nl2sql, "-c", config, "index", "build"], env=base, check=True, capture_output=True)
    ask = [nl2sql, "-c", config, "ask", QUESTION, "--role", "analyst"]
    figures: dict[str, Any] = {"question": QUESTION, "runs": args.runs, "commit": git_commit(ROOT)}
    person = {k: v for k, v in base.items() if k != "NL2SQL_BACKGROUND_DESK"}  # the default: a desk is started
    pairs = []
    for _ in range(args.runs):
        subprocess.run([nl2sql, "-c", config, "desk", "stop"], env=person, capture_output=True)
        pairs.append((first_line_and_end(ask, person), timed(ask, person)))
    subprocess.run([nl2sql, "-c", config, "desk", "stop"], env=person, capture_output=True)
    figures["desk_waiting_line_s"] = seconds_summary([first[0] for first, _ in pairs])
    figures["desk_first"] = seconds_summary([first[1] for first, _ in pairs])
    figures["desk_second"] = summary([second for _, second in pairs])
    print("nothing started by hand: waiting line", figures["desk_waiting_line_s"], "first question",
          figures["desk_first"], "second question", figures["desk_second"], flush=True)
    no_desk = [*ask, "--no-desk"]
    figures["temporary_waiting_line_s"] = seconds_summary([first_line_and_end(no_desk, base)[0]
                                                           for _ in range(args.runs)])
    figures["temporary"] = summary([timed(no_desk, base) for _ in range(args.runs)])
    print("temporary server, no desk: waiting line", figures["temporary_waiting_line_s"], figures["temporary"],
          flush=True)
    (work / "prefect-server").mkdir()
    with steady_prefect_server(work / "prefect-server") as (_, env):
        env = {**env, "PREFECT_RUNNER_POLL_FREQUENCY": "1", "NL2SQL_BACKGROUND_DESK": "0"}
        timed(ask, env)  # the server's first flow run registers the flow
        if args.against:
            before_env = {**env, "PYTHONPATH": str(args.against.resolve())}
            # that checkout's own entry point: the console script of this one may name a function it lacks
            entry = "from nl2sql.cli import main as m; (getattr(m, 'run', None) or m.main)()"
            before = [sys.executable, "-P", "-c", entry, *ask[1:]]  # -P: not this folder's package first
            pairs = [(timed(before, before_env), timed(ask, env)) for _ in range(args.runs)]
            figures["server"] = summary([now for _, now in pairs])
            figures["server_before"] = summary([before for before, _ in pairs])
            figures["server_before"]["checkout"] = git_commit(args.against)
            figures["server_ratio"] = round(figures["server"]["p50_s"] / figures["server_before"]["p50_s"], 2)
            print("running server, before:", figures["server_before"], "ratio:", figures["server_ratio"], flush=True)
        else:
            figures["server"] = summary([timed(ask, env) for _ in range(args.runs)])
        print("running server:", figures["server"], flush=True)
        serving = subprocess.Popen([nl2sql, "-c", config, "serve"], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        try:
            for line in serving.stdout:  # type: ignore[union-attr]
                if "being served" in line:
                    break
            figures["served"] = summary([timed(ask, env) for _ in range(args.runs)])
            print("nl2sql ask, handed to nl2sql serve:", figures["served"], flush=True)
            run = [str(BIN / "prefect"), "deployment", "run", "ask/ask", "--param", f"question={QUESTION}",
                   "--param", "role=analyst", "--watch"]
            figures["deployment_run"] = summary([timed(run, env) for _ in range(args.runs)])
            print("prefect deployment run, served:", figures["deployment_run"], flush=True)
        finally:
            serving.terminate()
            serving.wait(timeout=30)
    figures["targets_s"] = {"waiting_line": 0.5, "desk_second": 1.5, "served": 1.5, "server_no_desk": 4.0}
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
