"""Quantized programs and quantization at export, against PyTorch.

- PT2E's quantized_decomposed ops, torchao's affine ops and the QAT fake
  quantizers, one at a time: integers exactly equal (QuantizeLinear computes
  x / scale where torch computes x * (1 / scale): the two may round apart
  only where x / scale lies within float error of a .5 tie, which the
  comparison allows and counts), floats to 1e-6.
- PT2E-quantized models (torchvision ResNet-18 / MobileNet v2, static; a
  transformers BERT, dynamic), a QAT-prepared model, torchao's weight-only
  and dynamic configs: outputs of the quantized program in onnxruntime.
- export(quantize="int4" / "int8") of a transformers LLaMA: exact against
  PyTorch holding the file's own dequantized weights; accuracy against the
  float model (cosine, max diff, greedy tokens over 32 steps) stated and
  bounded; the file holds the integers (size).
"""

import logging
import os
import warnings

import numpy as np
import onnx
import pytest
import torch
from conftest import ort_session

from torch_releases import EXPAND_RESHAPE_GUARD
import pt2onnx
import pt2onnx.hf

import torchao  # noqa: E402,F401  (requirements-dev.txt)

logging.getLogger("torchao").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", module="torchao")

qd = torch.ops.quantized_decomposed


def _ort(path, feeds, level=None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = int(os.environ.get("PT2ONNX_TEST_THREADS", "2"))  # tests/conftest.py
    if level is not None:
        so.graph_optimization_level = level
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in s.get_inputs()]
    return s.run(None, dict(zip(names, [f.numpy() for f in feeds])))


def _ops(path):
    return [n.op_type for n in onnx.load(path, load_external_data=False).graph.node]


def _assert_ints(got, exp, x, scale):
    """Integers equal, except by one where x / scale is within float error
    of a .5 tie (QuantizeLinear divides, torch multiplies by 1 / scale)."""
    got, exp = np.asarray(got).astype(np.int64), np.asarray(exp).astype(np.int64)
    assert got.shape == exp.shape
    diff = got != exp
    if diff.any():
        ratio = (np.asarray(x, dtype=np.float64) / np.asarray(scale, dtype=np.float64))
        frac = np.abs(ratio - np.floor(ratio) - 0.5)
        assert np.abs(got - exp)[diff].max() == 1
        assert (frac[np.broadcast_to(diff, frac.shape)] < 1e-4).all(), "mismatch away from a tie"
    assert diff.mean() < 1e-3


class Fn(torch.nn.Module):
    def __init__(self, fn, **buffers):
        super().__init__()
        self.fn = fn
        for k, v in buffers.items():
            self.register_buffer(k, v)

    def forward(self, x):
        return self.fn(self, x)


def _export(m, x, path, opset=18, **kw):
    pt2onnx.export(m, (x,), path, opset=opset, **kw)
    return path


# ---- quantized_decomposed (PT2E)


@pytest.mark.parametrize("dtype,lo,hi", [(torch.uint8, 0, 255), (torch.int8, -128, 127),
                                         (torch.int8, -100, 100), (torch.uint8, 0, 127)])
def test_quantize_per_tensor_exact(dtype, lo, hi, tmp_onnx):
    scale, zp = 0.037, (lo + hi) // 2
    m = Fn(lambda s, x: qd.quantize_per_tensor(x, scale, zp, lo, hi, dtype))
    x = torch.randn(4, 33) * 4
    _export(m, x, tmp_onnx)
    ops = _ops(tmp_onnx)
    assert "QuantizeLinear" in ops
    # A range narrower than the type clamps the integers.
    assert ("Clip" in ops) == ((lo, hi) not in ((0, 255), (-128, 127)))
    x2 = torch.randn(4, 33) * 4
    (got,) = _ort(tmp_onnx, [x2])
    assert got.dtype == np.dtype(str(dtype).split(".")[1])
    _assert_ints(got, m(x2).numpy(), x2.numpy(), scale)


