"""custom_translation_table / custom_opsets (issue 11 item 1): ops defined with
torch.library.custom_op (and an autograd.Function wrapped as one) converted by
Python builder functions and by onnxscript functions, an aten converter
overridden, custom-domain nodes versioned by custom_opsets, the C++ converter
API and the command's --functions file. Every runnable model is compared with
PyTorch in onnxruntime on inputs other than the export inputs."""
import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnxscript import FLOAT, script
from onnxscript import opset18 as op

import conftest
import pt2onnx

# ---- ops written in the tests (torch.library.custom_op)


@torch.library.custom_op("pt2onnx_cc::scale_shift", mutates_args=())
def scale_shift(x: torch.Tensor, scale: float = 2.0, shift: float = 0.5) -> torch.Tensor:
    return x * scale + shift


@scale_shift.register_fake
def _(x, scale=2.0, shift=0.5):
    return torch.empty_like(x)


@torch.library.custom_op("pt2onnx_cc::split_sign", mutates_args=())
def split_sign(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.clamp(x + y, min=0), torch.clamp(x - y, max=0)


@split_sign.register_fake
def _(x, y):
    return torch.empty_like(x), torch.empty_like(x)


class _Cube(torch.autograd.Function):
    """An autograd.Function, as users write them for training."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * x * g


# Wrapped as a custom op so torch.export keeps it as one node.
@torch.library.custom_op("pt2onnx_cc::cube", mutates_args=())
def cube(x: torch.Tensor) -> torch.Tensor:
    return _Cube.apply(x)


@cube.register_fake
def _(x):
    return torch.empty_like(x)


cube.register_autograd(lambda ctx, g: 3 * ctx.x * ctx.x * g,
                       setup_context=lambda ctx, inputs, output: setattr(ctx, "x", inputs[0]))


class ScaleShiftNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 4)

    def forward(self, x):
        # one call at the schema defaults (omitted from the program), one not
        return scale_shift(self.lin(x)) - scale_shift(x[:, :4], scale=-1.5, shift=3.0)


def _export(model, args, path, **kw):
    return pt2onnx.export(model, args, str(path), dynamic_shapes=({0: "batch"},) * len(args), **kw)


def _compare(path, model, make_inputs, batches=(2, 5), rtol=1e-5, atol=1e-5):
    """onnxruntime vs PyTorch at batch sizes other than the export's (3)."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    for b in batches:
        inputs = make_inputs(b)
        with torch.no_grad():
            want = model(*inputs)
        want = want if isinstance(want, tuple) else (want,)
        got = sess.run(None, {n: t.numpy() for n, t in zip(names, inputs)})
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w.numpy(), rtol=rtol, atol=atol)


def scale_shift_builder(g, x, *, scale, shift):
    """scale and shift are the node's arguments, resolved per node."""
    return g.op("Add", g.op("Mul", x, g.op("CastLike", scale, x)), g.op("CastLike", shift, x))


def test_custom_op_by_builder_function(tmp_path):
    torch.manual_seed(0)
    model = ScaleShiftNet().eval()
    x = torch.randn(3, 6)
    r = _export(model, (x,), tmp_path / "m.onnx",
                custom_translation_table={torch.ops.pt2onnx_cc.scale_shift.default:
                                          scale_shift_builder})
    m = onnx.load(r.path)
    ops = [n.op_type for n in m.graph.node]
    assert "scale_shift" not in " ".join(ops) and ops.count("Mul") >= 2
    # The function body was instantiated per node: nothing of it is left as a function.
    assert not m.functions
    _compare(r.path, model, lambda b: (torch.randn(b, 6),))


def test_custom_op_def_and_string_keys(tmp_path):
    """The CustomOpDef itself and 'ns::op' strings name the same op."""
    model = ScaleShiftNet().eval()
    x = torch.randn(3, 6)
    a = _export(model, (x,), tmp_path / "a.onnx",
                custom_translation_table={scale_shift: scale_shift_builder})
    b = _export(model, (x,), tmp_path / "b.onnx",
                custom_translation_table={"pt2onnx_cc::scale_shift": scale_shift_builder})
    assert open(a.path, "rb").read() == open(b.path, "rb").read()


@script()
def scale_shift_onnxscript(x: FLOAT, scale: float = 2.0, shift: float = 0.5) -> FLOAT:
    s = op.CastLike(op.Constant(value_float=scale), x)
    t = op.CastLike(op.Constant(value_float=shift), x)
    return x * s + t


def test_custom_op_by_onnxscript_function(tmp_path):
    torch.manual_seed(1)
    model = ScaleShiftNet().eval()
    r = _export(model, (torch.randn(3, 6),), tmp_path / "m.onnx",
                custom_translation_table={torch.ops.pt2onnx_cc.scale_shift.default:
                                          scale_shift_onnxscript})
    _compare(r.path, model, lambda b: (torch.randn(b, 6),))


def test_multiple_outputs_and_autograd_function(tmp_path):
    class Net(torch.nn.Module):
        def forward(self, x, y):
            a, b = split_sign(x, y)
            return cube(a) + b, b

    def split_sign_fn(g, x, y):
        zero = g.op("CastLike", g.constant(0.0), x)
        return g.op("Max", g.op("Add", x, y), zero), g.op("Min", g.op("Sub", x, y), zero)

    def cube_fn(g, x):
        return g.op("Mul", g.op("Mul", x, x), x)

    model = Net()
    args = (torch.randn(3, 4), torch.randn(3, 4))
    table = {split_sign: split_sign_fn, cube: cube_fn}
    assert pt2onnx.unconvertible_ops(model, args) != []
    assert pt2onnx.unconvertible_ops(model, args, custom_translation_table=table) == []
    r = _export(model, args, tmp_path / "m.onnx", custom_translation_table=table)
    _compare(r.path, model, lambda b: (torch.randn(b, 4), torch.randn(b, 4)))


