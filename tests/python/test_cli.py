"""The pt2onnx command (this issue: --version / --help, usage errors)."""

import os
import subprocess

import pytest

import pt2onnx

CLI = os.environ.get("PT2ONNX_CLI", os.path.join(os.path.dirname(__file__), "../../build/cpp/pt2onnx"))


@pytest.fixture(scope="module")
def cli():
    if not os.path.exists(CLI):
        pytest.fail(f"pt2onnx command not built at {CLI} (run `make cpp`)")
    return CLI


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
