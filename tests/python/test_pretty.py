"""pt2onnx.pretty() and `pt2onnx show` (issue 11 item 5): an exported model
printed as text, compared with an expected literal; a torch.cond model shows
its branches; the command prints the same text; malformed files give a
one-line error; external data is not read."""

import subprocess

import onnx
import pytest
import torch
from conftest import assert_matches, cli_path
from torch.export import Dim

import pt2onnx


class LinearRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x))


LINEAR_RELU = """\
ir_version 8, producer pt2onnx {version}
opsets: ai.onnx 18
graph main_graph
inputs: 1
  x: float32[batch, 4]
initializers: 2, 60 bytes
  fc.weight: float32[3, 4]
  fc.bias: float32[3]
nodes: 2
  %linear = Gemm[transB=1](%x, %fc.weight, %fc.bias)   # fc
  %relu = Relu(%linear)
outputs: 1
  relu: float32[batch, 3]
"""


@pytest.fixture(scope="module")
def cli():
    return cli_path()


@pytest.fixture
def linear_relu(tmp_path):
    path = tmp_path / "lr.onnx"
    model = LinearRelu()
    pt2onnx.export(model, (torch.randn(2, 4),), path, dynamic_shapes=({0: Dim("batch")},),
                   opset=18)
    # Runs in onnxruntime like PyTorch, on a batch size other than the export's.
    assert_matches(model, str(path), {"x": torch.randn(5, 4)})
    return model, path


def test_pretty_linear_relu(linear_relu):
    _, path = linear_relu
    assert pt2onnx.pretty(path) == LINEAR_RELU.format(version=pt2onnx.__version__)


def test_pretty_accepts_path_bytes_and_modelproto(linear_relu):
    _, path = linear_relu
    text = pt2onnx.pretty(str(path))
    assert pt2onnx.pretty(path) == text  # PathLike
    assert pt2onnx.pretty(path.read_bytes()) == text
    assert pt2onnx.pretty(onnx.load(path)) == text
    with pytest.raises(TypeError, match="path, bytes or an onnx.ModelProto"):
        pt2onnx.pretty(42)


class Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.sin() * 2, lambda x: x.cos() - 1, (x,))


def test_pretty_shows_if_subgraphs(tmp_path):
    path = tmp_path / "cond.onnx"
    model = Cond()
    pt2onnx.export(model, (torch.randn(3, 4),), path, dynamic_shapes=({0: Dim("n")},))
    for x in (torch.rand(5, 4) + 0.1, -torch.rand(2, 4) - 0.1):  # both branches
        assert_matches(model, str(path), {"x": x})
    text = pt2onnx.pretty(path)
    lines = text.splitlines()
    (if_line,) = [i for i, l in enumerate(lines) if " = If(" in l]
    indent = len(lines[if_line]) - len(lines[if_line].lstrip())
    # The branches follow their node, indented, each with its signature and body.
    branches = {}
    i = if_line + 1
    while i < len(lines) and lines[i].startswith(" " * (indent + 2)):
        l = lines[i]
        if len(l) - len(l.lstrip()) == indent + 2:
            name = l.strip().split(":")[0]
            branches[name] = []
            assert ": graph " in l and " -> (" in l, l
        else:
            assert len(l) - len(l.lstrip()) >= indent + 4, l
            branches[name].append(l.strip())
        i += 1
    assert set(branches) == {"then_branch", "else_branch"}
    then_ops = {l.split(" = ")[1].split("(")[0] for l in branches["then_branch"]}
    else_ops = {l.split(" = ")[1].split("(")[0] for l in branches["else_branch"]}
    assert "Sin" in then_ops and "Mul" in then_ops, branches
    assert "Cos" in else_ops and "Sub" in else_ops, branches


def test_show_prints_pretty(cli, linear_relu):
    _, path = linear_relu
    r = subprocess.run([cli, "show", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == pt2onnx.pretty(path)
    assert r.stderr == ""


@pytest.mark.parametrize("content,text", [
    (b"", "not an ONNX model: no graph"),
    (b"\x3a\x05ab", "truncated: field 7 claims 5 bytes, 2 left"),
    (b"PK\x03\x04rest", "not an ONNX model: a zip archive"),
])
def test_show_bad_file_is_one_line_error(cli, tmp_path, content, text):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(content)
    r = subprocess.run([cli, "show", str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("pt2onnx: error: "), r.stderr
    assert f"{bad}: {text}" in r.stderr, r.stderr
    with pytest.raises(pt2onnx.ConversionError, match=text):
        pt2onnx.pretty(bad)


def test_show_missing_file_and_usage(cli, tmp_path):
    r = subprocess.run([cli, "show", str(tmp_path / "nope.onnx")], capture_output=True,
                       text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "cannot open" in r.stderr
    r = subprocess.run([cli, "show"], capture_output=True, text=True)
    assert r.returncode == 2 and "show needs an ONNX model path" in r.stderr


def test_truncated_model_raises(linear_relu):
    _, path = linear_relu
    data = path.read_bytes()
    for cut in range(0, len(data), max(1, len(data) // 50)):
        try:
            pt2onnx.pretty(data[:cut])
        except pt2onnx.ConversionError as e:
            assert str(e).startswith("<bytes>: "), e


class Big(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(64, 32)

    def forward(self, x):
        return self.fc(x).tanh()


def test_pretty_external_data_not_read(tmp_path):
    path = tmp_path / "ext.onnx"
    model = Big()
    pt2onnx.export(model, (torch.randn(2, 64),), path, external_data=True)
    data = tmp_path / "ext.onnx.data"
    assert data.exists()
    assert_matches(model, str(path), {"x": torch.randn(2, 64)})
    data.unlink()  # pretty() must not need it
    text = pt2onnx.pretty(path)
    # The weight is external, the 128-byte bias (below the 1 KB threshold) inline.
    assert "initializers: 2, 8320 bytes, 1 external (8192 bytes)" in text.splitlines()
    assert ('  fc.weight: float32[32, 64]  external "ext.onnx.data" offset 0, 8192 bytes'
            in text.splitlines())
    assert "  fc.bias: float32[32]" in text.splitlines()
