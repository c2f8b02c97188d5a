"""torch.compile(model, backend="pt2onnx") on the model zoo: every entry compiled
with dynamo's default (a static graph first, then dynamic dims once a shape
changes) and compared with eager PyTorch at the export size and the entry's
other sizes (the zoo's tolerances, scaled by the output's magnitude), under
inference_mode. Entries not marked quick are `slow`."""

import numpy as np
import pytest
import torch

from pt2onnx import dynamo_backend
from zoo import ZOO, build


def _leaves(x):
    return [t for t in torch.utils._pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if ZOO[n].quick else [pytest.mark.slow])
                                  for n in ZOO])
def test_zoo_model_compiled(name):
    torch._dynamo.reset()
    entry = ZOO[name]
    model, make, _ = build(name)
    compiled = torch.compile(model, backend="pt2onnx")
    before = len(dynamo_backend.stats())
    with torch.inference_mode():
        for k, (b, s) in enumerate([entry.export_size, *entry.check_sizes]):
            torch.manual_seed(7 + k)
            kwargs = make(b, s)
            expected = _leaves(model(**kwargs))
            got = _leaves(compiled(**kwargs))
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape)
                scale = max(1.0, float(e.abs().max())) if e.numel() and e.is_floating_point() \
                    else 1.0
                np.testing.assert_allclose(g.numpy(), e.numpy(), atol=entry.atol * scale,
                                           rtol=entry.rtol)
    graphs = dynamo_backend.stats()[before:]
    # Every graph dynamo captured ran in onnxruntime (none left to PyTorch).
    assert graphs and all(g.conversions >= 1 or g.partitions for g in graphs)
    torch._dynamo.reset()
