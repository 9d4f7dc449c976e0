"""The embedder: batching never changes a vector, the model file is checked, long texts are truncated,
the fused graph gives the shipped graph's vectors."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from nl2sql.index.embed import MAX_TOKENS, Embedder, EmbedderError, model_file, shared_embedder

TEXTS = [
    "How many tracks per genre?",
    "billing country of invoice, text, for example USA, Canada, France, Brazil, Germany.",
    "invoice line linked to track: InvoiceLine.TrackId references Track.TrackId.",
    "hire date of employee, date, from 2002 to 2004.",
    "ok",
    "tickets table (tickets): ticket id, customer id, agent id, status, priority, opened at, closed at.",
]


def test_a_vector_does_not_depend_on_its_batch() -> None:
    embedder = shared_embedder()
    together = embedder.embed(TEXTS)
    alone = np.stack([embedder.embed([text])[0] for text in TEXTS])
    small_batches = Embedder(batch_size=2).embed(list(reversed(TEXTS)))[::-1]
    assert together.shape == (len(TEXTS), 384) and together.dtype == np.float32
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert np.allclose(together, alone, atol=1e-4)
    assert np.allclose(together, small_batches, atol=1e-4)
    assert np.allclose(embedder.embed_cached(TEXTS[:2] + TEXTS[:1]), together[[0, 1, 0]], atol=1e-6)


def test_texts_are_counted_and_truncated_in_tokens() -> None:
    embedder = shared_embedder()
    counts = embedder.token_counts(["ok", "word " * 1000])
    assert counts == [3, MAX_TOKENS]  # [CLS] ok [SEP]; the long one cut at the limit
    assert embedder.embed(["word " * 1000]).shape == (1, 384)


def test_a_model_file_with_another_digest_is_refused(tmp_path: Path) -> None:
    tampered = tmp_path / "model.onnx"
    tampered.write_bytes(model_file().read_bytes()[:-1] + b"\0")
    with pytest.raises(EmbedderError) as raised:
        Embedder(model_path=tampered).embed(["anything"])
    assert raised.value.code == "EMBEDDER_UNAVAILABLE"
    assert str(tampered) in str(raised.value) and "not the pinned" in str(raised.value)
    with pytest.raises(EmbedderError, match="missing"):
        Embedder(model_path=tmp_path / "absent.onnx").embed(["anything"])


def test_the_fused_graph_gives_the_shipped_graphs_vectors() -> None:
    texts = [*TEXTS, "word " * 300]  # one truncated at the limit, the rest padded in its batch
    fused, shipped = shared_embedder().embed(texts), Embedder(fused=False).embed(texts)
    assert float((fused * shipped).sum(axis=1).min()) > 0.99999


def test_the_fused_graph_runs_one_kernel_per_attention_block_and_gelu() -> None:
    import onnx

    from nl2sql.index.fuse import fused_model

    ops = Counter(node.op_type for node in onnx.load_from_string(fused_model(model_file().read_bytes())).graph.node)
    assert ops["Attention"] == 6 and ops["BiasGelu"] == 6
    assert ops["Softmax"] == ops["Erf"] == ops["Transpose"] == ops["Where"] == 0


def test_a_graph_the_rewrite_does_not_know_runs_as_shipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from nl2sql.index.fuse import GraphMismatch, fused_model

    already_fused = fused_model(model_file().read_bytes())
    with pytest.raises(GraphMismatch, match="attention blocks"):
        fused_model(already_fused)
    path = tmp_path / "model.onnx"
    path.write_bytes(already_fused)
    embedder = Embedder(model_path=path, expected_sha256=hashlib.sha256(already_fused).hexdigest())
    vectors = embedder.embed(TEXTS)
    assert "could not be fused" in caplog.text
    assert float((vectors * shared_embedder().embed(TEXTS)).sum(axis=1).min()) > 0.99999
