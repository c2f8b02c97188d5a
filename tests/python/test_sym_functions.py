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


@pytest.mark.parametrize("opset", [12, 13, 18])
@pytest.mark.parametrize("name", list(CASES))
def test_sym_function(name, opset, tmp_path):
    fn = CASES[name]

    class M(torch.nn.Module):
        def forward(self, x):
            return fn(x)

    ep = torch.export.export(M(), (torch.randn(9, 2),),
                             dynamic_shapes=({0: Dim("n", min=2, max=64)},))
    assert any(n.op == "call_function" and getattr(n.target, "__name__", "") == name
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


def test_integer_pow_at_opset_11_is_refused_with_the_reason(tmp_path):
    """ONNX's Pow takes integers from opset 12: at 11 the export names the node
    and the opset it needs, and writes nothing."""
    class M(torch.nn.Module):
        def forward(self, x):
            return CASES["pow"](x)

    ep = torch.export.export(M(), (torch.randn(9, 2),),
                             dynamic_shapes=({0: Dim("n", min=2, max=64)},))
    with pytest.raises(pt2onnx.ConversionError, match="integer inputs need opset 12"):
        pt2onnx.export(ep, (), str(tmp_path / "m.onnx"), opset=11)
    assert not (tmp_path / "m.onnx").exists()
