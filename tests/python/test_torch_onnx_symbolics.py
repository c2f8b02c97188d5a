"""torch.onnx symbolic functions unchanged in pt2onnx (issue 36): g.op with
torch.onnx's attribute suffixes, register_custom_op_symbolic /
unregister_custom_op_symbolic, and autograd.Functions with a `symbolic`
exported through it (their forward not traced)."""

import numpy as np
import onnx
import pytest
import torch
from conftest import assert_matches
from torch.onnx.symbolic_helper import parse_args

import pt2onnx


@torch.library.custom_op("pt2onnx_symtest::foo_forward", mutates_args=())
def foo_forward(a: torch.Tensor, b: torch.Tensor, attr1: float, attr2: int) -> torch.Tensor:
    return a * attr1 + b * attr2


@foo_forward.register_fake
def _(a, b, attr1, attr2):
    return torch.empty_like(a)


class FooModel(torch.nn.Module):  # the documentation's custom operator example
    def __init__(self, attr1, attr2):
        super().__init__()
        self.attr1 = attr1
        self.attr2 = attr2

    def forward(self, input1, input2):
        return torch.ops.pt2onnx_symtest.foo_forward(input1, input2, self.attr1, self.attr2)


@parse_args("v", "v", "f", "i")
def symbolic_foo_forward(g, input1, input2, attr1, attr2):
    return g.op("custom_domain::Foo", input1, input2, attr1_f=attr1, attr2_i=attr2)


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


@pytest.fixture
def registered():
    pt2onnx.register_custom_op_symbolic("pt2onnx_symtest::foo_forward", symbolic_foo_forward, 9)
    yield
    pt2onnx.unregister_custom_op_symbolic("pt2onnx_symtest::foo_forward", 9)


def test_suffixes_become_typed_attributes(tmp_onnx, registered):
    x = (torch.randn(2, 3), torch.randn(2, 3))
    pt2onnx.export(FooModel(2, 3), x, tmp_onnx, custom_opsets={"custom_domain": 2})
    m = onnx.load(tmp_onnx)
    (node,) = [n for n in m.graph.node if n.op_type == "Foo"]
    assert node.domain == "custom_domain"
    types = {a.name: a.type for a in node.attribute}
    # torch.onnx writes attr1 as a float (2 given as an int) and attr2 as an int.
    assert types == {"attr1": onnx.AttributeProto.FLOAT, "attr2": onnx.AttributeProto.INT}
    assert _attrs(node) == {"attr1": 2.0, "attr2": 3}
    assert {o.domain: o.version for o in m.opset_import}["custom_domain"] == 2


def test_unregister_restores_the_error(tmp_onnx, registered):
    x = (torch.randn(2, 3), torch.randn(2, 3))
    pt2onnx.unregister_custom_op_symbolic("pt2onnx_symtest::foo_forward", 9)
    with pytest.raises(pt2onnx.ConversionError, match="foo_forward"):
        pt2onnx.export(FooModel(2.0, 3), x, tmp_onnx)


def test_registration_applies_from_its_opset(tmp_onnx):
    pt2onnx.register_custom_op_symbolic("pt2onnx_symtest::foo_forward", symbolic_foo_forward, 20)
    try:
        x = (torch.randn(2, 3), torch.randn(2, 3))
        with pytest.raises(pt2onnx.ConversionError):  # opset 18 < 20: not registered there
            pt2onnx.export(FooModel(2.0, 3), x, tmp_onnx, opset=18)
        pt2onnx.export(FooModel(2.0, 3), x, tmp_onnx, opset=21)
        assert any(n.op_type == "Foo" for n in onnx.load(tmp_onnx).graph.node)
    finally:
        pt2onnx.unregister_custom_op_symbolic("pt2onnx_symtest::foo_forward", 20)


