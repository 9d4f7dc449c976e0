"""What an MCP client waits for: the installed `nl2sql mcp` over stdio, driven by the MCP SDK's client, on a fresh
demo project (index built first).

Prints the time from starting the server to an initialized session, the first `ask` of a verified question (no
model: the embedder and connections load then), the p50/max of `--runs` more, and the same for `describe_table`.
Writes mcp_latency.json beside this file.

    .venv/bin/python benchmarks/perf/mcp_latency.py [--runs N] [--executor inline|prefect] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NL2SQL = str(Path(sys.executable).parent / "nl2sql")
QUESTION = "How much did we earn in each year?"  # a verified query on chinook: no model


def demo_project(target: Path) -> Path:
    """The demo project, its index built."""
    from nl2sql.demo import init_demo
    from nl2sql.index import StateStore
    from nl2sql.index.service import build_configured
    from nl2sql.project import load_project

    path = init_demo(target, env={})
    config = load_project(path)
    build_configured(config, StateStore(config.state_dir))
    return path


async def measure(config: Path, runs: int, executor: str) -> dict[str, Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=NL2SQL, args=["-c", str(config), "mcp", "--role", "analyst",
                                                         "--executor", executor])
    started = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        ready_s = time.perf_counter() - started

        async def timed(tool: str, arguments: dict[str, Any]) -> float:
            began = time.perf_counter()
            result = await client.call_tool(tool, arguments)
            assert not result.isError and (result.structuredContent or {}).get("status") in ("success", "ok"), result
            return (time.perf_counter() - began) * 1000

        first_ask = await timed("ask", {"question": QUESTION})
        asks = [await timed("ask", {"question": QUESTION}) for _ in range(runs)]
        describes = [await timed("describe_table", {"table": "Invoice"}) for _ in range(runs)]
    return {"executor": executor, "runs": runs, "server_ready_s": round(ready_s, 2),
            "first_ask_ms": round(first_ask, 1),
            "ask_ms": {"p50": round(statistics.median(asks), 1), "max": round(max(asks), 1)},
            "describe_table_ms": {"p50": round(statistics.median(describes), 1), "max": round(max(describes), 1)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--executor", choices=["inline", "prefect"], default="inline")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_suffix(".json"))
    args = parser.parse_args()
    config = demo_project(Path(tempfile.mkdtemp(prefix="nl2sql-mcp-bench-")) / "demo")
    report = asyncio.run(measure(config, args.runs, args.executor))
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
