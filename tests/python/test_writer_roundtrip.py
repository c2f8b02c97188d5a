"""The streaming writer's output re-read with onnx.load and compared field by
field with what was exported: model header, initializers (bytes equal to the
torch tensors, inline and external), inputs / outputs / value_info types and
shapes, attributes of every kind, node metadata."""

import os

import numpy as np
import onnx
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper

import pt2onnx
from conftest import assert_same_both_ways


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.fc = nn.Linear(16, 4)
        self.register_buffer("offsets", torch.arange(4, dtype=torch.int64))
        self.register_buffer("scale", torch.full((4,), 0.5, dtype=torch.float64))

    def forward(self, x):
        y = F.leaky_relu(self.conv(x), 0.1).mean((2, 3))
        y = F.gelu(self.fc(y)) + self.offsets
        z = torch.full((x.shape[0], 4), 2.0)
        return (y * z).softmax(-1), (y.double() * self.scale).sum(-1)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    m = Mixed().eval()
    d = tmp_path_factory.mktemp("rt")
    inline, ext = str(d / "inline.onnx"), str(d / "ext.onnx")
    args = (torch.randn(2, 3, 8, 8),)
    ds = {"x": {0: "batch"}}
    pt2onnx.export(m, args, inline, opset=20, dynamic_shapes=ds, external_data=False)
    r = pt2onnx.export(m, args, ext, opset=20, dynamic_shapes=ds, external_data=True)
    assert_same_both_ways(m, args, ext, opset=20, dynamic_shapes=ds,
                          extra_cli_args=("--external-data", "always"))
    return m, inline, ext, r


def test_model_header(exported):
    _, inline, _, _ = exported
    mp = onnx.load(inline)
    assert mp.ir_version == 9  # lowest IR version carrying opset 20
    assert mp.producer_name == "pt2onnx" and mp.producer_version == pt2onnx.__version__
    assert [(o.domain, o.version) for o in mp.opset_import] == [("", 20)]
    onnx.checker.check_model(mp, full_check=True)


def test_initializers_equal_torch_tensors(exported):
    m, inline, _, _ = exported
    mp = onnx.load(inline)
    by_name = {t.name: t for t in mp.graph.initializer}
    sd = m.state_dict()
    for name in ("conv.weight", "conv.bias", "fc.weight", "fc.bias", "offsets", "scale"):
        t = by_name[name]
        assert list(t.dims) == list(sd[name].shape)
        assert t.data_type == {torch.float32: 1, torch.int64: 7, torch.float64: 11}[sd[name].dtype]
        assert t.HasField("raw_data") and t.data_location == onnx.TensorProto.DEFAULT
        np.testing.assert_array_equal(numpy_helper.to_array(t), sd[name].numpy())


def test_external_data_layout(exported):
    m, _, ext, r = exported
    assert r.data_paths == [ext + ".data"]
    mp = onnx.load(ext, load_external_data=False)
    sd = m.state_dict()
    data = open(ext + ".data", "rb").read()
    seen = 0
    for t in mp.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            assert len(t.raw_data) < 1024  # small tensors stay inline
            continue
        kv = {e.key: e.value for e in t.external_data}
        assert kv["location"] == os.path.basename(ext) + ".data"
        off, length = int(kv["offset"]), int(kv["length"])
        assert off % 4096 == 0
        assert not t.HasField("raw_data")
        np.testing.assert_array_equal(
            np.frombuffer(data[off : off + length], dtype=sd[t.name].numpy().dtype),
            sd[t.name].numpy().ravel(),
        )
        seen += 1
    assert seen >= 1  # conv.weight: 432 floats, 1728 bytes
    full = onnx.load(ext)  # onnx resolves the external data itself
    w = {t.name: t for t in full.graph.initializer}["conv.weight"]
    np.testing.assert_array_equal(numpy_helper.to_array(w), sd["conv.weight"].numpy())


def _dims(tp):
    return [d.dim_param or d.dim_value for d in tp.tensor_type.shape.dim]


def test_inputs_outputs_and_value_info(exported):
    _, inline, _, _ = exported
    mp = onnx.load(inline)
    (inp,) = mp.graph.input
    assert inp.name == "x" and inp.type.tensor_type.elem_type == 1
    assert _dims(inp.type) == ["batch", 3, 8, 8]
    outs = {o.name: o for o in mp.graph.output}
    assert len(outs) == 2
    o1, o2 = mp.graph.output
    assert o1.type.tensor_type.elem_type == 1 and _dims(o1.type) == ["batch", 4]
    assert o2.type.tensor_type.elem_type == 11 and _dims(o2.type) == ["batch"]
    produced = {o for n in mp.graph.node for o in n.output} - set(outs)
    vi = {v.name: v for v in mp.graph.value_info}
    assert produced <= set(vi), produced - set(vi)
    # Our shapes agree with ONNX's own inference wherever it finds a static dim.
    stripped = onnx.ModelProto()
    stripped.CopyFrom(mp)
    del stripped.graph.value_info[:]
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(stripped).graph.value_info}
    compared = 0
    for name, v in vi.items():
        if name not in inferred:
            continue
        a, b = v.type.tensor_type, inferred[name].type.tensor_type
        assert a.elem_type == b.elem_type, name
        if a.HasField("shape") and b.HasField("shape"):
            assert len(a.shape.dim) == len(b.shape.dim), name
            for da, db in zip(a.shape.dim, b.shape.dim):
                if da.HasField("dim_value") and db.HasField("dim_value"):
                    assert da.dim_value == db.dim_value, name
                    compared += 1
    assert compared > 10


def test_attributes_of_every_kind(exported):
    _, inline, _, _ = exported
    mp = onnx.load(inline)
    nodes = {n.op_type: n for n in mp.graph.node}
    conv = {a.name: a for a in nodes["Conv"].attribute}
    assert conv["kernel_shape"].type == onnx.AttributeProto.INTS and list(conv["kernel_shape"].ints) == [3, 3]
    assert list(conv["pads"].ints) == [1, 1, 1, 1] and conv["group"].i == 1
    lrelu = {a.name: a for a in nodes["LeakyRelu"].attribute}
    assert lrelu["alpha"].type == onnx.AttributeProto.FLOAT
    assert abs(lrelu["alpha"].f - 0.1) < 1e-7
    gelu = {a.name: a for a in nodes["Gelu"].attribute}  # opset 20: the Gelu op
    assert gelu["approximate"].type == onnx.AttributeProto.STRING and gelu["approximate"].s == b"none"
    cos = {a.name: a for a in nodes["ConstantOfShape"].attribute}
    assert cos["value"].type == onnx.AttributeProto.TENSOR
    assert numpy_helper.to_array(cos["value"].t).tolist() == [2.0]


def test_node_names_and_metadata(exported):
    _, inline, _, _ = exported
    mp = onnx.load(inline)
    names = [n.name for n in mp.graph.node]
    assert len(set(names)) == len(names)
    conv = next(n for n in mp.graph.node if n.op_type == "Conv")
    assert conv.name.startswith("conv2d")
    assert conv.doc_string == ("namespace: conv; pkg.torch.onnx.fx_node: conv2d; "
                               "pkg.pt2onnx.aten_target: torch.ops.aten.conv2d.default")
