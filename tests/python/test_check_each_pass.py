"""PT2ONNX_CHECK_EACH_PASS=1 (issue 34): the value rules checked after every
pass, so a broken graph names the pass that broke it. Exercised in a fresh
process (the core reads the variable once): the repeated-fusion model of
test_fusion_names_property.py under its five targets / opsets passes the
check after each of its passes. That the check catches a broken graph, and
names the pass, is tests/cpp/test_check_structure.cpp's CheckValues."""

import os
import subprocess
import sys

SCRIPT = r"""
import sys, torch
sys.path.insert(0, {here!r})
import pt2onnx
from test_fusion_names_property import CONFIGS, Net, D
for opset, target, dtype, _ in CONFIGS:
    torch.manual_seed(0)
    pt2onnx.export(Net().eval(), (torch.randn(2, 8, D),), {out!r}, opset=opset, target=target,
                   dtype=dtype, dynamic_shapes={{"x": {{0: "batch", 1: "seq"}}}})
print("ok", len(CONFIGS))
"""


def test_every_pass_keeps_the_value_rules(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    code = SCRIPT.format(here=here, out=str(tmp_path / "m.onnx"))
    env = dict(os.environ, PT2ONNX_CHECK_EACH_PASS="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ok 5" in r.stdout