def test_suffixed_lists_strings_and_tensors(tmp_onnx):
    """A symbolic in standard ops with each suffix kind, run in onnxruntime."""
    def symbolic(g, input1, input2, attr1, attr2):
        x = g.op("Transpose", input1, perm_i=[1, 0])
        x = g.op("Transpose", x, perm_i=(1, 0))
        scaled = g.op("Mul", x, g.op("Constant", value_t=torch.tensor([2.0])))
        ysum = g.op("ReduceSum", input2, g.op("Constant", value_t=torch.tensor([1])),
                    keepdims_i=1)
        return g.op("Add", g.op("Add", scaled, ysum),
                    g.op("Cast", g.op("Constant", value_t=torch.tensor([1])), to_i=1))

    pt2onnx.register_custom_op_symbolic("pt2onnx_symtest::foo_forward", symbolic, 9)
    try:
        m = FooModel(2.0, 0)
        x = (torch.randn(2, 3), torch.randn(2, 3))
        pt2onnx.export(m, x, tmp_onnx)

        class Expected(torch.nn.Module):
            def forward(self, a, b):
                return a * 2 + b.sum(1, keepdim=True) + 1

        assert_matches(Expected(), tmp_onnx, {"input1": torch.randn(2, 3),
                                              "input2": torch.randn(2, 3)})
    finally:
        pt2onnx.unregister_custom_op_symbolic("pt2onnx_symtest::foo_forward", 9)


def test_bad_registration_arguments():
    with pytest.raises(ValueError, match="namespace::op"):
        pt2onnx.register_custom_op_symbolic("foo_forward", symbolic_foo_forward, 9)
    with pytest.raises(TypeError, match="opset_version"):
        pt2onnx.register_custom_op_symbolic("a::b", symbolic_foo_forward, "9")


_APPLY = torch.autograd.Function.__dict__["apply"]  # as torch defines it


class ScaledRelu(torch.autograd.Function):
    forward_traced = 0

    @staticmethod
    def forward(ctx, input, alpha: float):
        ctx.save_for_backward(input)
        return input.clamp(min=0) * alpha

    @staticmethod
    def symbolic(g, input, alpha):
        # Written differently from the forward, to show which one is exported.
        return g.op("Mul", g.op("LeakyRelu", input, alpha_f=0.0),
                    g.op("Constant", value_t=torch.tensor([2.0])))


class UsesFunction(torch.nn.Module):
    def forward(self, x):
        return ScaledRelu.apply(x, 2.0) + 1


def test_autograd_function_exported_through_its_symbolic(tmp_onnx):
    x = torch.randn(3, 4)
    pt2onnx.export(UsesFunction(), (x,), tmp_onnx, dynamic_axes={"x": {0: "b"}})
    ops = [n.op_type for n in onnx.load(tmp_onnx).graph.node]
    assert "LeakyRelu" in ops  # the symbolic's ops, not the forward's
    assert_matches(UsesFunction(), tmp_onnx, {"x": torch.randn(6, 4)})
    # Outside an export the Function is itself again.
    assert torch.autograd.Function.__dict__["apply"] is _APPLY
    y = ScaledRelu.apply(torch.tensor([-1.0, 3.0], requires_grad=True), 2.0)
    assert y.grad_fn is not None


@torch.library.custom_op("pt2onnx_symtest::extension", mutates_args=())
def _extension(x: torch.Tensor) -> torch.Tensor:  # no fake implementation: a compiled op
    return x.clone()


class CallsExtension(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.ops.pt2onnx_symtest.extension(x)

    @staticmethod
    def symbolic(g, x):
        return g.op("Identity", x)


class UsesExtension(torch.nn.Module):
    def forward(self, x):
        return CallsExtension.apply(x) * 2


def test_forward_that_cannot_run_on_fake_tensors_says_what_to_do(tmp_onnx):
    with pytest.raises(Exception, match="register_fake"):
        pt2onnx.export(UsesExtension(), (torch.randn(2, 3),), tmp_onnx)