def test_dequantize_per_tensor_and_tensor_overloads(tmp_onnx):
    # .tensor: scale / zero point as tensors (buffers of the program).
    m = Fn(lambda s, x: qd.dequantize_per_tensor.tensor(
        qd.quantize_per_tensor.tensor(x, s.scale, s.zp, 0, 255, torch.uint8),
        s.scale, s.zp, 0, 255, torch.uint8),
        scale=torch.tensor([0.02]), zp=torch.tensor([128]))
    x = torch.randn(3, 17)
    _export(m, x, tmp_onnx)
    assert _ops(tmp_onnx).count("DequantizeLinear") == 1
    x2 = torch.randn(3, 17)
    (got,) = _ort(tmp_onnx, [x2])
    exp = m(x2).numpy()
    assert np.abs(got - exp).max() <= 0.02 + 1e-6  # one step where a tie rounds apart
    assert (np.abs(got - exp) > 1e-6).mean() < 1e-2


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_per_channel_exact(axis, tmp_onnx):
    x = torch.randn(6, 5, 7) * 3
    n = x.shape[axis]
    scales = torch.rand(n) * 0.05 + 0.01
    zps = torch.randint(-20, 20, (n,))
    m = Fn(lambda s, x: qd.quantize_per_channel(x, s.scales, s.zps, axis, -128, 127, torch.int8),
           scales=scales, zps=zps)
    _export(m, x, tmp_onnx)
    assert "QuantizeLinear" in _ops(tmp_onnx)
    x2 = torch.randn(6, 5, 7) * 3
    (got,) = _ort(tmp_onnx, [x2])
    shape = [1, 1, 1]
    shape[axis] = n
    _assert_ints(got, m(x2).numpy(), x2.numpy(), scales.reshape(shape).numpy())

    q = torch.randint(-128, 128, (6, 5, 7), dtype=torch.int8)
    dq = Fn(lambda s, q: qd.dequantize_per_channel(q, s.scales, s.zps, axis, -128, 127,
                                                    torch.int8), scales=scales, zps=zps)
    _export(dq, q, tmp_onnx)
    (got,) = _ort(tmp_onnx, [q])
    np.testing.assert_allclose(got, dq(q).numpy(), atol=1e-6, rtol=1e-6)


