"""The pt2onnx command (this issue: --version / --help, usage errors)."""

import os
import subprocess

import pytest
from conftest import cli_path

import pt2onnx


@pytest.fixture(scope="module")
def cli():
    return cli_path()


def test_version_and_help(cli):
    v = subprocess.run([cli, "--version"], capture_output=True, text=True)
    lines = v.stdout.splitlines()
    assert v.returncode == 0 and lines[0] == f"pt2onnx {pt2onnx.__version__}"
    # The command's allocator: mimalloc where `make deps` installed it (CMakeLists.txt).
    if os.path.exists("/usr/include/mimalloc.h"):
        assert lines[1].startswith("allocator: mimalloc ")
        assert "libmimalloc" in subprocess.run(["ldd", cli], capture_output=True, text=True).stdout
    else:
        assert lines[1] == "allocator: system malloc"
    h = subprocess.run([cli, "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "usage: pt2onnx" in h.stdout


def test_usage_error_exit_code(cli):
    r = subprocess.run([cli], capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr


def test_links_neither_python_nor_torch(cli):
    out = subprocess.run(["ldd", cli], capture_output=True, text=True).stdout
    assert "libpython" not in out and "libtorch" not in out and "libc10" not in out


@pytest.mark.parametrize("spec,text", [
    ("nope:0=b", "dynamic axes name the input 'nope', which the program does not have"),
    ("input:5=b", "dynamic axis 5 of input 'input' is out of range for its rank 2"),
    ("input:-3=b", "dynamic axis -3 of input 'input' is out of range"),
    ("input:1x=b", "--dim-name axis"),
])
def test_dim_name_errors(cli, tmp_path, spec, text):
    import torch

    pt2 = tmp_path / "m.pt2"
    lin = torch.nn.Linear(4, 3)
    torch.export.save(torch.export.export(lin, (torch.randn(2, 4),)), pt2)
    out = tmp_path / "m.onnx"
    r = subprocess.run([cli, str(pt2), "-o", str(out), "--dim-name", spec],
                       capture_output=True, text=True)
    assert r.returncode != 0 and text in r.stderr, r.stderr
    assert not out.exists()


def test_negative_dim_name_axis(cli, tmp_path):
    import onnx
    import torch

    pt2 = tmp_path / "m.pt2"
    ep = torch.export.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),),
                             dynamic_shapes=({0: torch.export.Dim("b")},))
    torch.export.save(ep, pt2)
    out = tmp_path / "m.onnx"
    r = subprocess.run([cli, str(pt2), "-o", str(out), "--dim-name", "input:-2=batch"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    dims = onnx.load(out).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 4]
