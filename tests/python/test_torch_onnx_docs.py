"""The examples of torch.onnx's documentation for its TorchScript-based
exporter (../shared/torch-onnx-docs/), run as written with pt2onnx.export in
place of torch.onnx.export, each file checked in onnxruntime against PyTorch
(issue 36). Where an example cannot run as written on any current torch, the
change is said beside it: CUDA devices (a CPU machine), pretrained weights (no
network: random ones), the custom-op example's own typos (FooModule / undefined
attr1), and LoopModel, written for the old default capture (tracing), which
now takes dynamo=False as in torch.onnx."""

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from conftest import run_ort

import pt2onnx


def test_alexnet_with_input_and_output_names(tmp_path, monkeypatch):
    import torchvision

    monkeypatch.chdir(tmp_path)
    dummy_input = torch.randn(10, 3, 224, 224)  # device='cuda' in the documentation
    model = torchvision.models.alexnet(weights=None).eval()  # pretrained=True there
    input_names = ["actual_input_1"] + ["learned_%d" % i for i in range(16)]
    output_names = ["output1"]
    pt2onnx.export(model, dummy_input, "alexnet.onnx", verbose=True, input_names=input_names,
                   output_names=output_names)
    m = onnx.load("alexnet.onnx")
    onnx.checker.check_model(m)
    assert [i.name for i in m.graph.input] == ["actual_input_1"]
    assert {f"learned_{i}" for i in range(16)} <= {i.name for i in m.graph.initializer} | {
        n.input[1] for n in m.graph.node if len(n.input) > 1}
    ort_session = onnxruntime.InferenceSession("alexnet.onnx")
    x = np.random.randn(10, 3, 224, 224).astype(np.float32)
    outputs = ort_session.run(None, {"actual_input_1": x})
    with torch.no_grad():
        np.testing.assert_allclose(outputs[0], model(torch.from_numpy(x)).numpy(), atol=1e-4,
                                   rtol=1e-4)


class LoopModel(torch.nn.Module):
    def forward(self, x, y):
        for i in range(y):
            x = x + i
        return x