def test_int32_bias_dequantize(tmp_onnx):
    # A bias quantized to int32 at scale s_x * s_w per output channel (XNNPACK's
    # PT2E recipe), dequantized as the program reads it.
    bias = torch.randint(-2**20, 2**20, (16,), dtype=torch.int32)
    scales = torch.rand(16) * 1e-4 + 1e-5

    def f(s, x):
        b = qd.dequantize_per_channel(s.bias, s.scales, None, 0, -2**31, 2**31 - 1, torch.int32)
        return x + b

    m = Fn(f, bias=bias, scales=scales)
    x = torch.randn(3, 16)
    _export(m, x, tmp_onnx)
    assert "DequantizeLinear" in _ops(tmp_onnx)
    (got,) = _ort(tmp_onnx, [x])
    np.testing.assert_allclose(got, m(x).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("symmetric", [False, True])
def test_choose_qparams_dynamic(symmetric, tmp_onnx):
    op = qd.choose_qparams_symmetric.tensor if symmetric else qd.choose_qparams.tensor

    def f(s, x):
        scale, zp = op(x, -128 if symmetric else 0, 127 if symmetric else 255,
                       torch.finfo(torch.float32).eps, torch.int8 if symmetric else torch.uint8)
        return scale, zp

    m = Fn(f)
    x = torch.randn(4, 9) + 0.3
    pt2onnx.export(m, (x,), tmp_onnx, dynamic_shapes=({0: torch.export.Dim("b")},))
    for shape in [(2, 9), (7, 9)]:
        x2 = torch.randn(*shape) * 2 + 0.5
        got = _ort(tmp_onnx, [x2])
        exp = m(x2)
        np.testing.assert_allclose(got[0], exp[0].numpy(), rtol=1e-6)
        np.testing.assert_array_equal(got[1], exp[1].numpy())


# ---- torchao's affine ops


def _ao_ops():
    import torchao.quantization  # noqa: F401  (registers torch.ops.torchao)

    return torch.ops.torchao


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("block,name", [((4, 64), "per tensor"), ((1, 64), "per row"),
                                        ((1, 32), "blocked"), ((2, 16), "2-D blocks")])
def test_torchao_affine_round_trip(block, name, opset, tmp_onnx):
    ao = _ao_ops()
    block = list(block)

    def f(s, x):
        scale, zp = ao.choose_qparams_affine(x, "ASYMMETRIC", block, torch.uint8, 0, 255)
        q = ao.quantize_affine(x, block, scale, zp, torch.uint8, 0, 255)
        return q, ao.dequantize_affine(q, block, scale, zp, torch.uint8, 0, 255)

    m = Fn(f)
    x = torch.randn(4, 64)
    _export(m, x, tmp_onnx, opset=opset)
    ops = _ops(tmp_onnx)
    qdq = name in ("per tensor", "per row") or (name == "blocked" and opset >= 21)
    assert ("DequantizeLinear" in ops) == qdq, ops
    if name == "blocked" and opset >= 21:
        nodes = onnx.load(tmp_onnx).graph.node
        dq = next(n for n in nodes if n.op_type == "DequantizeLinear")
        assert {a.name: a.i for a in dq.attribute}.get("block_size") == 32
    x2 = torch.randn(4, 64)
    got = _ort(tmp_onnx, [x2])
    q, dq = m(x2)
    if qdq:  # QuantizeLinear divides: ties may round apart
        scale, _ = ao.choose_qparams_affine(x2, "ASYMMETRIC", block, torch.uint8, 0, 255)
        per_elem = scale.reshape(x2.shape[0] // block[0] if block[0] != 4 else 1, -1)
        per_elem = per_elem.repeat_interleave(block[0], 0)[: x2.shape[0]] \
            if per_elem.shape[0] > 1 else per_elem
        per_elem = per_elem.repeat_interleave(block[1], 1) if per_elem.shape[1] > 1 \
            else per_elem
        _assert_ints(got[0], q.numpy(), x2.numpy(), np.broadcast_to(per_elem.numpy(), x2.shape))
    else:  # torch's arithmetic, exactly
        np.testing.assert_array_equal(got[0], q.numpy())
    np.testing.assert_allclose(got[1], dq.numpy(), atol=float(x2.abs().max()) / 100)
    exact = got[0] == q.numpy()
    np.testing.assert_allclose(got[1][exact], dq.numpy()[exact], atol=1e-6)


def test_torchao_symmetric_per_token_dynamic_batch(tmp_onnx):
    ao = _ao_ops()

    def f(s, x):
        scale, zp = ao.choose_qparams_affine(x, "SYMMETRIC", [1, 48], torch.int8, -128, 127)
        return ao.dequantize_affine(ao.quantize_affine(x, [1, 48], scale, zp, torch.int8),
                                    [1, 48], scale, zp, torch.int8)

    m = Fn(f)
    pt2onnx.export(m, (torch.randn(3, 48),), tmp_onnx,
                   dynamic_shapes=({0: torch.export.Dim("tokens")},))
    for n in (1, 5):
        x2 = torch.randn(n, 48)
        (got,) = _ort(tmp_onnx, [x2])
        exp = m(x2).numpy()
        step = np.abs(x2.numpy()).max(1, keepdims=True) / 127.5
        assert (np.abs(got - exp) <= step * 1.001 + 1e-6).all()


# ---- fake quantization (QAT)


def test_fake_quantize_ops(tmp_onnx):
    a = torch.ops.aten

    def f(s, x):
        y1 = a.fake_quantize_per_tensor_affine(x, 0.05, 3, -128, 127)
        y2, mask = a.fake_quantize_per_tensor_affine_cachemask(x, 0.05, 3, 0, 100)
        y3 = a.fake_quantize_per_channel_affine(x, s.scales, s.zps, 1, 0, 255)
        y4, _ = a._fake_quantize_per_tensor_affine_cachemask_tensor_qparams(
            x, s.scale, s.zp, s.on, 0, 255)
        return y1, y2, mask, y3, y4

    m = Fn(f, scales=torch.rand(7) * 0.05 + 0.01, zps=torch.randint(0, 50, (7,), dtype=torch.int32),
           scale=torch.tensor([0.03]), zp=torch.tensor([10], dtype=torch.int32),
           on=torch.tensor([1], dtype=torch.long))
    x = torch.randn(5, 7) * 3
    _export(m, x, tmp_onnx)
    assert _ops(tmp_onnx).count("QuantizeLinear") == 4
    x2 = torch.randn(5, 7) * 3
    got = _ort(tmp_onnx, [x2])
    exp = [t.numpy() for t in m(x2)]
    steps = [0.05, 0.05, None, 0.06, 0.03]
    for g, e, st in zip(got, exp, steps):
        if st is None:  # the mask
            assert (g == e).mean() > 0.99
            continue
        diff = np.abs(g - e)
        assert diff.max() <= st + 1e-6 and (diff > 1e-6).mean() < 0.01


def test_qat_eager_model_observers_off(tmp_onnx):
    import torch.ao.quantization as aq

    torch.manual_seed(0)
    m = torch.nn.Sequential(aq.QuantStub(), torch.nn.Linear(32, 16), torch.nn.ReLU(),
                            torch.nn.Linear(16, 8), aq.DeQuantStub()).train()
    m.qconfig = aq.get_default_qat_qconfig("x86")
    aq.prepare_qat(m, inplace=True)
    for _ in range(3):
        m(torch.randn(8, 32))
    m.eval()
    x = torch.randn(4, 32)
    # Observers on: each call would move the scales; refused, saying what to do.
    with pytest.raises(pt2onnx.ConversionError, match="disable_observer"):
        _export(m, x, tmp_onnx)
    m.apply(aq.disable_observer)
    _export(m, x, tmp_onnx)
    ops = _ops(tmp_onnx)
    assert ops.count("QuantizeLinear") >= 3
    # A decomposed program has the functional helper (returning the observer's state).
    ep = torch.export.export(m, (x,)).run_decompositions()
    assert any("_functional" in str(n.target) for n in ep.graph.nodes)
    decomposed = tmp_onnx.replace(".onnx", "_decomposed.onnx")
    pt2onnx.export(ep, (x,), decomposed)
    got = _ort(decomposed, [x])[0]  # then the observers' buffers, as the program returns them
    with torch.no_grad():
        np.testing.assert_allclose(got, m(x).numpy(), atol=1e-5)
    x2 = torch.randn(4, 32)
    (got,) = _ort(tmp_onnx, [x2])
    with torch.no_grad():
        exp = m(x2).numpy()
    np.testing.assert_allclose(got, exp, atol=1e-5)


# ---- PT2E models


def _pt2e(model, x, dynamic=False, fold=True, strict=True):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq

    q = xiq.X86InductorQuantizer()
    config = xiq.get_default_x86_inductor_quantization_config(is_dynamic=dynamic)
    if dynamic:  # dynamic quantization is for Linear layers (as torch's recipe for BERT)
        q.set_module_type_qconfig(torch.nn.Linear, config)
    else:
        q.set_global(config)
    # strict (dynamo) capture: it records each call of a reused module
    # (torchvision's BasicBlock calls self.relu twice) as its own source,
    # which X86InductorQuantizer's conv + add + relu matching needs ("Input
    # partition has more than one output node" otherwise, torchao 0.18).
    captured = torch.export.export(model, x, strict=strict).module()
    p = prepare_pt2e(captured, q)
    torch.manual_seed(1)
    for _ in range(2):
        p(*[torch.randn_like(t) if t.is_floating_point() else t for t in x])
    return convert_pt2e(p, fold_quantize=fold)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_pt2e_static_torchvision(name, tmp_path):
    import onnxruntime as ort
    import torchvision.models as tvm

    torch.manual_seed(0)
    model = getattr(tvm, name)(weights=None).eval()
    # Freshly initialized batch norms (mean 0, var 1) let MobileNet's random
    # activations fade until the quantized program outputs exactly 0: give
    # them statistics, so the comparison has a signal.
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_var.uniform_(0.5, 2)
            mod.running_mean.normal_(0, 0.1)
    x = torch.randn(2, 3, 64, 64)
    qm = _pt2e(model, (x,))
    path = str(tmp_path / "q.onnx")
    # The onnxruntime target keeps the static QDQ pairs for onnxruntime's
    # QDQ optimizer (no MatMulNBits for a quantized activation).
    pt2onnx.export(qm, (x,), path, target="onnxruntime")
    assert "MatMulNBits" not in _ops(path)
    init = onnx.load(path).graph.initializer
    int8 = sum(np.prod(i.dims) for i in init if i.data_type == onnx.TensorProto.INT8)
    flt = sum(np.prod(i.dims) for i in init if i.data_type == onnx.TensorProto.FLOAT)
    assert int8 > 10 * flt  # the file holds the weights as int8
    x2 = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        exp = qm(x2).numpy()
    # The QDQ graph as written (no fusion): PyTorch's quantized program, up to
    # activations a tie apart (QuantizeLinear divides by the scale).
    (got,) = _ort(path, [x2], ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    err = np.abs(got - exp).max()
    assert np.abs(exp).max() > 1e-2 and err < 0.05 * np.abs(exp).max(), err
    # onnxruntime fuses the pairs into integer kernels at load time.
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    fused = _ops(str(tmp_path / "opt.onnx"))
    # (X86InductorQuantizer leaves a conv feeding a residual add with a float
    # output: those stay DequantizeLinear + Conv, 8 of ResNet-18's 20.)
    assert fused.count("QLinearConv") >= 12, sorted(set(fused))


def test_pt2e_fold_quantize_false_stores_int8(tmp_onnx):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 6 * 6, 10)).eval()
    x = torch.randn(2, 3, 8, 8)
    qm = _pt2e(model, (x,), fold=False)
    targets = [str(n.target) for n in qm.graph.nodes]
    assert "quantized_decomposed.quantize_per_channel.default" in targets
    pt2onnx.export(qm, (x,), tmp_onnx)
    init = onnx.load(tmp_onnx).graph.initializer
    kinds = {i.data_type for i in init if np.prod(i.dims) >= 216}
    assert kinds == {onnx.TensorProto.INT8}, kinds  # the weights' Q computed at export
    import onnxruntime as ort

    x2 = torch.randn(2, 3, 8, 8)
    (got,) = _ort(tmp_onnx, [x2], ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    with torch.no_grad():
        exp = qm(x2).numpy()
    assert np.abs(got - exp).max() < 0.02 * np.abs(exp).max()


def test_pt2e_dynamic_bert(tmp_onnx):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=64)
    # No pooler: its output is unused here, and X86InductorQuantizer fails
    # on a Tanh whose output nothing reads (torchao 0.18).
    bert = BertModel(cfg, add_pooling_layer=False).eval()

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, ids):
            return self.bert(input_ids=ids).last_hidden_state

    ids = torch.randint(0, 200, (2, 12))
    qm = _pt2e(Wrap().eval(), (ids,), dynamic=True, strict=False)
    pt2onnx.export(qm, (ids,), tmp_onnx)
    ops = _ops(tmp_onnx)
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    ids2 = torch.randint(0, 200, (2, 12))
    (got,) = _ort(tmp_onnx, [ids2])
    with torch.no_grad():
        exp = qm(ids2).numpy()
    np.testing.assert_allclose(got, exp, atol=2e-3)


