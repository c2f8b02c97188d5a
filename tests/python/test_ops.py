"""Operator matrix: each case is a small module exported (dynamic first dim
where it applies), checked, and compared with PyTorch in onnxruntime on new
inputs. Tolerance: fp32 atol/rtol 1e-4 (1e-5 for exact integer ops)."""

import numpy as np
import onnx
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_releases import BINCOUNT_WEIGHTS_DTYPE
import pt2onnx
from conftest import assert_same_both_ways, ort_session, run_ort


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
    # col2im / im2col (VOLO's outlook attention) over a dynamic batch: the batch made the
    # reshape's target shape a computed one, whose rank the converter once read unchecked (a
    # SIGSEGV in the core).
    "fold_unfold_dynamic_batch": (lambda s, x: (F.fold(x, (6, 6), 3, padding=1, stride=2), F.fold(x[:, :, :4], (3, 3), 2), F.unfold(F.fold(x, (6, 6), 3, padding=1, stride=2), 3, padding=1, stride=2)), [f32(2, 36, 9)], True),
    # eye of a symbolic size (XLNet's -torch.eye(qlen)), n x m, several dtypes.
    "eye_symbolic_size": (lambda s, x: (x[:, :1] - torch.eye(x.shape[0]), torch.eye(x.shape[0], 5, dtype=torch.int64), torch.eye(2, x.shape[0], dtype=torch.bool), torch.view_as_real(torch.eye(x.shape[0], dtype=torch.complex64))), [f32(3, 4)], True),
    # torch.multiply (ConvBERT) is mul's alias.
    "multiply_alias": (lambda s, x, y: torch.multiply(x, y) + torch.multiply(x, 2.0), [f32(3, 4), f32(3, 4)], True),
    # Complex rotary embeddings (DeepSeek-V2, Llama 4): polar, complex * real scalar,
    # complex * complex; and complex + - / with real and complex operands.
    "complex_rotary": (lambda s, x, f: torch.view_as_real(torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2)) * (torch.polar(torch.ones_like(f), f) * 0.5)).flatten(-2), [f32(3, 5, 8), f32(3, 5, 4)], True),
    "complex_add_sub_div": (lambda s, x, y, r: torch.view_as_real((torch.view_as_complex(x) + 1.5) / torch.view_as_complex(y) - torch.view_as_complex(y) * 2 + torch.view_as_complex(x) / (r.abs() + 1) - r + torch.sub(r, torch.view_as_complex(x), alpha=2) + 2.0 / torch.view_as_complex(y)), [f32(3, 4, 2), lambda: torch.randn(3, 4, 2) + 3, f32(3, 4)], True),
    # fftn over a symbolic dim (FNet): DFT reads the length at run time; the
    # normalizations then scale by the runtime size.
    "fftn_symbolic_dims": (lambda s, x: (torch.fft.fftn(x, dim=(0, 1)).real, torch.view_as_real(torch.fft.fftn(x, dim=(0, 1), norm="ortho")), torch.fft.ifft(x, dim=0).imag * 1, torch.view_as_real(torch.fft.rfft(x, dim=0, norm="forward"))), [f32(5, 6)], True),
    # torch's checks of a bool tensor (Gemma 3n's Normal(...).icdf validates its argument).
    "is_all_any_true": (lambda s, x: (torch.ops.aten._is_all_true(x > -3).to(torch.float32) + x, torch.ops.aten._is_any_true(x > 0.5), torch.ops.aten._is_all_true(x > 0.0)), [f32(3, 4)], True),
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


CHEBYSHEV = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
             "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
             "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
             "shifted_chebyshev_polynomial_w"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", CHEBYSHEV)