def test_loop_model_traced(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = LoopModel()
    dummy_input = torch.ones(2, 3, dtype=torch.long)
    loop_count = torch.tensor(5, dtype=torch.long)
    with pytest.raises(Exception) as e:  # torch.export: a loop over a tensor's value
        pt2onnx.export(model, (dummy_input, loop_count), "loop.onnx", verbose=True)
    assert "capture='trace'" in "\n".join(getattr(e.value, "__notes__", []))
    with pytest.warns(UserWarning, match="torch.jit.trace"):
        pt2onnx.export(model, (dummy_input, loop_count), "loop.onnx", verbose=True,
                       dynamo=False)
    m = onnx.load("loop.onnx")
    assert "Loop" not in {n.op_type for n in m.graph.node}  # unrolled, as the documentation shows
    _, got = run_ort("loop.onnx", {i.name: v for i, v in zip(
        m.graph.input, [dummy_input.numpy(), np.array(5)])})
    np.testing.assert_array_equal(got[0], model(dummy_input, 5).numpy())


@torch.jit.script
def loop(x, y):
    for i in range(int(y)):
        x = x + i
    return x


class LoopModel2(torch.nn.Module):
    def forward(self, x, y):
        return loop(x, y)


def test_loop_model2_mixing_tracing_and_scripting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = LoopModel2()
    dummy_input = torch.ones(2, 3, dtype=torch.long)
    loop_count = torch.tensor(5, dtype=torch.long)
    pt2onnx.export(model, (dummy_input, loop_count), "loop.onnx", verbose=True,
                   input_names=["input_data", "loop_range"])
    ort_sess = onnxruntime.InferenceSession("loop.onnx")
    outputs = ort_sess.run(None, {"input_data": dummy_input.numpy(),
                                  "loop_range": np.array(9).astype(np.int64)})
    np.testing.assert_array_equal(outputs[0], np.full((2, 3), 37))  # the documentation's output


class ListLoopModel(torch.nn.Module):
    def forward(self, x):
        res = []
        res1 = []
        arr = x.split(2, 0)
        res2 = torch.zeros(3, 4, dtype=torch.long)
        for i in range(len(arr)):
            res = res.append(arr[i].sum(0, False))  # TorchScript's append returns the list
            res1 = res1.append(arr[-1 - i].sum(0, False))
            res2 += 1
        return torch.stack(res), torch.stack(res1), res2


def test_list_loop_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = torch.jit.script(ListLoopModel())
    inputs = torch.randn(16)
    out = model(inputs)
    pt2onnx.export(model, (inputs, ), "loop_and_list.onnx", opset_version=11,
                   example_outputs=out)
    assert onnx.load("loop_and_list.onnx").opset_import[0].version == 11
    sess = onnxruntime.InferenceSession("loop_and_list.onnx")
    out_ort = sess.run(None, {sess.get_inputs()[0].name: inputs.numpy()})
    assert all(torch.allclose(o, torch.tensor(o_ort), atol=1e-6)
               for o, o_ort in zip(out, out_ort))


class ImplicitCastType(torch.jit.ScriptModule):
    @torch.jit.script_method
    def forward(self, x):
        y = x + 2
        return y + 3


def test_implicit_cast_type(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    x = torch.tensor([1.0], dtype=torch.float32)
    pt2onnx.export(ImplicitCastType(), x, "models/implicit_cast.onnx",
                   example_outputs=ImplicitCastType()(x))
    _, got = run_ort("models/implicit_cast.onnx", {"x": np.array([7.5], np.float32)})
    assert got[0].dtype == np.float32 and got[0].tolist() == [12.5]


class InPlaceIndexedAssignment(torch.nn.Module):
    def forward(self, data, new_data):
        data[1] = new_data
        return data


def test_in_place_indexed_assignment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = torch.zeros(3, 4)
    new_data = torch.arange(4).to(torch.float32)
    out = InPlaceIndexedAssignment()(data, new_data)
    data = torch.zeros(3, 4)
    new_data = torch.arange(4).to(torch.float32)
    pt2onnx.export(InPlaceIndexedAssignment(), (data, new_data), "inplace_assign.onnx",
                   opset_version=11)
    sess = onnxruntime.InferenceSession("inplace_assign.onnx")
    out_ort = sess.run(None, {
        sess.get_inputs()[0].name: torch.zeros(3, 4).numpy(),
        sess.get_inputs()[1].name: new_data.numpy(),
    })
    assert torch.all(torch.eq(out, torch.tensor(out_ort[0])))


@torch.library.custom_op("custom_ops::foo_forward", mutates_args=())
def foo_forward(input1: torch.Tensor, input2: torch.Tensor, attr1: float,
                attr2: int) -> torch.Tensor:  # the documentation's C++ custom op, in Python
    return input1 * attr1 + input2 * attr2


@foo_forward.register_fake
def _(input1, input2, attr1, attr2):
    return torch.empty_like(input1)


def test_custom_operator(tmp_path, monkeypatch):
    from torch.onnx.symbolic_helper import parse_args

    monkeypatch.chdir(tmp_path)

    # Create custom symbolic function
    @parse_args("v", "v", "f", "i")
    def symbolic_foo_forward(g, input1, input2, attr1, attr2):
        return g.op("custom_domain::Foo", input1, input2, attr1_f=attr1, attr2_i=attr2)

    # Register custom symbolic function
    pt2onnx.register_custom_op_symbolic("custom_ops::foo_forward", symbolic_foo_forward, 9)
    try:
        class FooModel(torch.nn.Module):
            def __init__(self, attr1, attr2):
                super(FooModel, self).__init__()  # FooModule in the documentation
                self.attr1 = attr1
                self.attr2 = attr2

            def forward(self, input1, input2):
                # Calling custom op
                return torch.ops.custom_ops.foo_forward(input1, input2, self.attr1, self.attr2)

        attr1, attr2 = 0.5, 3  # not defined in the documentation
        dummy_input1, dummy_input2 = torch.randn(2, 3), torch.randn(2, 3)
        model = FooModel(attr1, attr2)
        pt2onnx.export(model, (dummy_input1, dummy_input2), "model.onnx",
                       custom_opsets={"custom_domain": 2})
    finally:
        pt2onnx.unregister_custom_op_symbolic("custom_ops::foo_forward", 9)
    m = onnx.load("model.onnx")
    (foo,) = m.graph.node
    assert (foo.domain, foo.op_type) == ("custom_domain", "Foo")
    assert {a.name: (a.type, onnx.helper.get_attribute_value(a)) for a in foo.attribute} == {
        "attr1": (onnx.AttributeProto.FLOAT, 0.5), "attr2": (onnx.AttributeProto.INT, 3)}
    assert {o.domain: o.version for o in m.opset_import}["custom_domain"] == 2
    # No runtime implements custom_domain::Foo; onnxruntime runs the file once
    # the operator is given as a function of standard ops with its attributes:
    x1, x2 = torch.randn(2, 3), torch.randn(2, 3)
    body = [onnx.helper.make_node("Constant", [], ["a1"], value_float=0.0),
            onnx.helper.make_node("Constant", [], ["a2"], value_int=0)]
    body[0].attribute[0].ref_attr_name = "attr1"
    body[1].attribute[0].ref_attr_name = "attr2"
    body += [onnx.helper.make_node("CastLike", ["a2", "x"], ["a2f"]),
             onnx.helper.make_node("Mul", ["x", "a1"], ["p"]),
             onnx.helper.make_node("Mul", ["y", "a2f"], ["q"]),
             onnx.helper.make_node("Add", ["p", "q"], ["z"])]
    fn = onnx.helper.make_function("custom_domain", "Foo", ["x", "y"], ["z"], body,
                                   [onnx.helper.make_opsetid("", 18)],
                                   attributes=["attr1", "attr2"])
    m.functions.append(fn)
    m.ir_version = max(m.ir_version, 8)
    _, got = run_ort(m.SerializeToString(), {m.graph.input[0].name: x1.numpy(),
                                            m.graph.input[1].name: x2.numpy()})
    np.testing.assert_allclose(got[0], (x1 * 0.5 + x2 * 3).numpy(), rtol=1e-6)


def test_lstm_with_dynamic_axes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    layer_count = 4
    model = torch.nn.LSTM(10, 20, num_layers=layer_count, bidirectional=True)
    model.eval()
    with torch.no_grad():
        input = torch.randn(5, 3, 10)
        h0 = torch.randn(layer_count * 2, 3, 20)
        c0 = torch.randn(layer_count * 2, 3, 20)
        output, (hn, cn) = model(input, (h0, c0))
    # default export
    pt2onnx.export(model, (input, (h0, c0)), "lstm.onnx")
    onnx_model = onnx.load("lstm.onnx")
    dims = [d.dim_value for d in onnx_model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [5, 3, 10]  # input shape [5, 3, 10]
    # export with `dynamic_axes`
    pt2onnx.export(model, (input, (h0, c0)), "lstm.onnx",
                   input_names=["input", "h0", "c0"],
                   output_names=["output", "hn", "cn"],
                   dynamic_axes={"input": {0: "sequence"}, "output": {0: "sequence"}})
    onnx_model = onnx.load("lstm.onnx")
    dims = [d.dim_param or d.dim_value for d in onnx_model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["sequence", 3, 10]  # input shape ['sequence', 3, 10]
    x = torch.randn(9, 3, 10)  # another sequence length
    with torch.no_grad():
        out, (hn, cn) = model(x, (h0, c0))
    _, got = run_ort("lstm.onnx", {"input": x.numpy(), "h0": h0.numpy(), "c0": c0.numpy()})
    for g, e in zip(got, (out, hn, cn)):
        np.testing.assert_allclose(g, e.numpy(), atol=1e-5, rtol=1e-5)


class ExpDiv(torch.nn.Module):  # the operator export types' example graph
    def forward(self, x):
        return x / torch.exp(x)


@torch.library.custom_op("foo_namespace::bar", mutates_args=())
def bar(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


@bar.register_fake
def _(a, b):
    return torch.empty_like(a)


class CustomThenDiv(torch.nn.Module):  # ONNX_FALLTHROUGH's example graph
    def forward(self, x, y):
        return torch.ops.foo_namespace.bar(x, y) / x


def test_operator_export_types(tmp_path):
    OT = torch.onnx.OperatorExportTypes
    x = torch.rand(2, 3, 4) + 0.5
    path = str(tmp_path / "m.onnx")
    pt2onnx.export(ExpDiv(), (x,), path, operator_export_type=OT.ONNX)
    assert [n.op_type for n in onnx.load(path).graph.node] == ["Exp", "Div"]
    _, got = run_ort(path, {"x": x.numpy()})
    np.testing.assert_allclose(got[0], ExpDiv()(x).numpy(), rtol=1e-6)
    with pytest.warns(UserWarning, match="foo_namespace.bar"):
        r = pt2onnx.export(CustomThenDiv(), (x, x), path, operator_export_type=OT.ONNX_FALLTHROUGH)
    ops = [(n.domain, n.op_type) for n in onnx.load(path).graph.node]
    assert ("", "Div") in ops and any(d == "pkg.torch.ops" for d, _ in ops)
    assert r.fallback_ops[0]["target"] == "torch.ops.foo_namespace.bar.default"
    # ONNX_ATEN_FALLBACK: supported ops stay ONNX (triu has a converter here).
    class Triu(torch.nn.Module):
        def forward(self, x):
            return torch.triu(x) * x

    pt2onnx.export(Triu(), (x,), path, operator_export_type=OT.ONNX_ATEN_FALLBACK)
    _, got = run_ort(path, {"x": x.numpy()})
    np.testing.assert_allclose(got[0], Triu()(x).numpy(), rtol=1e-6)
    for kind in (OT.ONNX_ATEN,):
        with pytest.raises(ValueError, match="no pt2onnx equivalent"):
            pt2onnx.export(ExpDiv(), (x,), path, operator_export_type=kind)


class DropNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(4)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.bn(x))


@pytest.mark.parametrize("mode", ["EVAL", "PRESERVE", "TRAINING"])
def test_training_modes(tmp_onnx, mode):
    model = DropNorm()
    model.bn.running_mean.uniform_(-1, 1)
    x = torch.randn(8, 4)
    pt2onnx.export(model, (x,), tmp_onnx, training=getattr(torch.onnx.TrainingMode, mode))
    ops = {n.op_type for n in onnx.load(tmp_onnx).graph.node}
    assert model.training  # the model's mode is restored
    if mode == "EVAL":
        model.eval()
        _, got = run_ort(tmp_onnx, {"x": x.numpy()})
        np.testing.assert_allclose(got[0], model(x).detach().numpy(), atol=1e-5, rtol=1e-5)
    else:  # PRESERVE of a model in train mode = TRAINING: dropout at run time
        assert "Dropout" in ops


def test_use_external_data_format(tmp_path, monkeypatch):
    import torchvision

    monkeypatch.chdir(tmp_path)
    model = torchvision.models.mobilenet_v2(weights=None).eval()  # pretrained=True there
    input = torch.randn(2, 3, 224, 224, requires_grad=True)
    pt2onnx.export(model, (input, ), "./large_model.onnx", use_external_data_format=True)
    import os
    assert os.path.exists("large_model.onnx.data")
    x = torch.randn(2, 3, 224, 224)
    _, got = run_ort("large_model.onnx", {onnx.load("large_model.onnx").graph.input[0].name:
                                          x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(got[0], model(x).numpy(), atol=1e-4, rtol=1e-4)
    # False meant one file in torch.onnx (its default), whatever pt2onnx's own default is.
    pt2onnx.export(model, (input, ), "./one_file.onnx", use_external_data_format=False)
    assert os.path.exists("one_file.onnx") and not os.path.exists("one_file.onnx.data")
