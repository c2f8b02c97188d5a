import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

ATOL = 1e-4
RTOL = 1e-4


def run_ort(path, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return sess, sess.run(None, {k: v for k, v in feeds.items()})


def assert_matches(model, path, inputs, atol=ATOL, rtol=RTOL):
    """Runs `path` in onnxruntime on `inputs` (a dict name -> tensor) and
    compares every output with the PyTorch model's."""
    import torch

    with torch.no_grad():
        expected = model(*inputs.values())
    if not isinstance(expected, (tuple, list)):
        expected = (expected,)
    _, got = run_ort(path, {k: v.numpy() for k, v in inputs.items()})
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == tuple(e.shape)
        np.testing.assert_allclose(g, e.numpy(), atol=atol, rtol=rtol)


@pytest.fixture
def tmp_onnx(tmp_path):
    return str(tmp_path / "model.onnx")