def test_chebyshev_every_branch(name, dtype):
    """Degrees past OpInfo's (< 9): torch's trigonometric form inside (-1, 1),
    its recurrence outside (our hyperbolic form), +-1, 0 and negative n.
    float32 rtol 1e-4, float64 rtol 1e-9 (atol 1e-5)."""
    fn = getattr(torch.special, name)
    x = torch.cat([torch.linspace(-1.6, 1.6, 33),
                   torch.tensor([-1.0, 1.0, 0.0, 0.5, -0.999, 1.001])]).to(dtype)
    n = torch.arange(-2, 24).to(dtype)
    xs, ns = (t.contiguous() for t in torch.broadcast_tensors(x[:, None], n[None, :]))
    model = Fn(lambda self, a, b: fn(a, b))
    r = pt2onnx.export(model, (xs, ns), None)
    _, (got,) = run_ort(r.model_bytes, {"xs_0": xs.numpy(), "xs_1": ns.numpy()})
    rtol = 1e-4 if dtype == torch.float32 else 1e-9
    np.testing.assert_allclose(got, fn(xs, ns).numpy(), rtol=rtol, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["erfcx", "log_ndtr"])
def test_erfcx_log_ndtr_whole_range(name, dtype):
    """Both branches (series to 3, continued fraction beyond), the tails
    where erfc underflows or overflows, inf and NaN. rtol 1e-5 (float32) /
    1e-8 (float64), atol 1e-12."""
    fn = getattr(torch.special, name)
    x = torch.cat([torch.linspace(-30, 30, 2001),
                   torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, 3.0])]).to(dtype)
    r = pt2onnx.export(Fn(lambda self, a: fn(a)), (x,), None)
    _, (got,) = run_ort(r.model_bytes, {"xs_0": x.numpy()})
    rtol = 1e-5 if dtype == torch.float32 else 1e-8
    np.testing.assert_allclose(got, fn(x).numpy(), rtol=rtol, atol=1e-12)


