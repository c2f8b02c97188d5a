"""TorchScript models through pt2onnx.export (issue 36): scripted, traced,
saved and loaded modules, ScriptModule subclasses, script functions, and
nn.Modules that hold scripted submodules or call script functions (the
torch.onnx documentation's "mixing tracing and scripting"). Scripted control
flow keeps its dynamics: each model runs in onnxruntime on inputs that take
the other branch or another trip count than the export's, compared with the
TorchScript model itself."""

from typing import Optional

import numpy as np
import onnx
import pytest
import torch
from conftest import assert_matches, run_ort

import pt2onnx


def _node_types(path, graph=None):
    g = graph or onnx.load(path).graph
    types = []
    for n in g.node:
        types.append(n.op_type)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                types += _node_types(path, a.g)
    return types


@torch.jit.script
def loop(x, y):
    for i in range(int(y)):
        x = x + i
    return x


class LoopModel2(torch.nn.Module):  # the documentation's "mixing tracing and scripting"
    def forward(self, x, y):
        return loop(x, y)


def test_script_function_called_from_a_module_keeps_its_loop(tmp_onnx):
    x = torch.ones(2, 3, dtype=torch.long)
    pt2onnx.export(LoopModel2(), (x, torch.tensor(5)), tmp_onnx,
                   input_names=["input_data", "loop_range"])
    assert "Loop" in _node_types(tmp_onnx)
    for n in (0, 1, 9):  # other trip counts than the export's 5
        _, got = run_ort(tmp_onnx, {"input_data": x.numpy(), "loop_range": np.array(n)})
        np.testing.assert_array_equal(got[0], loop(x, torch.tensor(n)).numpy())


def test_script_function_itself(tmp_onnx):
    x = torch.ones(2, 3, dtype=torch.long)
    pt2onnx.export(loop, (x, torch.tensor(5)), tmp_onnx)
    m = onnx.load(tmp_onnx)
    assert [i.name for i in m.graph.input] == ["x", "y"]  # the function's argument names
    _, got = run_ort(tmp_onnx, {"x": x.numpy() * 3, "y": np.array(7)})
    np.testing.assert_array_equal(got[0], loop(x * 3, torch.tensor(7)).numpy())


class ImplicitCastType(torch.jit.ScriptModule):  # the documentation's FAQ example
    @torch.jit.script_method
    def forward(self, x):
        y = x + 2
        return y + 3


def test_script_module_subclass_with_script_method(tmp_onnx):
    m = ImplicitCastType()
    pt2onnx.export(m, torch.tensor([1.0], dtype=torch.float32), tmp_onnx)
    # The constants take x's type (torch.onnx's scripted export got y + 3 wrong before
    # its type propagation).
    assert_matches(m, tmp_onnx, {"x": torch.tensor([-4.5])})


class ListLoopModel(torch.nn.Module):  # the documentation's list example
    def forward(self, x):
        res = []
        res1 = []
        arr = x.split(2, 0)
        res2 = torch.zeros(3, 4, dtype=torch.long)
        for i in range(len(arr)):
            res.append(arr[i].sum(0, False))
            res1.append(arr[-1 - i].sum(0, False))
            res2 += 1
        return torch.stack(res), torch.stack(res1), res2


def test_scripted_list_loop(tmp_onnx):
    m = torch.jit.script(ListLoopModel())
    pt2onnx.export(m, (torch.randn(16),), tmp_onnx)
    assert_matches(m, tmp_onnx, {"x": torch.randn(16)}, atol=1e-5, rtol=1e-5)


class WhileAndIf(torch.nn.Module):
    def forward(self, x):
        n = 0
        while bool(x.sum() < 100.0):  # trip count from the data
            x = x * 2
            n += 1
        if bool(x.mean() > 50):
            x = x - 1
        else:
            x = x + 1
        return x, n


