"""pt2onnx's serializer (python/pt2onnx/_serialize.py) against torch's: the
same JSON bytes on programs with every kind of content the schema carries,
and its patches gone afterwards. (tests/conftest.py repeats the byte check on
the programs of a fixed sample of the suite's tests.)"""

import logging

import pytest
import torch

from pt2onnx._serialize import serialize_program


class Blocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 5)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x, n: int):
        y = self.bn(self.conv(x)).relu().mean(dim=(2, 3))
        y = self.fc(y) * self.scale + float("inf") * 0 + n
        v, i = y.max(dim=-1)  # torch.return_types output
        z = torch.cond(y.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (y,))
        return z[:, : y.shape[1] - 1], (v, i), y.shape[0] * 2


def _program():
    x = torch.randn(2, 3, 8, 8)
    b = torch.export.Dim("b", min=2, max=64)
    return torch.export.export(Blocks().eval(), (x, 3),
                               dynamic_shapes=({0: b}, torch.export.Dim.DYNAMIC))


def test_same_bytes_as_torch():
    ep = _program()
    fast = serialize_program(ep)
    assert fast == serialize_program(ep, fast=False)
    assert b'"cond"' in fast or b"torch.ops.higher_order.cond" in fast  # a nested graph went through


def test_patches_are_undone():
    from torch._export.serde import serialize as serde
    from torch._export.serde.union import _Union

    ep = _program()
    def state():
        return (serde.canonicalize, serde._to_json_bytes, serde._print_sympy,
                _Union.__dict__["create"])

    before = state()
    serialize_program(ep)
    assert state() == before
    assert "print_readable" not in ep.graph_module.__dict__
    assert "def forward" in ep.graph_module.print_readable(print_output=False)


def test_debug_logging_still_gets_the_listing():
    """With the serializer's debug log on, the graph listing is built (the
    fast path only skips it when nobody would see it)."""
    log = logging.getLogger("torch._export.serde.serialize")
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler, level, propagate = Keep(), log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    try:
        ep = _program()
        out = serialize_program(ep)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate
    assert out == serialize_program(ep, fast=False)
    assert any("def forward" in m for m in seen)


# The direct hand-off (issue 18 item 5): export() gives the C++ core torch's
# dataclass tree, read in place (src/python/program_object.cpp), not JSON.

def _convert(program, views, path):
    from pt2onnx import _core

    return _core.convert(program, views, path, 18, True, "auto", [], [], {}, {})


def test_tree_and_json_give_the_same_file(tmp_path):
    from pt2onnx._export import _weight_views
    from pt2onnx._serialize import program_tree

    ep = _program()
    views, keep = _weight_views(ep)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()  # the same file name: the graph is named after it
    a = _convert(program_tree(ep), views, str(tmp_path / "a" / "m.onnx"))
    b = _convert(serialize_program(ep, fast=False), views, str(tmp_path / "b" / "m.onnx"))
    assert (tmp_path / "a" / "m.onnx").read_bytes() == (tmp_path / "b" / "m.onnx").read_bytes()
    assert a["nodes"] == b["nodes"] > 5


@pytest.mark.hand_off
def test_suite_check_catches_a_changed_program(monkeypatch, tmp_path):
    """tests/conftest.py converts every exported program both ways: a tree
    that says something else than torch's JSON (one constant changed) fails
    the export with the check's message."""
    import pytest

    import pt2onnx
    from pt2onnx import _serialize

    class Scale(torch.nn.Module):
        def forward(self, x):
            return x * 2.5

    tree_of = _serialize.program_tree

    def changed(ep):
        tree = tree_of(ep)
        for node in tree.graph_module.graph.nodes:
            for arg in node.inputs:
                if arg.arg.type == "as_float":
                    object.__setattr__(arg.arg, "as_float", 3.5)
        return tree

    monkeypatch.setattr(_serialize, "program_tree", changed)
    with pytest.raises(AssertionError, match="different bytes"):
        pt2onnx.export(Scale(), (torch.randn(3),), str(tmp_path / "m.onnx"))


