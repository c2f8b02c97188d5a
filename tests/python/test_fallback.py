"""Ops no converter handles: by default an error listing all of them (no file
written); `pt2onnx.unconvertible_ops` lists them without writing; opt-in
`fallback="custom_domain"` writes each as a node of domain pkg.torch.ops
(arguments as attributes, listed in the result, a warning and on the
command's stderr). The written graph is checked in onnxruntime after the
test swaps the custom node for an equivalent ONNX subgraph: the wiring
(inputs, attributes, outputs, types) is what it claims."""

import os
import subprocess
import warnings

import numpy as np
import onnx
import pytest
import torch
from conftest import cli_path, ort_session
from onnx import helper

import pt2onnx


@torch.library.custom_op("pt2onnx_test::scale_shift", mutates_args=())
def scale_shift(x: torch.Tensor, s: float, k: int, mode: str,
                w: torch.Tensor | None = None, flags: list[int] | None = None) -> torch.Tensor:
    return x * s + k + (w if w is not None else 0)


@scale_shift.register_fake
def _(x, s, k, mode, w=None, flags=None):
    return torch.empty_like(x)


@torch.library.custom_op("pt2onnx_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


@twice.register_fake
def _(x):
    return torch.empty_like(x)


class Model(torch.nn.Module):
    def forward(self, x, w):
        y = torch.relu(x)
        a = torch.ops.pt2onnx_test.scale_shift(y, 2.5, 3, "fast", None, [1, 0])
        b = torch.ops.pt2onnx_test.scale_shift(a, 0.5, -1, "slow", w)
        return torch.ops.pt2onnx_test.twice(b) + 1


def args(batch=2):
    return torch.randn(batch, 3), torch.randn(batch, 3)


def test_default_fails_listing_every_op(tmp_onnx):
    with pytest.raises(pt2onnx.ConversionError) as e:
        pt2onnx.export(Model(), args(), tmp_onnx)
    msg = str(e.value)
    assert "2 operators are not supported" in msg
    assert "torch.ops.pt2onnx_test.scale_shift.default (2 nodes)" in msg
    assert "torch.ops.pt2onnx_test.twice.default (1 node)" in msg
    assert "test_fallback.py" in msg  # the source line of the first node
    assert 'fallback="custom_domain"' in msg
    assert not os.path.exists(tmp_onnx)


def test_unconvertible_ops(tmp_path):
    ops = pt2onnx.unconvertible_ops(Model(), args())
    assert [(o["target"], o["count"], o["converts_from"]) for o in ops] == [
        ("torch.ops.pt2onnx_test.scale_shift.default", 2, 0),
        ("torch.ops.pt2onnx_test.twice.default", 1, 0)]
    assert "in forward" in ops[0]["where"]
    assert pt2onnx.unconvertible_ops(torch.nn.Linear(3, 2), (torch.randn(2, 3),)) == []
    ep = torch.export.export(Model(), args())
    assert pt2onnx.unconvertible_ops(ep) == ops
    assert os.listdir(tmp_path) == []


def _swap_custom_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """The custom nodes replaced by ONNX ops computing the same, from their
    attributes and inputs (what a runtime implementing them would do)."""
    nodes = []
    for n in model.graph.node:
        if n.domain != "pkg.torch.ops":
            nodes.append(n)
            continue
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        out = n.output[0]
        if n.op_type == "pt2onnx_test.twice.default":
            c = helper.make_tensor(out + "_two", onnx.TensorProto.FLOAT, [], [2.0])
            nodes += [helper.make_node("Constant", [], [out + "_c"], value=c),
                      helper.make_node("Mul", [n.input[0], out + "_c"], [out])]
            continue
        s = helper.make_tensor(out + "_s", onnx.TensorProto.FLOAT, [], [a["s"]])
        k = helper.make_tensor(out + "_k", onnx.TensorProto.FLOAT, [], [float(a["k"])])
        nodes += [helper.make_node("Constant", [], [out + "_sv"], value=s),
                  helper.make_node("Constant", [], [out + "_kv"], value=k),
                  helper.make_node("Mul", [n.input[0], out + "_sv"], [out + "_m"])]
        if len(n.input) > 1 and n.input[1]:
            nodes += [helper.make_node("Add", [out + "_m", out + "_kv"], [out + "_a"]),
                      helper.make_node("Add", [out + "_a", n.input[1]], [out])]
        else:
            nodes.append(helper.make_node("Add", [out + "_m", out + "_kv"], [out]))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.opset_import[1:]
    return model


def test_custom_domain_fallback(tmp_path):
    path = str(tmp_path / "m.onnx")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = pt2onnx.export(Model(), args(), path, fallback="custom_domain",
                           dynamic_shapes={"x": {0: "batch"}, "w": {0: "batch"}})
    assert any("pkg.torch.ops" in str(w.message) and "scale_shift" in str(w.message)
               for w in caught)
    assert [(o["target"], o["count"]) for o in r.fallback_ops] == [
        ("torch.ops.pt2onnx_test.scale_shift.default", 2),
        ("torch.ops.pt2onnx_test.twice.default", 1)]
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    assert [(o.domain, o.version) for o in m.opset_import] == [("", 18), ("pkg.torch.ops", 1)]
    custom = [n for n in m.graph.node if n.domain == "pkg.torch.ops"]
    assert [n.op_type for n in custom] == ["pt2onnx_test.scale_shift.default"] * 2 + [
        "pt2onnx_test.twice.default"]
    first = {a.name: helper.get_attribute_value(a) for a in custom[0].attribute}
    assert first == {"s": pytest.approx(2.5), "k": 3, "mode": b"fast", "flags": [1, 0]}
    assert len(custom[0].input) == 1  # the trailing None (w) dropped
    assert len(custom[1].input) == 2 and custom[1].input[1] == "w"
    # Output types from torch's metadata, dim names included.
    vi = {v.name: v for v in m.graph.value_info}
    t = vi[custom[0].output[0]].type.tensor_type
    assert t.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_param or d.dim_value for d in t.shape.dim] == ["batch", 3]

    swapped = str(tmp_path / "swapped.onnx")
    onnx.save(_swap_custom_nodes(m), swapped)
    sess = ort_session(swapped)
    for batch in (1, 4):
        x, w = args(batch)
        got = sess.run(None, {"x": x.numpy(), "w": w.numpy()})[0]
        np.testing.assert_allclose(got, Model()(x, w).numpy(), atol=1e-5, rtol=1e-5)


