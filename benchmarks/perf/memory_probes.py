"""Statements built to exhaust memory, run through the installed `nl2sql sql` as a user would: each must end with
a clear error (or a bounded result) well under 1 GiB of resident memory. Prints the peak RSS and time of each probe,
beside a plain `SELECT 1` run the same way (the process's own floor).

    .venv/bin/python benchmarks/perf/memory_probes.py [--out benchmarks/perf/memory_probes.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NL2SQL = Path(sys.executable).parent / "nl2sql"
LIMIT_MIB = 1024

PROBES = [
    ("floor: SELECT 1", "chinook", "admin", ["SELECT 1"]),
    ("SQLite zeroblob(200000000)", "chinook", "admin", ["SELECT zeroblob(200000000)"]),
    ("SQLite 200 MB of text from a recursive CTE", "chinook", "admin",
     ["WITH RECURSIVE r(n, s) AS (SELECT 1, '' UNION ALL SELECT n + 1, printf('%.1000c', 'x') FROM r "
      "WHERE n < 200000) SELECT s FROM r", "--limit", "100000"]),
    ("DuckDB count(DISTINCT r) FROM range(1e8)", "webanalytics", "admin",
     ["SELECT count(DISTINCT r) FROM range(100000000) t(r)"]),
    ("--limit=-1 (no row limit)", "chinook", "admin",
     ["SELECT * FROM Track a CROSS JOIN Track b", "--limit=-1"]),
    ("--limit 100000000 over a 12M-row cross join", "chinook", "admin",
     ["SELECT * FROM Track a CROSS JOIN Track b", "--limit", "100000000"]),
]


def run_probe(config: Path, datasource: str, role: str, args: list[str]) -> dict:
    """One probe in its own process: exit code, the last line it printed, its peak RSS (MiB) and seconds."""
    command = [str(NL2SQL), "-c", str(config), "sql", args[0], "-d", datasource, "-r", role, *args[1:]]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=out, stderr=err, env={**os.environ, "COLUMNS": "200"})
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not the largest child's so far
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    said = (stderr.strip() or stdout.strip()).splitlines()
    return {"exit": os.waitstatus_to_exitcode(status), "message": said[-1][:160] if said else "",
            "traceback": "Traceback" in stderr, "rss_mib": round(usage.ru_maxrss / 1024, 1),
            "seconds": round(seconds, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="Write the figures as JSON.")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([str(NL2SQL), "init", "--demo", folder, "--force"], check=True, capture_output=True)
        config = Path(folder) / "nl2sql.yaml"
        results = []
        for name, datasource, role, args in PROBES:
            result = {"probe": name, **run_probe(config, datasource, role, args)}
            results.append(result)
            print(f"{name:48s} exit {result['exit']}  {result['rss_mib']:7.1f} MiB  {result['seconds']:6.2f} s  "
                  f"{result['message']}")
    worst = max(r["rss_mib"] for r in results)
    print(f"peak RSS of any probe: {worst:.1f} MiB (limit {LIMIT_MIB} MiB); "
          f"ratio to the SELECT 1 floor: {worst / results[0]['rss_mib']:.2f}")
    if options.out:
        options.out.write_text(json.dumps({"limit_mib": LIMIT_MIB, "probes": results}, indent=2) + "\n")
    if worst >= LIMIT_MIB or any(r["traceback"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
