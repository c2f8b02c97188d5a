"""Export options in combination (issue 34): models of the quick zoo under
every combination of opset, target, dtype, module functions, external data,
weight quantization and optimize. Each file must follow ONNX's rules (the
suite's conftest checks every file written: structure, then onnx.checker or
onnxruntime's schemas), load in onnxruntime and match PyTorch on inputs of
other sizes than the export's, or the export must refuse with a one-line
reason that docs/option_combinations.md lists.

Tolerances, as stated for users: float32, the zoo entry's (1e-4 unless the
entry says otherwise, scaled by the output's magnitude above 1); float16,
export's verify_tolerance for float16 (1e-2, 1e-2, scaled the same way);
quantized weights, the README's cosine similarity of every float output to
float32 PyTorch: at least 0.995 (int8) and 0.95 (int4).

Each model is captured once per worker and converted under every combination
from that program: the combination is what is tested, not torch.export. The
hand-off comparison (tests/conftest.py) is left to the rest of the suite here;
the rules check is not.

The whole matrix (14 opsets x 2 targets x 48 combinations of the other
options, on MODELS) runs in `make test`; the quick loop runs QUICK_MODELS at
QUICK_OPSETS with QUICK_COMBOS, a subset in which every pair of option values
occurs."""

from __future__ import annotations

import itertools
import os
import re

import numpy as np
import onnxruntime as ort
import pytest
import torch

import pt2onnx
from zoo import ZOO, build
from zoo_check import leaves

OPSETS = list(range(13, 27))
TARGETS = ["standard", "onnxruntime"]
# (dtype, module functions, external data, quantize, optimize)
DTYPES = ["float32", "float16"]
COMBOS = list(itertools.product(DTYPES, [False, True], [False, True], [None, "int8", "int4"],
                                [True, False]))
# The quick zoo's op families, each once: transposed and strided convolutions
# with batch norm (dcgan_generator), pixel shuffle (super_resolution), an LSTM
# (word_lm_lstm), depthwise convolutions, pooling and Gemm (tv_mobilenet_v2),
# and three transformers (GPT-2's Conv1D and tanh GELU, BERT's encoder with
# token types, LLaMA's RMS norm, rotary and grouped-query attention). Left out
# as repeats of those, and for their weights (45 MB and 21 MB written 1,344
# times each): resnet18, dcgan_discriminator, word_lm_transformer,
# timm_vit_tiny. 7 x 1,344 combinations: about 5 minutes on 2 cores.
MODELS = ["dcgan_generator", "super_resolution", "word_lm_lstm", "tv_mobilenet_v2", "hf_gpt2",
          "hf_bert", "hf_llama"]

QUICK_MODELS = ["word_lm_lstm", "hf_llama", "hf_bert"]
QUICK_OPSETS = [13, 14, 18, 21, 23]
# Every pair of values of the five options occurs in at least one of these.
QUICK_COMBOS = [
    ("float32", False, False, None, True),
    ("float16", True, True, None, True),
    ("float32", True, True, "int8", False),
    ("float16", False, True, "int4", False),
    ("float32", False, False, "int4", True),
    ("float16", True, False, "int8", True),
    ("float32", True, False, None, False),
    ("float16", False, False, None, False),
    ("float32", False, True, "int8", True),
    ("float16", True, False, "int4", True),
]

COSINE = {"int8": 0.995, "int4": 0.95}
DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "option_combinations.md")


def _documented_refusals() -> list[re.Pattern]:
    """The refusal messages docs/option_combinations.md lists: the regular
    expressions in backticks in its table's 'message' column."""
    with open(DOC) as fh:
        text = fh.read()
    pats = []
    for line in text.splitlines():
        if line.startswith("| ") and "`" in line:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) >= 2 and cells[1].startswith("`"):
                pats.append(re.compile(cells[1].strip("`")))
    assert pats, "no refusal listed in docs/option_combinations.md"
    return pats


_CAPTURED: dict = {}


def _captured(name):
    """(program, dynamic dim names, check inputs, expected outputs) of a zoo
    model: captured as pt2onnx.export captures, once per worker."""
    if name not in _CAPTURED:
        from pt2onnx._export import _capture

        model, make, dyn = build(name)
        b, s = ZOO[name].export_size
        ep, in_names, _ = _capture(model, (), make(b, s), dyn, None, None, None)
        cb, cs = ZOO[name].check_sizes[-1]
        torch.manual_seed(7)
        kwargs = make(cb, cs)
        with torch.no_grad():
            expected = [t.numpy() for t in leaves(model(**kwargs))]
        _CAPTURED[name] = (ep, in_names, [t.numpy() for t in leaves(kwargs)], expected)
    return _CAPTURED[name]


