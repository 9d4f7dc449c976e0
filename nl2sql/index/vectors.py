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
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import faiss
import numpy as np

#: Builds with more vectors than this use HNSW (approximate); smaller ones exact inner product. A graph pays only
#: where scoring every visible entry by id costs more than searching it: at 351,000 entries (20,000 tables, 2 cores)
#: the two were level (p50/p95 109/202 ms scored, 99/246 ms searched), while rebuilding the graph took 90 of an
#: incremental build's 118 s.
HNSW_ABOVE = 400_000
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 100
HNSW_EF_SEARCH = 256
#: The width of an empty index's vectors (the embedder's).
DIMENSIONS = 384


def build_index(vectors: np.ndarray, *, hnsw_above: int = HNSW_ABOVE) -> tuple[faiss.Index, str]:
    """An inner-product index over the rows; its kind ('flat' or 'hnsw')."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    dim = vectors.shape[1] if vectors.ndim == 2 and vectors.shape[0] else DIMENSIONS
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


def read_index(path: Path, *, mapped: bool = False) -> faiss.Index:
    """Read an index written by `write_index` (`mapped`: its vectors memory-mapped from the file, read by the OS
    as searches touch them, instead of copied into memory)."""
    # IO_FLAG_MMAP_IFC maps a flat store's vectors (a flat index's, an HNSW index's storage) read-only: the pages
    # a search touches are read, and only those count against the process's memory
    index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_MMAP_IFC if mapped else 0)
    if hasattr(index, "hnsw"):
        index.hnsw.efSearch = HNSW_EF_SEARCH
    return index


def flat_index(vectors: np.ndarray) -> faiss.Index:
    """An exact inner-product index over the rows (what a build of this size writes)."""
    return build_index(vectors, hnsw_above=len(vectors) + 1)[0]


#: Entries a question scores from which the segments holding them are scored on `SCORING_THREADS` threads at once:
#: at 351,000 entries (20,000 tables in 21 segments) two threads took 24 ms, one 41 ms, on 2 cores.
PARALLEL_FROM = 50_000
SCORING_THREADS = min(4, os.cpu_count() or 1)


@lru_cache(maxsize=1)
def _scoring_pool() -> ThreadPoolExecutor:
    """The threads that score segments (made on first use, kept for the process)."""
    return ThreadPoolExecutor(max_workers=SCORING_THREADS, thread_name_prefix="nl2sql-scoring")


class SegmentedIndex:
    """A build's FAISS files, one per segment, read as one index: entry `p` is row `p - start` of the segment that
    holds it (`start`: how many entries the segments before it hold).

    >>> data = np.eye(4, dtype="float32")
    >>> both = SegmentedIndex([flat_index(data[:3]), flat_index(data[3:])])
    >>> both.ntotal, similarities_of(both, data[3], np.array([3, 0])).tolist(), both.reconstruct(3).tolist()
    (4, [1.0, 0.0], [0.0, 0.0, 0.0, 1.0])
    """

    def __init__(self, segments: Sequence[faiss.Index]) -> None:
        self.segments = list(segments)
        self.starts = np.concatenate([[0], np.cumsum([s.ntotal for s in self.segments])]).astype(np.int64)
        self.ntotal = int(self.starts[-1])
        self.d = self.segments[0].d if self.segments else DIMENSIONS
        #: one HNSW segment (a build written before segments, or one of many tables' columns): searched as a graph
        self.graph = len(self.segments) == 1 and hasattr(self.segments[0], "hnsw")

    def split(self, ids: np.ndarray) -> Iterator[tuple[faiss.Index, np.ndarray, np.ndarray]]:
        """(segment, its rows, where in `ids`) for each segment that holds some of `ids`."""
        order = None if np.all(ids[1:] >= ids[:-1]) else np.argsort(ids, kind="stable")
        ranked = ids if order is None else ids[order]
        bounds = np.searchsorted(ranked, self.starts)
        for k, segment in enumerate(self.segments):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            if hi > lo:
                where = np.arange(lo, hi) if order is None else order[lo:hi]
                yield segment, ranked[lo:hi] - self.starts[k], where

    def reconstruct(self, position: int) -> np.ndarray:
        """One entry's stored vector."""
        k = int(np.searchsorted(self.starts, position, side="right")) - 1
        return self.segments[k].reconstruct(int(position - self.starts[k]))


