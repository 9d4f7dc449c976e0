"""The regression gate: a run against a baseline, case by case.

Only comparable runs are compared (same mode, suite digest and schema fingerprint; anything else is a
series break), and only on the cases both hold: a run sliced with `--case`, `--tag` or `--limit` is
gated on the cases it ran, never on the ones it skipped. A case passes on execution accuracy when every pass of it passed. Modes plans and
retrieval allow no flip from pass to fail; mode full allows `gate.max_regressions`, and fails when it
lost more cases than it gained with McNemar's exact two-sided p below `gate.alpha`.

Exit codes: 0 ok, 1 regression, 2 usage or series break, 3 the run stopped at its dollar cap.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from nl2sql.evaluation.stats import mcnemar_exact

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_COST_CAP = 0, 1, 2, 3


class ConfigGate(BaseModel):
    """One config's comparison."""

    lost: list[str] = Field(default_factory=list)
    gained: list[str] = Field(default_factory=list)
    p_value: float = 1.0
    accuracy: float | None = None
    baseline_accuracy: float | None = None
    regressed: bool = False
    why: str | None = None
    #: Cases (case/role) compared: those both runs hold; fewer than the baseline's for a sliced run.
    compared: int = 0
    baseline_cases: int = 0


class GateResult(BaseModel):
    """The gate's verdict."""

    exit_code: int
    reason: str
    configs: dict[str, ConfigGate] = Field(default_factory=dict)

    baseline: str | None = Field(default=None, description="Where the baseline came from.")

    @property
    def ok(self) -> bool:
        """Whether the run may land."""
        return self.exit_code == EXIT_OK

    def lines(self, sliced: bool = False) -> list[str]:
        """The verdict in words: against what, why, and per config what was lost and gained."""
        out = [f"gate against {self.baseline}: {self.reason}" if self.baseline else f"gate: {self.reason}"]
        for name, g in self.configs.items():
            part = f" (a slice: {g.compared} of the baseline's {g.baseline_cases} cases compared)" if sliced else ""
            out.append(f"  {name}: lost {len(g.lost)}, gained {len(g.gained)}, p = {g.p_value:.4f}; accuracy "
                       f"{g.baseline_accuracy} → {g.accuracy}{part}")
        return out


def verdicts(run: Mapping[str, Any], config: str) -> dict[str, bool]:
    """`case_id/role` → passed (in every pass), from a report's board or a record's verdicts."""
    if "boards" in run:
        rows = [{"case_id": r["case_id"], "role": r["role"], "passed": _passed(r)}
                for r in run["boards"][config]["records"]]
    else:
        rows = run["verdicts"]
    out: dict[str, bool] = defaultdict(lambda: True)
    for row in rows:
        key = f"{row['case_id']}/{row['role']}"
        out[key] = out[key] and bool(row["passed"])
    return dict(out)


def _passed(record: Mapping[str, Any]) -> bool:
    scores = [s["passed"] for name, s in record["scores"].items() if name != "faithfulness" and s["passed"] is not None]
    return bool(scores) and all(scores)


def identity(run: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """What makes two runs comparable: mode, suite digest, schema fingerprint."""
    dataset = run.get("suite") or run.get("dataset") or {}
    return run.get("mode") or run.get("kind"), dataset.get("digest"), (run.get("database") or {}).get(
        "schema_fingerprint")


def configs_of(run: Mapping[str, Any]) -> list[str]:
    """The model configs a report or record holds."""
    return list(run["boards"]) if "boards" in run else [run["config"]["name"]]


def run_gate(report: Mapping[str, Any], baseline: Mapping[str, Any], *, max_regressions: int = 0,
             alpha: float = 0.05) -> GateResult:
    """Compare a report with a baseline (a report or a record)."""
    if report.get("stopped"):
        return GateResult(exit_code=EXIT_COST_CAP, reason=f"the run stopped early ({report['stopped']})")
    mine, theirs = identity(report), identity(baseline)
    if mine != theirs:
        names = ("mode", "suite digest", "schema fingerprint")
        differs = [f"{n}: {a} vs {b}" for n, a, b in zip(names, mine, theirs, strict=True) if a != b]
        return GateResult(exit_code=EXIT_USAGE, reason="not comparable (a series break): " + "; ".join(differs))
    allowed = max_regressions if mine[0] == "full" else 0
    result = GateResult(exit_code=EXIT_OK, reason="no regression")
    shared = [c for c in configs_of(report) if c in configs_of(baseline)]
    if not shared:
        return GateResult(exit_code=EXIT_USAGE, reason="the baseline has none of the run's configs")
    for config in shared:
        now, before = verdicts(report, config), verdicts(baseline, config)
        keys = sorted(set(now) & set(before))
        gate = ConfigGate(lost=[k for k in keys if before[k] and not now[k]],
                          gained=[k for k in keys if now[k] and not before[k]],
                          accuracy=round(sum(now[k] for k in keys) / len(keys), 4) if keys else None,
                          baseline_accuracy=round(sum(before[k] for k in keys) / len(keys), 4) if keys else None,
                          compared=len(keys), baseline_cases=len(before))
        gate.p_value = mcnemar_exact(len(gate.lost), len(gate.gained))
        if len(gate.lost) > allowed:
            gate.regressed, gate.why = True, f"{len(gate.lost)} case(s) went from pass to fail (allowed: {allowed})"
        elif mine[0] == "full" and len(gate.lost) > len(gate.gained) and gate.p_value < alpha:
            gate.regressed, gate.why = True, (f"lost {len(gate.lost)}, gained {len(gate.gained)}, McNemar p = "
                                              f"{gate.p_value:.4f} < {alpha}")
        result.configs[config] = gate
    regressed = {c: g for c, g in result.configs.items() if g.regressed}
    if regressed:
        result.exit_code = EXIT_REGRESSION
        result.reason = "; ".join(f"{c}: {g.why} ({', '.join(g.lost)})" for c, g in regressed.items())
    return result


def eval_exit_code(report: Mapping[str, Any], gate: GateResult | None) -> tuple[int, str | None]:
    """(exit code, why) of an eval run: 3 stopped at its dollar cap, 1 a failing case in mode plans (every case
    must pass there) or a regression, 2 a series break, else 0."""
    if report.get("stopped"):
        return EXIT_COST_CAP, f"stopped: {report['stopped']}"
    code, why = EXIT_OK, None
    if report.get("mode") == "plans" and any(b["failures"] for b in report["boards"].values()):
        code, why = EXIT_REGRESSION, "mode plans: every case must pass for every role"
    if gate is not None and not gate.ok and gate.exit_code >= code:  # the gate says which cases were lost
        code, why = gate.exit_code, gate.reason
    return code, why