@pytest.mark.hand_off
def test_nan_with_its_sign_bit_set_reads_as_json_does(tmp_path):
    """The difference the hand-off check found when it was added: JSON spells
    every NaN "NaN" (read back as the one quiet NaN), while a Python float
    NaN keeps its sign bit (-nan, or inf * 0 on x86). The tree reader reads
    it as JSON does, so both routes give the same bytes and the two NaN
    constants stay one initializer. (tests/conftest.py also compares the
    export below; tools/hand_off_mutations.py plants the old behaviour and
    shows this test fails under both the per-export and the per-program
    comparison.)"""
    import math
    import struct

    import numpy as np

    import pt2onnx
    from pt2onnx._export import _weight_views
    from pt2onnx._serialize import program_tree

    neg_nan = -math.nan
    assert struct.pack("<d", neg_nan) != struct.pack("<d", math.nan)  # the sign bit is set

    class Fill(torch.nn.Module):
        def forward(self, x):
            return x.masked_fill(x > 1, neg_nan), x.masked_fill(x < -1, math.nan)

    x = torch.tensor([[-2.0, 0.5], [3.0, 0.0]])
    ep = torch.export.export(Fill(), (x,))
    views, keep = _weight_views(ep)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _convert(program_tree(ep), views, str(tmp_path / "a" / "m.onnx"))
    _convert(serialize_program(ep, fast=False), views, str(tmp_path / "b" / "m.onnx"))
    assert (tmp_path / "a" / "m.onnx").read_bytes() == (tmp_path / "b" / "m.onnx").read_bytes(), \
        "the direct hand-off and torch's JSON give different bytes"

    pt2onnx.export(Fill(), (x,), str(tmp_path / "e.onnx"))
    import onnxruntime as ort

    got = ort.InferenceSession(str(tmp_path / "e.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.array([[5.0, -5.0], [0.0, 1.5]], np.float32)})
    np.testing.assert_array_equal(np.isnan(got[0]), [[True, False], [False, True]])
    np.testing.assert_array_equal(np.isnan(got[1]), [[False, True], [False, False]])


@pytest.mark.hand_off
def test_suite_check_compares_each_program_once(monkeypatch, tmp_path):
    """tests/conftest.py serializes and compares an ExportedProgram on its
    first export only: the same program exported again (other opsets,
    targets, options) reuses its tree, since the C++ reader's result does not
    depend on the options. A program changed in place is serialized (and
    compared) again."""
    import pt2onnx
    from pt2onnx import _serialize

    class Scale(torch.nn.Module):
        def forward(self, x):
            return x * 2.5

    calls = []
    tree_of = _serialize.program_tree
    monkeypatch.setattr(_serialize, "program_tree", lambda ep: calls.append(ep) or tree_of(ep))
    ep = torch.export.export(Scale(), (torch.randn(3),))
    for opset in (17, 18, 21):
        pt2onnx.export(ep, (), str(tmp_path / f"m{opset}.onnx"), opset=opset)
    pt2onnx.export(ep, (), str(tmp_path / "ort.onnx"), target="onnxruntime")
    assert len(calls) == 1

    (mul,) = [n for n in ep.graph.nodes if n.op == "call_function"]
    mul.args = (mul.args[0], 3.0)
    ep.graph_module.recompile()
    pt2onnx.export(ep, (), str(tmp_path / "changed.onnx"))
    assert len(calls) == 2
    import numpy as np
    import onnxruntime as ort

    x = np.array([1.0, -2.0, 4.0], np.float32)
    (got,) = ort.InferenceSession(str(tmp_path / "changed.onnx"),
                                  providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, x * 3.0)


def test_malformed_tree_names_the_path(tmp_path):
    """The tree is read with the JSON reader's checks and messages."""
    import pytest

    import pt2onnx
    from pt2onnx._export import _weight_views
    from pt2onnx._serialize import program_tree

    ep = _program()
    views, keep = _weight_views(ep)
    tree = program_tree(ep)
    node = tree.graph_module.graph.nodes[1]
    object.__setattr__(node, "target", 7)
    with pytest.raises(pt2onnx.ConversionError,
                       match=r"ExportedProgram: \$\.graph_module\.graph\.nodes\[1\]\.target: "
                             r"expected a string, found a number"):
        _convert(tree, views, str(tmp_path / "m.onnx"))
    assert not (tmp_path / "m.onnx").exists()

    tree = program_tree(ep)
    object.__setattr__(tree.graph_module.graph, "tensor_values", {1: None})
    with pytest.raises(pt2onnx.ConversionError, match="dict key of type int"):
        _convert(tree, views, str(tmp_path / "m.onnx"))

    tree = program_tree(ep)
    object.__setattr__(tree.graph_module.graph, "nodes", object())
    with pytest.raises(pt2onnx.ConversionError,
                       match=r"graph\.nodes: expected a JSON array, found a Python object"):
        _convert(tree, views, str(tmp_path / "m.onnx"))
    assert not (tmp_path / "m.onnx").exists()
