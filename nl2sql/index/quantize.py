"""Int8 activations for the fused MiniLM graph: every weight product in 8-bit integers, about 2× faster.

The pinned file stores each weight matrix as int8 values with a scale per output column; the fused
graph (`fuse.py`) multiplies them back to float and runs float products. Here each product's input is
quantised to uint8 with a fixed scale and zero point (its range measured once over a calibration
corpus, `minilm_int8_ranges.json`) and multiplied with the file's own int8 weights by onnxruntime's
`MatMulIntegerToFloat`, stored as the type this CPU multiplies exactly (`exact_weight_type`: the same
vector on every machine); each fused attention block becomes one `QAttention` node (the packed Q|K|V
product in integers, then attention). Fixed ranges keep a text's vector independent of the batch it is embedded in (a
range measured per batch would not). Vectors stay within cosine ~0.99 of the float graph's; retrieval
and routing were measured unchanged on the eval suites and the benchmark's test bed (docs/index.md).
A value beyond its calibrated range saturates at the range's end (the ranges are the extremes over
some 15,000 texts).

`activation_ranges` measures the ranges (benchmarks/perf/calibrate_int8.py writes the file);
`quantized_model` rewrites a fused graph with them.
"""

from __future__ import annotations

import json
import platform
import re
from collections.abc import Iterable, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np

from nl2sql.index.fuse import DISABLED_OPTIMIZERS, HEADS, GraphMismatch, replace_nodes

RANGES_FILE = "minilm_int8_ranges.json"
WEIGHT_ZERO = 128  # an int8 weight stored as uint8 (w + 128) reads back exactly with this zero point
WEIGHT_TYPES = ("int8", "uint8")


def exact_weight_type() -> str:
    """The weight type whose products this CPU computes exactly, the faster when both are.

    onnxruntime multiplies uint8 activations by int8 weights with VPMADDUBSW on x86 CPUs without VNNI,
    which saturates each pair of products at int16: a vector, and so a near-tie in retrieval, depended
    on the machine. uint8 by uint8 is widened before multiplying on every CPU (exact, about half the
    speed of VNNI's int8); VNNI (and Arm's dot products) multiply uint8 by int8 exactly."""
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return "int8"
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:  # not Linux: no way to tell, so the type that is exact everywhere
        return "uint8"
    return "int8" if re.search(r"\b(avx512_vnni|avx_vnni|amx_int8)\b", flags) else "uint8"


def stored_weight(weight: np.ndarray, weight_type: str) -> tuple[np.ndarray, np.ndarray]:
    """(weight, zero point) of the file's int8 weight as `weight_type`: the same values either way."""
    if weight.dtype != np.int8:
        raise GraphMismatch(f"a weight product's weight is {weight.dtype}, not int8")
    if weight_type == "int8":
        return weight, np.array(0, dtype=np.int8)
    return (weight.astype(np.int16) + WEIGHT_ZERO).astype(np.uint8), np.array(WEIGHT_ZERO, dtype=np.uint8)


