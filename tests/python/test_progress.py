"""The progress line (export(verbose=...), pt2onnx-pretrained): shown on a
terminal once an export runs longer than PT2ONNX_PROGRESS_AFTER seconds (1 by
default), never with verbose=False or when stderr is not a terminal. Run in
a pseudo-terminal."""

import os
import pty
import re
import subprocess
import sys

import pytest

SCRIPT = """
import sys, torch, pt2onnx
m = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
verbose = {"none": None, "false": False}[sys.argv[2]]
pt2onnx.export(m, (torch.randn(2, 256),), sys.argv[1], verbose=verbose)
"""


def _run(tmp_path, verbose, after, tty=True):
    env = dict(os.environ, PT2ONNX_PROGRESS_AFTER=after)
    cmd = [sys.executable, "-c", SCRIPT, str(tmp_path / "m.onnx"), verbose]
    if not tty:
        r = subprocess.run(cmd, env=env, capture_output=True, check=True)
        return r.stderr.decode()
    main, sub = pty.openpty()
    p = subprocess.Popen(cmd, env=env, stderr=sub, stdout=subprocess.DEVNULL)
    os.close(sub)
    out = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert p.wait() == 0
    return out.decode()


def test_progress_on_a_terminal(tmp_path):
    out = _run(tmp_path, "none", "0")
    for stage in ("capturing", "converting", "optimizing", "writing"):
        assert f"pt2onnx: {stage}" in out, out
    assert re.search(r"pt2onnx: writing \d+\.\d\d / \d+\.\d\d GB", out), out
    assert out.endswith("\r\x1b[K")  # the line is cleared at the end


@pytest.mark.parametrize("case", ["verbose_false", "not_a_terminal", "short_export"])
def test_no_progress(tmp_path, case):
    if case == "verbose_false":
        out = _run(tmp_path, "false", "0")
    elif case == "not_a_terminal":
        out = _run(tmp_path, "none", "0", tty=False)
    else:  # an export shorter than the threshold
        out = _run(tmp_path, "none", "1000")
    assert "pt2onnx:" not in out, out
