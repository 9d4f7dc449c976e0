"""The embedder: batching never changes a vector, the model file is checked, long texts are truncated."""

from __future__ import annotations

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