def similarities_of(index: faiss.Index | SegmentedIndex, query: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The inner product of a (unit) query with the stored vectors `ids`, exactly and in their order. FAISS
    computes it from those vectors alone: no other stored vector is read, and none is copied out.

    >>> data = np.eye(4, dtype="float32")
    >>> similarities_of(flat_index(data), data[2], np.array([2, 0])).tolist()
    [1.0, 0.0]
    """
    if isinstance(index, SegmentedIndex):
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty(len(ids), dtype=np.float32)
        parts = list(index.split(ids))
        if len(parts) > 1 and len(ids) >= PARALLEL_FROM:
            # one thread reads one segment's vectors at a time: scoring is bound by how fast a core reads memory
            # (FAISS scores one query on one thread), and FAISS lets go of the GIL while it scores
            scored = _scoring_pool().map(lambda part: similarities_of(part[0], query, part[1]), parts)
        else:
            scored = (similarities_of(segment, query, rows) for segment, rows, _ in parts)
        for (_, _, where), sims in zip(parts, scored, strict=True):
            out[where] = sims
        return out
    flat = faiss.downcast_index(index.storage) if hasattr(index, "storage") else index  # HNSW keeps a flat store
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    out = np.empty(len(ids), dtype=np.float32)
    if len(ids):
        probe = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
        # one query: OpenMP's threads only cost here (7 ms for 200 ids with two threads on a busy machine, against
        # 7 µs with one); the thread count is the calling thread's own, so it is set for this call and put back
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            flat.compute_distance_subset(1, faiss.swig_ptr(probe), len(ids), faiss.swig_ptr(out),
                                         faiss.swig_ptr(ids))
        finally:
            faiss.omp_set_num_threads(threads)
    return out


#: Entries scored exactly whatever the index: below this many, scoring them all costs less than a graph search
#: (a few milliseconds), and a graph search restricted to a small part of the index loses recall.
EXACT_UP_TO = 50_000


class EntrySelector:
    """A set of entry positions as FAISS filters a search by (a bitmap, one bit per stored vector)."""

    def __init__(self, ids: np.ndarray, total: int) -> None:
        self.ids = ids
        mask = np.zeros(total, dtype=bool)
        mask[ids] = True
        self.size = len(ids)
        self._bits = np.packbits(mask, bitorder="little")  # kept: FAISS reads it by pointer
        self.selector = faiss.IDSelectorBitmap(total, faiss.swig_ptr(self._bits))


def searched(index: faiss.Index | SegmentedIndex, query: np.ndarray, among: EntrySelector,
             k: int) -> tuple[np.ndarray, np.ndarray]:
    """The `k` entries of `among` most similar to the (unit) query, best first: (positions, similarities). An HNSW
    index searches its graph, restricted to `among` (only their vectors are scored); a flat one, or segments,
    score `among`.

    >>> data = np.eye(4, dtype="float32")
    >>> ids, sims = searched(flat_index(data), data[3], EntrySelector(np.array([0, 3]), 4), 1)
    >>> ids.tolist(), sims.tolist()
    ([3], [1.0])
    """
    k = min(k, among.size)
    if k <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    if isinstance(index, SegmentedIndex):
        if not index.graph:
            sims = similarities_of(index, query, among.ids)
            best = np.argpartition(-sims, k - 1)[:k] if k < len(sims) else np.arange(len(sims))
            best = best[np.argsort(-sims[best], kind="stable")]
            return np.asarray(among.ids, dtype=np.int64)[best], sims[best]
        index = index.segments[0]
    probe = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
    if hasattr(index, "hnsw"):
        params = faiss.SearchParametersHNSW()
        params.efSearch = max(HNSW_EF_SEARCH, k)
    else:
        params = faiss.SearchParameters()
    params.sel = among.selector
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # one query: threads only cost (see `similarities_of`)
    try:
        sims, ids = index.search(probe, k, params=params)
    finally:
        faiss.omp_set_num_threads(threads)
    found = ids[0] >= 0
    return ids[0][found].astype(np.int64), sims[0][found]


def all_vectors(index: faiss.Index) -> np.ndarray:
    """Every stored vector, in order (flat and HNSW indexes keep them): for builds and their checks, never for a
    question (`similarities_of` reads only what a caller may see)."""
    if index.ntotal == 0:
        return np.zeros((0, index.d), dtype=np.float32)
    return index.reconstruct_n(0, index.ntotal)
