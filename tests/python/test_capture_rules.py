"""Capture rule 12 (python/pt2onnx/_capture_rules.py): inference batch norm over symbolic sizes
gets its fake result without torch's decomposition. The captured graph must be the one torch
captures without the rule (every value's shape, strides and dtype), the rule must be the path
taken (the decomposition not run) where it applies and torch's own elsewhere, and the file
must match PyTorch on sizes other than the example's."""
import pytest
import torch
from conftest import assert_matches
from torch.export import Dim

import pt2onnx
from pt2onnx import _capture_rules

BN_OP = torch.ops.aten._native_batch_norm_legit_no_training.default


class ConvNet(torch.nn.Module):
    """Conv + BatchNorm2d + ReLU twice, then BatchNorm1d over the pooled channels (a 2-D
    input) and over a [N, C, L] view (a 3-D input), with and without affine parameters."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.b1 = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.b2 = torch.nn.BatchNorm2d(8, affine=False)
        self.b3 = torch.nn.BatchNorm1d(8)
        self.b4 = torch.nn.BatchNorm1d(8)
        for bn in (self.b1, self.b2, self.b3, self.b4):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
        torch.nn.init.uniform_(self.b1.weight, 0.5, 1.5)
        torch.nn.init.uniform_(self.b1.bias, -0.5, 0.5)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.b2(self.c2(y)))
        pooled = self.b3(y.mean((2, 3)))
        seq = self.b4(y.flatten(2))
        return y, pooled, seq


class Transposed(torch.nn.Module):
    """A batch norm over an input neither contiguous nor channels-last (H and W swapped):
    torch's own path."""

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(4)
        self.bn.running_var.fill_(2.0)

    def forward(self, x):
        return self.bn(x.transpose(2, 3))


DYN = {"x": {0: Dim("b"), 2: Dim("h", min=8, max=512), 3: Dim("w", min=8, max=512)}}


def _metas(ep):
    out = []
    for n in ep.graph.nodes:
        v = n.meta.get("val")
        vals = v if isinstance(v, (list, tuple)) else [v]
        out.append((n.op, n.name, str(n.target),
                    [(str(t.shape), str(t.stride()), t.dtype) if isinstance(t, torch.Tensor)
                     else str(t) for t in vals]))
    return out


def _count_decompositions(monkeypatch):
    from torch._decomp import decomposition_table

    calls = []
    original = decomposition_table[BN_OP]

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setitem(decomposition_table, BN_OP, counted)
    return calls


def _capture(model, x, dynamic_shapes, rules):
    if not rules:
        return torch.export.export(model, (x,), dynamic_shapes=dynamic_shapes)
    with pt2onnx.capture_rules(model):
        return torch.export.export(model, (x,), dynamic_shapes=dynamic_shapes)


def _net_and_input(layout, seed):
    torch.manual_seed(seed)
    model = ConvNet().eval()
    x = torch.randn(2, 3, 40, 56)
    if layout == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    return model, x


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_same_graph_without_the_decomposition(layout, monkeypatch):
    model, x = _net_and_input(layout, seed=0)
    calls = _count_decompositions(monkeypatch)
    plain = _capture(model, x, DYN, rules=False)
    assert len(calls) >= 4, "torch's fake tensors no longer run the decomposition here"
    calls.clear()
    fast = _capture(model, x, DYN, rules=True)
    # Channels-last: b4's input (the flattened [N, C, H*W] view of a channels-last tensor) is
    # neither contiguous nor channels-last, and takes torch's path.
    expected = 0 if layout == "contiguous" else 1
    assert len(calls) == expected, "the rule was not taken where it applies"
    assert _metas(fast) == _metas(plain)
    assert str(fast.range_constraints) == str(plain.range_constraints)


def test_other_inputs_take_torchs_path(monkeypatch):
    """A non-contiguous input, and statistics of another length than the channels: the
    decomposition runs (and the mismatch fails as it does in torch)."""
    model = Transposed().eval()
    x = torch.randn(2, 4, 16, 24)
    plain = _capture(model, x, DYN, rules=False)
    calls = _count_decompositions(monkeypatch)
    fast = _capture(model, x, DYN, rules=True)
    assert calls, "a transposed input should run torch's decomposition"
    assert _metas(fast) == _metas(plain)

    class Mismatched(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.batch_norm(x, torch.zeros(3), torch.ones(3))

    with pytest.raises(Exception) as plain_error:
        _capture(Mismatched().eval(), torch.randn(2, 4, 8, 8), DYN, rules=False)
    with pytest.raises(Exception) as rule_error:
        _capture(Mismatched().eval(), torch.randn(2, 4, 8, 8), DYN, rules=True)
    assert type(rule_error.value) is type(plain_error.value)


def test_rule_is_removed_after_the_capture():
    from torch._subclasses import fake_impls

    before = fake_impls.get_fast_op_impls().get(BN_OP)
    with pt2onnx.capture_rules():
        assert fake_impls.get_fast_op_impls()[BN_OP] is _capture_rules._fast_batch_norm_inference
    assert fake_impls.get_fast_op_impls().get(BN_OP) is before


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_export_matches_on_other_sizes(layout, tmp_onnx):
    model, x = _net_and_input(layout, seed=1)
    pt2onnx.export(model, (x,), tmp_onnx, dynamic_shapes=DYN)
    for shape in [(1, 3, 33, 17), (3, 3, 64, 48)]:
        assert_matches(model, tmp_onnx, {"x": torch.randn(shape)}, atol=1e-4, rtol=1e-4)
