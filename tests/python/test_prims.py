"""Every op of torch.ops.prims converts, or is listed here with the reason it
cannot reach a graph (issue 39).

Prims are what torch's reference decompositions (torch._refs) emit; with
every dim symbolic, AOTAutograd leaves some in torch.compile's graphs (a
SymFloat times a tensor: prims.convert_element_type). The list is torch's
own: the op packets of torch.ops.prims, not a hand-picked subset; a prim a
newer torch adds fails test_every_prim_is_converted_or_listed until it is
converted or listed. Each converted prim is checked numerically: a module
calling it, exported by pt2onnx and run in onnxruntime, against eager PyTorch
on inputs other than the export's (a second draw, for ops of data-dependent
shape the same sizes); ops whose results are random or unspecified (empty,
normal, uniform) on their shape, dtype and, for uniform, range."""

import inspect
import re

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch._decomp
import torch._decomp.decompositions
import torch._inductor.inductor_prims
import torch._refs

import pt2onnx
from pt2onnx import _core

P = torch.ops.prims

# Inductor registers prims of its own when it is imported (above, so that the
# list is the same in every process): torch/_inductor/inductor_prims.py.
_INDUCTOR_PRIMS_SOURCE = inspect.getsource(torch._inductor.inductor_prims)


def _inductors(name):
    return re.search(rf"[\"']{re.escape(name)}\(", _INDUCTOR_PRIMS_SOURCE) is not None


INDUCTORS_REASON = ("inductor's own prim (torch/_inductor/inductor_prims.py): inductor's lowerings "
                    "emit it inside inductor; no decomposition or reference another backend's "
                    "graphs or torch.export's programs are made with calls it")

# name -> why no graph can hold it (checked below where it can be).
NOT_IN_GRAPHS = {
    "item": "declared to return a number, its meta function returns a tensor: tracing it fails "
            "(\"Cannot cast FakeTensor to number\"), so no captured graph holds it",
    "maximum_value": "declared to return a number, its meta function returns a tensor: tracing it "
                     "fails (\"Cannot cast FakeTensor to number\")",
    "minimum_value": "declared to return a number, its meta function returns a tensor: tracing it "
                     "fails (\"Cannot cast FakeTensor to number\")",
    "xor_sum": "no torch decomposition emits it (only inductor's lowerings use it) and it has no "
               "eager kernel (\"xor_sum only implemented with inductor\")",
}


def _f(*shape, lo=0.1, hi=0.9):
    return lambda: torch.rand(*shape) * (hi - lo) + lo


def _i(*shape, lo=1, hi=20, dtype=torch.int64):
    return lambda: torch.randint(lo, hi, shape, dtype=dtype)


def _n(*shape, scale=3.0):
    return lambda: torch.randn(*shape) * scale


UNARY_FLOAT = ["abs", "acos", "asin", "asinh", "atan", "atanh", "cbrt", "cos", "cosh", "digamma",
               "erf", "erf_inv", "erfc", "erfcx", "exp", "exp2", "expm1", "lgamma", "log", "log10",
               "log1p", "log2", "ndtri", "reciprocal", "rsqrt", "sin", "sinh", "sqrt", "tan",
               "tanh", "bessel_i0", "bessel_i0e", "bessel_i1", "bessel_i1e", "bessel_j0",
               "bessel_j1", "spherical_bessel_j0", "clone", "view_of"]
UNARY_SIGNED = ["ceil", "floor", "round", "trunc", "sign", "neg", "isfinite"]
BINARY_FLOAT = ["add", "sub", "mul", "div", "atan2", "fmax", "fmin", "fmod", "hypot", "igamma",
                "igammac", "maximum", "minimum", "nextafter", "pow", "remainder", "eq", "ne",
                "ge", "gt", "le", "lt"]
BINARY_INT = ["bitwise_and", "bitwise_or", "bitwise_xor", "gcd", "shift_left",
              "shift_right_arithmetic"]

# name -> (function of the inputs, input makers, how to compare: "values", "meta" (shape and
# dtype only) or a callable(outputs, inputs) -> list of (got, expected) pairs).
CASES = {}
for _op in UNARY_FLOAT:
    CASES[_op] = (lambda x, _op=_op: getattr(P, _op)(x), [_f(3, 4)], "values")