@pytest.mark.parametrize("n,shape,kernel,out", [
    (2, (2, 3, 11, 9), (3, 2), (5, 4)),
    (2, (3, 10, 10), 2, (9, 5)),         # unbatched
    (2, (2, 2, 9, 9), 3, 1),             # one window per dim
    (3, (1, 2, 7, 8, 9), (2, 3, 2), (4, 3, 5)),
])
def test_fractional_max_pool_values_and_indices(n, shape, kernel, out):
    """With the random samples as an input (OpInfo draws them inside, so it
    can only compare shapes): values and indices exact on new inputs."""
    fn = F.fractional_max_pool2d if n == 2 else F.fractional_max_pool3d
    planes = (shape[0] if len(shape) == n + 2 else 1, shape[-n - 1], n)
    model = Fn(lambda self, a, s: fn(a, kernel, output_size=out, return_indices=True,
                                     _random_samples=s))
    r = pt2onnx.export(model, (torch.randn(*shape), torch.rand(*planes)), None)
    x, s = torch.randn(*shape), torch.rand(*planes)
    _, got = run_ort(r.model_bytes, {"xs_0": x.numpy(), "xs_1": s.numpy()})
    for g, e in zip(got, model(x, s)):
        np.testing.assert_array_equal(g, e.numpy())


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 6), (2, 3, 5, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_householder_qr_family(shape, dtype):
    """geqrf, linalg.qr (reduced / complete / r), householder_product and
    ormqr (all four sides) against LAPACK's results on new inputs: same signs,
    fp32 atol/rtol 1e-4, fp64 1e-10."""
    def fn(self, a, c_left, c_right):
        qa, tau = torch.geqrf(a)
        q, r = torch.linalg.qr(a)
        qc, rc = torch.linalg.qr(a, mode="complete")
        _, rr = torch.linalg.qr(a, mode="r")
        k = min(a.shape[-2:])  # householder_product wants m >= n
        return (qa, tau, q, r, qc, rc, rr, torch.linalg.householder_product(qa[..., :k], tau),
                torch.ormqr(qa, tau, c_left), torch.ormqr(qa, tau, c_left, transpose=True),
                torch.ormqr(qa, tau, c_right, left=False),
                torch.ormqr(qa, tau, c_right, left=False, transpose=True))
    m = shape[-2]
    args = lambda: (torch.randn(*shape, dtype=dtype), torch.randn(*shape[:-2], m, 3, dtype=dtype),
                    torch.randn(*shape[:-2], 2, m, dtype=dtype))
    model = Fn(fn)
    r = pt2onnx.export(model, args(), None)
    new = args()
    _, got = run_ort(r.model_bytes, {f"xs_{i}": a.numpy() for i, a in enumerate(new)})
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    for g, e in zip(got, model(*new)):
        np.testing.assert_allclose(g, e.numpy(), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_igamma_igammac_zeta_valid_range(dtype):
    """OpInfo's samples are all outside the domain (NaN); here a in [0, 500],
    x in [0, 630], both series / continued-fraction sides, inf, zeros and
    negatives; zeta at s in [0.5, 30], q in [-19.5, 100]. rtol 1e-6
    (float32) / 1e-8 (float64), atol 1e-7 / 1e-9."""
    a = torch.cat([torch.tensor([0.0, 1e-3, 0.1, 0.5, 1, 2.5]), torch.logspace(0.5, 2.7, 20),
                   torch.tensor([float("inf"), -1.0])]).to(dtype)
    x = torch.cat([torch.tensor([0.0, 1e-4, 0.3, 1, 1.1]), torch.logspace(0.2, 2.8, 30),
                   torch.tensor([float("inf"), -0.5])]).to(dtype)
    s = torch.tensor([1.0, 1.5, 2, 3, 4.5, 10, 30, 0.5]).to(dtype)
    q = torch.tensor([0.1, 0.5, 1, 2.5, 10, 100, 0.0, -1, -2.5, -19.5, -3.0]).to(dtype)
    rtol, atol = (1e-6, 1e-7) if dtype == torch.float32 else (1e-8, 1e-9)
    for fn, u, v in [(torch.igamma, a, x), (torch.igammac, a, x), (torch.special.zeta, s, q)]:
        uu, vv = (t.contiguous() for t in torch.broadcast_tensors(u[:, None], v[None, :]))
        r = pt2onnx.export(Fn(lambda self, p, z: fn(p, z)), (uu, vv), None)
        _, (got,) = run_ort(r.model_bytes, {"xs_0": uu.numpy(), "xs_1": vv.numpy()})
        np.testing.assert_allclose(got, fn(uu, vv).numpy(), rtol=rtol, atol=atol, err_msg=fn.__name__)


@BINCOUNT_WEIGHTS_DTYPE
def test_bincount_and_one_hot_lengths_from_the_data():
    """bincount's length is max(x) + 1 (or minlength), known only when the
    model runs: new inputs with a larger maximum give a longer result."""
    def fn(self, x, w):
        return (torch.bincount(x, minlength=3), torch.bincount(x, weights=w),
                F.one_hot(x, 12), F.one_hot(x[0], 10))
    model = Fn(fn)
    r = pt2onnx.export(model, (torch.tensor([1, 4, 4, 0]), torch.rand(4)), None)
    for x in (torch.tensor([7, 7, 2, 9]), torch.tensor([0, 1, 1, 0])):
        w = torch.rand(4)
        _, got = run_ort(r.model_bytes, {"xs_0": x.numpy(), "xs_1": w.numpy()})
        for g, e in zip(got, model(x, w)):
            assert g.shape == tuple(e.shape)
            np.testing.assert_allclose(g, e.numpy(), rtol=1e-6)


@pytest.mark.parametrize("shape", [(5, 5), (6, 3), (3, 6), (2, 4, 4)])
def test_unrolled_jacobi_spectra(shape):
    """eigvalsh / eigh, svdvals, matrix_rank (full and rank-deficient), pinv
    (plain and hermitian), pinverse, cond and the nuclear / spectral norms
    against LAPACK's on new inputs (float32, atol/rtol 1e-4). eigh's vectors
    are compared sign-free: V diag(w) V^T rebuilds the matrix; svd's U S Vh
    rebuilds it and U, Vh are orthonormal (rank-deficient input: the rank
    columns only, so the low-rank check is U S Vh and S)."""
    def fn(self, a, low_rank):
        sym = a[..., : shape[-1], :] if shape[-2] >= shape[-1] else a[..., :, : shape[-2]]
        sym = sym + sym.mT
        w, v = torch.linalg.eigh(sym)
        return (torch.linalg.eigvalsh(sym), w, (v * w.unsqueeze(-2)) @ v.mT,
                torch.linalg.svdvals(a), torch.linalg.matrix_rank(a),
                torch.linalg.matrix_rank(low_rank), torch.linalg.matrix_rank(sym, hermitian=True),
                torch.linalg.pinv(a), torch.linalg.pinv(low_rank),
                torch.linalg.pinv(sym, hermitian=True), torch.pinverse(a),
                torch.linalg.cond(sym), torch.linalg.matrix_norm(a, "nuc"),
                torch.linalg.matrix_norm(a, 2), torch.linalg.matrix_norm(a, -2),
                *svd_rebuilt(torch.linalg.svd(a, full_matrices=False)),
                *svd_rebuilt(torch.linalg.svd(low_rank, full_matrices=False))[:2])

    def svd_rebuilt(usv):  # U S Vh: sign-free, and U, Vh orthonormal
        u, s, vh = usv
        return (u * s.unsqueeze(-2)) @ vh, s, u.mT @ u, vh @ vh.mT

    def args():
        a = torch.randn(*shape)
        u, v = torch.randn(*shape[:-1], 2), torch.randn(*shape[:-2], 2, shape[-1])
        return a, u @ v  # rank 2

    model = Fn(fn)
    r = pt2onnx.export(model, args(), None)
    new = args()
    _, got = run_ort(r.model_bytes, {"xs_0": new[0].numpy(), "xs_1": new[1].numpy()})
    for i, (g, e) in enumerate(zip(got, model(*new))):
        np.testing.assert_allclose(g, e.numpy(), atol=1e-4, rtol=1e-4, err_msg=f"output {i}")


def _assert_exact(got, expected):
    """onnxruntime's outputs equal PyTorch's exactly: count, dtype, shape, values."""
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.numpy().dtype and g.shape == tuple(e.shape), k
        np.testing.assert_array_equal(g, e.numpy(), err_msg=f"output {k}")


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("opset", [13, 18])
def test_gcd_lcm_edge_values(dtype, opset):
    """gcd / lcm (a Loop of Euclid steps) against torch, exactly: zeros,
    negatives, equal values, the type's extremes (torch's wrapping results:
    gcd(INT_MIN, 0) = INT_MIN, gcd(INT_MIN, INT_MAX) = -1), broadcasting
    of a column against a row, a 0-d operand; exported on other values with
    a dynamic length. lcm leaves out (INT_MIN, INT_MAX), where torch itself
    divides INT_MIN by -1 (a SIGFPE)."""
    i = torch.iinfo(dtype)
    a = torch.tensor([i.min, i.min, i.min, 0, 0, -6, 6, -4, i.max, i.min, 7, 12, 35, 1, -36,
                      i.max, i.min], dtype=torch.int64).to(dtype)
    b = torch.tensor([0, 6, i.min, 0, -5, 4, -9, 0, i.max, 1, i.min, 18, -49, 1, -24,
                      i.min, i.max], dtype=torch.int64).to(dtype)
    no_lcm = 2

    def fn(self, x, y, col, row, s):
        return (torch.gcd(x, y), torch.lcm(x[:-no_lcm], y[:-no_lcm]), torch.gcd(col, row),
                torch.lcm(col, row), torch.gcd(s, row), torch.lcm(row, s), torch.gcd(s, s))

    def make(n, seed):
        g = torch.Generator().manual_seed(seed)
        lo, hi = (0, 100) if dtype == torch.uint8 else (-100, 100)
        return (torch.randint(lo, hi, (n, 1), generator=g).to(dtype),
                torch.randint(lo, hi, (n,), generator=g).to(dtype))

    col, row = make(3, 0)
    s = torch.tensor(12 if dtype != torch.uint8 else 200, dtype=dtype)
    model = Fn(fn)
    dyn = torch.export.Dim.DYNAMIC
    r = pt2onnx.export(model, (a[:4] * 0 + 3, b[:4] * 0 + 5, col, row, s), None, opset=opset,
                       dynamic_shapes=(({0: dyn}, {0: dyn}, {0: dyn}, {0: dyn}, {}),))
    col, row = make(6, 1)
    new = (a, b, col, row, s)
    _, got = run_ort(r.model_bytes, {f"xs_{k}": v.numpy() for k, v in enumerate(new)})
    expected = model(*new)
    assert len(got) == len(expected) == 7
    for k, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.numpy().dtype and g.shape == tuple(e.shape), (k, g.shape, e.shape)
        np.testing.assert_array_equal(g, e.numpy(), err_msg=f"output {k}")


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise_before_opset18_opinfo(name, opset):
    """bitwise and / or / xor on integers before BitwiseAnd (opset 18), bit
    by bit in a Loop: OpInfo's own samples in int32 and int64 (the OpInfo
    suite's integer configurations run at opset 18 only), exact."""
    import opinfo_harness as h

    op = next(o for o in h.op_db() if h.op_id(o) == name)
    for dtype in [torch.int32, torch.int64]:
        results = [h.run_sample(op, s, dtype, opset) for s in h.samples(op, dtype)]
        assert results and all(r.outcome == h.PASS for r in results), [
            (r.outcome, r.detail) for r in results]


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64])
def test_bitwise_before_opset18_edge_values(dtype):
    """The bit-by-bit form at opset 13 on the type's extremes, -1, 0, mixed
    signs, broadcasting and Python int operands (__and__.Scalar), exact."""
    i = torch.iinfo(dtype)
    vals = [i.min, i.max, -1, 0, 5, -6, 100, i.min, 3, 1]
    a = torch.tensor(vals, dtype=torch.int64).to(dtype)
    b = torch.tensor(vals[::-1], dtype=torch.int64).to(dtype)

    def fn(self, x, y):
        return x & y, x | y, x ^ y, x & 5, y | 6, x[:, None] ^ y[None, :]

    model = Fn(fn)
    r = pt2onnx.export(model, (a[:3].clone(), b[:3].clone()), None, opset=13,
                       dynamic_shapes=(({0: torch.export.Dim.DYNAMIC}, {0: torch.export.Dim.DYNAMIC}),))
    _, got = run_ort(r.model_bytes, {"xs_0": a.numpy(), "xs_1": b.numpy()})
    expected = model(a, b)
    _assert_exact(got, expected)


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("size,scale", [((3, 4), None), ((12, 3), None), ((1, 1), None),
                                        (None, (0.37, 0.5)), (None, (2.3, 1.7))])