def test_data_dependent_while_and_if(tmp_onnx):
    m = torch.jit.script(WhileAndIf())
    pt2onnx.export(m, (torch.rand(3) + 0.5,), tmp_onnx)
    types = _node_types(tmp_onnx)
    assert "Loop" in types and "If" in types
    for x in (torch.rand(3) + 0.5, torch.rand(3) * 0.1 + 0.01, torch.full((3,), 40.0),
              torch.full((3,), 90.0)):
        expected = m(x)
        _, got = run_ort(tmp_onnx, {"x": x.numpy()})
        np.testing.assert_allclose(got[0], expected[0].numpy(), rtol=1e-6)
        assert int(got[1]) == expected[1]


class SizeLoop(torch.nn.Module):
    def forward(self, x):
        acc = torch.zeros_like(x[0])
        for i in range(x.size(0)):  # a dynamic dim as trip count
            acc = acc + x[i] * (i + 1)
        return acc


def test_loop_over_a_dynamic_dim(tmp_onnx):
    m = torch.jit.script(SizeLoop())
    pt2onnx.export(m, (torch.randn(4, 3),), tmp_onnx, dynamic_axes={"x": {0: "n"}})
    assert "Loop" in _node_types(tmp_onnx)
    for n in (1, 4, 7):
        assert_matches(m, tmp_onnx, {"x": torch.randn(n, 3)}, atol=1e-5)


class Gate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x, y: Optional[torch.Tensor] = None):
        if y is not None:
            x = x + y
        if bool(x.sum() > 0):
            return self.lin(x).relu() * self.scale
        return -x


class HoldsScripted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = torch.jit.script(Gate())
        self.post = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.post(self.gate(x))


def test_module_holding_a_scripted_submodule(tmp_onnx):
    m = HoldsScripted().eval()
    x = torch.randn(2, 3).abs()
    r = pt2onnx.export(m, (x,), tmp_onnx, dynamic_shapes={"x": {0: "batch"}}, verify=True)
    assert r.checks["verify"]
    assert "If" in _node_types(tmp_onnx)
    m2 = onnx.load(tmp_onnx)
    names = {i.name for i in m2.graph.initializer}
    assert {"gate.lin.weight", "gate.scale", "post.weight"} <= names  # weights keep their names
    for v in (-x, torch.randn(5, 3).abs()):  # the other branch, another batch
        assert_matches(m, tmp_onnx, {"x": v})


def test_optional_input_left_out_takes_its_default(tmp_onnx):
    m = torch.jit.script(Gate())
    pt2onnx.export(m, (torch.randn(2, 3).abs(),), tmp_onnx)
    assert_matches(m, tmp_onnx, {"x": -torch.randn(2, 3).abs()})


class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 5)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(x.mean((2, 3)))


@pytest.mark.parametrize("how", ["script", "trace"])
def test_saved_and_loaded_file(tmp_path, how):
    m = SmallNet().eval()
    x = torch.randn(2, 3, 8, 8)
    ts = torch.jit.script(m) if how == "script" else torch.jit.trace(m, (x,))
    torch.jit.save(ts, str(tmp_path / "m.pt"))
    loaded = torch.jit.load(str(tmp_path / "m.pt"))
    path = str(tmp_path / "m.onnx")
    pt2onnx.export(loaded, (x,), path, dynamic_axes={"x": {0: "batch", 2: "h", 3: "w"}})
    assert_matches(m, path, {"x": torch.randn(3, 3, 12, 10)})


def test_training_mode_of_a_script_module(tmp_onnx):
    m = torch.jit.script(SmallNet())
    m.train()
    pt2onnx.export(m, (torch.randn(2, 3, 8, 8),), tmp_onnx)  # EVAL: batch norm's running stats
    assert m.training  # the mode is restored
    m.eval()
    assert_matches(m, tmp_onnx, {"x": torch.randn(2, 3, 8, 8)})


