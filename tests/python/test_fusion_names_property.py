"""The fusions firing several times in one graph keep the outputs (issue 34
item 4; tests/cpp/test_fusion_names_property.cpp holds the names to the
property on graphs whose node names all collide). Three identical blocks,
each with patterns the fusions match written by hand (LayerNorm, RMS norm,
tanh GELU, SDPA, residual + norm, a Linear on rank-3 input, conv + batch
norm): FX names them layer_norm,
layer_norm_1, ..., and the passes derive node names from those, so the names
the passes make meet each other and the names of the other blocks. Every
file must hold each fused op three times where its target / opset has it,
have unique node names (the suite's conftest checks the rest of ONNX's
rules), and match PyTorch on other sizes."""

import numpy as np
import onnx
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pt2onnx
from conftest import ort_session

D, HEADS, KV_HEADS = 32, 4, 2
HD = D // HEADS


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_w, self.ln_b = nn.Parameter(torch.rand(D) + 0.5), nn.Parameter(torch.randn(D))
        self.rms_w = nn.Parameter(torch.rand(D) + 0.5)
        self.q = nn.Linear(D, D)
        self.k = nn.Linear(D, KV_HEADS * HD)
        self.v = nn.Linear(D, KV_HEADS * HD)
        self.o = nn.Linear(D, D, bias=False)
        self.up, self.down = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def layer_norm(self, x):
        mu = x.mean(-1, keepdim=True)
        var = (x - mu).pow(2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * self.ln_w + self.ln_b

    def rms_norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.rms_w

    @staticmethod
    def rotate(x, cos, sin):
        x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h = self.rms_norm(x)
        q = self.q(h).view(b, s, HEADS, HD).transpose(1, 2)
        k = self.k(h).view(b, s, KV_HEADS, HD).transpose(1, 2)
        v = self.v(h).view(b, s, KV_HEADS, HD).transpose(1, 2)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, D))
        h = self.layer_norm(x)
        return x + self.down(F.gelu(self.up(h), approximate="tanh"))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(D, D, 3, padding=1)
        self.bn = nn.BatchNorm1d(D)
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        inv = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
        self.register_buffer("inv_freq", inv)

    def forward(self, x):
        x = self.bn(self.conv(x.transpose(1, 2))).transpose(1, 2)
        pos = torch.arange(x.shape[1], dtype=torch.float32)
        ang = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat([ang, ang], -1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return x


# (opset, target, dtype, fused ops expected 3 times each). This hand-written
# rotary and grouped-query SDPA stay unfused (their fusions match the forms
# transformers writes; the zoo's LLaMA and the C++ property test have them
# fire per layer): they are here as the code between the fusions.
CONFIGS = [
    (18, "standard", None, ["LayerNormalization"]),
    (23, "standard", None, ["LayerNormalization", "RMSNormalization", "Attention", "Gelu"]),
    (18, "onnxruntime", None, ["SkipLayerNormalization", "FastGelu", "FusedMatMul"]),
    (13, "onnxruntime", None, ["FastGelu", "FusedMatMul"]),
    (18, "onnxruntime", torch.float16, ["SkipLayerNormalization", "FastGelu", "FusedMatMul"]),
]


@pytest.mark.parametrize("opset,target,dtype,fused", CONFIGS,
                         ids=[f"{o}-{t}-{'f16' if d else 'f32'}" for o, t, d, _ in CONFIGS])
def test_repeated_fusions_keep_outputs_and_names(opset, target, dtype, fused, tmp_onnx):
    torch.manual_seed(0)
    model = Net().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 1.5)
    pt2onnx.export(model, (torch.randn(2, 8, D),), tmp_onnx, opset=opset, target=target,
                   dtype=dtype, dynamic_shapes={"x": {0: "batch", 1: "seq"}})
    m = onnx.load(tmp_onnx)
    ops = [n.op_type for n in m.graph.node]
    for op in fused:
        assert ops.count(op) == 3, (op, sorted(set(ops)))
    assert "BatchNormalization" not in ops  # folded into the convolution
    names = [n.name for n in m.graph.node]
    assert len(names) == len(set(names))

    x = torch.randn(3, 11, D)
    with torch.no_grad():
        expected = model(x).numpy()
    feed = x.numpy().astype(np.float16) if dtype else x.numpy()
    got = ort_session(tmp_onnx).run(None, {m.graph.input[0].name: feed})[0]
    tol = 2e-2 if dtype else 1e-4
    np.testing.assert_allclose(got.astype(np.float32), expected, atol=tol, rtol=tol)