def test_antialiased_bilinear_before_opset18(size, scale, align):
    """interpolate(antialias=True) at opset 13 (no Resize antialias): the
    filter as constant matrices; down- and upscaling, sizes and scale
    factors, align_corners, float32 (atol/rtol 1e-5) and float64 (1e-12)."""
    def fn(self, x):
        return F.interpolate(x, size=size, scale_factor=scale, mode="bilinear", antialias=True,
                             align_corners=align)

    model = Fn(fn)
    for dtype, tol in [(torch.float32, 1e-5), (torch.float64, 1e-12)]:
        torch.manual_seed(0)
        x = torch.randn(2, 3, 11, 9, dtype=dtype)
        r = pt2onnx.export(model, (x,), None, opset=13,
                           dynamic_shapes=(({0: torch.export.Dim.DYNAMIC},),))
        assert "Resize" not in [n.op_type for n in onnx.load_from_string(r.model_bytes).graph.node]
        x = torch.randn(3, 3, 11, 9, dtype=dtype)
        _, (got,) = run_ort(r.model_bytes, {"xs_0": x.numpy()})
        e = model(x).numpy()
        assert got.dtype == e.dtype and got.shape == e.shape
        np.testing.assert_allclose(got, e, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16])
def test_narrow_int_arithmetic_opset13(dtype):
    """Add / Sub / Mul / Div take 8- and 16-bit integers only from opset 14:
    at opset 13 they run in int32 and wrap back as torch wraps (values at
    the type's extremes overflow), exact."""
    i = torch.iinfo(dtype)
    a = torch.tensor([1, -2, 100, i.max, i.min, 0], dtype=torch.int64).to(dtype)
    b = torch.tensor([3, 7, 100, -1, i.min or 200, 5], dtype=torch.int64).to(dtype)  # no 0

    def fn(self, x, y):
        return (x + y, x - y, x * y, torch.add(x, y, alpha=3), torch.rsub(x, y),
                torch.div(x, y, rounding_mode="trunc"), x + 5, x * 3)

    model = Fn(fn)
    r = pt2onnx.export(model, (a, b), None, opset=13)
    _, got = run_ort(r.model_bytes, {"xs_0": a.numpy(), "xs_1": b.numpy()})
    expected = model(a, b)
    _assert_exact(got, expected)


