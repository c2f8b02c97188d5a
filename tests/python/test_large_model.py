"""A model with more than 2 GB of weights exports with external data, loads
and runs in onnxruntime, and the export's peak memory beyond the model's own
weights stays under 10% of the weight bytes."""

import json
import os
import subprocess
import sys

import onnx
import pytest

HERE = os.path.dirname(__file__)


@pytest.mark.slow
def test_over_2gb_with_external_data(tmp_path):
    path = str(tmp_path / "big.onnx")
    width, layers = 12288, 4  # 4 x 12288^2 fp32 = 2.42 GB
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "big_model_export.py"), path, str(width), str(layers)],
        capture_output=True, text=True, timeout=1200,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    rep = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(rep, indent=1))
    assert rep["weight_bytes"] > 2 * 1024**3
    assert rep["data_paths"] == [path + ".data"]
    assert os.path.getsize(path) < 1024 * 1024  # the graph only
    assert os.path.getsize(path + ".data") >= rep["weight_bytes"]
    onnx.checker.check_model(path)  # the path form handles > 2 GB models
    mp = onnx.load(path, load_external_data=False)
    locs = {e.value for t in mp.graph.initializer for e in t.external_data if e.key == "location"}
    assert locs == {"big.onnx.data"}
    assert rep["allclose"], rep["max_abs_diff"]
    assert rep["extra_bytes"] < 0.10 * rep["weight_bytes"], (
        f"export used {rep['extra_bytes'] / 1e6:.0f} MB beyond the weights "
        f"({rep['weight_bytes'] / 1e6:.0f} MB)"
    )