def test_override_an_aten_converter(tmp_path):
    """A user converter for aten.relu replaces ours (Relu) by its own nodes."""
    model = torch.nn.Sequential(torch.nn.Linear(5, 5), torch.nn.ReLU())
    x = torch.randn(3, 5)
    plain = onnx.load(_export(model, (x,), tmp_path / "a.onnx").path)
    assert "Relu" in [n.op_type for n in plain.graph.node]

    def relu_as_max(g, x):
        return g.op("Max", x, g.op("CastLike", g.constant(0.0), x))

    r = _export(model, (x,), tmp_path / "b.onnx",
                custom_translation_table={torch.ops.aten.relu.default: relu_as_max})
    ops = [n.op_type for n in onnx.load(r.path).graph.node]
    assert "Relu" not in ops and "Max" in ops
    _compare(r.path, model, lambda b: (torch.randn(b, 5),))


def test_custom_domain_node_with_custom_opsets(tmp_path):
    """A converter may emit nodes of its own domain; custom_opsets versions it,
    and a domain it does not name gets version 1 (torch.onnx's rule)."""

    def to_mydomain(g, x, *, scale, shift):
        y = g.op("mydomain::FusedScaleShift", x, scale=scale, shift=shift, mode="fast")
        return g.op("other::Tag", y)

    model = ScaleShiftNet().eval()
    r = _export(model, (torch.randn(3, 6),), tmp_path / "m.onnx",
                custom_translation_table={scale_shift: to_mydomain},
                custom_opsets={"mydomain": 3})
    m = onnx.load(r.path)
    opsets = {o.domain: o.version for o in m.opset_import}
    assert opsets["mydomain"] == 3 and opsets["other"] == 1
    fused = [n for n in m.graph.node if n.op_type == "FusedScaleShift"]
    assert [n.domain for n in fused] == ["mydomain", "mydomain"]
    # The attribute references resolved per node: the default call and the explicit one.
    got = sorted(onnx.helper.get_attribute_value(a) for n in fused for a in n.attribute
                 if a.name == "scale")
    assert got == [-1.5, 2.0]
    for n in fused:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs["mode"] == b"fast"
    onnx.checker.check_model(m)


def test_builder_refuses_arithmetic_on_attributes(tmp_path):
    def bad(g, x, *, scale, shift):
        return g.op("Mul", x, g.constant(scale * 2))

    with pytest.raises(TypeError, match="attribute reference"):
        _export(ScaleShiftNet().eval(), (torch.randn(3, 6),), tmp_path / "m.onnx",
                custom_translation_table={scale_shift: bad})
    assert not os.path.exists(tmp_path / "m.onnx")


def test_function_with_wrong_arity_is_a_clear_error(tmp_path):
    def two_inputs(g, x, extra):  # the op has one tensor argument
        return g.op("Add", x, extra)

    with pytest.raises(TypeError):
        _export(ScaleShiftNet().eval(), (torch.randn(3, 6),), tmp_path / "m.onnx",
                custom_translation_table={scale_shift: two_inputs})
    assert not os.path.exists(tmp_path / "m.onnx")


def test_unknown_target_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no op"):
        _export(ScaleShiftNet().eval(), (torch.randn(3, 6),), tmp_path / "m.onnx",
                custom_translation_table={"pt2onnx_cc::nope": scale_shift_builder})


def test_functions_file_for_the_command(tmp_path):
    """save_custom_converters writes the table as an ONNX file of functions;
    the command's --functions converts a .pt2 with it, byte-identical to the
    Python path."""
    torch.manual_seed(2)
    model = ScaleShiftNet().eval()
    x = torch.randn(3, 6)
    table = {scale_shift: scale_shift_builder}
    ops_file = tmp_path / "ops.onnx"
    pt2onnx.save_custom_converters(table, str(ops_file))
    ep = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    pt2 = tmp_path / "m.pt2"
    torch.export.save(ep, str(pt2))
    (tmp_path / "py").mkdir()
    (tmp_path / "cli").mkdir()
    ref = pt2onnx.export(ep, None, str(tmp_path / "py" / "m.onnx"), custom_translation_table=table,
                         dynamic_axes={"x": {0: "batch"}})
    out = tmp_path / "cli" / "m.onnx"
    p = subprocess.run([conftest.cli_path(), str(pt2), "-o", str(out), "--functions", str(ops_file),
                        "--dim-name", "x:0=batch"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    _compare(out, model, lambda b: (torch.randn(b, 6),))
    assert open(ref.path, "rb").read() == open(out, "rb").read()
    # Without the file the command fails, naming the op, and writes nothing.
    out2 = tmp_path / "none.onnx"
    p = subprocess.run([conftest.cli_path(), str(pt2), "-o", str(out2)], capture_output=True, text=True)
    assert p.returncode != 0 and "scale_shift" in p.stderr and not out2.exists()


def test_cpp_converter_api(tmp_path):
    """examples/custom_converter.cpp registers a C++ converter through
    Options::converters and converts a .pt2 holding the custom op."""
    model = ScaleShiftNet().eval()
    x = torch.randn(3, 6)
    ep = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    pt2 = tmp_path / "m.pt2"
    torch.export.save(ep, str(pt2))
    example = os.path.join(conftest.CPP_BUILD, "pt2onnx_custom_converter_example")
    out = tmp_path / "m.onnx"
    p = subprocess.run([example, str(pt2), str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    _compare(out, model, lambda b: (torch.randn(b, 6),))
