"""Bad input: each case gives a clear error naming the cause and leaves no
output file."""

import json
import os

import pytest
import torch
import torch.nn as nn

import pt2onnx
from pt2onnx import _core
from pt2onnx._export import _weight_views
from pt2onnx._serialize import serialize_program as _serialize


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x).relu()


def program():
    ep = torch.export.export(Small().eval(), (torch.randn(2, 8),))
    views, keep = _weight_views(ep)
    return ep, _serialize(ep), views, keep


def convert(js, views, path):
    return _core.convert(js, views, path, 18, True, "auto", [], [], {}, {})


def test_malformed_json(tmp_onnx):
    with pytest.raises(pt2onnx.ConversionError, match="malformed JSON"):
        convert(b'{"schema_version": {', [], tmp_onnx)
    assert not os.path.exists(tmp_onnx)


def test_json_of_the_wrong_shape(tmp_onnx):
    _, js, views, _keep = program()
    d = json.loads(js)
    d["graph_module"]["graph"]["nodes"] = {"not": "a list"}
    with pytest.raises(pt2onnx.ConversionError, match=r"graph\.nodes: expected a JSON array"):
        convert(json.dumps(d).encode(), views, tmp_onnx)
    assert not os.path.exists(tmp_onnx)


def test_unknown_schema_major_version(tmp_onnx):
    _, js, views, _keep = program()
    d = json.loads(js)
    d["schema_version"]["major"] = 99
    with pytest.raises(pt2onnx.ConversionError, match="unsupported schema major version 99"):
        convert(json.dumps(d).encode(), views, tmp_onnx)
    assert not os.path.exists(tmp_onnx)


def test_missing_weight(tmp_onnx):
    _, js, views, _keep = program()
    views = [v for v in views if v[0] != "fc.bias"]
    with pytest.raises(pt2onnx.ConversionError, match="weight 'fc.bias'.*missing"):
        convert(js, views, tmp_onnx)
    assert not os.path.exists(tmp_onnx)


