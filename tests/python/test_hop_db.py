"""PyTorch's own higher-order-op samples (torch.testing._internal.hop_db:
cond, while_loop, while_loop_stack_output, scan, map, invoke_subgraph; torch
>= 2.14 adds switch and flex_gemm),
exported and run in onnxruntime against PyTorch on the sample and on other
inputs: fresh values, values small enough to take the other branch of a cond,
other trip counts for loops."""

import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree
from conftest import ort_session

import pt2onnx

# Ops of hop_db that are not user-facing control flow: flex attention (needs
# its own lowering), autograd/quantization/distributed wrappers, inline asm.
NOT_CONTROL_FLOW = {
    "flex_attention", "flex_attention_backward", "local_map_hop", "inline_asm_elementwise",
    "register_hook", "auto_functionalize", "invoke_quant", "invoke_quant_packed",
}


def _ops():
    from torch.testing._internal.hop_db import hop_db

    return [o for o in hop_db if o.name not in NOT_CONTROL_FLOW]


class _Call(torch.nn.Module):
    def __init__(self, fn, kwargs):
        super().__init__()
        self.fn, self.kwargs = fn, kwargs

    def forward(self, *args):
        return self.fn(*args, **self.kwargs)


def _variants(args):
    """The sample, fresh values of the same kind, then small values and other
    integers (the other cond branch, other loop trip counts)."""
    gen = torch.Generator().manual_seed(0)

    def fresh(t, scale, ints):
        if not isinstance(t, torch.Tensor):
            return t
        if t.dtype.is_floating_point:
            return (torch.rand(t.shape, generator=gen, dtype=torch.float64) * 1.9 + 0.1).to(
                t.dtype) * scale
        return torch.full_like(t, ints)

    yield args
    yield pytree.tree_map(lambda t: fresh(t, 1.0, 5), args)
    yield pytree.tree_map(lambda t: fresh(t, 0.05, 0), args)
    yield pytree.tree_map(lambda t: fresh(t, 0.5, 1), args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", _ops(), ids=lambda o: f"{o.name}.{o.variant_test_name}")
def test_hop_db(op, dtype, tmp_onnx):
    for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
        args = (sample.input, *sample.args)
        model = _Call(op.op, sample.kwargs)
        pt2onnx.export(model, args, tmp_onnx)
        for inputs in _variants(args):
            expected = pytree.tree_leaves(model(*inputs))
            feeds = [t for t in pytree.tree_leaves(inputs) if isinstance(t, torch.Tensor)]
            sess = ort_session(tmp_onnx)
            got = sess.run(None, {i.name: t.numpy() for i, t in zip(sess.get_inputs(), feeds)})
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                assert g.shape == tuple(e.shape)
                np.testing.assert_allclose(g, e.numpy(), atol=1e-5, rtol=1e-5)


# torch >= 2.14's switch and flex_gemm beyond hop_db's samples (whose switch
# index is only ever 0 or 1 of its three branches).
_HAS_SWITCH = hasattr(torch.ops.higher_order, "switch")
_HAS_FLEX_GEMM = hasattr(torch.ops.higher_order, "flex_gemm")


class _Switch(torch.nn.Module):
    def forward(self, index, x, y):
        from torch._higher_order_ops.switch import switch

        return switch(index, (lambda x, y: (x.cos(), y + 1),
                              lambda x, y: (x.sin() * y, y.exp()),
                              lambda x, y: (x.abs() - y, y * y)), (x, y))


@pytest.mark.skipif(not _HAS_SWITCH, reason="torch < 2.14 has no torch.switch")
def test_switch_every_branch(tmp_onnx):
    """Each branch index, and indices out of range (torch.switch clamps them
    into [0, 3)), on inputs other than the export's: values and batch size."""
    batch = torch.export.Dim("batch")
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    pt2onnx.export(_Switch(), (torch.tensor(1), x, y), tmp_onnx,
                   dynamic_shapes=({}, {0: batch}, {0: batch}))
    sess = ort_session(tmp_onnx)
    gen = torch.Generator().manual_seed(1)
    for k in (0, 1, 2, -3, 7):
        x, y = torch.randn(5, 3, generator=gen), torch.randn(5, 3, generator=gen)
        idx = torch.tensor(k)
        expected = _Switch()(idx, x, y)
        got = sess.run(None, {"index": idx.numpy(), "x": x.numpy(), "y": y.numpy()})
        assert len(got) == 2
        for g, e in zip(got, expected):
            assert g.shape == tuple(e.shape) == (5, 3)
            np.testing.assert_allclose(g, e.numpy(), atol=1e-5, rtol=1e-5)


class _FlexAddmm(torch.nn.Module):
    def forward(self, bias, a, b):
        from torch._higher_order_ops.flex_gemm import flex_gemm

        return flex_gemm(torch.addmm, (bias, a, b), lambda acc: torch.nn.functional.gelu(acc) * 2,
                         gemm_kwargs={"beta": 0.5, "alpha": 1.5})


class _FlexBmm(torch.nn.Module):
    def forward(self, a, b):
        from torch._higher_order_ops.flex_gemm import flex_gemm

        return flex_gemm(torch.bmm, (a, b), lambda acc: (acc.sigmoid(), acc.amax(-1)))


@pytest.mark.skipif(not _HAS_FLEX_GEMM, reason="torch < 2.14 has no flex_gemm")
@pytest.mark.parametrize("case", ["addmm", "bmm"])
def test_flex_gemm(case, tmp_onnx):
    """addmm with beta/alpha (gemm_kwargs) and an epilogue; bmm with an
    epilogue of two outputs; checked on fresh values."""
    gen = torch.Generator().manual_seed(2)

    def r(*shape):
        return torch.randn(*shape, generator=gen)

    if case == "addmm":
        model, make = _FlexAddmm(), lambda: (r(4), r(3, 5), r(5, 4))
    else:
        model, make = _FlexBmm(), lambda: (r(2, 3, 5), r(2, 5, 4))
    pt2onnx.export(model, make(), tmp_onnx)
    sess = ort_session(tmp_onnx)
    for _ in range(2):
        inputs = make()
        expected = pytree.tree_leaves(model(*inputs))
        got = sess.run(None, {i.name: t.numpy() for i, t in zip(sess.get_inputs(), inputs)})
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == tuple(e.shape)
            np.testing.assert_allclose(g, e.numpy(), atol=1e-5, rtol=1e-5)
