"""Every function torch can record on symbolic values (SymInt, SymFloat,
SymBool) converts, or is listed here with the reason no graph holds it
(issue 39).

The list is torch's own, not a hand-picked subset: its serializer's
(torch._export.serde.serialize._SYM_OPS) and the table its tracing records
them from (torch.fx.experimental.sym_node.METHOD_TO_OPERATOR: math.ceil,
round, abs, xor, torch._sym_sqrt, ...). A function a newer torch adds fails
test_every_sym_function_is_placed_or_listed until a program here places it.

Each program computes a size, a SymFloat or a SymBool from its input's first
dim and uses it in a tensor. It runs two ways: torch.compile(dynamic=True)
with the pt2onnx backend, against eager at three sizes, and torch.export
with that dim dynamic, converted at opsets 13 and 18 and run in onnxruntime
at three sizes other than the export's. The function must reach at least
one of the two graphs (torch.export specializes some: a size's square root
is evaluated once), and is checked in both."""

import math
import operator

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch.export import Dim

import pt2onnx
from pt2onnx import dynamo_backend


def S(x):
    return x.shape[0]


def _ite(cond):
    return lambda x: x.new_ones(torch.sym_ite(cond(S(x)), 3, 5)) + x.sum()


# The function's qualified name (module.name, as graphs name it) -> programs placing it.
PROGRAMS = {
    "_operator.add": [lambda x: x.new_ones(S(x) + 2)],
    "_operator.sub": [lambda x: x.new_ones(S(x) - 1)],
    "_operator.mul": [lambda x: x.new_ones(S(x) * 2)],
    # Negative operands too: Python's // and >> round toward minus infinity.
    "_operator.floordiv": [lambda x: x.new_ones(S(x) // 3),
                           lambda x: x.new_ones((S(x) - 20) // 3 + 10)],
    "_operator.mod": [lambda x: x.new_ones(S(x) % 3 + 1)],
    "_operator.pow": [lambda x: x.new_ones(S(x) ** 2), lambda x: x * (S(x) / 4) ** 0.5],
    "_operator.truediv": [lambda x: x * (S(x) / 3)],
    "_operator.neg": [lambda x: x.new_ones(max(-S(x), -20) + 21)],
    "_operator.abs": [lambda x: x.new_ones(abs(S(x) - 10) + 1)],
    "_operator.lshift": [lambda x: x.new_ones(S(x) << 1)],
    "_operator.rshift": [lambda x: x.new_ones(S(x) >> 1),
                         lambda x: x.new_ones(((S(x) - 20) >> 2) + 10)],
    "_operator.eq": [_ite(lambda n: n == 8)],
    "_operator.ne": [_ite(lambda n: n != 8)],
    "_operator.lt": [_ite(lambda n: n < 8)],
    "_operator.le": [_ite(lambda n: n <= 8)],
    "_operator.gt": [_ite(lambda n: n > 8)],
    "_operator.ge": [_ite(lambda n: n >= 8)],
    "_operator.and_": [lambda x: x.new_ones(S(x) & 6), _ite(lambda n: (n > 4) & (n < 10))],
    "_operator.or_": [lambda x: x.new_ones(S(x) | 1), _ite(lambda n: (n < 4) | (n > 10))],
    # SymBool ^ SymBool is a TypeError in torch itself.
    "_operator.xor": [lambda x: x.new_ones(S(x) ^ 1)],
    "torch.sym_not": [_ite(lambda n: torch.sym_not(n > 8))],
    "torch.sym_ite": [_ite(lambda n: n > 8)],
    "torch.sym_max": [lambda x: x.new_ones(max(S(x), 6))],
    "torch.sym_min": [lambda x: x.new_ones(min(S(x), 6))],
    "torch.sym_float": [lambda x: x * torch.sym_float(S(x))],
    "math.trunc": [lambda x: x.new_ones(math.trunc(S(x) / 3))],
    "math.ceil": [lambda x: x.new_ones(math.ceil(S(x) / 3))],
    # A SymFloat's // is traced as math.floor of the quotient.
    "math.floor": [lambda x: x.new_ones(math.floor(S(x) / 3)), lambda x: x * ((S(x) / 2) // 3)],
    "builtins.round": [lambda x: x.new_ones(round(S(x) / 3)), lambda x: x * round(S(x) / 7, 2)],
    "torch._sym_sqrt": [lambda x: x * math.sqrt(S(x) / 2)],
    "torch._sym_cos": [lambda x: x * math.cos(S(x) / 2)],
    "torch._sym_sin": [lambda x: x * math.sin(S(x) / 2)],
    "torch._sym_tan": [lambda x: x * math.tan(S(x) / 50)],
    "torch._sym_cosh": [lambda x: x * math.cosh(S(x) / 50)],
    "torch._sym_sinh": [lambda x: x * math.sinh(S(x) / 50)],
    "torch._sym_tanh": [lambda x: x * math.tanh(S(x) / 50)],
    "torch._sym_asin": [lambda x: x * math.asin(1 / S(x))],
    "torch._sym_acos": [lambda x: x * math.acos(1 / S(x))],
    "torch._sym_atan": [lambda x: x * math.atan(S(x) / 2)],
    "torch._sym_log2": [lambda x: x * math.log2(S(x) / 2)],
}

# Functions in torch's lists that no graph holds, with the reason; the programs
# that would place them show it (they must not appear in either graph).
NOT_IN_GRAPHS = {
    "torch.sym_int": ("torch.sym_int(x) of a SymFloat is traced as math.trunc(x) (converted), "
                      "so graphs hold that instead (its converter stays, for programs made "
                      "otherwise)", lambda x: x.new_ones(torch.sym_int(S(x) / 2)), None),
    "_operator.pos": ("unary + is the identity on torch's symbolic expressions: tracing returns "
                      "the operand and records nothing", lambda x: x.new_ones(+S(x)), None),
    "torch.fx.experimental.sym_node.<lambda>": (
        "SymFloat.is_integer() (the only unnamed entry): torch.compile breaks the graph there "
        "and runs it in Python; torch.export records it as a lambda whose generated code does "
        "not compile (SyntaxError), so no program is made",
        lambda x: x.new_ones(torch.sym_ite((S(x) / 2).is_integer(), 3, 5)) + x.sum(),
        SyntaxError),
}


def _qualname(f):
    return f"{f.__module__}.{f.__name__}"


def _torch_sym_functions():
    from torch._export.serde.serialize import _SYM_OPS
    from torch.fx.experimental.sym_node import METHOD_TO_OPERATOR

    return {_qualname(f) for f in [*_SYM_OPS, *METHOD_TO_OPERATOR.values()]}


def test_every_sym_function_is_placed_or_listed():
    missing = _torch_sym_functions() - set(PROGRAMS) - set(NOT_IN_GRAPHS)
    assert not missing, f"functions torch records on symbolic values, not covered here: {missing}"


def _call_targets(gm):
    return {_qualname(n.target) for n in gm.graph.nodes
            if n.op == "call_function" and not isinstance(n.target, torch._ops.OpOverload)
            and hasattr(n.target, "__name__")}


def _compiled(fn, monkeypatch):
    """fn compiled with dynamic=True, checked against eager at three sizes; the
    functions the converted graphs called."""
    seen = set()
    program = dynamo_backend._program

    def spy(gm, *args, **kwargs):
        seen.update(_call_targets(gm))
        return program(gm, *args, **kwargs)

    monkeypatch.setattr(dynamo_backend, "_program", spy)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="pt2onnx", dynamic=True)
    with torch.inference_mode():
        for n in (5, 8, 13):
            torch.manual_seed(n)
            x = torch.randn(n, 4)
            torch.testing.assert_close(compiled(x), fn(x), rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
    return seen


class _Call(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _exported(fn, tmp_path, opsets=(13, 18)):
    """fn exported with its first dim dynamic (Dim.AUTO), converted at
    `opsets` and run in onnxruntime at three other sizes, those where torch's
    program is valid: torch.export evaluates some functions of a size once
    (math.sqrt(n / 2) becomes 2.12...) and guards the program on that size
    (ExportedProgram._guards_code; ep.module() refuses other sizes), where
    the export size is checked. The program (None where torch's verifier
    refuses the function in an exported program) and the functions it
    called."""
    try:
        ep = torch.export.export(_Call(fn), (torch.randn(9, 4),),
                                 dynamic_shapes=({0: Dim.AUTO},))
    except torch._export.verifier.SpecViolationError as e:
        assert "is not an allowed operator type" in str(e), e
        return None, set()
    sizes = []
    for n in (3, 16, 40):
        try:
            ep.module()(torch.randn(n, 4))
            sizes.append(n)
        except AssertionError as e:  # a guard torch.export recorded
            assert "Guard failed" in str(e), e
    for opset in opsets:
        path = str(tmp_path / f"m{opset}.onnx")
        pt2onnx.export(ep, (), path, opset=opset)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        for n in sizes or [9]:
            x = torch.randn(n, 4)
            (got,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
            want = fn(x).numpy()
            assert got.shape == want.shape, (opset, n, got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return ep, _call_targets(ep.graph_module)


# Bitwise operators on SymInts need ONNX's BitwiseAnd / Or / Xor (opset 18):
# their export runs at 18 only, and at 13 is refused with that reason.
_BITWISE = {("_operator.and_", 0), ("_operator.or_", 0), ("_operator.xor", 0)}


@pytest.mark.parametrize("name,k", [(n, k) for n, progs in PROGRAMS.items()
                                    for k in range(len(progs))])
def test_sym_function_converts(name, k, monkeypatch, tmp_path):
    fn = PROGRAMS[name][k]
    placed = _compiled(fn, monkeypatch)
    if (name, k) in _BITWISE:
        ep, in_program = _exported(fn, tmp_path, opsets=(18,))
        if ep is not None:
            with pytest.raises(pt2onnx.ConversionError, match="needs opset 18"):
                pt2onnx.export(ep, (), str(tmp_path / "m13.onnx"), opset=13)
            assert not (tmp_path / "m13.onnx").exists()
    else:
        _, in_program = _exported(fn, tmp_path)
    assert name in placed | in_program, f"no graph holds {name}: {sorted(placed | in_program)}"


@pytest.mark.parametrize("name", list(NOT_IN_GRAPHS))
def test_unplaceable_sym_functions_are_as_listed(name, monkeypatch, tmp_path):
    _, fn, export_error = NOT_IN_GRAPHS[name]
    placed = _compiled(fn, monkeypatch)
    if export_error is None:
        placed |= _exported(fn, tmp_path)[1]
    else:
        with pytest.raises(export_error):
            torch.export.export(_Call(fn), (torch.randn(9, 4),), dynamic_shapes=({0: Dim.AUTO},))
    assert name not in placed, placed


def test_integer_pow_at_opset_11_is_refused_with_the_reason(tmp_path):
    """ONNX's Pow takes integers from opset 12: at 11 the export names the node
    and the opset it needs, and writes nothing."""
    ep = torch.export.export(_Call(PROGRAMS["_operator.pow"][0]), (torch.randn(9, 2),),
                             dynamic_shapes=({0: Dim("n", min=2, max=64)},))
    with pytest.raises(pt2onnx.ConversionError, match="integer inputs need opset 12"):
        pt2onnx.export(ep, (), str(tmp_path / "m.onnx"), opset=11)
    assert not (tmp_path / "m.onnx").exists()