# ---- torchao quantize_ configs (tensor-subclass weights)


def _torchao_configs():
    from torchao.quantization import (Int8DynamicActivationInt8WeightConfig,
                                      Int8WeightOnlyConfig, IntxWeightOnlyConfig)
    from torchao.quantization.granularity import PerAxis, PerGroup

    return {
        "int8_weight_only": Int8WeightOnlyConfig(),
        "int4_weight_only_group32": IntxWeightOnlyConfig(weight_dtype=torch.int4,
                                                         granularity=PerGroup(32)),
        "int4_weight_only_per_channel": IntxWeightOnlyConfig(weight_dtype=torch.int4,
                                                             granularity=PerAxis(0)),
        "int8_dynamic_activation": Int8DynamicActivationInt8WeightConfig(),
    }


@pytest.mark.parametrize("target", ["standard", "onnxruntime"])
@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("config", ["int8_weight_only", "int4_weight_only_group32",
                                    "int4_weight_only_per_channel", "int8_dynamic_activation"])
def test_torchao_quantize_configs(config, opset, target, tmp_onnx):
    from torchao.quantization import quantize_

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32))
    m.eval()
    quantize_(m, _torchao_configs()[config])
    x = torch.randn(3, 64)
    pt2onnx.export(m, (x,), tmp_onnx, opset=opset, target=target,
                   dynamic_shapes=({0: torch.export.Dim("b")},))
    init = onnx.load(tmp_onnx).graph.initializer
    assert not any(i.data_type == onnx.TensorProto.FLOAT and np.prod(i.dims) >= 64 * 96
                   for i in init), "a float copy of a quantized weight"
    # onnxruntime target: weight-only layers multiply the integers as they are
    # (MatMulNBits), except blocks at opset < 21 (no blocked DequantizeLinear:
    # computed as torch does) and the dynamic config (MatMulInteger).
    nbits = _ops(tmp_onnx).count("MatMulNBits")
    fusable = config != "int8_dynamic_activation" and not (
        config == "int4_weight_only_group32" and opset < 21)
    assert nbits == (2 if target == "onnxruntime" and fusable else 0), _ops(tmp_onnx)
    if config == "int4_weight_only_group32" and opset >= 21 and target == "standard":
        dq = [n for n in onnx.load(tmp_onnx).graph.node if n.op_type == "DequantizeLinear"]
        assert len(dq) == 2 and all(any(a.name == "block_size" for a in n.attribute) for n in dq)
    for n in (1, 5):
        x2 = torch.randn(n, 64)
        (got,) = _ort(tmp_onnx, [x2])
        with torch.no_grad():
            exp = m(x2).numpy()
        np.testing.assert_allclose(got, exp, atol=1e-4, rtol=1e-4)


