"""PyTorch's own higher-order-op samples (torch.testing._internal.hop_db:
cond, while_loop, while_loop_stack_output, scan, map, invoke_subgraph),
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
