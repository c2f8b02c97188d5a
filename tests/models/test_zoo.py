"""The model zoo (zoo.py) end to end: export with dynamic batch (and
sequence) sizes, onnx.checker's full check, and onnxruntime against PyTorch on
fresh inputs at two other sizes (atol 1e-4 scaled by the output's magnitude,
rtol 1e-4). Entries not marked quick are `slow` (skipped by make test-quick).

Each model is exported with the fusions on (the default) at opset 18 and 23
on the standard target and for onnxruntime at opset 18; the quick entries
also for onnxruntime at opset 23 (what differs there from onnxruntime at 18
is the standard Attention left where GroupQueryAttention / MultiHeadAttention
do not apply, which the opset-23 standard runs cover; a fourth pass over the
slow entries would add ~10 minutes to CI). The fused graphs must match
PyTorch as the plain ones do."""

import pytest

import zoo_check
from zoo import ZOO

# (id, opset, target)
CONFIGS = [("opset18", 18, "standard"), ("opset23", 23, "standard"),
           ("ort18", 18, "onnxruntime")]
QUICK_ONLY = [("ort23", 23, "onnxruntime")]


def _param(name, config):
    # A model's configurations on one worker (--dist loadgroup), one capture shared
    # (zoo_check.export): the configurations test conversion, not torch.export.
    marks = [pytest.mark.xdist_group(f"zoo-{name}")]
    marks += [] if ZOO[name].quick else [pytest.mark.slow]
    return pytest.param(name, *config[1:], marks=marks, id=f"{name}-{config[0]}")


@pytest.mark.parametrize("name,opset,target",
                         [_param(n, c) for n in ZOO for c in CONFIGS]
                         + [_param(n, c) for n in ZOO if ZOO[n].quick for c in QUICK_ONLY])
def test_zoo_model(name, opset, target, tmp_path):
    path = str(tmp_path / f"{name}.onnx")
    result = zoo_check.export(name, path, opset=opset, target=target, reuse_capture=True)
    assert result.nodes > 0
    errors = zoo_check.compare(name, path, checker=False)  # conftest checked the file
    assert len(errors) == len(ZOO[name].check_sizes)
