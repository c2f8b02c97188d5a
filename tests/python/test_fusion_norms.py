"""Norm fusions (src/opt/fuse_rms_norm.cpp, fuse_layer_norm.cpp,
fuse_skip_norm.cpp) on real module definitions: transformers' LlamaRMSNorm,
a hand-written LayerNorm, a 2-layer transformers LlamaForCausalLM and a
2-layer BERT, built from configs with random weights. Each is exported at
opsets 18 and 23 on both targets; the test asserts the fused operators (and
how many) in the file, and that onnxruntime matches PyTorch on fresh inputs
of other batch / sequence sizes than the export's (fp32: atol = rtol = 1e-4;
the float16 RMS norm: atol = rtol = 1e-2, about four float16 ulps at the
outputs' magnitude)."""

import collections

import numpy as np
import onnx
import pytest
import torch

import pt2onnx
from conftest import ort_session

CASES = [(18, "standard"), (18, "onnxruntime"), (23, "standard"), (23, "onnxruntime")]
HIDDEN = 64


def _ops(path):
    m = onnx.load(path, load_external_data=False)
    return collections.Counter(n.op_type for n in m.graph.node), m


def _norm_ops(counts):
    return {k: v for k, v in counts.items() if "Normalization" in k}


def _compare(model, path, fresh, atol=1e-4, rtol=1e-4):
    sess = ort_session(path)
    names = [i.name for i in sess.get_inputs()]
    for args in fresh:
        got = sess.run(None, {n: a.numpy() for n, a in zip(names, args)})
        with torch.no_grad():
            exp = model(*args)
        exp = exp if isinstance(exp, tuple) else (exp,)
        assert len(got) == len(exp)
        for g, e in zip(got, exp):
            assert g.shape == tuple(e.shape)
            np.testing.assert_allclose(g.astype(np.float32), e.float().numpy(), atol=atol,
                                       rtol=rtol)


def _dynamic(n_inputs):
    b, s = torch.export.Dim("batch", max=64), torch.export.Dim("seq", max=512)
    return tuple({0: b, 1: s} for _ in range(n_inputs))


# ---- transformers' LlamaRMSNorm


def _rms_norm(dtype=torch.float32):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    m = LlamaRMSNorm(HIDDEN, eps=1e-6).eval()
    with torch.no_grad():
        m.weight.copy_(torch.randn(HIDDEN))
    return m.to(dtype)


@pytest.mark.parametrize("opset,target", CASES)
def test_llama_rms_norm(opset, target, tmp_onnx):
    m = _rms_norm()
    pt2onnx.export(m, (torch.randn(2, 8, HIDDEN),), tmp_onnx, dynamic_shapes=_dynamic(1),
                   opset=opset, target=target)
    counts, model = _ops(tmp_onnx)
    if target == "onnxruntime":
        assert _norm_ops(counts) == {"SimplifiedLayerNormalization": 1}
    elif opset >= 23:
        assert _norm_ops(counts) == {"RMSNormalization": 1}
    else:  # nothing standard to emit below 23: the pattern stays
        assert _norm_ops(counts) == {} and counts["Sqrt"] == 1
    if opset >= 23 or target == "onnxruntime":
        assert len(model.graph.node) == 1
        node = model.graph.node[0]
        assert node.domain == "" and list(node.input) == ["hidden_states", "weight"]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attrs["axis"] == -1 and attrs["stash_type"] == 1
        assert attrs["epsilon"] == pytest.approx(1e-6)
    _compare(m, tmp_onnx, [(torch.randn(3, 5, HIDDEN),), (torch.randn(1, 1, HIDDEN) * 100,)])


@pytest.mark.parametrize("opset,target", [(23, "standard"), (18, "onnxruntime")])
def test_llama_rms_norm_float16(opset, target, tmp_onnx):
    # LlamaRMSNorm computes in float32 between two Casts: both go inside.
    m = _rms_norm(torch.float16)
    pt2onnx.export(m, (torch.randn(2, 8, HIDDEN).half(),), tmp_onnx,
                   dynamic_shapes=_dynamic(1), opset=opset, target=target)
    counts, model = _ops(tmp_onnx)
    op = "SimplifiedLayerNormalization" if target == "onnxruntime" else "RMSNormalization"
    assert dict(counts) == {op: 1}
    assert list(model.graph.node[0].input) == ["hidden_states", "weight"]
    _compare(m, tmp_onnx, [(torch.randn(3, 5, HIDDEN).half(),)], atol=1e-2, rtol=1e-2)


# ---- a hand-written LayerNorm


class HandLayerNorm(torch.nn.Module):
    def __init__(self, n, eps=1e-12, affine=True):
        super().__init__()
        self.eps = eps
        self.affine = affine
        self.weight = torch.nn.Parameter(torch.randn(n))
        self.bias = torch.nn.Parameter(torch.randn(n))

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight * x + self.bias if self.affine else x


class Residual(torch.nn.Module):
    """A residual Add feeding the norm, its sum read again after it."""

    def __init__(self, norm):
        super().__init__()
        self.norm = norm
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x, r):
        s = self.proj(x) + r
        return self.norm(s) * 2, s - 1


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("opset,target", CASES)
def test_hand_written_layer_norm(opset, target, affine, tmp_onnx):
    torch.manual_seed(0)
    m = HandLayerNorm(HIDDEN, affine=affine).eval()
    pt2onnx.export(m, (torch.randn(2, 8, HIDDEN),), tmp_onnx, dynamic_shapes=_dynamic(1),
                   opset=opset, target=target)
    counts, model = _ops(tmp_onnx)
    assert dict(counts) == {"LayerNormalization": 1}
    node = model.graph.node[0]
    assert len(node.input) == (3 if affine else 2)
    assert onnx.helper.get_attribute_value(node.attribute[1]) == pytest.approx(1e-12)
    _compare(m, tmp_onnx, [(torch.randn(3, 5, HIDDEN),), (torch.randn(1, 1, HIDDEN) + 3,)])


