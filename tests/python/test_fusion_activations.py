"""Activation and MatMul fusions (src/opt/fuse_gelu.cpp, fuse_gemm.cpp,
fuse_matmul_transpose.cpp): real modules exported at opsets 18 / 20 / 23 on
both targets; the fused operator must be in the file and onnxruntime's output
must match PyTorch's on fresh inputs of another batch size (dynamic batch).
Tolerances: float32, atol 1e-5 / rtol 1e-5 for the elementwise activations,
1e-4 / 1e-4 where a matrix product is involved (summation order differs)."""

import math

import numpy as np
import onnx
import pytest
import torch

import pt2onnx
from conftest import run_ort

OPSETS = [18, 20, 23]
TARGETS = ["standard", "onnxruntime"]


def ops(path):
    m = onnx.load(path, load_external_data=False)
    return [(n.domain, n.op_type) for n in m.graph.node]


def attr(path, op_type, name):
    m = onnx.load(path, load_external_data=False)
    for n in m.graph.node:
        if n.op_type == op_type:
            for a in n.attribute:
                if a.name == name:
                    return onnx.helper.get_attribute_value(a)
    return None


def export_and_check(
    model, example, fresh, path, opset, target, atol=1e-5, rtol=1e-5, dyn=None
):
    """Exports with a dynamic batch dim (dim 0 of every input unless `dyn`),
    runs fresh inputs, returns the (domain, op_type) list."""
    model.eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    if dyn is None:
        dyn = tuple({0: batch} for _ in example)
    pt2onnx.export(model, example, path, opset=opset, target=target, dynamic_shapes=dyn)
    with torch.no_grad():
        expected = model(*fresh)
    names = [i.name for i in onnx.load(path, load_external_data=False).graph.input]
    _, got = run_ort(path, {n: t.numpy() for n, t in zip(names, fresh)})
    np.testing.assert_allclose(got[0], expected.numpy(), atol=atol, rtol=rtol)
    return ops(path)


# ---- hand-written GELU, both forms, in the variants models write


class ErfGeluA(torch.nn.Module):  # x * 0.5 * (1 + erf(x / sqrt(2)))  (BERT, GPT-J ...)
    def forward(self, x):
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class ErfGeluB(torch.nn.Module):  # 0.5 * x * (1 + erf(x * 0.7071...))
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))


class ErfGeluC(torch.nn.Module):  # x * (0.5 * (erf(x / sqrt 2) + 1))
    def forward(self, x):
        return x * (0.5 * (torch.erf(x / math.sqrt(2.0)) + 1.0))


class TanhGeluPow(torch.nn.Module):
    def forward(self, x):
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0))))


class TanhGeluCube(torch.nn.Module):
    def forward(self, x):
        c = math.sqrt(2.0 / math.pi)
        return x * 0.5 * (1.0 + torch.tanh((x + 0.044715 * (x * x * x)) * c))


class BiasGeluModule(torch.nn.Module):
    """Linear without bias + bias Add + erf GELU (BiasGelu on onnxruntime)."""

    def __init__(self, tanh=False):
        super().__init__()
        self.lin = torch.nn.Linear(16, 32, bias=False)
        self.bias = torch.nn.Parameter(torch.randn(32))
        self.tanh = tanh

    def forward(self, x):
        h = self.lin(x) + self.bias
        if self.tanh:
            return TanhGeluPow()(h)
        return ErfGeluA()(h)


ERF = [ErfGeluA, ErfGeluB, ErfGeluC]
TANH = [TanhGeluPow, TanhGeluCube]


def expect_gelu(o, opset, target, tanh):
    if target == "onnxruntime":
        assert ("com.microsoft", "FastGelu" if tanh else "Gelu") in o, o
        assert ("", "Erf") not in o and ("", "Tanh") not in o, o
    elif opset >= 20:
        assert ("", "Gelu") in o, o
        assert ("", "Erf") not in o and ("", "Tanh") not in o, o
    else:  # nothing to emit: the hand-written form stays
        assert ("", "Tanh" if tanh else "Erf") in o, o


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("cls", ERF + TANH, ids=lambda c: c.__name__)
def test_hand_written_gelu(cls, opset, target, tmp_path):
    torch.manual_seed(0)
    p = str(tmp_path / "m.onnx")
    o = export_and_check(
        cls(), (torch.randn(2, 3, 8) * 3,), (torch.randn(5, 3, 8) * 3,), p, opset, target
    )
    expect_gelu(o, opset, target, cls in TANH)
    if target == "standard" and opset >= 20:
        assert attr(p, "Gelu", "approximate") == (b"tanh" if cls in TANH else b"none")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_aten_gelu(approximate, opset, target, tmp_path):
    """Our own aten.gelu decomposition below opset 20 is caught too."""
    torch.manual_seed(0)
    p = str(tmp_path / "m.onnx")
    o = export_and_check(
        torch.nn.GELU(approximate=approximate),
        (torch.randn(2, 8),),
        (torch.randn(7, 8) * 3,),
        p,
        opset,
        target,
    )
    tanh = approximate == "tanh"
    if target == "onnxruntime":
        assert ("com.microsoft", "FastGelu" if tanh else "Gelu") in o, o
    else:
        # opset >= 20: the converter's Gelu; 18: the decomposition stays.
        assert (("", "Gelu") in o) == (opset >= 20), o


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("tanh", [False, True])
def test_bias_gelu(tanh, opset, target, tmp_path):
    torch.manual_seed(0)
    p = str(tmp_path / "m.onnx")
    o = export_and_check(
        BiasGeluModule(tanh),
        (torch.randn(2, 4, 16),),
        (torch.randn(3, 4, 16),),
        p,
        opset,
        target,
        atol=1e-4,
        rtol=1e-4,
    )
    if target == "onnxruntime":
        m = onnx.load(p, load_external_data=False)
        node = [n for n in m.graph.node if n.domain == "com.microsoft"]
        assert len(node) == 1
        assert node[0].op_type == ("FastGelu" if tanh else "BiasGelu")
        assert len(node[0].input) == 2  # the bias went in
        assert ("", "Add") not in o, o
    else:
        expect_gelu(o, opset, target, tanh)


