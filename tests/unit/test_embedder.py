"""The embedder: batching never changes a vector, the model file is checked, long texts are truncated,
the fused graph gives the shipped graph's vectors, the int8 graph comes close to them."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from nl2sql.index.embed import MAX_TOKENS, MODEL_IDS, Embedder, EmbedderError, model_file, shared_embedder

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
    fused, shipped = Embedder(precision="float32").embed(texts), Embedder(fused=False).embed(texts)
    assert float((fused * shipped).sum(axis=1).min()) > 0.99999


def test_int8_products_come_close_to_the_float_vectors_and_keep_their_own_cache_space() -> None:
    texts = [*TEXTS, "How many urgent tickets are still open?", "Which album has the most tracks?", "word " * 300]
    int8, exact = shared_embedder(), Embedder(precision="float32")
    cosines = (int8.embed(texts) * exact.embed(texts)).sum(axis=1)
    # measured 0.990 mean; the shortest text ("ok", three tokens) moves most, 0.969
    assert float(cosines.mean()) > 0.985 and float(cosines.min()) > 0.96
    # each text's nearest other text is the same under both
    nearest = [np.argsort(-(v @ v.T), axis=1)[:, 1].tolist() for v in (exact.embed(TEXTS), int8.embed(TEXTS))]
    assert nearest[0] == nearest[1]
    assert int8.precision == "int8" and int8.model_id == MODEL_IDS["int8"] != exact.model_id == MODEL_IDS["float32"]
    assert Embedder(fused=False, precision="int8").model_id == MODEL_IDS["float32"]  # only the fused graph quantises


def test_the_int8_graph_multiplies_every_weight_in_integers() -> None:
    import onnx

    from nl2sql.index.fuse import fused_model
    from nl2sql.index.quantize import load_ranges, quantized_model

    graph = onnx.load_from_string(quantized_model(fused_model(model_file().read_bytes()), load_ranges()["ranges"])).graph
    ops = Counter(node.op_type for node in graph.node)
    assert ops["MatMulIntegerToFloat"] == 18 and ops["QAttention"] == 6 and ops["QuantizeLinear"] == 24
    assert ops["MatMul"] == ops["Attention"] == 0
    assert not any(node.op_type == "Cast" and node.input[0].endswith("int8") for node in graph.node)


@pytest.mark.parametrize("weight_type", ["uint8", "auto"])
def test_an_int8_product_is_exact_where_pairs_of_products_overflow_int16(weight_type: str) -> None:
    # 255 × 127 twice is 64,770: a CPU without VNNI saturates that pair at 32,767 when the weight is int8
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from nl2sql.index.quantize import exact_weight_type, stored_weight

    rng = np.random.default_rng(7)
    inputs = np.concatenate([np.full((2, 64), 255), rng.integers(0, 256, (2, 64))]).astype(np.uint8)
    weights = np.concatenate([np.full((64, 3), 127), np.full((64, 3), -128), rng.integers(-128, 128, (64, 3))],
                             axis=1).astype(np.int8)
    stored, zero = stored_weight(weights, exact_weight_type() if weight_type == "auto" else weight_type)
    graph = helper.make_graph(
        [helper.make_node("MatMulIntegerToFloat", ["a", "w", "a_step", "w_step", "a_zero", "w_zero"], ["y"],
                          domain="com.microsoft")], "product",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 9])],
        [numpy_helper.from_array(stored, "w"), numpy_helper.from_array(zero, "w_zero"),
         numpy_helper.from_array(np.array(1.0, dtype=np.float32), "a_step"),
         numpy_helper.from_array(np.ones(9, dtype=np.float32), "w_step"),
         numpy_helper.from_array(np.array(0, dtype=np.uint8), "a_zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    product = session.run(None, {"a": inputs})[0]
    assert np.array_equal(product, inputs.astype(np.int64) @ weights.astype(np.int64))
    assert onnx.checker.check_model(model) is None


def test_a_vector_is_the_same_whichever_weight_type_holds_the_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    import nl2sql.index.quantize as quantize

    texts = [*TEXTS, "word " * 300]
    chosen = Embedder().embed(texts)
    monkeypatch.setattr(quantize, "exact_weight_type", lambda: "uint8")  # exact on every CPU
    assert np.array_equal(Embedder().embed(texts), chosen)
    with pytest.raises(ValueError, match="weight_type"):
        quantize.quantized_model(b"", {}, weight_type="int4")


def test_a_bad_precision_or_ranges_of_another_model_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EmbedderError, match="Unknown embedding precision 'fp16'") as raised:
        Embedder(precision="fp16")
    assert "float32" in raised.value.fix and "int8" in raised.value.fix
    import nl2sql.index.embed as embed_module

    monkeypatch.setattr(embed_module, "load_ranges", lambda: {"model_sha256": "0" * 64, "ranges": {}})
    with pytest.raises(EmbedderError, match="calibrated for another model") as raised:
        Embedder().embed(["anything"])
    assert "NL2SQL_EMBED_PRECISION=float32" in raised.value.fix


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
    assert embedder.model_id == MODEL_IDS["float32"]
    assert float((vectors * Embedder(precision="float32").embed(TEXTS)).sum(axis=1).min()) > 0.99999


def test_a_rewritten_graph_is_kept_for_the_next_process_and_a_damaged_one_is_made_again(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import nl2sql.index.embed as embed_module

    monkeypatch.setenv("NL2SQL_CACHE_DIR", str(tmp_path / "cache"))
    first = Embedder().embed(TEXTS)
    kept = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert [Path(name).suffix for name in kept] == [".onnx", ".sha256"]  # no partial file left behind

    def no_rewrite(_: bytes) -> bytes:
        raise AssertionError("the graph was rewritten again")

    monkeypatch.setattr(embed_module, "fused_model", no_rewrite)
    assert np.array_equal(Embedder().embed(TEXTS), first)  # read back: the same vectors, no rewrite
    monkeypatch.undo()

    monkeypatch.setenv("NL2SQL_CACHE_DIR", str(tmp_path / "cache"))
    graph = next((tmp_path / "cache").glob("*.onnx"))
    graph.write_bytes(graph.read_bytes()[:-100] + bytes(100))  # damaged on disk: its hash no longer matches
    assert np.array_equal(Embedder().embed(TEXTS), first)
    assert embed_module.read_rewrite(graph.stem) is not None  # made again and kept

    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("NL2SQL_CACHE_DIR", str(blocked / "cache"))  # a cache that cannot be written: no error
    assert np.array_equal(Embedder().embed(TEXTS), first)


def test_another_precision_or_weight_type_is_another_rewrite(monkeypatch: pytest.MonkeyPatch) -> None:
    from nl2sql.index import quantize
    from nl2sql.index.embed import MODEL_SHA256, rewrite_key

    int8 = rewrite_key(MODEL_SHA256, "int8")
    assert rewrite_key(MODEL_SHA256, "float32") != int8
    other = "uint8" if quantize.exact_weight_type() == "int8" else "int8"
    monkeypatch.setattr(quantize, "exact_weight_type", lambda: other)
    assert rewrite_key(MODEL_SHA256, "int8") != int8
