"""Functions torch.export records on symbolic sizes (torch's serializer's
list of them: operator.pow, operator.lshift, ...), converted and checked in
onnxruntime at sizes other than the export's. Issue 39 asks for every one of
that list; these are the ones converted so far."""

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch.export import Dim

import pt2onnx

CASES = {
    "pow": lambda x: torch.zeros(x.shape[0] ** 2) + x.sum(),
    "lshift": lambda x: torch.zeros(x.shape[0] << 1) + x.sum(),
}


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("name", list(CASES))
def test_sym_function(name, opset, tmp_path):
    fn = CASES[name]

    class M(torch.nn.Module):
        def forward(self, x):
            return fn(x)

    ep = torch.export.export(M(), (torch.randn(9, 2),),
                             dynamic_shapes=({0: Dim("n", min=2, max=64)},))
    op = {"pow": "pow", "lshift": "lshift"}[name]
    assert any(n.op == "call_function" and getattr(n.target, "__name__", "") == op
               for n in ep.graph.nodes), ep.graph  # the function is in the graph
    path = str(tmp_path / "m.onnx")
    pt2onnx.export(ep, (), path, opset=opset)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for n in (3, 16, 40):
        x = torch.randn(n, 2)
        (got,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
        want = fn(x).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