class _IntMatMulScaled(torch.nn.Module):
    """(x @ q.float()) * s, torchao's int8 weight-only form, with s [N] per
    column or [N, 1] (per row: not a weight scale)."""

    def __init__(self, rows):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.register_buffer("q", torch.randint(-128, 128, (32, 16), generator=g,
                                                dtype=torch.int8))
        self.register_buffer("s", torch.rand((16, 1) if rows else (16,), generator=g))

    def forward(self, x):
        return (x @ self.q.float()) * self.s


@pytest.mark.parametrize("rows", [False, True])
def test_integer_matmul_times_scale(rows, tmp_onnx):
    """A per-column scale becomes MatMulNBits (the integers read as they are);
    one of N values that scales rows ([N, 1]) is left as it is."""
    m = _IntMatMulScaled(rows).eval()
    x = torch.randn(16, 32)
    pt2onnx.export(m, (x,), tmp_onnx, opset=18, target="onnxruntime")
    assert _ops(tmp_onnx).count("MatMulNBits") == (0 if rows else 1), _ops(tmp_onnx)
    x2 = torch.randn(16, 32)
    (got,) = _ort(tmp_onnx, [x2])
    with torch.no_grad():
        np.testing.assert_allclose(got, m(x2).numpy(), atol=1e-4, rtol=1e-4)


