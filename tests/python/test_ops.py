"""Operator matrix: each case is a small module exported (dynamic first dim
where it applies), checked, and compared with PyTorch in onnxruntime on new
inputs. Tolerance: fp32 atol/rtol 1e-4 (1e-5 for exact integer ops)."""

import numpy as np
import onnx
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pt2onnx
from conftest import assert_same_both_ways, run_ort


class Fn(nn.Module):
    def __init__(self, fn, params=None):
        super().__init__()
        self.fn = fn
        self.params = nn.ModuleDict(params or {})

    def forward(self, *xs):
        return self.fn(self, *xs)


def f32(*s):
    return lambda: torch.randn(*s)


def i64(hi, *s):
    return lambda: torch.randint(0, hi, s)


def boolean(*s):
    return lambda: torch.rand(*s) > 0.5


# name -> (module, input makers, dynamic dim 0?, opsets)
CASES = {
    "add_sub_mul_div_scalars": (lambda s, x: ((x + 2) * 3 - 1.5) / 4 - 2 * x, [f32(3, 4)], True),
    "add_alpha_rsub": (lambda s, x, y: torch.add(x, y, alpha=2) + torch.rsub(x, 1.0), [f32(3, 4), f32(3, 4)], True),
    "int_tensor_plus_float_scalar": (lambda s, x: x + 0.5, [i64(10, 3, 4)], True),
    "int_true_div": (lambda s, x, y: x / (y + 1), [i64(10, 3, 4), i64(10, 3, 4)], True),
    "div_floor_trunc": (lambda s, x: torch.div(x, 0.7, rounding_mode="floor") + torch.div(x, 0.7, rounding_mode="trunc"), [f32(3, 4)], True),
    "int_floor_div": (lambda s, x: torch.div(x - 5, 3, rounding_mode="floor"), [i64(10, 3, 4)], True),
    "pow_sqrt_rsqrt_exp_log": (lambda s, x: x.abs().pow(1.5) + x.abs().add(1).sqrt() + x.abs().add(1).rsqrt() + x.exp() + x.abs().add(1).log() + x.pow(2), [f32(3, 4)], True),
    "neg_cos_sin_erf": (lambda s, x: -x + x.cos() + x.sin() + torch.erf(x), [f32(3, 4)], True),
    "compare_promotion": (lambda s, x, y: ((x > 0.5) & (y <= 3)) | (x == y) | (y != 2) | (x < y) | (x >= 0), [f32(3, 4), i64(6, 3, 4)], True),
    "where_masked_fill": (lambda s, x, m: torch.where(m, x, 0.0) + x.masked_fill(~m, -1.0) + torch.where(x > 0, 1.0, x), [f32(3, 4), boolean(3, 4)], True),
    "clamp": (lambda s, x: x.clamp(-0.5, 0.5) + x.clamp(min=0.1), [f32(3, 4)], True),
    "cast_and_sum_of_bools": (lambda s, x: (x > 0).sum(-1) + x.to(torch.int32).sum(0).long().sum(), [f32(3, 4)], True),
    "activations": (lambda s, x: F.relu(x) + F.leaky_relu(x, 0.2) + F.hardtanh(x, -0.3, 0.4) + F.silu(x) + torch.sigmoid(x) + torch.tanh(x) + F.relu6(x * 4), [f32(3, 4)], True),
    "gelu_exact_and_tanh": (lambda s, x: F.gelu(x) + F.gelu(x, approximate="tanh"), [f32(3, 4)], True),
    "softmax_log_softmax": (lambda s, x: F.softmax(x, 0) + F.log_softmax(x, -1) + x.softmax(-1, dtype=torch.float64).float(), [f32(3, 4)], True),
    "reductions": (lambda s, x: (x.mean(), x.sum(dim=(0, 2)), x.amax(1, keepdim=True), x.amin(-1), x.mean(-1, keepdim=True)), [f32(3, 4, 5)], True),
    "matmuls": (lambda s, x, y: (x @ y, torch.bmm(x, y), torch.matmul(x[0], y[0]), torch.mm(x[0], y[0]), torch.addmm(x[0, :, :2], x[0], y[0], beta=0.5, alpha=2)), [f32(2, 3, 4), f32(2, 4, 2)], False),
    "linear_1d_and_3d": (lambda s, x: s.params["l"](x) + s.params["l"](x[0, 0]), [f32(2, 3, 8)], True, {"l": nn.Linear(8, 5)}),
    "conv1d_dilated_grouped": (lambda s, x: s.params["c"](x), [f32(2, 4, 20)], True, {"c": nn.Conv1d(4, 8, 3, padding=2, dilation=2, groups=2)}),
    "conv2d_same_padding": (lambda s, x: s.params["c"](x), [f32(2, 3, 9, 9)], True, {"c": nn.Conv2d(3, 6, (3, 4), padding="same")}),
    "conv3d": (lambda s, x: s.params["c"](x), [f32(1, 2, 5, 6, 7)], True, {"c": nn.Conv3d(2, 3, 3, stride=2, padding=1)}),
    "conv_transpose2d": (lambda s, x: s.params["c"](x), [f32(2, 4, 5, 5)], True, {"c": nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)}),
    "conv_unbatched": (lambda s, x: s.params["c"](x), [f32(3, 8, 8)], False, {"c": nn.Conv2d(3, 4, 3)}),
    "pools": (lambda s, x: (F.max_pool2d(x, 3, 2, 1, dilation=1, ceil_mode=True), F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), F.avg_pool2d(x, 2, ceil_mode=True), F.max_pool1d(x[:, :, 0], 2), F.adaptive_avg_pool2d(x, (2, 3))), [f32(2, 3, 8, 9)], True),
    "embedding": (lambda s, i: s.params["e"](i), [i64(10, 2, 5)], True, {"e": nn.Embedding(10, 6)}),
    "view_permute_flatten": (lambda s, x: (x.view(x.shape[0], 4, 5).permute(2, 0, 1), x.flatten(), x.unflatten(1, (2, 10)), x.transpose(0, 1).contiguous()), [f32(3, 20)], True),
    "cat_stack_mixed_dtypes": (lambda s, x, i: (torch.cat([x, i], 1), torch.stack([x, x * 2], -1), torch.cat([x], 0)), [f32(3, 4), i64(5, 3, 2)], True),
    "split_chunk": (lambda s, x: (*x.split([1, 3], 1), *x.chunk(2, -1), *x.split(2, 1)), [f32(3, 4)], True),
    "select_slice_negative": (lambda s, x: (x[:, 1], x[:, -1], x[1:, ::2], x[:, 1:-1], x[..., None, :2]), [f32(4, 5)], True),
    "dynamic_slice_by_size": (lambda s, x: x[:, : x.shape[0]], [f32(3, 8)], True),
    "unsqueeze_squeeze": (lambda s, x: (x.unsqueeze(0).unsqueeze(-1).squeeze(0), x[:, :1].squeeze(1), x.squeeze()), [f32(3, 4)], True),
    "expand_dynamic": (lambda s, x, y: (x[:, :1].expand(-1, 4) + y, x.unsqueeze(0).expand(2, -1, -1)), [f32(3, 4), f32(3, 4)], True),
    "creation_static": (lambda s, x: (x + torch.arange(4), torch.arange(1, 9, 2, dtype=torch.float32) * x[:, :1], torch.zeros(2, 3), torch.ones(3, dtype=torch.int64), torch.full((2,), 1.5), torch.eye(3)), [f32(3, 4)], True),
    "creation_dynamic": (lambda s, x: (torch.zeros_like(x), torch.ones_like(x, dtype=torch.int64), torch.full_like(x, 2.0), torch.full((x.shape[0], 2), 3.0), torch.arange(x.shape[0]), x.new_zeros(x.shape[0], 3)), [f32(3, 4)], True),
    "sdpa_bool_mask_and_scale": (lambda s, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3), [f32(2, 2, 5, 8), f32(2, 2, 6, 8), f32(2, 2, 6, 8), lambda: torch.rand(5, 6) > 0.2], False),
    "sdpa_float_mask": (lambda s, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), [f32(2, 2, 5, 8), f32(2, 2, 5, 8), f32(2, 2, 5, 8), f32(2, 1, 5, 5)], True),
    "sdpa_causal_gqa": (lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), [f32(2, 4, 5, 8), f32(2, 2, 5, 8), f32(2, 2, 5, 8)], True),
    "batch_norm_1d_layer_norm_no_affine": (lambda s, x: F.layer_norm(s.params["bn"](x), (6,)), [f32(3, 6)], True, {"bn": nn.BatchNorm1d(6)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("opset", [18, 20])
def test_op(name, opset, tmp_onnx):
    case = CASES[name]
    fn, makers, dynamic = case[:3]
    params = case[3] if len(case) > 3 else None
    torch.manual_seed(0)
    m = Fn(fn, params).eval()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm1d):
            mod.running_mean.uniform_(-1, 1)
            mod.running_var.uniform_(0.5, 2)
    args = tuple(mk() for mk in makers)
    ds = None
    if dynamic:
        ds = (tuple({0: torch.export.Dim.AUTO} for _ in args),)  # forward(*xs)
    pt2onnx.export(m, args, tmp_onnx, opset=opset, dynamic_shapes=ds)
    onnx.checker.check_model(tmp_onnx, full_check=True)
    if opset == 18:  # the .pt2 path gives the same bytes (checked once per case)
        assert_same_both_ways(m, args, tmp_onnx, opset=opset, dynamic_shapes=ds)
    torch.manual_seed(1)
    new = tuple(mk() for mk in makers)
    if dynamic:  # a different first dim where torch kept it dynamic
        sess, _ = run_ort(tmp_onnx, {i.name: a.numpy() for i, a in zip(_inputs(tmp_onnx), new)})
        grown = []
        for i, a in zip(sess.get_inputs(), new):
            if isinstance(i.shape[0], str):
                reps = [2] + [1] * (a.dim() - 1)
                a = a.repeat(*reps)[: a.shape[0] + 1]
            grown.append(a)
        new = tuple(grown)
    with torch.no_grad():
        expected = m(*new)
    if not isinstance(expected, tuple):
        expected = (expected,)
    _, got = run_ort(tmp_onnx, {i.name: a.numpy() for i, a in zip(_inputs(tmp_onnx), new)})
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        e = e.numpy()
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, atol=1e-4, rtol=1e-4)


def _inputs(path):
    return onnx.load(path, load_external_data=False).graph.input
