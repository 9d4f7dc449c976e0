"""Benchmark scripts under benchmarks/, imported as modules by the tests that run them small or share their data."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(relative: str) -> ModuleType:
    """The benchmark script `benchmarks/<relative>` as a module (imported once per process)."""
    name = "nl2sql_bench_" + relative.removesuffix(".py").replace("/", "_")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / relative)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