CASES["acosh"] = (lambda x: P.acosh(x), [_f(3, 4, lo=1.1, hi=3.0)], "values")
for _op in UNARY_SIGNED:
    CASES[_op] = (lambda x, _op=_op: getattr(P, _op)(x), [_n(3, 4)], "values")
CASES["bitwise_not"] = (lambda x: P.bitwise_not(x), [_i(3, 4, lo=-50, hi=50)], "values")
for _op in BINARY_FLOAT:
    CASES[_op] = (lambda a, b, _op=_op: getattr(P, _op)(a, b), [_f(3, 4), _f(3, 4)], "values")
CASES["zeta"] = (lambda a, b: P.zeta(a, b), [_f(3, 4, lo=1.5, hi=4.0), _f(3, 4)], "values")
for _op in BINARY_INT:
    CASES[_op] = (lambda a, b, _op=_op: getattr(P, _op)(a, b), [_i(3, 4, hi=200), _i(3, 4, hi=6)],
                  "values")
# Integer division truncates toward zero (negative quotients included).
CASES["div (int64)"] = (lambda a, b: P.div(a, b), [_i(3, 4, lo=-50, hi=50), _i(3, 4, lo=1, hi=7)],
                        "values")
CASES.update({
    "where": (lambda p, a, b: P.where(p, a, b),
              [lambda: torch.rand(3, 4) > 0.5, _f(3, 4), _f(3, 4)], "values"),
    "convert_element_type": (lambda x: P.convert_element_type(x, torch.int32), [_n(3, 4)],
                             "values"),
    "broadcast_in_dim": (lambda x: P.broadcast_in_dim(x, [2, 3, 4], [1, 2]), [_f(3, 1)],
                         "values"),
    "cat": (lambda a, b: P.cat([a, b], 1), [_f(3, 4), _f(3, 2)], "values"),
    "collapse": (lambda x: P.collapse(x, 1, 2), [_f(2, 3, 4, 5)], "values"),
    "collapse_view": (lambda x: P.collapse_view(x, 0, 1), [_f(2, 3, 4)], "values"),
    "split_dim": (lambda x: P.split_dim(x, 1, 2), [_f(3, 6, 2)], "values"),
    "reshape": (lambda x: P.reshape(x, [4, 6]), [_f(2, 3, 4)], "values"),
    "squeeze": (lambda x: P.squeeze(x, [0, 2]), [_f(1, 3, 1, 4)], "values"),
    "transpose": (lambda x: P.transpose(x, [2, 0, 1]), [_f(2, 3, 4)], "values"),
    "rev": (lambda x: P.rev(x, [0, 2]), [_f(2, 3, 4)], "values"),
    "copy_strided": (lambda x: P.copy_strided(x, [1, 3]), [_f(3, 4)], "values"),
    "device_put": (lambda x: P.device_put(x, torch.device("cpu")), [_f(3, 4)], "values"),
    "conj": (lambda x: torch.view_as_real(P.conj(torch.view_as_complex(x)).resolve_conj()),
             [_f(3, 2)], "values"),
    "conj_physical": (lambda x: torch.view_as_real(P.conj_physical(torch.view_as_complex(x))),
                      [_f(3, 2)], "values"),
    # A bit reinterpretation: ONNX's BitCast, opset 26.
    "view_of_dtype": (lambda x: P.view_of_dtype(x, torch.int32), [_n(3, 4)], "values", 26),
    # torch records signbit's result in the input's dtype (its meta function) though eager
    # returns bool: the file computes what the graph declares, 1.0 where the sign bit is set.
    "signbit": (lambda x: P.signbit(x), [lambda: torch.tensor([[-1.0, 0.0, -0.0, 2.0]])],
                "as recorded"),
    "sum": (lambda x: P.sum(x, [1]), [_f(3, 4, 5)], "values"),
    "prod": (lambda x: P.prod(x, [0, 2]), [_f(3, 4, 5)], "values"),
    "amax": (lambda x: P.amax(x, [0, 2]), [_n(3, 4, 5)], "values"),
    "amin": (lambda x: P.amin(x, [1]), [_n(3, 4, 5)], "values"),
    "var": (lambda x: P.var(x, [1], 1.0), [_n(3, 4, 5)], "values"),
    "fill": (lambda x: P.fill(x, 2.5), [_f(3, 4)], "values"),
    "full": (lambda x: x + P.full([3, 4], 1.5, dtype=torch.float32, device=torch.device("cpu"),
                                  requires_grad=False), [_f(3, 4)], "values"),
    "full_like": (lambda x: P.full_like(x, 0.5, dtype=torch.float32, device=torch.device("cpu"),
                                        requires_grad=False), [_f(3, 4)], "values"),
    "scalar_tensor": (lambda x: x * P.scalar_tensor(2.5, dtype=torch.float32,
                                                    device=torch.device("cpu")), [_f(3, 4)],
                      "values"),
    "iota": (lambda x: x + P.iota(4, start=2, step=3, dtype=torch.int64,
                                  device=torch.device("cpu"), requires_grad=False),
             [_i(3, 4)], "values"),
    "copy_to": (lambda x, y: P.copy_to(x.clone(), y), [_f(3, 4), _n(3, 4)], "values"),
    "resize": (lambda x: P.resize(x.clone(), [2, 5]) * 1, [_f(3, 4)], "values"),
    "as_strided": (lambda x: P.as_strided(x, [2, 2], [3, 1], 1) * 1, [_f(3, 4)], "values"),
    "as_strided_scatter": (lambda x, s: P.as_strided_scatter(x, s, [2, 2], [4, 1], 1),
                           [_f(3, 4), _f(2, 2)], "values"),
    "frexp": (lambda x: P.frexp(x), [_n(3, 4)], "values"),
    "real": (lambda x: P.real(torch.view_as_complex(x)) * 1, [_f(3, 2)], "values"),
    "imag": (lambda x: P.imag(torch.view_as_complex(x)) * 1, [_f(3, 2)], "values"),
    "fft_r2c": (lambda x: torch.view_as_real(P.fft_r2c(x, dim=[1], onesided=True)), [_f(3, 8)],
                "values"),
    "fft_c2c": (lambda x: torch.view_as_real(P.fft_c2c(torch.view_as_complex(x), dim=[0],
                                                       forward=True)), [_f(4, 2)], "values"),
    "fft_c2r": (lambda x: P.fft_c2r(torch.view_as_complex(x), dim=[0], last_dim_size=6),
                [_f(4, 2)], "values"),
    "svd": (lambda a: (lambda u, s, vh: u @ torch.diag(s) @ vh)(*P.svd(a, full_matrices=False)),
            [_f(4, 3)], "values"),
    "empty": (lambda x: P.empty([3, 4], dtype=torch.float32, device=torch.device("cpu"),
                                requires_grad=False), [_f(3, 4)], "meta"),
    "empty_strided": (lambda x: P.empty_strided([3, 4], [4, 1], dtype=torch.float32,
                                                device=torch.device("cpu"), requires_grad=False),
                      [_f(3, 4)], "meta"),
    "empty_permuted": (lambda x: P.empty_permuted([3, 4], [1, 0], dtype=torch.float32,
                                                  device=torch.device("cpu"),
                                                  requires_grad=False), [_f(3, 4)], "meta"),
    "normal": (lambda x: P.normal([3, 4], mean=0.0, std=1.0, dtype=torch.float32,
                                  device=torch.device("cpu"), requires_grad=False), [_f(3, 4)],
               "meta"),
    "uniform": (lambda x: P.uniform([3, 4], low=2.0, high=3.0, dtype=torch.float32,
                                    device=torch.device("cpu"), stride=[4, 1]), [_f(3, 4)],
                "uniform"),
    "_make_token": (lambda x: (x * 1, P._make_token())[0], [_f(3, 4)], "values"),
    "_sink_tokens": (lambda x: (P._sink_tokens([]), x * 1)[1], [_f(3, 4)], "values"),
})