# ---- quantize at export


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    pt2onnx.hf.prepare()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=352,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=128, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).logits

    return Logits().eval()


def _export_llama(model, path, **kw):
    ids = torch.randint(0, 512, (2, 16))
    dims = ({0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=128)},)
    return pt2onnx.export(model, (ids,), path, dynamic_shapes=dims, **kw)


def _dequantized_weights(path):
    """Linear weights [N, K] as the file's quantized form gives them."""
    m = onnx.load(path)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    out = {}
    for n in m.graph.node:
        a = {x.name: x.i for x in n.attribute}
        if n.op_type == "MatMulNBits":
            K, N, bits, bs = a["K"], a["N"], a["bits"], a["block_size"]
            b = inits[n.input[1]].reshape(N, -1)
            if bits == 4:
                b = np.stack([b & 0xF, b >> 4], -1).reshape(N, -1)
            nb = -(-K // bs)
            q = b.reshape(N, nb, bs).astype(np.float32)
            scale = inits[n.input[2]].reshape(N, nb, 1)
            if len(n.input) > 3 and n.input[3]:
                z = inits[n.input[3]].reshape(N, -1)
                if bits == 4:
                    z = np.stack([z & 0xF, z >> 4], -1).reshape(N, -1)
                z = z[:, :nb].reshape(N, nb, 1).astype(np.float32)
            else:
                z = 2.0 ** (bits - 1)
            w = ((q - z) * scale).reshape(N, -1)[:, :K]
            # Sibling projections packed into one ("a_q4+b_q4"), split after it.
            names = n.input[1].split("+")
            if len(names) > 1:
                (sp,) = [x for x in m.graph.node if x.op_type == "Split" and
                         x.input[0] == n.output[0]]
                w = np.split(w, np.cumsum(inits[sp.input[1]])[:-1], 0)
            else:
                w = [w]
            for name, part in zip(names, w, strict=True):
                out[name.rsplit("_q", 1)[0]] = part
        elif n.op_type == "DequantizeLinear" and n.input[0] in inits and "_q" in n.input[0]:
            q = inits[n.input[0]].astype(np.float32)  # [K, N]
            scale = inits[n.input[1]]
            z = inits[n.input[2]].astype(np.float32) if len(n.input) > 2 else 0.0
            if a.get("block_size"):
                bs = a["block_size"]
                scale = np.repeat(scale, bs, 0)[: q.shape[0]]
                z = np.repeat(z, bs, 0)[: q.shape[0]] if np.ndim(z) else z
            w = (q - z) * scale
            out[n.input[0].rsplit("_q", 1)[0].removesuffix(".T")] = w.T
    return out


def _check_dequantized(model, path, deq, kind):
    """The file's logits equal PyTorch's with the weights the file dequantizes
    to (`deq`), and are close to float32 PyTorch's (cosine)."""
    import onnxruntime as ort

    ids = torch.randint(0, 512, (3, 20))
    with torch.no_grad():
        ref = model(ids).numpy()
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        sd = model.state_dict()
        for name, w in deq.items():
            assert name in sd, name
            sd[name].copy_(torch.from_numpy(np.ascontiguousarray(w)))
        same_weights = model(ids).numpy()
        model.load_state_dict(saved)
    # Basic level: onnxruntime's extended level turns a standard file's 4-bit
    # DequantizeLinear + MatMul into MatMulNBits with int8 compute
    # (session.qdq_matmulnbits_accuracy_level, default 4).
    (got,) = _ort(path, [ids], ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    np.testing.assert_allclose(got, same_weights, atol=2e-4, rtol=1e-3)
    # Accuracy against float32 PyTorch (random weights: no outliers, the
    # hardest case for a per-block scale). Bounds well below the measured
    # figures (README: "Quantization at export").
    cos = (got * ref).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(ref, axis=-1)
    assert cos.min() > (0.995 if kind == "int8" else 0.95), cos.min()


@pytest.mark.parametrize("spec,target,opset", [
    ("int4", "onnxruntime", 18),
    ("int8", "onnxruntime", 18),
    ("int4", "standard", 21),
    ("int8", "standard", 18),
    ({"dtype": "int4", "symmetric": False, "block_size": 64}, "onnxruntime", 18),
    ({"dtype": "int8", "block_size": 32}, "standard", 21),
])
@EXPAND_RESHAPE_GUARD
def test_quantize_at_export_llama(spec, target, opset, tmp_path):
    model = _llama()
    kind = spec if isinstance(spec, str) else spec["dtype"]
    # accuracy_level 0: onnxruntime computes in float, so the file's weights
    # alone account for every difference from PyTorch.
    q = {"dtype": spec} if isinstance(spec, str) else dict(spec)
    if target == "onnxruntime":
        q["accuracy_level"] = 0
    path = str(tmp_path / "q.onnx")
    _export_llama(model, path, target=target, opset=opset, quantize=q)
    ops = _ops(path)
    linears = 2 * 7 + 1  # q k v o gate up down per layer, lm head
    if target == "onnxruntime":
        # One MatMulNBits per activation: q k v, gate up packed (their rows
        # side by side), o, down, lm head.
        assert ops.count("MatMulNBits") == 2 * 4 + 1, ops
        assert ops.count("Split") == 2 * 2, ops
    else:
        assert ops.count("DequantizeLinear") == linears, ops

    # Exact: PyTorch holding the file's dequantized weights gives its logits.
    deq = _dequantized_weights(path)
    assert len(deq) == linears
    _check_dequantized(model, path, deq, kind)

    # The file holds the integers.
    import os

    size = sum(os.path.getsize(os.path.join(tmp_path, f)) for f in os.listdir(tmp_path)
               if f.startswith("q.onnx"))
    linear_params = sum(p.numel() for n, p in model.named_parameters() if "proj" in n or
                        "lm_head" in n)
    other = sum(p.numel() for n, p in model.named_parameters()) - linear_params
    bits = 4 if kind == "int4" else 8
    block = q.get("block_size") or (32 if bits == 4 else 128)  # int8: one scale per K = 128..352
    per_param = bits / 8 + 4 / block + (0 if q.get("symmetric", True) else bits / 8 / block)
    expected = other * 4 + linear_params * per_param
    assert size < expected * 1.15 + 65536, (size, expected)


def _dequantized_embedding(path, name, bits):
    """The embedding table [V, H] as the file's quantized rows give it."""
    m = onnx.load(path)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    q = inits[name + ("_q4" if bits == 4 else "_q8")]
    scale = inits[name + "_scales"]
    V, blocks = scale.shape
    if q.dtype == np.uint8 and bits == 4:  # GatherBlockQuantized's packed rows
        q = np.stack([q & 0xF, q >> 4], -1).reshape(V, -1)
    q = q.astype(np.float32)
    H = q.shape[1]
    z = inits.get(name + "_zero_points")
    if z is not None:
        if z.dtype == np.uint8 and bits == 4 and z.shape[1] != blocks:  # packed per row
            z = np.stack([z & 0xF, z >> 4], -1).reshape(V, -1)[:, :blocks]
        z = np.repeat(z.astype(np.float32), H // blocks, 1)
    elif q.min() >= 0:  # unsigned, symmetric: the default zero point 2^(bits-1)
        z = 2.0 ** (bits - 1)
    else:
        z = 0.0
    return (q - z) * np.repeat(scale, H // blocks, 1)


@pytest.mark.parametrize("spec,target,opset", [
    ({"dtype": "int4", "embeddings": True}, "onnxruntime", 18),
    ({"dtype": "int4", "embeddings": True, "symmetric": False}, "onnxruntime", 18),
    ({"dtype": "int8", "embeddings": True, "block_size": 32}, "onnxruntime", 18),
    ({"dtype": "int4", "embeddings": True}, "standard", 21),
    ({"dtype": "int4", "embeddings": True, "symmetric": False}, "standard", 21),
])
@EXPAND_RESHAPE_GUARD
def test_quantize_embeddings(spec, target, opset, tmp_path):
    """quantize={..., "embeddings": True}: the table becomes GatherBlockQuantized
    (onnxruntime) or Gather of the integer rows + DequantizeLinear (standard),
    and the file equals PyTorch holding every dequantized weight, the table's
    included."""
    model = _llama()
    q = dict(spec)
    if target == "onnxruntime":
        q["accuracy_level"] = 0
    path = str(tmp_path / "e.onnx")
    _export_llama(model, path, target=target, opset=opset, quantize=q)
    ops = _ops(path)
    table_gathers = [n for n in onnx.load(path, load_external_data=False).graph.node
                     if n.op_type == "Gather" and n.input[0].startswith("m.model.embed_tokens")]
    if target == "onnxruntime":
        assert ops.count("GatherBlockQuantized") == 1 and not table_gathers, ops
    else:  # the integer rows, their scales (and zero points)
        assert len(table_gathers) == (3 if not spec.get("symmetric", True) else 2), ops
    deq = _dequantized_weights(path)
    bits = 4 if spec["dtype"] == "int4" else 8
    deq["m.model.embed_tokens.weight"] = _dequantized_embedding(path, "m.model.embed_tokens.weight",
                                                              bits)
    _check_dequantized(model, path, deq, spec["dtype"])
    # Smaller than the same export without the table quantized.
    import os

    plain = str(tmp_path / "p.onnx")
    q.pop("embeddings")
    _export_llama(model, plain, target=target, opset=opset, quantize=q)

    def size(stem):
        return sum(os.path.getsize(os.path.join(tmp_path, f)) for f in os.listdir(tmp_path)
                   if f.startswith(stem))
    table = 512 * 128 * 4
    assert size("e.onnx") < size("p.onnx") - table * (1 - bits / 32 - 0.1), (size("e.onnx"),
                                                                                size("p.onnx"))


@EXPAND_RESHAPE_GUARD
def test_quantize_greedy_generation_agrees(tmp_path):
    """Greedy decoding over 32 steps against float32 PyTorch: per step, does
    the quantized file pick PyTorch's token given PyTorch's own prefix
    (teacher-forced agreement), and how many tokens run equal before the
    first divergence (after it the contexts differ). Random weights give
    near-flat logits, the hardest case for agreement."""
    import onnxruntime as ort

    model = _llama()
    torch.manual_seed(3)
    prompt = torch.randint(0, 512, (1, 8))
    seq = prompt.clone()
    with torch.no_grad():
        for _ in range(32):
            seq = torch.cat([seq, model(seq)[:, -1:].argmax(-1)], 1)
        ref = model(seq[:, :-1]).argmax(-1)[0, 7:].numpy()  # PyTorch's 32 choices
    figures = {}
    for kind in ("int8", "int4"):
        path = str(tmp_path / f"{kind}.onnx")
        _export_llama(model, path, target="onnxruntime", quantize=kind)
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        forced = s.run(None, {"ids": seq[:, :-1].numpy()})[0].argmax(-1)[0, 7:]
        free = prompt.clone()
        for _ in range(32):
            nxt = s.run(None, {"ids": free.numpy()})[0][:, -1].argmax(-1)
            free = torch.cat([free, torch.from_numpy(nxt)[:, None]], 1)
        same = (free[0, 8:] == seq[0, 8:]).numpy()
        figures[kind] = (float((forced == ref).mean()),
                         int(np.argmin(same)) if not same.all() else 32)
    print("teacher-forced agreement, tokens before first divergence:", figures)
    assert figures["int8"][0] >= 0.8, figures  # measured 0.91 (int4: 0.72)
    assert figures["int4"][0] >= 0.5, figures


@EXPAND_RESHAPE_GUARD
def test_quantize_errors(tmp_path):
    model = _llama()
    path = str(tmp_path / "e.onnx")
    with pytest.raises(pt2onnx.ConversionError, match="opset 21"):
        _export_llama(model, path, quantize="int4", opset=18)
    with pytest.raises(pt2onnx.ConversionError, match="power of 2"):
        _export_llama(model, path, quantize={"dtype": "int4", "block_size": 24},
                      target="onnxruntime")
    with pytest.raises(pt2onnx.ConversionError, match="int4' or 'int8'"):
        _export_llama(model, path, quantize="int3")
    with pytest.raises(ValueError, match="verify_tolerance"):
        _export_llama(model, path, quantize="int8", verify=True)
    with pytest.raises(pt2onnx.ConversionError, match="embeddings .*opset 21"):
        _export_llama(model, path, quantize={"dtype": "int8", "embeddings": True}, opset=18)
    import os

    assert not os.path.exists(path)


def test_cli_quantize(tmp_path):
    """`pt2onnx model.pt2 --quantize ...`: a .pt2 archive quantized with no Python."""
    import subprocess

    from conftest import installed_cli

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, 32)).eval()
    x = torch.randn(4, 64)
    pt2 = str(tmp_path / "mlp.pt2")
    torch.export.save(torch.export.export(mlp, (x,)), pt2)
    out = str(tmp_path / "mlp.onnx")
    p = subprocess.run([installed_cli(), pt2, "-o", out, "--target", "onnxruntime",
                        "--quantize", "int8,accuracy_level=0"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert _ops(out).count("MatMulNBits") == 2
    (got,) = _ort(out, [x])
    with torch.no_grad():
        exp = mlp(x).numpy()
    assert np.abs(got - exp).max() < 0.02 * np.abs(exp).max()
    bad = subprocess.run([installed_cli(), pt2, "-o", out, "--quantize", "int4,block=3"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "block_size" in bad.stderr