def _judge(name, path, dtype, quantize):
    """None when the file loads in onnxruntime and matches; else why not."""
    _, _, inputs, expected = _captured(name)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feeds = {}
    for i, x in zip(sess.get_inputs(), inputs):
        feeds[i.name] = x.astype(np.float16) if i.type == "tensor(float16)" else x
    got = sess.run(None, feeds)
    if len(got) != len(expected):
        return f"{len(got)} outputs, PyTorch gives {len(expected)}"
    entry = ZOO[name]
    for k, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape:
            return f"output {k}: shape {g.shape}, PyTorch {e.shape}"
        if not np.issubdtype(e.dtype, np.floating):
            if not np.array_equal(g, e):
                return f"output {k}: integer values differ"
            continue
        g64, e64 = g.astype(np.float64), e.astype(np.float64)
        if not np.all(np.isfinite(g64)):
            return f"output {k}: not finite"
        if quantize:
            cos = float(np.dot(g64.ravel(), e64.ravel()) /
                        (np.linalg.norm(g64) * np.linalg.norm(e64) + 1e-30))
            if cos < COSINE[quantize]:
                return f"output {k}: cosine similarity {cos:.4f} < {COSINE[quantize]}"
            continue
        atol, rtol = (1e-2, 1e-2) if dtype == "float16" else (entry.atol, entry.rtol)
        scale = max(1.0, float(np.abs(e64).max())) if e64.size else 1.0
        bad = np.abs(g64 - e64) > atol * scale + rtol * np.abs(e64)
        if bad.any():
            return (f"output {k}: {int(bad.sum())} of {bad.size} beyond atol {atol} x {scale:.3g} "
                    f"/ rtol {rtol} (max abs error {float(np.abs(g64 - e64).max()):.3g})")
    return None


def _run(name, opset, target, combos, tmp_path, no_hand_off_comparison):
    ep, in_names, _, _ = _captured(name)
    refusals = _documented_refusals()
    failures = []
    for k, (dtype, functions, external, quantize, optimize) in enumerate(combos):
        label = (f"opset={opset} target={target} dtype={dtype} functions={functions} "
                 f"external_data={external} quantize={quantize} optimize={optimize}")
        path = str(tmp_path / f"m{k}.onnx")
        try:
            pt2onnx.export(ep, None, path, opset=opset, target=target,
                           dtype=None if dtype == "float32" else torch.float16,
                           export_modules_as_functions=functions, external_data=external,
                           quantize=quantize, optimize=optimize,
                           dynamic_axes=in_names or None)
        except (pt2onnx.ConversionError, ValueError) as e:
            msg = str(e)
            if "\n" in msg.strip():
                failures.append(f"{label}: refusal is not one line: {msg!r}")
            elif not any(p.search(msg) for p in refusals):
                failures.append(f"{label}: refusal not in docs/option_combinations.md: {msg}")
            continue
        except AssertionError as e:  # the conftest's rules check
            failures.append(f"{label}: {e}")
            continue
        if external:
            assert os.path.exists(path + ".data") or not _has_weights(path), label
        try:
            why = _judge(name, path, dtype, quantize)
        except Exception as e:  # onnxruntime refused the file
            why = f"onnxruntime: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
        if why:
            failures.append(f"{label}: {why}")
        for f in (path, path + ".data"):  # 1,344 files per model: not kept
            if os.path.exists(f):
                os.remove(f)
    assert not failures, f"{len(failures)} of {len(combos)} combinations fail:\n" + \
        "\n".join(failures)


def _has_weights(path):
    import onnx

    m = onnx.load(path, load_external_data=False)
    return any(t.raw_data or t.data_location == onnx.TensorProto.EXTERNAL
               for t in m.graph.initializer if len(t.raw_data) > 1024 or t.external_data)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("opset", QUICK_OPSETS)
@pytest.mark.parametrize("name", QUICK_MODELS)
def test_option_pairs(name, opset, target, tmp_path, no_hand_off_comparison):
    _run(name, opset, target, QUICK_COMBOS, tmp_path, no_hand_off_comparison)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", MODELS)
def test_option_matrix(name, opset, target, tmp_path, no_hand_off_comparison):
    _run(name, opset, target, COMBOS, tmp_path, no_hand_off_comparison)
