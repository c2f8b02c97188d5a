"""The pt2onnx command (this issue: --version / --help, usage errors)."""

import subprocess

import pytest
from conftest import cli_path

import pt2onnx


@pytest.fixture(scope="module")
def cli():
    return cli_path()


def test_version_and_help(cli):
    v = subprocess.run([cli, "--version"], capture_output=True, text=True)
    assert v.returncode == 0 and v.stdout.strip() == f"pt2onnx {pt2onnx.__version__}"
    h = subprocess.run([cli, "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "usage: pt2onnx" in h.stdout


def test_usage_error_exit_code(cli):
    r = subprocess.run([cli], capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr


def test_links_neither_python_nor_torch(cli):
    out = subprocess.run(["ldd", cli], capture_output=True, text=True).stdout
    assert "libpython" not in out and "libtorch" not in out and "libc10" not in out