def test_weight_shorter_than_its_metadata(tmp_onnx):
    _, js, views, _keep = program()
    views = [(n, p, dt, s, st, (av // 2 if n == "fc.weight" else av)) for n, p, dt, s, st, av in views]
    with pytest.raises(pt2onnx.ConversionError, match="weight 'fc.weight': needs 128 bytes but only 64"):
        convert(js, views, tmp_onnx)
    assert not os.path.exists(tmp_onnx)


def test_weight_of_the_wrong_size(tmp_onnx):
    _, js, views, _keep = program()
    views = [(n, p, dt, ([4, 4] if n == "fc.weight" else s), st, av) for n, p, dt, s, st, av in views]
    with pytest.raises(pt2onnx.ConversionError, match="weight 'fc.weight': size 4 at dim 1"):
        convert(js, views, tmp_onnx)
    assert not os.path.exists(tmp_onnx)


# Ops not converted (Airy Ai, matrix exponential, general eigenvalues).
class ManyUnsupported(nn.Module):
    def forward(self, x):
        a = torch.special.airy_ai(x)
        b = torch.special.airy_ai(a)
        c = torch.linalg.matrix_exp(b)
        return torch.linalg.eigvals(b).real + torch.special.airy_ai(c).sum(0)


def test_unsupported_ops_are_all_reported_at_once(tmp_onnx):
    with pytest.raises(pt2onnx.ConversionError) as e:
        pt2onnx.export(ManyUnsupported(), (torch.randn(3, 3),), tmp_onnx)
    msg = str(e.value)
    assert "3 operators are not supported at opset 18" in msg
    assert "torch.ops.aten.special_airy_ai.default (3 nodes)" in msg
    assert "torch.ops.aten.linalg_matrix_exp.default (1 node)" in msg
    assert "torch.ops.aten.linalg_eigvals.default (1 node)" in msg
    # the first stack trace of each: the user's line
    assert "test_errors.py" in msg and "a = torch.special.airy_ai(x)" in msg
    assert not os.path.exists(tmp_onnx)


def test_error_names_node_module_and_source_line(tmp_onnx):
    class Airy(nn.Module):
        def forward(self, x):
            return torch.special.airy_ai(x)

    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.airy = Airy()

        def forward(self, x):
            return self.airy(x)

    with pytest.raises(pt2onnx.ConversionError) as e:
        pt2onnx.export(Bad(), (torch.randn(2, 3),), tmp_onnx)
    msg = str(e.value)
    assert "torch.ops.aten.special_airy_ai.default" in msg and "module 'airy'" in msg
    assert "return torch.special.airy_ai(x)" in msg
    assert not os.path.exists(tmp_onnx)


def test_bad_opset_and_names(tmp_onnx):
    with pytest.raises(ValueError, match="opset must be in"):
        pt2onnx.export(Small(), (torch.randn(2, 8),), tmp_onnx, opset=10)
    # Names past the inputs name the weights (torch.onnx's rule); more than both is an error.
    with pytest.raises(ValueError, match="input_names has 100 names; the model has 1 inputs"):
        pt2onnx.export(Small(), (torch.randn(2, 8),), tmp_onnx,
                       input_names=[f"n{i}" for i in range(100)])
    assert not os.path.exists(tmp_onnx)


def test_unwritable_path_leaves_nothing(tmp_path):
    path = str(tmp_path / "no_such_dir" / "m.onnx")
    with pytest.raises(pt2onnx.ConversionError, match="cannot create"):
        pt2onnx.export(Small(), (torch.randn(2, 8),), path)
    assert list(tmp_path.iterdir()) == []


# ---- argument errors name the argument (issue 8) ---------------------------

X28 = torch.randn(2, 8)


def _input_dims(path):
    import onnx

    m = onnx.load(path)
    return [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in m.graph.input]


@pytest.mark.parametrize("opset,exc,text", [
    ("18", TypeError, "opset must be an int"),
    (18.7, TypeError, "opset must be an int"),
    (True, TypeError, "opset must be an int"),
    (99, ValueError, "opset must be in"),
])
def test_opset_must_be_an_int_in_range(tmp_onnx, opset, exc, text):
    with pytest.raises(exc, match=text):
        pt2onnx.export(Small(), (X28,), tmp_onnx, opset=opset)
    assert not os.path.exists(tmp_onnx)


@pytest.mark.parametrize("kwargs,text", [
    (dict(f=123), "f must be a file path"),
    (dict(input_names="x"), "input_names must be a list of str"),
    (dict(input_names=[1]), r"input_names\[0\] must be a non-empty str"),
    (dict(output_names=("y", "y")), r"output_names repeats \['y'\]"),
    (dict(external_data="yes"), "external_data must be True, False, None or .shards:SIZE."),
    (dict(optimize=1), "optimize must be True or False"),
    (dict(dynamic_axes=[0]), "dynamic_axes must be a dict"),
    (dict(dynamic_axes={"x": 0}), r"dynamic_axes\['x'\] must be a list of axes or a dict"),
    (dict(dynamic_axes={"x": ["0"]}), r"dynamic_axes\['x'\]: axis '0' is not an int"),
    (dict(kwargs=[1]), "kwargs must be a dict"),
])
def test_wrong_argument_types_name_the_argument(tmp_path, kwargs, text):
    kwargs = dict(kwargs)
    f = kwargs.pop("f", str(tmp_path / "m.onnx"))
    with pytest.raises(TypeError if "repeats" not in text else ValueError, match=text):
        pt2onnx.export(Small(), (X28,), f, **kwargs)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("axes,text", [
    ({"x": [7]}, r"dynamic_axes\['x'\]: axis 7 is out of range for rank 2 \(valid: -2..1\)"),
    ({"x": [-3]}, r"dynamic_axes\['x'\]: axis -3 is out of range"),
    ({"x": {2: "n"}}, r"axis 2 is out of range"),
])
def test_dynamic_axes_out_of_range(tmp_onnx, axes, text):
    with pytest.raises(ValueError, match=text):
        pt2onnx.export(Small(), (X28,), tmp_onnx, dynamic_axes=axes)
    assert not os.path.exists(tmp_onnx)


def test_dynamic_axes_of_an_output_out_of_range(tmp_onnx):
    with pytest.raises(pt2onnx.ConversionError,
                       match=r"dynamic axis 9 of output 'y' \(output 0\) is out of range for its "
                             "rank 2"):
        pt2onnx.export(Small(), (X28,), tmp_onnx, output_names=["y"],
                       dynamic_axes={"x": {0: "b"}, "y": {9: "b"}})
    assert not os.path.exists(tmp_onnx)


def test_negative_dynamic_axes_count_from_the_end(tmp_onnx):
    pt2onnx.export(Small(), (X28,), tmp_onnx, output_names=["y"],
                   dynamic_axes={"x": {-2: "batch"}, "y": {-2: "batch"}})
    assert _input_dims(tmp_onnx) == [["batch", 8]]
    import onnx

    out = onnx.load(tmp_onnx).graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in out] == ["batch", 4]
    pt2onnx.export(Small(), (X28,), tmp_onnx, dynamic_axes={"x": [-2]})
    assert _input_dims(tmp_onnx) == [["x_dynamic_axes_1", 8]]


@pytest.mark.parametrize("shapes,exc,text", [
    ({"x": {5: torch.export.Dim.DYNAMIC}}, ValueError,
     r"dynamic_shapes\['x'\]: axis 5 is out of range for rank 2"),
    ({"x": {-3: torch.export.Dim.DYNAMIC}}, ValueError, r"axis -3 is out of range"),
    ({"y": {0: torch.export.Dim.DYNAMIC}}, ValueError,
     r"dynamic_shapes names 'y', which is not an argument of forward \(its arguments: x\)"),
    (({0: "b"}, {0: "c"}), ValueError, r"dynamic_shapes has 2 entries but forward is given 1 "
                                        r"inputs \(x\)"),
    (({0: "b", 1: "c", 2: "d"},), ValueError, r"dynamic_shapes\[0\]: axis 2 is out of range"),
    ((["b"],), ValueError, r"dynamic_shapes\[0\]: gives 1 axes for an input of rank 2"),
    ("x", TypeError, "dynamic_shapes must be a dict"),
])
def test_dynamic_shapes_errors(tmp_onnx, shapes, exc, text):
    with pytest.raises(exc, match=text):
        pt2onnx.export(Small(), (X28,), tmp_onnx, dynamic_shapes=shapes)
    assert not os.path.exists(tmp_onnx)


def test_negative_dynamic_shapes_axis(tmp_onnx):
    pt2onnx.export(Small(), (X28,), tmp_onnx, dynamic_shapes={"x": {-2: "batch"}})
    assert _input_dims(tmp_onnx) == [["batch", 8]]


def test_core_checks_dim_names_too(tmp_onnx):
    """The CLI and C++ callers give dim names straight to the core: unknown
    inputs and axes out of range are errors there as well."""
    ep, js, views, keep = program()
    with pytest.raises(pt2onnx.ConversionError,
                       match=r"dynamic axes name the input 'nope', which the program does not "
                             r"have \(its inputs: 'x'\)"):
        _core.convert(js, views, tmp_onnx, 18, True, "auto", [], [], {"nope": {0: "b"}}, {})
    with pytest.raises(pt2onnx.ConversionError,
                       match=r"dynamic axis 4 of input 'x' is out of range for its rank 2"):
        _core.convert(js, views, tmp_onnx, 18, True, "auto", [], [], {"x": {4: "b"}}, {})
    with pytest.raises(pt2onnx.ConversionError, match="dynamic axes name output 3 but the model "
                                                      "has 1 outputs"):
        _core.convert(js, views, tmp_onnx, 18, True, "auto", [], [], {}, {3: {0: "b"}})
    assert not os.path.exists(tmp_onnx)


def test_crafted_arguments_give_a_conversion_error_naming_the_node(tmp_onnx):
    """A program edited by hand (roll with fewer shifts than dims, which torch
    itself never records) reaches a converter with arguments it does not
    expect: the caller gets a ConversionError naming the node, not another
    exception type."""

    class Roll(nn.Module):
        def forward(self, x):
            return torch.roll(x, shifts=(1, 2), dims=(0, 1))

    ep = torch.export.export(Roll(), (torch.randn(3, 4),))
    views, keep = _weight_views(ep)
    prog = json.loads(_serialize(ep))
    for node in prog["graph_module"]["graph"]["nodes"]:
        for arg in node["inputs"]:
            if arg["name"] == "shifts":
                arg["arg"]["as_ints"] = [1]
    with pytest.raises(pt2onnx.ConversionError, match=r"(?s)roll.*cause"):
        convert(json.dumps(prog).encode(), views, tmp_onnx)
    assert not os.path.exists(tmp_onnx)
