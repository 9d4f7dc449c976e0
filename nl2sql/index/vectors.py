"""FAISS indexes of unit vectors: exact inner product for small builds, HNSW above a size threshold.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> data = rng.normal(size=(500, 16)).astype("float32")
>>> data /= np.linalg.norm(data, axis=1, keepdims=True)
>>> index, kind = build_index(data, hnsw_above=100)
>>> kind, recall_at_k(index, data, k=10) >= 0.99
('hnsw', True)
"""

from __future__ import annotations

import os
from pathlib import Path

import faiss
import numpy as np

#: Builds with more vectors than this use HNSW (approximate); smaller ones exact inner product (retrieval scans
#: a build's vectors exactly with numpy up to this size, and rebuilding an HNSW graph dominated incremental builds).
HNSW_ABOVE = 200_000
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 100
HNSW_EF_SEARCH = 256


def build_index(vectors: np.ndarray, *, hnsw_above: int = HNSW_ABOVE) -> tuple[faiss.Index, str]:
    """An inner-product index over the rows; its kind ('flat' or 'hnsw')."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    dim = vectors.shape[1] if vectors.ndim == 2 and vectors.shape[0] else 384
    if len(vectors) > hnsw_above:
        index = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        index.hnsw.efSearch = HNSW_EF_SEARCH
        kind = "hnsw"
    else:
        index = faiss.IndexFlatIP(dim)
        kind = "flat"
    if len(vectors):
        index.add(vectors)
    return index, kind


def recall_at_k(index: faiss.Index, vectors: np.ndarray, *, k: int = 20, queries: int = 200, seed: int = 0) -> float:
    """Recall@k of `index` against exact search, with `queries` of its own vectors as queries."""
    n = index.ntotal
    if n == 0:
        return 1.0
    rng = np.random.default_rng(seed)
    picks = rng.choice(n, size=min(queries, n), replace=False)
    probe = np.ascontiguousarray(vectors[picks], dtype=np.float32)
    exact = faiss.IndexFlatIP(vectors.shape[1])
    exact.add(np.ascontiguousarray(vectors, dtype=np.float32))
    k = min(k, n)
    _, truth = exact.search(probe, k)
    _, found = index.search(probe, k)
    hits = sum(len(set(t) & set(f)) for t, f in zip(truth.tolist(), found.tolist(), strict=True))
    return hits / (len(picks) * k)


def write_index(index: faiss.Index, path: Path) -> None:
    """Write atomically: a temporary file, flushed to disk, then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    faiss.write_index(index, str(tmp))
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_index(path: Path) -> faiss.Index:
    """Read an index written by `write_index`."""
    index = faiss.read_index(str(path))
    if hasattr(index, "hnsw"):
        index.hnsw.efSearch = HNSW_EF_SEARCH
    return index


def all_vectors(index: faiss.Index) -> np.ndarray:
    """Every stored vector, in order (flat and HNSW indexes keep them)."""
    if index.ntotal == 0:
        return np.zeros((0, index.d), dtype=np.float32)
    return index.reconstruct_n(0, index.ntotal)