def test_gelu_near_miss_wrong_constant(tmp_path):
    class M(torch.nn.Module):
        def forward(self, x):
            return 0.5 * x * (1.0 + torch.erf(x / 1.4142))  # not sqrt(2) to 1e-6

    for target in TARGETS:
        p = str(tmp_path / f"{target}.onnx")
        o = export_and_check(M(), (torch.randn(2, 8),), (torch.randn(4, 8),), p, 23, target)
        assert ("", "Erf") in o and not any(t in ("Gelu", "BiasGelu") for _, t in o), o


def test_gelu_near_miss_interior_read_elsewhere(tmp_path):
    class M(torch.nn.Module):
        def forward(self, x):
            e = torch.erf(x / math.sqrt(2.0))
            return 0.5 * x * (1.0 + e) + e

    for target in TARGETS:
        p = str(tmp_path / f"{target}.onnx")
        o = export_and_check(M(), (torch.randn(2, 8),), (torch.randn(4, 8),), p, 23, target)
        assert ("", "Erf") in o and not any(t == "Gelu" for _, t in o), o


# ---- transformers' activations


def hf_activation(name):
    import transformers.activations as A

    return getattr(A, name)()


class MLP(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)
        self.act = act

    def forward(self, x):
        return self.down(self.act(self.up(x)))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize(
    "name", ["NewGELUActivation", "GELUActivation", "QuickGELUActivation", "SiLU"]
)
def test_transformers_activation_mlp(name, opset, target, tmp_path):
    torch.manual_seed(0)
    act = torch.nn.SiLU() if name == "SiLU" else hf_activation(name)
    p = str(tmp_path / "m.onnx")
    o = export_and_check(
        MLP(act),
        (torch.randn(2, 5, 16),),
        (torch.randn(4, 5, 16),),
        p,
        opset,
        target,
        atol=1e-4,
        rtol=1e-4,
    )
    ort = target == "onnxruntime"
    if name == "NewGELUActivation":
        expect_gelu(o, opset, target, tanh=True)
        if ort:  # the up projection's bias goes into FastGelu
            m = onnx.load(p, load_external_data=False)
            fg = [n for n in m.graph.node if n.op_type == "FastGelu"][0]
            assert len(fg.input) == 2
    elif name == "GELUActivation":  # nn.functional.gelu: aten.gelu
        if ort:
            assert ("com.microsoft", "BiasGelu") in o, o
        else:
            assert (("", "Gelu") in o) == (opset >= 20), o
    elif name == "QuickGELUActivation":  # x * sigmoid(1.702 x)
        if ort:
            assert ("com.microsoft", "QuickGelu") in o, o
            assert attr(p, "QuickGelu", "alpha") == pytest.approx(1.702)
        else:
            assert ("", "Sigmoid") in o, o
    else:  # SiLU: x * sigmoid(x)
        if ort:
            assert ("com.microsoft", "QuickGelu") in o and ("", "Sigmoid") not in o, o
            assert attr(p, "QuickGelu", "alpha") == 1.0
        else:
            assert ("", "Sigmoid") in o, o


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("opset", OPSETS)
def test_llama_style_silu_mlp(opset, target, tmp_path):
    """gate/up/down: act(gate(x)) * up(x), LLaMA's MLP."""

    class LlamaMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = torch.nn.Linear(16, 40, bias=False)
            self.up = torch.nn.Linear(16, 40, bias=False)
            self.down = torch.nn.Linear(40, 16, bias=False)
            self.act = torch.nn.SiLU()

        def forward(self, x):
            return self.down(self.act(self.gate(x)) * self.up(x))

    torch.manual_seed(0)
    p = str(tmp_path / "m.onnx")
    o = export_and_check(
        LlamaMLP(),
        (torch.randn(2, 6, 16),),
        (torch.randn(3, 6, 16),),
        p,
        opset,
        target,
        atol=1e-4,
        rtol=1e-4,
    )
    assert (("com.microsoft", "QuickGelu") in o) == (target == "onnxruntime"), o


