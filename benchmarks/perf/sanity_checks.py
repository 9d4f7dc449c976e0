"""What the result checks cost a question, and what they say about plans known to be right.

Runs every Chinook gold plan (answered by the fake model server over the real wire, plan cache off, as admin)
through the inline executor twice, checks on and off (which of the two runs first alternates), and prints p50/p95 of each, the time the
checks add (on − off, per question), the `sanity` step's own time, and the findings by code. The gold plans are
right, so a VALUE_NOT_FOUND or JOIN_FAN_OUT on one of them is a false finding (and a refiner call a user pays
for); ALL_NULL_COLUMN may be true of a right answer.

Target: the checks add ≤ 10 ms p50 to a question; no false VALUE_NOT_FOUND or JOIN_FAN_OUT on the gold plans.

    .venv/bin/python benchmarks/perf/sanity_checks.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.perf.ask_overhead import PLANS, _asked, pct, write_project  # noqa: E402


def with_checks(config: Any, on: bool) -> Any:
    """The configuration with `settings.pipeline.sanity_checks` set."""
    pipeline = config.settings.pipeline.model_copy(update={"sanity_checks": on})
    return config.model_copy(update={"settings": config.settings.model_copy(update={"pipeline": pipeline})})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_suffix(".json"))
    args = parser.parse_args()
    report = run(Path(tempfile.mkdtemp(prefix="nl2sql-sanity-bench-")))
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def run(work: Path) -> dict[str, Any]:
    from nl2sql.engine import Engine
    from nl2sql.llm.fake import FakeLLMServer
    from nl2sql.project import load_project

    plans = {}
    for path in sorted(PLANS.glob("*.json")):
        record = json.loads(path.read_text())
        plans[record["question"]] = record["plan"]
    with FakeLLMServer() as fake:
        fake.respond_with("Answerability", lambda b: {"answerable": True, "datasource_ids": ["chinook"],
                                                      "reason": "the music store"})
        fake.respond_with("PlanModel", lambda b: plans[_asked(b)])
        fake.respond_with("text", lambda b: "The answer is in the rows below.")
        config = load_project(write_project(work / "demo", fake.base_url))
        on, off = Engine(with_checks(config, True)), Engine(with_checks(config, False))
        first = next(iter(plans))
        on.ask(first, role="admin", datasource="chinook")  # warm: model files, connections
        off.ask(first, role="admin", datasource="chinook")
        on_ms, off_ms, added_ms, step_ms, findings, answered = [], [], [], [], Counter(), 0
        false_findings: list[dict[str, str]] = []
        for turn, question in enumerate(plans):
            events: list[Any] = []
            timed: dict[bool, tuple[Any, float]] = {}
            for checks in (True, False) if turn % 2 else (False, True):  # neither always runs first
                started = time.perf_counter()
                result = (on if checks else off).ask(question, role="admin", datasource="chinook",
                                                     on_event=events.append if checks else None)
                timed[checks] = (result, (time.perf_counter() - started) * 1000)
            (checked, on_run), (unchecked, off_run) = timed[True], timed[False]
            on_ms.append(on_run)
            off_ms.append(off_run)
            added_ms.append(on_run - off_run)
            step_ms.append(sum(e.data["duration_ms"] for e in events
                               if e.name == "node.finished" and e.data["node"] == "sanity"))
            answered += checked.status == unchecked.status == "success"
            for warning in checked.warnings:
                if warning.step == "sanity":
                    findings[warning.code] += 1
                    if warning.code != "ALL_NULL_COLUMN":
                        false_findings.append({"question": question, "code": warning.code})
        on.close()
        off.close()
    return {
        "questions": len(plans), "answered_both": answered,
        "checks_on_ms": {"p50": pct(on_ms, 0.5), "p95": pct(on_ms, 0.95)},
        "checks_off_ms": {"p50": pct(off_ms, 0.5), "p95": pct(off_ms, 0.95)},
        "added_ms": {"p50": pct(added_ms, 0.5), "p95": pct(added_ms, 0.95), "target_p50": 10},
        "sanity_step_ms": {"p50": pct(step_ms, 0.5), "p95": pct(step_ms, 0.95), "max": round(max(step_ms), 1)},
        "findings": dict(findings), "false_findings": false_findings,
    }


if __name__ == "__main__":
    main()