@pytest.mark.parametrize("norm", ["layer", "rms"])
@pytest.mark.parametrize("opset,target", CASES)
def test_residual_add_and_norm(opset, target, norm, tmp_onnx):
    torch.manual_seed(0)
    m = Residual(HandLayerNorm(HIDDEN) if norm == "layer" else _rms_norm()).eval()
    pt2onnx.export(m, (torch.randn(2, 8, HIDDEN), torch.randn(2, 8, HIDDEN)), tmp_onnx,
                   dynamic_shapes=_dynamic(2), opset=opset, target=target)
    counts, model = _ops(tmp_onnx)
    if target == "onnxruntime":
        op = "SkipLayerNormalization" if norm == "layer" else "SkipSimplifiedLayerNormalization"
        assert _norm_ops(counts) == {op: 1}
        (skip,) = [n for n in model.graph.node if n.op_type == op]
        assert skip.domain == "com.microsoft"
        assert list(skip.output[1:3]) == ["", ""] and skip.output[3]  # the sum, read later
        assert "com.microsoft" in {o.domain for o in model.opset_import}
    elif norm == "layer":
        assert _norm_ops(counts) == {"LayerNormalization": 1}
    else:
        assert _norm_ops(counts) == ({"RMSNormalization": 1} if opset >= 23 else {})
    _compare(m, tmp_onnx, [(torch.randn(3, 5, HIDDEN), torch.randn(3, 5, HIDDEN))])


def test_broadcasting_residual_add_left_alone(tmp_onnx):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(HIDDEN)
            self.pos = torch.nn.Parameter(torch.randn(1, 8, HIDDEN))

        def forward(self, x):
            return self.norm(x + self.pos)

    m = M().eval()
    batch = torch.export.Dim("batch", max=64)
    pt2onnx.export(m, (torch.randn(2, 8, HIDDEN),), tmp_onnx, dynamic_shapes=({0: batch},),
                   target="onnxruntime")
    counts, _ = _ops(tmp_onnx)
    assert _norm_ops(counts) == {"LayerNormalization": 1} and counts["Add"] == 1
    _compare(m, tmp_onnx, [(torch.randn(3, 8, HIDDEN),)])


# ---- tiny transformers models, through export_pretrained (which compares
# with PyTorch in onnxruntime at (batch, seq, past) sizes other than the
# export's and raises on a mismatch)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    from pt2onnx import hf

    hf.prepare()
    import transformers as tr

    cfg = tr.LlamaConfig(hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                         max_position_embeddings=256)
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("llama")
    tr.LlamaForCausalLM(cfg).eval().save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    from pt2onnx import hf

    hf.prepare()
    import transformers as tr

    cfg = tr.BertConfig(vocab_size=256, hidden_size=HIDDEN, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128,
                        max_position_embeddings=128)
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("bert")
    tr.BertModel(cfg).eval().save_pretrained(d)
    return d


@pytest.mark.parametrize("opset,target", CASES)
def test_tiny_llama(tiny_llama, opset, target, tmp_path):
    from pt2onnx import hf

    path = str(tmp_path / "llama.onnx")
    r = hf.export_pretrained(tiny_llama, "text-generation-with-past", path, opset=opset,
                             target=target, atol=1e-4, rtol=1e-4)
    assert r.checks["max_abs_error"] < 1e-4
    counts, model = _ops(path)
    # 5 norms: input and post-attention per layer, the final one.
    if target == "onnxruntime":
        # Each norm but the first reads a residual Add; three of those sums
        # are read again by the next residual Add.
        assert _norm_ops(counts) == {"SimplifiedLayerNormalization": 1,
                                     "SkipSimplifiedLayerNormalization": 4}
        skips = [n for n in model.graph.node if n.op_type == "SkipSimplifiedLayerNormalization"]
        assert sorted(len(n.output) for n in skips) == [1, 4, 4, 4]
    elif opset >= 23:
        assert _norm_ops(counts) == {"RMSNormalization": 5}
    else:
        assert _norm_ops(counts) == {} and counts["Sqrt"] == 5
    if opset >= 23 or target == "onnxruntime":
        assert counts["Sqrt"] == 0 and counts["Reciprocal"] == 0 and counts["ReduceSum"] == 0


@pytest.mark.parametrize("opset,target", CASES)
def test_tiny_bert(tiny_bert, opset, target, tmp_path):
    from pt2onnx import hf

    path = str(tmp_path / "bert.onnx")
    r = hf.export_pretrained(tiny_bert, "feature-extraction", path, opset=opset, target=target,
                             atol=1e-4, rtol=1e-4)
    assert r.checks["max_abs_error"] < 1e-4
    counts, _ = _ops(path)
    if target == "onnxruntime":
        # Two post-norms per layer on a residual Add; the embeddings' norm reads
        # a broadcasting Add (position embeddings [1, seq, hidden]): left alone.
        assert _norm_ops(counts) == {"LayerNormalization": 1, "SkipLayerNormalization": 4}
    else:
        assert _norm_ops(counts) == {"LayerNormalization": 5}