# ---- Gemm


class HandLinear(torch.nn.Module):
    def __init__(self, bias_2d=False):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 24))
        self.b = torch.nn.Parameter(torch.randn(1, 24) if bias_2d else torch.randn(24))

    def forward(self, x):
        return x @ self.w + self.b


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("module", ["nn.Linear", "x@W+b", "x@W+b[1,N]"])
def test_gemm(module, opset, target, tmp_path):
    torch.manual_seed(0)
    model = {
        "nn.Linear": lambda: torch.nn.Linear(16, 24),
        "x@W+b": lambda: HandLinear(),
        "x@W+b[1,N]": lambda: HandLinear(bias_2d=True),
    }[module]()
    p = str(tmp_path / "m.onnx")
    o = export_and_check(
        model, (torch.randn(2, 16),), (torch.randn(9, 16),), p, opset, target, 1e-4, 1e-4
    )
    assert o == [("", "Gemm")], o


def test_gemm_near_miss_rank3(tmp_path):
    p = str(tmp_path / "m.onnx")
    o = export_and_check(
        HandLinear(), (torch.randn(2, 3, 16),), (torch.randn(4, 3, 16),), p, 18, "standard",
        1e-4, 1e-4,
    )
    assert ("", "Gemm") not in o and ("", "MatMul") in o, o


# ---- FusedMatMul


class Scores(torch.nn.Module):
    """q @ k^T * scale, the attention scores."""

    def forward(self, q, k):
        return (q @ k.transpose(-1, -2)) * 0.125


class ScoresOuterTranspose(torch.nn.Module):
    """A transpose that also moves a batch axis: not FusedMatMul's."""

    def forward(self, q, k):
        return q @ k.permute(1, 0, 3, 2)


@pytest.mark.parametrize("opset", OPSETS)
def test_fused_matmul_scores(opset, tmp_path):
    torch.manual_seed(0)
    for target in TARGETS:
        p = str(tmp_path / f"{target}.onnx")
        o = export_and_check(
            Scores(),
            (torch.randn(2, 4, 6, 8), torch.randn(2, 4, 7, 8)),
            (torch.randn(3, 4, 6, 8), torch.randn(3, 4, 7, 8)),
            p,
            opset,
            target,
            1e-4,
            1e-4,
        )
        if target == "onnxruntime":
            assert o == [("com.microsoft", "FusedMatMul")], o
            assert attr(p, "FusedMatMul", "transB") == 1
            assert attr(p, "FusedMatMul", "transA") == 0
            assert attr(p, "FusedMatMul", "alpha") == 0.125
        else:
            assert ("", "Transpose") in o and ("", "MatMul") in o, o


def test_sdpa_goes_to_attention_not_fused_matmul(tmp_path):
    """An SDPA on the onnxruntime target becomes one MultiHeadAttention
    (fuse_multi_head_attention runs before fuse_matmul_transpose), so no
    score MatMul is left for FusedMatMul."""
    class Attn(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    torch.manual_seed(0)
    p = str(tmp_path / "m.onnx")
    o = export_and_check(
        Attn(),
        tuple(torch.randn(2, 4, 6, 8) for _ in range(3)),
        tuple(torch.randn(3, 4, 6, 8) for _ in range(3)),
        p,
        18,
        "onnxruntime",
        1e-4,
        1e-4,
    )
    assert ("com.microsoft", "MultiHeadAttention") in o, o
    assert ("com.microsoft", "FusedMatMul") not in o and ("", "Softmax") not in o, o


def test_fused_matmul_near_miss_other_axes(tmp_path):
    torch.manual_seed(0)
    batch = torch.export.Dim("batch", min=1, max=64)
    p = str(tmp_path / "m.onnx")
    o = export_and_check(
        ScoresOuterTranspose(),
        (torch.randn(2, 4, 6, 5), torch.randn(4, 2, 7, 5)),
        (torch.randn(3, 4, 6, 5), torch.randn(4, 3, 7, 5)),
        p,
        18,
        "onnxruntime",
        1e-4,
        1e-4,
        dyn=({0: batch}, {1: batch}),
    )
    assert ("com.microsoft", "FusedMatMul") not in o, o


def test_opset18_gelu_is_fused_by_onnxruntime_at_load(tmp_path):
    # Below opset 20 GELU is decomposed; the form written (x / sqrt(2), not
    # x * sqrt(1/2)) is the one onnxruntime's own load-time GeluFusion
    # recognises, so a standard opset-18 file still runs one fused kernel.
    import onnxruntime as ort

    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU()).eval()
    path = str(tmp_path / "gelu.onnx")
    export_and_check(m, (torch.randn(2, 16),), (torch.randn(5, 16),), path, 18, "standard",
                     atol=1e-4, rtol=1e-4)
    assert ("", "Erf") in ops(path)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "loaded.onnx")
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    loaded = [t for _, t in ops(so.optimized_model_filepath)]
    assert "Erf" not in loaded and ({"Gelu", "BiasGelu"} & set(loaded)), loaded
