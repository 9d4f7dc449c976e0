"""Measure the activation ranges of the embedder's int8 products and write nl2sql/index/minilm_int8_ranges.json.

The corpus is what the index embeds and what people ask: every entry text of the demo's three
databases and their sample questions, a generated wide schema and a generated many-database test bed
(entries, sample and held-out questions), all from seed 7 — not the seed the index benchmark measures
on (42). Each product's input range is the least and greatest value over real tokens of the corpus.
Run it again only when the model file changes:

    .venv/bin/python benchmarks/perf/calibrate_int8.py [--tables 400] [--databases 36]

It then prints how close the int8 vectors come to the float ones, over the same corpus and over texts
of seed 42 the ranges never saw.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np

from nl2sql.config.models import ProfileSettings
from nl2sql.datasources import adapter_class
from nl2sql.demo import init_demo
from nl2sql.index.build import build_datasource
from nl2sql.index.embed import MODEL_SHA256, Embedder, model_file, padded, read_model
from nl2sql.index.fuse import fused_model
from nl2sql.index.quantize import RANGES_FILE, activation_ranges
from nl2sql.index.service import build_configured
from nl2sql.index.store import StateStore
from nl2sql.project import load_project

HERE = Path(__file__).resolve().parent
OUT = HERE.parent.parent / "nl2sql" / "index" / RANGES_FILE
CALIBRATION_SEED = 7
HELD_OUT_SEED = 42


class Recorder(Embedder):
    """Collects the texts a build would embed (zero vectors back: the builds only feed the corpus)."""

    model_id = "calibration-recorder"

    def __init__(self) -> None:
        super().__init__(precision="float32")
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        """Record the texts; zero vectors."""
        self.texts += texts
        return np.zeros((len(texts), self.dimensions), dtype=np.float32)


def load_schemas() -> ModuleType:
    """The benchmark's schema generator (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("nl2sql_bench_schemas", HERE / "schemas.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def corpus(seed: int, tables: int, databases: int, work: Path, demo: bool) -> list[str]:
    """Entry texts and questions: the demo's (when asked), a wide schema's and a test bed's of this seed."""
    schemas = load_schemas()
    recorder = Recorder()
    store = StateStore(work / f"state-{seed}")
    if demo:
        config = load_project(init_demo(work / "demo"))
        build_configured(config, store, recorder)
    wide = schemas.write_sqlite(schemas.wide_schema(tables, seed), work / f"wide-{seed}.sqlite")
    build_datasource(adapter_class("sqlite")("wide", f"sqlite:///{wide}"), store, recorder, profile=ProfileSettings())
    questions: list[str] = []
    for db in schemas.make_test_bed(databases, seed):
        path = schemas.write_sqlite(db.tables, work / f"{db.name}-{seed}.sqlite")
        build_datasource(adapter_class("sqlite")(db.name, f"sqlite:///{path}"), store, recorder,
                         profile=ProfileSettings(), sample_questions=db.sample_questions, description=db.description)
        questions += db.test_questions
    return list(dict.fromkeys(recorder.texts + questions))


def token_batches(embedder: Embedder, texts: Sequence[str], size: int = 64) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(input ids, attention mask) batches of similar lengths, as the embedder forms them."""
    tokens = sorted(embedder.tokens(list(texts)), key=len)
    for start in range(0, len(tokens), size):
        yield padded(tokens[start:start + size])


def agreement(texts: Sequence[str]) -> dict[str, float]:
    """Cosine between the int8 and the float vectors of the texts."""
    cosines = (Embedder(precision="int8").embed(list(texts)) * Embedder(precision="float32").embed(list(texts))).sum(1)
    return {"texts": len(texts), "mean": round(float(cosines.mean()), 5), "least": round(float(cosines.min()), 5),
            "p1": round(float(np.percentile(cosines, 1)), 5)}


def main(argv: Sequence[str] | None = None) -> None:
    """Calibrate, write the ranges, report the agreement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=400, help="tables of the generated wide schema")
    parser.add_argument("--databases", type=int, default=36, help="databases of the generated test bed")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nl2sql-calibrate-") as tmp:
        texts = corpus(CALIBRATION_SEED, args.tables, args.databases, Path(tmp), demo=True)
        held_out = corpus(HELD_OUT_SEED, args.tables, args.databases, Path(tmp), demo=False)
    print(f"calibration corpus: {len(texts)} texts (seed {CALIBRATION_SEED} and the demo)")
    ranges = activation_ranges(fused_model(read_model(model_file())), token_batches(Embedder(precision="float32"), texts))
    args.out.write_text(json.dumps({
        "model_sha256": MODEL_SHA256,
        "corpus": f"demo entries and sample questions; wide schema of {args.tables} tables and a test bed of "
                  f"{args.databases} databases (entries, questions), seed {CALIBRATION_SEED}: {len(texts)} texts",
        "ranges": ranges}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(ranges)} ranges to {args.out}")
    print("int8 vs float, calibration corpus:", agreement(texts))
    print(f"int8 vs float, held out (seed {HELD_OUT_SEED}):", agreement(held_out))


if __name__ == "__main__":
    main()