def _weight_products(graph: Any) -> list[tuple[Any, str, str]]:
    """(node, int8 weight, per-column scale) of each product whose weight is Mul(Cast(int8), scale): the
    fused attention blocks and the plain MatMuls."""
    initializers = {i.name for i in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    found = []
    for node in graph.node:
        if node.op_type not in ("MatMul", "Attention") or len(node.input) < 2:
            continue
        scale = producer.get(node.input[1])
        cast = producer.get(scale.input[0]) if scale is not None and scale.op_type == "Mul" else None
        if cast is not None and cast.op_type == "Cast" and cast.input[0] in initializers and scale.input[1] in initializers:
            found.append((node, cast.input[0], scale.input[1]))
    return found


def load_ranges() -> dict[str, Any]:
    """The calibrated ranges shipped with the package: {"model_sha256", "ranges": {input name: [low, high]}}."""
    return json.loads(files("nl2sql.index").joinpath(RANGES_FILE).read_text(encoding="utf-8"))


def activation_ranges(fused: bytes, batches: Iterable[tuple[np.ndarray, np.ndarray]]) -> dict[str, list[float]]:
    """The least and greatest value each weight product reads over real (unpadded) tokens of the batches
    (input ids, attention mask), by the name of the tensor it reads."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    model = onnx.load_from_string(fused)
    inputs = list(dict.fromkeys(node.input[0] for node, _, _ in _weight_products(model.graph)))
    for name in inputs:
        model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), sess_options=options,
                                   providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_OPTIMIZERS)
    low = dict.fromkeys(inputs, np.inf)
    high = dict.fromkeys(inputs, -np.inf)
    for ids, mask in batches:
        outputs = session.run(inputs, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
        real = mask.astype(bool)
        for name, values in zip(inputs, outputs, strict=True):
            tokens = values[real]
            low[name] = min(low[name], float(tokens.min()))
            high[name] = max(high[name], float(tokens.max()))
    return {name: [round(low[name], 4), round(high[name], 4)] for name in inputs}


def quantized_model(fused: bytes, ranges: dict[str, Sequence[float]], weight_type: str | None = None) -> bytes:
    """The fused model with every weight product in 8-bit integers, its weights stored as `weight_type`
    (default: the one this CPU multiplies exactly); raises GraphMismatch when a product has no range."""
    import onnx
    from onnx import helper, numpy_helper


    weight_type = weight_type or exact_weight_type()
    if weight_type not in WEIGHT_TYPES:
        raise ValueError(f"weight_type must be one of {WEIGHT_TYPES}, not {weight_type!r}")
    model = onnx.load_from_string(fused)
    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    products = _weight_products(graph)
    if not any(node.op_type == "Attention" for node, _, _ in products):
        raise GraphMismatch("no fused attention block to quantise")
    added = []
    replacements: dict[str, list] = {}
    for node, weight, scale in products:
        if node.input[0] not in ranges:
            raise GraphMismatch(f"no calibrated range for {node.input[0]}")
        # the range must hold 0 exactly (padding and the zero point); widening it for safety measured worse
        # (a margin of ×1.25 took the mean cosine to float from 0.9933 to 0.9892)
        low, high = min(float(ranges[node.input[0]][0]), 0.0), max(float(ranges[node.input[0]][1]), 0.0)
        step = (high - low) / 255.0 or 1.0
        zero = int(np.clip(round(-low / step), 0, 255))
        prefix = f"{node.name}_int8"
        column_scales = numpy_helper.to_array(initializers[scale]).astype(np.float32).reshape(-1)
        added += [numpy_helper.from_array(np.array(step, dtype=np.float32), f"{prefix}_step"),
                  numpy_helper.from_array(np.array(zero, dtype=np.uint8), f"{prefix}_zero"),
                  numpy_helper.from_array(column_scales, f"{prefix}_scales")]
        stored, weight_zero = stored_weight(numpy_helper.to_array(initializers[weight]), weight_type)
        added += [numpy_helper.from_array(stored, f"{prefix}_weight"),
                  numpy_helper.from_array(weight_zero, f"{prefix}_weight_zero")]
        quantise = helper.make_node("QuantizeLinear", [node.input[0], f"{prefix}_step", f"{prefix}_zero"],
                                    [f"{prefix}_in"], name=f"{prefix}_quantise")
        operands = [f"{prefix}_in", f"{prefix}_weight", f"{prefix}_step", f"{prefix}_scales", f"{prefix}_zero",
                    f"{prefix}_weight_zero"]
        if node.op_type == "MatMul":
            replacements[node.name] = [quantise, helper.make_node(
                "MatMulIntegerToFloat", operands, list(node.output), name=f"{prefix}_product", domain="com.microsoft")]
            continue
        # Attention(x, W, bias, mask) → QAttention(x as uint8, W, bias, its step, W's scales, mask, its zero point):
        # one kernel as before (a product, a Split and MultiHeadAttention measured 7% slower end to end)
        replacements[node.name] = [quantise, helper.make_node(
            "QAttention", [f"{prefix}_in", f"{prefix}_weight", node.input[2], f"{prefix}_step", f"{prefix}_scales",
                           node.input[3], f"{prefix}_zero", f"{prefix}_weight_zero"], list(node.output), name=f"{prefix}_attention", domain="com.microsoft",
            num_heads=HEADS)]
    replace_nodes(graph, replacements, added)
    return model.SerializeToString()
