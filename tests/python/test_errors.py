"""Bad input: each case gives a clear error naming the cause and leaves no
output file."""

import json
import os

import pytest
import torch
import torch.nn as nn

import pt2onnx
from pt2onnx import _core
from pt2onnx._export import _serialize, _weight_views


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
        pt2onnx.export(Small(), (torch.randn(2, 8),), tmp_onnx, opset=12)
    with pytest.raises(pt2onnx.ConversionError, match="input_names has 2 names"):
        pt2onnx.export(Small(), (torch.randn(2, 8),), tmp_onnx, input_names=["a", "b"])
    assert not os.path.exists(tmp_onnx)


def test_unwritable_path_leaves_nothing(tmp_path):
    path = str(tmp_path / "no_such_dir" / "m.onnx")
    with pytest.raises(pt2onnx.ConversionError, match="cannot create"):
        pt2onnx.export(Small(), (torch.randn(2, 8),), path)
    assert list(tmp_path.iterdir()) == []