class _Call(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _prims():
    return sorted(n for n in dir(P) if isinstance(getattr(P, n), torch._ops.OpOverloadPacket))


def test_every_prim_is_converted_or_listed():
    supported = set(_core.supported_targets(pt2onnx.MAX_OPSET))
    unlisted, listed_and_converted, untested = [], [], []
    for name in _prims():
        for overload in getattr(P, name).overloads():
            target = f"torch.ops.prims.{name}.{overload}"
            if name in NOT_IN_GRAPHS or _inductors(name):
                if target in supported:
                    listed_and_converted.append(target)
            elif target not in supported:
                unlisted.append(target)
            elif name not in CASES:
                untested.append(target)
    assert not unlisted, f"prims without a converter or a reason: {unlisted}"
    assert not listed_and_converted, f"listed as unreachable but converted: {listed_and_converted}"
    assert not untested, f"converted prims without a numeric case here: {untested}"


def _run(name, tmp_path, opset=18):
    fn, makers, how, *at = CASES[name]
    opset = at[0] if at else opset
    torch.manual_seed(0)
    export_args = tuple(m() for m in makers)
    m = _Call(fn)
    ep = torch.export.export(m, export_args)
    prim = name.split(" ")[0]
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert f"prims.{prim}.default" in targets, f"the program holds no prims.{prim}: {targets}"
    path = tmp_path / f"{name}.onnx"
    pt2onnx.export(ep, (), str(path), opset=opset)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    torch.manual_seed(1)
    args = tuple(mk() for mk in makers)
    feeds = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
    got = sess.run(None, feeds)
    want = [t for t in torch.utils._pytree.tree_leaves(m(*args)) if isinstance(t, torch.Tensor)]
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape), (g.shape, w.shape)
        assert how == "as recorded" or str(g.dtype) == str(w.numpy().dtype), (g.dtype, w.dtype)
        if how == "as recorded":
            w = w.to(torch.float32)
            assert g.dtype == np.float32
        if how == "uniform":
            assert (g >= 2.0).all() and (g <= 3.0).all()
        elif how == "values":
            # float32 ops computed as torch does up to rounding; float64-only
            # special functions onnxruntime lacks are lowered in float32.
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_prim_converts_and_matches_eager(name, tmp_path):
    _run(name, tmp_path)


