"""Control flow (issue 9): torch.cond -> If, while_loop -> Loop, scan and map
-> Scan, runtime asserts dropped. Every model runs in onnxruntime on inputs
other than the export inputs, taking both branches of every If and several trip
counts of every loop, and the .pt2 command gives the same bytes."""

import numpy as np
import onnx
import pytest
import torch
from conftest import assert_same_both_ways, run_ort
from torch._higher_order_ops.map import map as hop_map
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop
from torch.export import Dim

import pt2onnx

ATOL = RTOL = 1e-5


def export_and_check(model, args, path, cases, *, dynamic_shapes=None, opset=18, pt2=True):
    """Exports, checks the model with onnx.checker (full), runs every input
    tuple of `cases` in onnxruntime and compares with PyTorch; returns the ops
    of the main graph."""
    model.eval()
    pt2onnx.export(model, args, path, dynamic_shapes=dynamic_shapes, opset=opset)
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    names = [i.name for i in m.graph.input]
    for inputs in cases:
        with torch.no_grad():
            expected = model(*inputs)
        if not isinstance(expected, (tuple, list)):
            expected = (expected,)
        _, got = run_ort(path, {n: x.numpy() for n, x in zip(names, inputs)})
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == tuple(e.shape)
            np.testing.assert_allclose(g, e.numpy(), atol=ATOL, rtol=RTOL)
    if pt2:
        assert_same_both_ways(model, args, path, dynamic_shapes=dynamic_shapes, opset=opset)
    return [n.op_type for n in m.graph.node]


def subgraph_ops(path):
    m = onnx.load(path)
    ops = []

    def walk(g):
        for n in g.node:
            ops.append(n.op_type)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)

    walk(m.graph)
    return ops


# ---------------------------------------------------------------- cond -> If


class CondTensorPred(torch.nn.Module):
    """Two outputs per branch; the branches read a parameter and the operands."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, x, y):
        def true_fn(x, y):
            return (x + y * self.w).sin(), x.sum(0)

        def false_fn(x, y):
            return (x - y).cos() * 2, y.amax(0)

        return torch.cond(x.sum() > 0, true_fn, false_fn, (x, y))


@pytest.mark.parametrize("opset", [13, 18, 21])
def test_cond_tensor_predicate(tmp_onnx, opset):
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    pos, neg = torch.rand(5, 4) + 0.1, -torch.rand(5, 4) - 0.1
    batch = Dim("batch")
    ops = export_and_check(CondTensorPred(), (x, y), tmp_onnx,
                           [(pos, torch.randn(5, 4)), (neg, torch.randn(5, 4)),
                            (torch.randn(2, 4), torch.randn(2, 4))],
                           dynamic_shapes=({0: batch}, {0: batch}), opset=opset)
    assert "If" in ops


class CondShapePred(torch.nn.Module):
    """The predicate is a symbolic shape (a SymBool), not a tensor."""

    def forward(self, x):
        return torch.cond(x.shape[0] > 4, lambda x: x * 2 + 1, lambda x: x.flip(0) - 1, (x,))


def test_cond_shape_predicate(tmp_onnx):
    ops = export_and_check(CondShapePred(), (torch.randn(3, 2),), tmp_onnx,
                           [(torch.randn(6, 2),), (torch.randn(2, 2),), (torch.randn(5, 2),)],
                           dynamic_shapes=({0: Dim("n")},))
    assert "If" in ops


class CondReadsSizes(torch.nn.Module):
    """Branches use a symbolic size: torch passes it to them as a SymInt operand."""

    def forward(self, x):
        n = x.shape[0]
        return torch.cond(x.sum() > 0, lambda x: x * n + x.shape[0],
                          lambda x: x.new_ones(n, 4) * 2.0, (x,))


def test_cond_reads_symbolic_sizes(tmp_onnx):
    batch = Dim("batch")
    ep = torch.export.export(CondReadsSizes(), (torch.randn(4, 4),), dynamic_shapes=({0: batch},))
    cond = next(n for n in ep.graph.nodes if "cond" in str(n.target))
    assert any(isinstance(a, torch.fx.Node) and "sym_size" in a.name for a in cond.args[3])
    export_and_check(CondReadsSizes(), (torch.randn(4, 4),), tmp_onnx,
                     [(torch.rand(6, 4),), (-torch.rand(2, 4),)],
                     dynamic_shapes=({0: batch},))


class CondInplaceNoGrad(torch.nn.Module):
    """Branches as real modules write them: in-place ops (ReLU(inplace=True),
    add_, a write through a view) in one, a no-grad block (the wrapper
    torch.export records around it) in the other."""

    def __init__(self):
        super().__init__()
        self.act = torch.nn.ReLU(inplace=True)
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        def true_fn(x):
            y = self.lin(x)
            self.act(y)
            y.add_(1)
            y[0].fill_(2.0)
            return y

        def false_fn(x):
            with torch.no_grad():
                return x.sin() * 2

        return torch.cond(x.sum() > 0, true_fn, false_fn, (x,))


def test_cond_branches_with_inplace_ops_and_no_grad(tmp_onnx):
    export_and_check(CondInplaceNoGrad(), (torch.rand(2, 3),), tmp_onnx,
                     [(torch.rand(2, 3),), (-torch.rand(2, 3),)])


class NestedCond(torch.nn.Module):
    def forward(self, x, k):
        def inner_true(x, k):
            return torch.cond(k.sum() > 1, lambda x: x * 3, lambda x: x * 4, (x,))

        def inner_false(x, k):
            return torch.cond(k.sum() < -1, lambda x: x - 3, lambda x: x - 4, (x,))

        return torch.cond(k.sum() > 0, inner_true, inner_false, (x, k))


def test_nested_cond(tmp_onnx):
    x = torch.randn(3)
    cases = [(x, torch.tensor([2.0])), (x, torch.tensor([0.5])), (x, torch.tensor([-2.0])),
             (x, torch.tensor([-0.5]))]
    export_and_check(NestedCond(), (x, torch.tensor([1.5])), tmp_onnx, cases)
    assert subgraph_ops(tmp_onnx).count("If") == 3


class EarlyExit(torch.nn.Module):
    """An early-exit classifier: a cheap head answers when it is confident,
    otherwise deeper layers run. Both paths use weights."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
        self.exit_head = torch.nn.Linear(16, 4)
        self.deep = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(),
                                        torch.nn.Linear(16, 16), torch.nn.ReLU())
        self.final_head = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = self.stem(x)
        early = self.exit_head(h).softmax(-1)
        confident = early.amax(-1).min() > 0.5

        def stop(h, early):
            return early.clone()

        def go_on(h, early):
            return self.final_head(self.deep(h)).softmax(-1)

        return torch.cond(confident, stop, go_on, (h, early))


