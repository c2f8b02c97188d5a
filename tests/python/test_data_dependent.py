"""Data-dependent shapes (issue 9 item 3): ops whose output size depends on
values. Each model runs in onnxruntime on inputs other than the export inputs
(different counts of selected elements, none included), and the sizes torch
could not know (unbacked symbols u0, u1, ...) are dim_params in the ONNX
outputs, never the export-time constants."""

import numpy as np
import onnx
import pytest
import torch
from conftest import assert_same_both_ways, run_ort

import pt2onnx


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _postprocess_head(scores, boxes):
    """A detection post-processing head: top-k, score threshold, gather."""
    top, idx = scores.topk(4)
    keep = torch.nonzero(top > 0.5).squeeze(1)
    kept_idx = idx[keep]
    return boxes[kept_idx], top[keep]


def _index_put_mask(x, v):
    y = x.clone()
    y[y > 0] = v  # a boolean-mask assignment (index_put with a bool index)
    return y


def _index_put_mask_values(x):
    y = x.clone()
    m = y < 0
    y[m] = y[m] * -10.0  # values gathered with the same mask
    return y


CASES = {
    # name: (fn, export args, [other inputs...], dims of the outputs that must be symbolic)
    "nonzero": (lambda x: torch.nonzero(x > 0), (torch.randn(4, 5),),
                [(torch.randn(4, 5),), (-torch.rand(4, 5),), (torch.rand(4, 5),)], [(0,)]),
    "argwhere": (lambda x: torch.argwhere(x > 0.3), (torch.randn(4, 5),),
                 [(torch.randn(4, 5),), (torch.zeros(4, 5),)], [(0,)]),
    "masked_select": (lambda x: torch.masked_select(x, x > 0), (torch.randn(4, 5),),
                      [(torch.randn(4, 5),), (-torch.rand(4, 5),)], [(0,)]),
    "bool_index": (lambda x: x[x.sum(1) > 0] * 2, (torch.randn(6, 3),),
                   [(torch.randn(6, 3),), (-torch.rand(6, 3),), (torch.rand(6, 3),)], [(0,)]),
    "bool_index_put": (_index_put_mask, (torch.randn(4, 5), torch.tensor(7.0)),
                       [(torch.randn(4, 5), torch.tensor(-1.0)), (-torch.rand(4, 5), torch.tensor(2.0))],
                       []),
    "bool_index_put_values": (_index_put_mask_values, (torch.randn(4, 5),),
                              [(torch.randn(4, 5),), (torch.rand(4, 5),)], []),
    "unique": (lambda x: torch.unique(x, sorted=True, return_inverse=True, return_counts=True),
               (torch.randint(0, 5, (10,)),),
               [(torch.randint(0, 9, (10,)),), (torch.zeros(10, dtype=torch.int64),)], [(0,), (), (0,)]),
    "repeat_interleave_tensor": (lambda x, r: torch.repeat_interleave(x, r, dim=0),
                                 (torch.randn(3, 2), torch.tensor([1, 2, 3])),
                                 [(torch.randn(3, 2), torch.tensor([0, 4, 1])),
                                  (torch.randn(3, 2), torch.tensor([0, 0, 0]))], [(0,)]),
    "item_as_slice_bound": (lambda x, n: x[: n.item()] + 1, (torch.randn(8, 2), torch.tensor(3)),
                            [(torch.randn(8, 2), torch.tensor(6)), (torch.randn(8, 2), torch.tensor(0))],
                            [(0,)]),
    "item_as_size": (lambda x, n: torch.zeros(n.item(), 2) + x.sum(),
                     (torch.randn(8, 2), torch.tensor(3)),
                     [(torch.randn(8, 2), torch.tensor(5)), (torch.randn(8, 2), torch.tensor(1))],
                     [(0,)]),
    "tolist_split": (lambda x, n: x.split(n.tolist()), (torch.randn(6, 2), torch.tensor([2, 4])),
                     [(torch.randn(6, 2), torch.tensor([5, 1])), (torch.randn(6, 2), torch.tensor([0, 6]))],
                     [(0,), (0,)]),
    "postprocess_head": (_postprocess_head, (torch.rand(10), torch.randn(10, 4)),
                         [(torch.rand(10), torch.randn(10, 4)), (torch.rand(10) * 0.4, torch.randn(10, 4)),
                          (torch.rand(10) * 0.2 + 0.8, torch.randn(10, 4))], [(0,), (0,)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_data_dependent(name, tmp_onnx):
    fn, args, others, symbolic = CASES[name]
    model = Fn(fn)
    pt2onnx.export(model, args, tmp_onnx)
    m = onnx.load(tmp_onnx)
    onnx.checker.check_model(m, full_check=True)
    for out, dims in zip(m.graph.output, symbolic):
        shape = out.type.tensor_type.shape.dim
        for d in dims:
            assert shape[d].dim_param and not shape[d].HasField("dim_value"), (out.name, shape)
    names = [i.name for i in m.graph.input]
    for inputs in [args, *others]:
        expected = model(*inputs)
        if not isinstance(expected, (tuple, list)):
            expected = (expected,)
        _, got = run_ort(tmp_onnx, {n: t.numpy() for n, t in zip(names, inputs)})
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == tuple(e.shape), (g.shape, tuple(e.shape))
            np.testing.assert_allclose(g, e.numpy(), atol=1e-5, rtol=1e-5)
    assert_same_both_ways(model, args, tmp_onnx)