def test_view_of_dtype_before_opset_26_is_refused_with_its_reason(tmp_path):
    with pytest.raises(pt2onnx.ConversionError, match="opset 26"):
        pt2onnx.export(_Call(lambda x: P.view_of_dtype(x, torch.int32)), (torch.rand(3),),
                       str(tmp_path / "v.onnx"), opset=25)
    assert not (tmp_path / "v.onnx").exists()


def test_inductors_prims_are_used_by_no_decomposition():
    """INDUCTORS_REASON, checked: torch's references, decompositions and prims
    call none of inductor's prims."""
    names = [n for n in _prims() if _inductors(n)]
    assert len(names) >= 5, names  # the source pattern still finds them
    sources = "".join(inspect.getsource(m) for m in (
        torch._refs, torch._decomp, torch._decomp.decompositions, torch._prims))
    used = [n for n in names if re.search(rf"prims\.{re.escape(n)}\b", sources)]
    assert not used, used


@pytest.mark.parametrize("name", sorted(NOT_IN_GRAPHS))
def test_unreachable_prims_are_as_listed(name):
    """What NOT_IN_GRAPHS says, checked."""
    if name == "xor_sum":
        with pytest.raises(NotImplementedError, match="inductor"):
            P.xor_sum(torch.rand(3) > 0.5, [0])
        for module in (torch._refs, torch._decomp, torch._decomp.decompositions):
            assert "xor_sum" not in inspect.getsource(module), module
        return
    calls = {
        "item": lambda x: x * P.item(x[0]),
        "maximum_value": lambda x: x + P.maximum_value(torch.float32),
        "minimum_value": lambda x: x + P.minimum_value(torch.float32),
    }
    with pytest.raises(Exception, match="Cannot cast FakeTensor"):
        torch.export.export(_Call(calls[name]), (torch.rand(3, 4),))