def test_early_exit_network(tmp_onnx):
    torch.manual_seed(0)
    m = EarlyExit()
    # A huge bias on one class makes the early head confident.
    confident_input = torch.randn(2, 8)
    with torch.no_grad():
        took = []
        for scale in (0.0, 200.0):
            m.exit_head.bias.zero_()
            m.exit_head.bias[0] = scale
            took.append(bool(m.exit_head(m.stem(confident_input)).softmax(-1).amax(-1).min() > 0.5))
    assert took == [False, True]
    export_and_check(m, (torch.randn(2, 8),), tmp_onnx,
                     [(torch.randn(3, 8),), (torch.randn(1, 8),)],
                     dynamic_shapes=({0: Dim("batch")},))
    # The other branch: same weights but a confident exit head.
    with torch.no_grad():
        m.exit_head.bias[0] = 200.0
    export_and_check(m, (torch.randn(2, 8),), tmp_onnx,
                     [(torch.randn(3, 8),), (torch.randn(1, 8),)],
                     dynamic_shapes=({0: Dim("batch")},), pt2=False)


# ------------------------------------------------------- while_loop -> Loop


class WhileCount(torch.nn.Module):
    """A data-dependent trip count (read from an input tensor); the body reads
    a tensor from outside the loop."""

    def forward(self, x, n, step):
        def cond_fn(i, x):
            return i < n.sum()

        def body_fn(i, x):
            return i + 1, x * 0.5 + step

        return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


@pytest.mark.parametrize("opset", [13, 18])
def test_while_loop_trip_counts(tmp_onnx, opset):
    x, step = torch.randn(4), torch.randn(4)
    cases = [(torch.randn(4), torch.tensor(t), torch.randn(4)) for t in (0, 1, 5, 17)]
    ops = export_and_check(WhileCount(), (x, torch.tensor(3), step), tmp_onnx, cases,
                           opset=opset)
    assert "Loop" in ops


class WhileConverge(torch.nn.Module):
    """The loop stops on a condition the body computes (a carried flag):
    Newton iterations for sqrt until converged."""

    def forward(self, a):
        def cond_fn(x, done, it):
            return ~done & (it < 100)

        def body_fn(x, done, it):
            nx = 0.5 * (x + a / x)
            return nx, (nx - x).abs().max() < 1e-6, it + 1

        x, _, it = while_loop(cond_fn, body_fn,
                              (a.clone(), torch.tensor(False), torch.tensor(0)))
        return x, it