def test_fallback_from_the_command_matches_python(tmp_path):
    ep = torch.export.export(Model(), args())
    pt2 = str(tmp_path / "m.pt2")
    torch.export.save(ep, pt2)
    py_path, cli_out = str(tmp_path / "py.onnx"), str(tmp_path / "cli.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pt2onnx.export(ep, (), py_path, fallback="custom_domain")
    r = subprocess.run([cli_path(), pt2, "-o", cli_out], capture_output=True, text=True)
    assert r.returncode == 1 and "2 operators are not supported" in r.stderr
    # The core's message has a line per op; the command prints it as one line (issue 22).
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("pt2onnx: error: "), r.stderr
    assert "pt2onnx_test.twice.default (1 node" in r.stderr
    assert not os.path.exists(cli_out)
    r = subprocess.run([cli_path(), pt2, "-o", cli_out, "--fallback", "custom_domain"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "pt2onnx_test.twice.default (1 node" in r.stderr and "pkg.torch.ops" in r.stderr
    with open(py_path, "rb") as a, open(cli_out, "rb") as b:
        assert a.read() == b.read()
    bad = subprocess.run([cli_path(), pt2, "--fallback", "drop"], capture_output=True, text=True)
    assert bad.returncode == 2


def test_fallback_inside_a_branch(tmp_path):
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda t: torch.ops.pt2onnx_test.twice(t),
                              lambda t: t - 1, (x,))

    path = str(tmp_path / "b.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = pt2onnx.export(Branchy(), (torch.randn(2, 3),), path, fallback="custom_domain")
    assert [o["target"] for o in r.fallback_ops] == ["torch.ops.pt2onnx_test.twice.default"]
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    assert ("pkg.torch.ops", 1) in [(o.domain, o.version) for o in m.opset_import]


def test_fallback_argument_checked():
    with pytest.raises(ValueError, match="fallback must be"):
        pt2onnx.export(torch.nn.Linear(3, 2), (torch.randn(2, 3),), None, fallback="onnx")
