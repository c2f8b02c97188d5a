"""`pip install .` puts the C++ pt2onnx command on PATH (the environment's
scripts directory, through scikit-build-core), beside the Python package, in a
fresh virtual environment. The wheel builds in build/install-test (kept, so
later runs are incremental; not the editable install's build/ directory,
which a regular build would reconfigure)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.mark.slow
def test_pip_install_puts_the_command_on_path(tmp_path):
    venv = tmp_path / "venv"
    # torch and the build requirements come from this environment (no network).
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    bin_dir = venv / "bin"
    r = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-deps",
                        "--no-build-isolation",
                        f"--config-settings=build-dir={ROOT}/build/install-test", ROOT],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    env.pop("PYTHONPATH", None)
    which = subprocess.run(["sh", "-c", "command -v pt2onnx"], capture_output=True, text=True,
                           env=env)
    assert which.stdout.strip() == str(bin_dir / "pt2onnx")
    v = subprocess.run(["pt2onnx", "--version"], capture_output=True, text=True, env=env)
    assert v.returncode == 0 and v.stdout.startswith("pt2onnx ")
    # The same version as the Python package installed beside it.
    py = subprocess.run([str(bin_dir / "python"), "-c",
                         "import pt2onnx; print(pt2onnx.__version__)"],
                        capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert v.stdout.split()[1] == py.stdout.strip()