def test_while_loop_condition_from_body(tmp_onnx):
    a = torch.rand(5) + 1
    cases = [(torch.rand(5) * 100 + 1,), (torch.ones(5),), (torch.rand(3) + 0.5,)]
    export_and_check(WhileConverge(), (a,), tmp_onnx, cases,
                     dynamic_shapes=({0: Dim("n")},))


# --------------------------------------------------------------- scan / map


class CumulativeScan(torch.nn.Module):
    """A running sum and running max along a dim, as scan computes them."""

    def __init__(self, dim, reverse):
        super().__init__()
        self.dim, self.reverse = dim, reverse

    def forward(self, xs, init):
        def combine(carry, x):
            s, m = carry
            ns, nm = s + x, torch.maximum(m, x)
            return (ns, nm), ns * 2 - nm

        # Two distinct carries: with (init, init) torch 2.13 traces both as
        # one placeholder of the combine graph (its ExportedProgram is then
        # wrong in PyTorch too).
        (s, m), ys = scan(combine, (init, init - 1), xs, dim=self.dim, reverse=self.reverse)
        return s, m, ys


@pytest.mark.parametrize("dim,reverse", [(0, False), (1, True)])
def test_scan_cumulative(tmp_onnx, dim, reverse):
    xs = torch.randn(6, 5) if dim == 0 else torch.randn(5, 6)
    init = torch.zeros(5)
    cases = [(torch.randn(*xs.shape), torch.randn(5)), (torch.randn(*xs.shape), init)]
    export_and_check(CumulativeScan(dim, reverse), (xs, init), tmp_onnx, cases)
    assert "Scan" in subgraph_ops(tmp_onnx)


def test_scan_dynamic_length(tmp_onnx):
    xs, init = torch.randn(6, 5), torch.zeros(5)
    cases = [(torch.randn(n, 5), torch.randn(5)) for n in (1, 3, 11)]
    export_and_check(CumulativeScan(0, False), (xs, init), tmp_onnx, cases,
                     dynamic_shapes=({0: Dim("steps")}, None))


class MapRows(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, xs, y):
        return hop_map(lambda x, y: self.lin(x * y + 1).relu(), xs, y)


def test_map(tmp_onnx):
    cases = [(torch.randn(4, 3), torch.randn(3)), (torch.randn(7, 3), torch.randn(3))]
    export_and_check(MapRows(), (torch.randn(5, 3), torch.randn(3)), tmp_onnx, cases,
                     dynamic_shapes=({0: Dim("n")}, None))


# ------------------------------------------------------- runtime assertions


class Checks(torch.nn.Module):
    def forward(self, x, k):
        n = k.item()
        torch._check(n >= 1)
        torch._check(n <= x.shape[0])
        torch._check_is_size(n)
        return x[:n] * 2


def test_runtime_checks_dropped(tmp_onnx):
    x = torch.randn(8, 2)
    cases = [(torch.randn(8, 2), torch.tensor(3)), (torch.randn(8, 2), torch.tensor(8))]
    export_and_check(Checks(), (x, torch.tensor(5)), tmp_onnx, cases)
    ep = torch.export.export(Checks(), (x, torch.tensor(5)))
    targets = {str(n.target) for n in ep.graph.nodes}
    assert any("_assert_scalar" in t or "sym_constrain_range" in t for t in targets), targets


def test_unsupported_op_in_branch_is_reported(tmp_onnx):
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda x: torch.linalg.matrix_exp(x),
                              lambda x: x.clone(), (x,))

    import os

    with pytest.raises(pt2onnx.ConversionError, match="matrix_exp"):
        pt2onnx.export(M(), (torch.randn(2, 2),), tmp_onnx)
    assert not os.path.exists(tmp_onnx)


def test_guide_example(tmp_path, monkeypatch):
    """The guide's control-flow example runs as printed and gives an If."""
    import doc_blocks

    page = "docs/guides/modules.md"
    code = doc_blocks.section_code(page, "Control flow, data-dependent shapes, recurrent layers")
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(code, page, "exec"), scope)
    m = onnx.load(str(tmp_path / "early_exit.onnx"))
    assert [n.op_type for n in m.graph.node].count("If") == 1
    model = scope["model"]
    for x in (torch.rand(3, 8), -torch.rand(5, 8)):  # both branches
        _, (got,) = run_ort(str(tmp_path / "early_exit.onnx"), {"x": x.numpy()})
        with torch.no_grad():
            np.testing.assert_allclose(got, model(x).numpy(), atol=1e-5, rtol=1e-5)
