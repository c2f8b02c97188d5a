"""F.interpolate where ONNX Resize's coordinates are not torch's.

Resize divides by out/in rounded to float; torch multiplies by in/out rounded
to float (or by 1/scale_factor). Unless the ratio is a power of two they
round differently, and nearest then picks another input pixel (e.g. 2 -> 82,
4 -> 41) while bilinear 200 -> 320 differs by 1.5e-5. There the exporter
computes the source indices as torch does; these tests compare with torch
exactly (nearest: equal arrays) or to float rounding (linear: 1e-6, the
Resize form is 1.5e-5 off on 200 -> 320), at sizes other than the export's
where shapes are dynamic, and check that Resize stays where it is exact.
"""

import numpy as np
import onnx
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.export import Dim

import pt2onnx
from conftest import run_ort

# (in, out) pairs where Resize's nearest index differs from torch's (found by
# sweeping sizes against onnxruntime), and pairs where the ratio is exact.
SIZES = [82, 41, 61, 320, 115, 5]


class Interp(nn.Module):
    """F.interpolate of one input once per call's size= / scale_factor=."""

    def __init__(self, mode, calls, align=False):
        super().__init__()
        self.mode, self.calls = mode, calls
        self.kw = {} if mode.startswith("nearest") else {"align_corners": align}

    def forward(self, x):
        return tuple(F.interpolate(x, mode=self.mode, **c, **self.kw) for c in self.calls)


def at_sizes(mode, sizes, align=False):
    return Interp(mode, [{"size": s} for s in sizes], align)


def _ops(r):
    return [n.op_type for n in onnx.load_from_string(r.model_bytes).graph.node]


def _check(got, ref, mode, dtype=torch.float32):
    ref = ref.numpy()
    assert got.shape == ref.shape and got.dtype == ref.dtype
    if mode.startswith("nearest"):
        np.testing.assert_array_equal(got, ref)
    else:
        tol = {torch.float32: 1e-6, torch.float64: 1e-13, torch.float16: 1e-3}[dtype]
        if mode == "bicubic":  # weight polynomials: torch's fused multiply-adds, ours not
            tol *= 2
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "linear"])
@pytest.mark.parametrize("n_in", [2, 4, 200])
def test_static_sizes_1d(mode, n_in):
    m = at_sizes(mode, [(s,) for s in SIZES])
    x = torch.randn(1, 2, n_in)
    r = pt2onnx.export(m, (x,), None)
    x = torch.randn(1, 2, n_in)
    _, got = run_ort(r.model_bytes, {"x": x.numpy()})
    for g, e in zip(got, m(x)):
        _check(g, e, mode)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "bilinear"])
def test_dynamic_input_fixed_size_2d(mode):
    """A detection-style transform: any image to 320 x 320 (SSDlite)."""
    m = at_sizes(mode, [(320, 320), (61, 41)])
    dyn = ({2: Dim("h", min=2, max=1024), 3: Dim("w", min=2, max=1024)},)
    r = pt2onnx.export(m, (torch.rand(1, 3, 240, 320),), None, dynamic_shapes=dyn)
    assert "Resize" not in _ops(r)
    for h, w in [(200, 280), (2, 4), (320, 320), (160, 97)]:
        x = torch.rand(1, 3, h, w)
        _, got = run_ort(r.model_bytes, {"x": x.numpy()})
        for g, e in zip(got, m(x)):
            _check(g, e, mode)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "bilinear"])
@pytest.mark.parametrize("scale", [(1.5, 0.7), (2.0, 0.5)])
def test_dynamic_scale_factor(mode, scale):
    m = Interp(mode, [{"scale_factor": scale}])
    dyn = ({2: Dim("h", min=4, max=1024), 3: Dim("w", min=4, max=1024)},)
    r = pt2onnx.export(m, (torch.rand(1, 2, 30, 40),), None, dynamic_shapes=dyn)
    # Powers of two: Resize's division is exact, it stays.
    assert ("Resize" in _ops(r)) == (scale == (2.0, 0.5))
    for h, w in [(33, 57), (41, 82), (7, 9)]:
        x = torch.rand(1, 2, h, w)
        _, (got,) = run_ort(r.model_bytes, {"x": x.numpy()})
        _check(got, m(x)[0], mode)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_bilinear_dtypes(dtype):
    m = at_sizes("bilinear", [(320, 320), (7, 5)])
    r = pt2onnx.export(m, (torch.rand(1, 2, 200, 280).to(dtype),), None)
    x = torch.rand(1, 2, 200, 280).to(dtype)
    _, got = run_ort(r.model_bytes, {"x": x.numpy()})
    for g, e in zip(got, m(x)):
        _check(g, e, "bilinear", dtype)


