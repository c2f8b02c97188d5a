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
    # torch.tensor of read-back numbers (torchvision's resize_boxes does it with sizes): the
    # trace holds a promote_types of their dtypes, with no output.
    "tensor_of_tolist": (lambda x, n: x[: n[0]] * torch.tensor(n.tolist()).sum(),
                         (torch.randn(8, 2), torch.tensor([2, 3])),
                         [(torch.randn(8, 2), torch.tensor([5, 1])),
                          (torch.randn(8, 2), torch.tensor([0, 4]))], [(0,)]),
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


class _Scalars(torch.nn.Module):
    """Python numbers returned from forward: a float (.item(): a SymFloat),
    a bool (a SymBool), an int from a dynamic size (a SymInt), beside a
    tensor."""

    def forward(self, x):
        return x * 2, x.sum().item(), (x > 0).any().item(), x.shape[0] * 2


@pytest.mark.parametrize("opset", [13, 18])
def test_scalar_outputs_are_0d_tensors(opset, tmp_onnx):
    """Each number is a 0-d output: float64 for a Python float (a double, as
    torch computes SymFloats), bool, int64; checked in onnxruntime against
    PyTorch on inputs of other lengths (the bool both ways), and by
    export(verify=True). atol/rtol 1e-5 on the float (float32 summation
    order)."""
    model = _Scalars()
    dyn = {0: torch.export.Dim.DYNAMIC}
    torch.manual_seed(0)
    r = pt2onnx.export(model, (torch.randn(4, 3),), tmp_onnx, opset=opset,
                       dynamic_shapes=(dyn,), verify=True)
    assert len(r.checks["verify"]) == 2
    m = onnx.load(tmp_onnx)
    onnx.checker.check_model(m, full_check=True)
    P = onnx.TensorProto
    want = [P.FLOAT, P.DOUBLE, P.BOOL, P.INT64]
    assert [o.type.tensor_type.elem_type for o in m.graph.output] == want
    for o in m.graph.output[1:]:
        assert o.type.tensor_type.HasField("shape") and len(o.type.tensor_type.shape.dim) == 0
    for x in [torch.randn(7, 3), -torch.rand(2, 3) - 0.1, torch.randn(1, 3)]:
        expected = model(x)
        _, got = run_ort(tmp_onnx, {"x": x.numpy()})
        assert len(got) == 4
        np.testing.assert_allclose(got[0], expected[0].numpy(), atol=1e-6)
        for g, e, t in zip(got[1:], expected[1:], [float, bool, int]):
            assert type(e) is t and g.shape == (), (g.shape, e)
            np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-5)
        assert got[2].item() is expected[2] and got[3].item() == expected[3]


def test_scalar_float_output_both_ways(tmp_onnx):
    """The .pt2 path (torch.export.save, then the pt2onnx command) writes the
    same file for a float and an int output. (A bool output has no .pt2
    form: torch's serializer cannot write a SymBool output.)"""
    model = Fn(lambda x: (x.mean().item(), x.shape[0] + 1))
    args = (torch.randn(4, 3),)
    ds = ({0: torch.export.Dim.DYNAMIC},)
    pt2onnx.export(model, args, tmp_onnx, dynamic_shapes=(ds,))
    assert_same_both_ways(model, args, tmp_onnx, dynamic_shapes=(ds,))
    x = torch.randn(6, 3)
    _, (mean, n) = run_ort(tmp_onnx, {"args_0": x.numpy()})
    assert mean.dtype == np.float64 and mean.shape == () and n.shape == ()
    np.testing.assert_allclose(mean, x.mean().item(), atol=1e-6, rtol=1e-6)
    assert n.item() == 7
