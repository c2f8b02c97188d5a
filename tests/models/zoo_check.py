"""Export one zoo model with pt2onnx and judge it in onnxruntime: full
onnx.checker, then every output against PyTorch on fresh inputs at the
entry's other batch / sequence sizes."""

from __future__ import annotations

import os

import numpy as np
import onnx
import torch

import pt2onnx
from zoo import ZOO, build


def leaves(x):
    return [t for t in torch.utils._pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def ort_session(path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = int(os.environ.get("PT2ONNX_TEST_THREADS", "2"))  # tests/conftest.py
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


# One model built and one capture kept per worker: test_zoo.py exports each model at several
# (opset, target) configurations, grouped on one worker (xdist_group), and what differs between
# them is conversion, not torch.export. The first configuration of a model exports the nn.Module
# (capture included); the others convert that capture (its ExportedProgram, with the dim names
# the capture gave), so a model is captured once, not three or four times.
_BUILT: dict = {}
_CAPTURED: dict = {}


def built(name):
    if name not in _BUILT:
        _BUILT.clear()
        _BUILT[name] = build(name)
    return _BUILT[name]


def export(name, path, opset=None, target="standard", reuse_capture=False):
    model, make, dyn = built(name)
    if reuse_capture and name in _CAPTURED:
        ep, dim_names = _CAPTURED[name]
        return pt2onnx.export(ep, (), path, dynamic_axes=dim_names or None, opset=opset,
                              target=target)
    b, s = ZOO[name].export_size
    state = {}
    r = pt2onnx.export(model, (), path, kwargs=make(b, s), dynamic_shapes=dyn, opset=opset,
                       target=target, _state=state)
    _CAPTURED.clear()
    if reuse_capture and not state["out_dim_names"]:
        _CAPTURED[name] = (state["exported_program"], state["in_dim_names"])
    return r


def compare(name, path, seed=1, checker=True):
    """Max abs error (relative to the output's scale when above 1) per
    checked size; AssertionError on a mismatch."""
    entry = ZOO[name]
    model, make, _ = built(name)
    # By path: finds external data. onnx's checker knows no com.microsoft operators
    # (test_ort_schema.py checks those against onnxruntime's schemas). The test suite passes
    # checker=False: tests/conftest.py (follows_onnx_rules) checks every file it writes already.
    if checker and not any(o.domain == "com.microsoft"
                           for o in onnx.load(path, load_external_data=False).opset_import):
        onnx.checker.check_model(path, full_check=True)
    sess = ort_session(path)
    names = [i.name for i in sess.get_inputs()]
    errors = []
    for b, s in entry.check_sizes:
        torch.manual_seed(seed + b * 100 + s)
        kwargs = make(b, s)
        flat = leaves(kwargs)
        assert len(flat) == len(names), (names, len(flat))
        got = sess.run(None, {n: t.numpy() for n, t in zip(names, flat)})
        with torch.no_grad():
            expected = leaves(model(**kwargs))
        assert len(got) == len(expected), (len(got), len(expected))
        err = 0.0
        for g, e in zip(got, expected):
            # Shapes and dtypes exactly: assert_allclose broadcasts ((1,) vs ()).
            assert g.shape == tuple(e.shape), (g.shape, tuple(e.shape))
            assert g.dtype == e.numpy().dtype, (g.dtype, e.dtype)
            # atol scales with the output's magnitude: random weights without
            # trained normalization give some models (Inception) outputs of 1e10.
            scale = max(1.0, float(e.abs().max())) if e.numel() and e.is_floating_point() else 1.0
            np.testing.assert_allclose(g, e.numpy(), atol=entry.atol * scale, rtol=entry.rtol)
            if g.size:
                diff = np.abs(g.astype(np.float64) - e.double().numpy())
                err = max(err, float(np.max(diff)) / scale)
        errors.append(err)
    return errors