def test_upsample_to_skip_size_keeps_resize():
    """UNet / FPN decoders: upsample to a skip connection's (symbolic) size,
    twice the input's. The ratio is 2, Resize is exact and stays."""

    class Up(nn.Module):
        def forward(self, x, skip):
            return F.interpolate(x, size=skip.shape[-2:], mode="nearest") + skip

    h = Dim("h", min=2, max=512)
    dyn = ({2: h, 3: h}, {2: 2 * h, 3: 2 * h})
    r = pt2onnx.export(Up(), (torch.rand(1, 2, 8, 8), torch.rand(1, 2, 16, 16)), None,
                       dynamic_shapes=dyn)
    assert "Resize" in _ops(r) and "Gather" not in _ops(r)
    x, s = torch.rand(1, 2, 13, 13), torch.rand(1, 2, 26, 26)
    _, (got,) = run_ort(r.model_bytes, {"x": x.numpy(), "skip": s.numpy()})
    np.testing.assert_array_equal(got, Up()(x, s).numpy())


def test_trilinear_and_nearest_3d():
    class M(nn.Module):
        def forward(self, x):
            return (F.interpolate(x, size=(5, 41, 7), mode="trilinear", align_corners=False),
                    F.interpolate(x, size=(5, 41, 7), mode="nearest"))

    dyn = ({2: Dim("d", min=2, max=64), 4: Dim("w", min=2, max=64)},)
    r = pt2onnx.export(M(), (torch.rand(1, 2, 3, 4, 6),), None, dynamic_shapes=dyn)
    for d, w in [(3, 6), (7, 2), (11, 13)]:
        x = torch.rand(1, 2, d, 4, w)
        _, got = run_ort(r.model_bytes, {"x": x.numpy()})
        e = M()(x)
        _check(got[0], e[0], "trilinear")
        _check(got[1], e[1], "nearest")


@pytest.mark.parametrize("mode,align", [("bilinear", True), ("bicubic", False), ("bicubic", True)])
@pytest.mark.parametrize("dynamic", [False, True])
def test_align_corners_and_bicubic(mode, align, dynamic):
    """Resize's align_corners coordinate and its cubic weights are 1.4e-5 and
    1.7e-5 off torch's on these sizes (measured against onnxruntime)."""
    m = at_sizes(mode, [(1, 320), (61, 7), (3, 1)], align)
    dyn = ({2: Dim("h", min=2, max=512), 3: Dim("w", min=2, max=512)},) if dynamic else None
    r = pt2onnx.export(m, (torch.rand(1, 2, 41, 97),), None, dynamic_shapes=dyn)
    for h, w in [(41, 97)] + ([(5, 200), (2, 3)] if dynamic else []):
        x = torch.rand(1, 2, h, w)
        _, got = run_ort(r.model_bytes, {"x": x.numpy()})
        for g, e in zip(got, m(x)):
            _check(g, e, mode)


def test_power_of_two_ratios_keep_resize():
    """Where the ratio is a power of two, Resize's division is exact: it stays."""
    m = at_sizes("bicubic", [(82, 194)])
    r = pt2onnx.export(m, (torch.rand(1, 2, 41, 97),), None)
    assert _ops(r).count("Resize") == 1 and "Gather" not in _ops(r)
    x = torch.rand(1, 2, 41, 97)
    _, (got,) = run_ort(r.model_bytes, {"x": x.numpy()})
    np.testing.assert_allclose(got, m(x)[0].numpy(), rtol=0, atol=1e-5)
