"""What scoring a question against a live build costs, by how much of it the caller may see.

Retrieval and routing score a question against the entries a caller may see, read from the build's FAISS index
(`LiveIndex.similarities`: `compute_distance_subset` over the visible ids, the vectors memory-mapped from the
index file). Before, every vector of the build was copied out of FAISS when the build was loaded and all of them
were scanned with numpy (`vectors @ query`), whatever the caller could see. This prints both, interleaved on the
same synthetic build (`--entries` random unit vectors, 384 dimensions, written and read back as the state store
does), for callers who see 1%, 10% and all of it: p50/p95 per question and the ratio, and the memory each way
holds (the numpy copy against the mapped file).

    .venv/bin/python benchmarks/perf/scoped_search.py [--entries N] [--runs N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.perf.ask_overhead import pct  # noqa: E402
from nl2sql.index.chunks import EntryTable  # noqa: E402
from nl2sql.index.retrieve import LiveIndex  # noqa: E402
from nl2sql.index.vectors import all_vectors, build_index, read_index, write_index  # noqa: E402

DIM = 384


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_suffix(".json"))
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(args.entries, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    path = Path(tempfile.mkdtemp(prefix="nl2sql-scoped-")) / "build.faiss"
    index, kind = build_index(vectors)
    write_index(index, path)
    del index
    live = LiveIndex("bench", EntryTable(), read_index(path, mapped=True), None)  # scores by position only
    copied = all_vectors(read_index(path))  # what a build held in memory before: every vector, copied out
    queries = rng.normal(size=(args.runs, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    report: dict[str, Any] = {"entries": args.entries, "index_kind": kind, "runs": args.runs,
                              "index_file_mb": round(path.stat().st_size / 2**20, 1),
                              "numpy_copy_mb": round(copied.nbytes / 2**20, 1), "visible": {}}
    for share in (0.01, 0.1, 1.0):
        visible = np.zeros(args.entries, dtype=bool)
        visible[rng.choice(args.entries, size=max(1, int(share * args.entries)), replace=False)] = True
        scoped_ms, scanned_ms = [], []
        for query in queries:  # interleaved: the machine's speed drifts, the ratio holds
            started = time.perf_counter()
            scoped = live.similarities(query, visible)
            scoped_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            scanned = np.where(visible, copied @ query, -np.inf)
            scanned_ms.append((time.perf_counter() - started) * 1000)
            assert np.allclose(scoped[visible], scanned[visible], atol=1e-5)
        report["visible"][f"{share:.0%}"] = {
            "faiss_scoped_ms": {"p50": pct(scoped_ms, 0.5), "p95": pct(scoped_ms, 0.95)},
            "numpy_scan_ms": {"p50": pct(scanned_ms, 0.5), "p95": pct(scanned_ms, 0.95)},
            "ratio_p50": round(statistics.median(scoped_ms) / statistics.median(scanned_ms), 3)}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
