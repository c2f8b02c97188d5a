"""TorchScript models from torchvision, timm, transformers and PyTorch's
ModuleInfo database (torchscript_models.py) through pt2onnx.export, each run
in onnxruntime on inputs of another batch (and image or sequence size)
against the eager model (atol 1e-4 scaled by the output's magnitude, rtol
1e-3). The quick entries run in make test-quick. bench/torchscript.py puts the
same models beside torch.onnx's TorchScript exporter (bench/torchscript.md)."""

import numpy as np
import pytest
import torch

import pt2onnx
import torchscript_models as tsm
from pt2onnx import _core
from pt2onnx._torchscript import check_loaded_graphs

MODELS = tsm.models()


def _param(name):
    return pytest.param(name, id=name, marks=[] if name in tsm.QUICK else [pytest.mark.slow])


@pytest.mark.parametrize("name", [_param(n) for n in MODELS])
def test_torchscript_model(name, tmp_path):
    import onnxruntime as ort

    eager, ts, args, other, axes = MODELS[name]()
    if name.startswith("tv_"):
        # Classification models with a dynamic batch only: their dynamic height
        # and width cost CI minutes in torch.export's symbolic reasoning (googlenet
        # 11 s) and test nothing of the TorchScript reader that the segmentation
        # entries (dynamic size, interpolate to it) do not; bench/torchscript.md
        # exports them with all three dynamic.
        axes = {k: {a: n for a, n in v.items() if a == 0} for k, v in axes.items()}
        other = (torch.randn(2, *args[0].shape[1:]),)
    # Saved, the model's file passes the checks that the command runs before and after
    # torch.jit.load (no code but tensor code in it: issue 56).
    saved = str(tmp_path / "m.pt")
    ts.save(saved)
    _core.check_torchscript_file(saved)
    check_loaded_graphs(torch.jit.load(saved), saved)
    path = str(tmp_path / "m.onnx")
    pt2onnx.export(ts, args, path, dynamic_axes=axes)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    feeds = {n: v.numpy() for n, v in zip(names, [a for a in other if
                                                   isinstance(a, torch.Tensor)])}
    got = sess.run(None, feeds)
    with torch.no_grad():
        expected = tsm.outputs(eager(*other))
    assert len(got) == len(expected), (len(got), len(expected))
    for g, e in zip(got, expected):
        e = e.numpy()
        assert g.shape == e.shape
        scale = max(1.0, float(np.abs(e).max()))
        np.testing.assert_allclose(g, e, atol=1e-4 * scale, rtol=1e-3)