@pytest.mark.parametrize("out", [(7, 7), (3, 5), (4,)])
def test_adaptive_avg_pool_of_a_symbolic_size(out, tmp_path):
    """Spatial sizes known only at run time (an image model exported or
    compiled with the image size dynamic): each window averaged on its own,
    checked at sizes that divide the output size and sizes that do not."""
    pool = (torch.nn.AdaptiveAvgPool2d(out) if len(out) == 2
            else torch.nn.AdaptiveAvgPool1d(out[0]))
    shape = (2, 3, 13, 11) if len(out) == 2 else (2, 3, 13)
    spec = {d: torch.export.Dim.DYNAMIC for d in range(2, len(shape))}
    ep = torch.export.export(pool, (torch.randn(*shape),), dynamic_shapes=(spec,))
    path = str(tmp_path / "p.onnx")
    pt2onnx.export(ep, (), path)
    sess = ort_session(path)
    for size in (7, 14, 23):
        x = torch.randn(*shape[:2], *([size] * (len(shape) - 2)))
        (got,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
        np.testing.assert_allclose(got, pool(x).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode,align", [("nearest", None), ("bilinear", False),
                                        ("bilinear", True), ("bicubic", True)])
@pytest.mark.parametrize("after", ["input", "strided conv"])
def test_interpolate_by_scale_factor_of_a_symbolic_size(mode, align, after, tmp_path):
    """interpolate(scale_factor=...) where the spatial sizes are symbolic: torch
    passes the scale factors and no output_size (align_corners=True too, which
    keeps them only for the size), so the output size is floor(in * scale)
    computed from the input's runtime shape; also on a size torch derived
    through floor() (a stride-2 convolution's output, as in DPT's neck)."""

    def fn(self, x):
        if after == "strided conv":
            x = self.params["conv"](x)
        return F.interpolate(x, scale_factor=(2.0, 1.5), mode=mode, align_corners=align)

    m = Fn(fn, {"conv": nn.Conv2d(3, 3, 3, stride=2)})
    spec = {2: torch.export.Dim.AUTO, 3: torch.export.Dim.AUTO}
    path = str(tmp_path / "r.onnx")
    pt2onnx.export(m, (torch.randn(2, 3, 13, 11),), path, dynamic_shapes=((spec,),))
    sess = ort_session(path)
    for h, w in ((9, 17), (16, 8)):
        x = torch.randn(2, 3, h, w)
        (got,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
        with torch.no_grad():
            want = m(x).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
