"""The model zoo (zoo.py) end to end: export with dynamic batch (and
sequence) sizes, onnx.checker's full check, and onnxruntime against PyTorch on
fresh inputs at two other sizes (atol 1e-4 scaled by the output's magnitude,
rtol 1e-4). Entries not marked quick are `slow` (skipped by make test-quick)."""

import pytest

import zoo_check
from zoo import ZOO


def _param(name):
    marks = [] if ZOO[name].quick else [pytest.mark.slow]
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_param(n) for n in ZOO])
def test_zoo_model(name, tmp_path):
    path = str(tmp_path / f"{name}.onnx")
    result = zoo_check.export(name, path)
    assert result.nodes > 0
    errors = zoo_check.compare(name, path)
    assert len(errors) == len(ZOO[name].check_sizes)