class SetsAttribute(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.count = 0

    def forward(self, x):
        if bool(x.sum() > 0):
            self.count += 1
        return x * 2


def test_unreadable_nodes_are_listed_with_their_source_line(tmp_onnx):
    m = torch.jit.script(SetsAttribute())
    with pytest.raises(RuntimeError) as e:
        pt2onnx.export(m, (torch.randn(3),), tmp_onnx)
    msg = str(e.value)
    assert "TorchScript node could not be read" in msg
    assert "prim::If" in msg and "SetAttr" in msg and "test_torchscript.py" in msg
    import os
    assert not os.path.exists(tmp_onnx)


# ---- the command on TorchScript files -------------------------------------

def _run_cli(*args, env=None):
    import subprocess

    from conftest import cli_path

    return subprocess.run([cli_path(), *map(str, args)], capture_output=True, text=True, env=env)


def test_command_converts_a_saved_torchscript_file(tmp_path):
    m = SmallNet().eval()
    pt = tmp_path / "model.bin"  # the kind is read from the contents, not the name
    torch.jit.save(torch.jit.script(m), str(pt))
    out = tmp_path / "m.onnx"
    r = _run_cli(pt, "-o", out, "--input", "x:float32[batch,3,h=10,w]")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"wrote {out}")
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in onnx.load(str(out)).graph.input]
    assert dims == [["batch", 3, "h", "w"]]
    assert_matches(m, str(out), {"x": torch.randn(3, 3, 9, 7)})


def test_command_on_a_script_function_file_and_several_inputs(tmp_path):
    m = torch.jit.script(LoopModel2())  # calls the script function `loop`
    torch.jit.save(m, str(tmp_path / "loop.pt"))
    r = _run_cli(tmp_path / "loop.pt", "--input", "x:int64[2,3]", "--input", "y:int64[]",
                 "--input-names", "data", "count")
    assert r.returncode == 0, r.stderr
    out = str(tmp_path / "loop.onnx")  # beside the input, .pt -> .onnx
    x = torch.ones(2, 3, dtype=torch.long)
    _, got = run_ort(out, {"data": x.numpy(), "count": np.array(6)})
    np.testing.assert_array_equal(got[0], loop(x, torch.tensor(6)).numpy())


@pytest.mark.parametrize("content,text", [
    (b"not a zip at all" * 10, "not a zip"),
    ("truncated", "end-of-central-directory"),
    ("state_dict", "torch.save file of pickled objects"),
])
def test_command_refuses_what_is_not_a_model(tmp_path, content, text):
    path = tmp_path / "m.pt"
    if content == "truncated":
        torch.jit.save(torch.jit.script(SmallNet()), str(path))
        path.write_bytes(path.read_bytes()[:2000])
    elif content == "state_dict":
        torch.save(SmallNet().state_dict(), str(path))
    else:
        path.write_bytes(content)
    r = _run_cli(path, "--input", "x:float32[1,3,8,8]", "-o", tmp_path / "m.onnx")
    assert r.returncode == 1 and text in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "m.onnx").exists()


def test_command_needs_inputs_and_a_python_with_torch(tmp_path):
    import os
    import sys

    pt = tmp_path / "m.pt"
    torch.jit.save(torch.jit.script(SmallNet()), str(pt))
    r = _run_cli(pt)
    assert r.returncode == 1 and "--input NAME:DTYPE[DIMS]" in r.stderr
    r = _run_cli(pt, "--input", "x:float32[1,3")
    assert r.returncode == 1 and "NAME:DTYPE[DIMS]" in r.stderr
    # A Python without torch: one line saying what to install.
    env = dict(os.environ, PT2ONNX_PYTHON=sys.executable, PYTHONPATH="",
               PYTHONNOUSERSITE="1")
    env["PT2ONNX_PYTHON"] = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else ""
    r = _run_cli(pt, "--input", "x:float32[1,3,8,8]", env=env)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "pip install torch" in r.stderr or "no Python was found" in r.stderr, r.stderr
