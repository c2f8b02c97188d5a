"""torch.onnx.export's whole signature on pt2onnx.export, with torch.onnx's
meanings (issue 36): every keyword of inspect.signature(torch.onnx.export)
is accepted, and each one's effect is checked; torch.onnx.is_in_onnx_export()
during capture; f as a binary file object; input_names naming weights."""

import inspect
import io
import os
import warnings

import numpy as np
import onnx
import pytest
import torch
from conftest import assert_matches, run_ort

import pt2onnx


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def _net():
    torch.manual_seed(0)
    m = Net().eval()
    m.bn.running_mean.uniform_(-1, 1)
    m.bn.running_var.uniform_(0.5, 2)
    return m


X = torch.randn(2, 4)


def test_every_torch_onnx_keyword_is_accepted(tmp_path):
    """Each keyword torch.onnx.export takes, with a value of its own type,
    in one call each: none is a TypeError."""
    values = {
        "kwargs": None, "verbose": False, "input_names": ["x"], "output_names": ["y"],
        "opset_version": 18, "dynamo": True, "external_data": False, "dynamic_shapes": None,
        "custom_translation_table": None, "report": False, "optimize": True, "verify": True,
        "profile": False, "dump_exported_program": False, "artifacts_dir": str(tmp_path),
        "export_params": True, "keep_initializers_as_inputs": False,
        "dynamic_axes": {"x": {0: "batch"}}, "training": torch.onnx.TrainingMode.EVAL,
        "operator_export_type": torch.onnx.OperatorExportTypes.ONNX,
        "do_constant_folding": True, "custom_opsets": None,
        "export_modules_as_functions": False, "autograd_inlining": True,
    }
    names = [p for p in inspect.signature(torch.onnx.export).parameters
             if p not in ("model", "args", "f")]
    assert sorted(names) == sorted(values), "torch.onnx.export's signature changed"
    ours = inspect.signature(pt2onnx.export).parameters
    assert set(names) <= set(ours)
    for name in names:
        path = str(tmp_path / f"{name}.onnx")
        pt2onnx.export(_net(), (X,), path, **{name: values[name]})
        assert_matches(_net(), path, {onnx.load(path).graph.input[0].name: torch.randn(2, 4)})
    # All of them at once, as a torch.onnx call would pass them.
    path = str(tmp_path / "all.onnx")
    pt2onnx.export(_net(), (X,), path, **values)
    assert_matches(_net(), path, {"x": torch.randn(5, 4)})


def test_opset_version_is_opset(tmp_onnx):
    pt2onnx.export(_net(), (X,), tmp_onnx, opset_version=15)
    assert [o.version for o in onnx.load(tmp_onnx).opset_import if o.domain == ""] == [15]
    with pytest.raises(ValueError, match="disagree"):
        pt2onnx.export(_net(), (X,), tmp_onnx, opset=17, opset_version=15)


def test_export_params_false_makes_weights_inputs(tmp_onnx):
    m = _net()
    pt2onnx.export(m, (X,), tmp_onnx, export_params=False)
    model = onnx.load(tmp_onnx)
    names = [i.name for i in model.graph.input]
    weights = dict(m.state_dict())
    assert names[0] == "x"  # the model's inputs first, then its weights
    assert {"fc1.weight", "fc1.bias", "bn.running_mean", "fc2.weight"} <= set(names[1:])
    big = [i.name for i in model.graph.initializer if i.name in weights]
    assert not big, f"weights written as initializers: {big}"
    x = torch.randn(2, 4)
    feeds = {"x": x.numpy()}
    feeds.update({n: weights[n].numpy() for n in names[1:]})
    _, got = run_ort(tmp_onnx, feeds)
    np.testing.assert_allclose(got[0], m(x).detach().numpy(), atol=1e-5, rtol=1e-5)


def test_keep_initializers_as_inputs(tmp_onnx):
    pt2onnx.export(_net(), (X,), tmp_onnx, keep_initializers_as_inputs=True)
    model = onnx.load(tmp_onnx)
    inits = {i.name for i in model.graph.initializer}
    inputs = [i.name for i in model.graph.input]
    assert inputs[0] == "x" and inits and inits <= set(inputs[1:])
    assert_matches(_net(), tmp_onnx, {"x": torch.randn(2, 4)})  # defaults: the initializers


def test_do_constant_folding_false_keeps_the_graph_unfolded(tmp_path):
    folded, unfolded = str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx")
    pt2onnx.export(_net(), (X,), folded)
    pt2onnx.export(_net(), (X,), unfolded, do_constant_folding=False)
    n_folded = len(onnx.load(folded).graph.node)
    n_unfolded = len(onnx.load(unfolded).graph.node)
    assert n_unfolded > n_folded  # batch norm's arithmetic on constants stays
    assert_matches(_net(), unfolded, {"x": torch.randn(2, 4)})


@torch.library.custom_op("pt2onnx_compat::scale", mutates_args=())
def _scale(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@_scale.register_fake
def _(x):
    return torch.empty_like(x)


class UsesCustomOp(torch.nn.Module):
    def forward(self, x):
        return torch.ops.pt2onnx_compat.scale(x) + 1


@pytest.mark.parametrize("kind", ["ONNX_FALLTHROUGH", "ONNX_ATEN_FALLBACK"])
def test_operator_export_type_fallbacks(tmp_onnx, kind):
    with pytest.warns(UserWarning, match="no converter for"):
        r = pt2onnx.export(UsesCustomOp(), (X,), tmp_onnx,
                           operator_export_type=getattr(torch.onnx.OperatorExportTypes, kind))
    assert [op["target"] for op in r.fallback_ops] == ["torch.ops.pt2onnx_compat.scale.default"]
    domains = {n.domain for n in onnx.load(tmp_onnx).graph.node}
    assert "pkg.torch.ops" in domains


@pytest.mark.parametrize("kind", ["ONNX_ATEN"])
def test_operator_export_type_without_equivalent(tmp_onnx, kind):
    with pytest.raises(ValueError, match="no pt2onnx equivalent"):
        pt2onnx.export(_net(), (X,), tmp_onnx,
                       operator_export_type=getattr(torch.onnx.OperatorExportTypes, kind))
    assert not os.path.exists(tmp_onnx)


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # a branch torch.export cannot keep (data-dependent)
            return x * 2
        return x - 1


def test_dynamo_false_traces(tmp_onnx):
    x = torch.ones(3)
    with pytest.raises(Exception):  # the default capture refuses the data-dependent if
        pt2onnx.export(DataDependent(), (x,), tmp_onnx)
    with pytest.warns(UserWarning, match="torch.jit.trace"):
        pt2onnx.export(DataDependent(), (x,), tmp_onnx, dynamo=False)
    # Specialised to the example's branch, as torch.onnx's tracing is.
    _, got = run_ort(tmp_onnx, {onnx.load(tmp_onnx).graph.input[0].name: np.full(3, 5.0, "f")})
    np.testing.assert_allclose(got[0], np.full(3, 10.0))
    with pytest.warns(UserWarning, match="torch.jit.trace"):
        pt2onnx.export(DataDependent(), (x,), tmp_onnx, capture="trace")


def test_report_profile_dump_into_artifacts_dir(tmp_path):
    art = tmp_path / "artifacts"
    r = pt2onnx.export(_net(), (X,), str(tmp_path / "m.onnx"), report=True, profile=True,
                       dump_exported_program=True, artifacts_dir=str(art))
    files = sorted(os.listdir(art))
    assert any(f.endswith("_report.md") for f in files), files
    assert os.path.exists(r.checks["profile"]) and "cumulative" in open(r.checks["profile"]).read()
    ep = torch.export.load(r.checks["exported_program"])  # the captured program, loadable
    torch.testing.assert_close(ep.module()(X), _net()(X))


def test_autograd_inlining_and_verbose_accepted(tmp_onnx):
    pt2onnx.export(_net(), (X,), tmp_onnx, autograd_inlining=False, verbose=True)
    assert_matches(_net(), tmp_onnx, {"x": torch.randn(2, 4)})
    with pytest.raises(TypeError, match="autograd_inlining"):
        pt2onnx.export(_net(), (X,), tmp_onnx, autograd_inlining="yes")


def test_f_as_a_binary_file_object(tmp_path):
    buf = io.BytesIO()
    r = pt2onnx.export(_net(), (X,), buf)
    assert r.path is None and buf.getvalue() == r.model_bytes
    model = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(model)
    path = str(tmp_path / "from_buffer.onnx")
    with open(path, "wb") as fh:
        fh.write(buf.getvalue())
    assert_matches(_net(), path, {"x": torch.randn(2, 4)})
    with open(str(tmp_path / "opened.onnx"), "wb") as fh:  # an open file too
        pt2onnx.export(_net(), (X,), fh)
    assert open(str(tmp_path / "opened.onnx"), "rb").read() == buf.getvalue()
    with pytest.raises(TypeError, match="binary file object"):
        pt2onnx.export(_net(), (X,), io.StringIO())


class ExportFriendly(torch.nn.Module):
    """An eager path that reads a value (.item()) and an export path that does
    not, switched on torch.onnx.is_in_onnx_export() as detection codebases do."""

    def forward(self, x):
        if torch.onnx.is_in_onnx_export():
            return torch.clamp(x, max=1.0)
        m = x.max().item()
        return torch.clamp(x, max=min(m, 1.0))


def test_is_in_onnx_export_during_capture(tmp_onnx):
    seen = []

    class Spy(torch.nn.Module):
        def forward(self, x):
            seen.append((torch.onnx.is_in_onnx_export(), pt2onnx.is_in_onnx_export()))
            return x + 1

    assert not torch.onnx.is_in_onnx_export() and not pt2onnx.is_in_onnx_export()
    pt2onnx.export(Spy(), (X,), tmp_onnx)
    assert seen and all(s == (True, True) for s in seen)
    assert not torch.onnx.is_in_onnx_export() and not pt2onnx.is_in_onnx_export()
    pt2onnx.export(ExportFriendly(), (X,), tmp_onnx, dynamic_axes={"x": {0: "b"}})
    assert_matches(ExportFriendly(), tmp_onnx, {"x": torch.randn(5, 4) * 3})

    class Fails(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("model failure")

    with pytest.raises(RuntimeError, match="model failure"):
        pt2onnx.export(Fails(), (X,), tmp_onnx)
    assert not torch.onnx.is_in_onnx_export() and not pt2onnx.is_in_onnx_export()


def test_input_names_past_the_inputs_name_the_weights(tmp_onnx):
    """The AlexNet example of torch.onnx's documentation: input_names lists the
    input, then names for the parameters."""
    m = _net()
    names = ["actual_input_1"] + [f"learned_{i}" for i in range(4)]
    pt2onnx.export(m, (X,), tmp_onnx, input_names=names, output_names=["output1"],
                   optimize=False)
    model = onnx.load(tmp_onnx)
    inits = {i.name for i in model.graph.initializer}
    assert {"learned_0", "learned_1", "learned_2", "learned_3"} <= inits  # fc1.w, fc1.b, bn.w, bn.b
    assert [i.name for i in model.graph.input] == ["actual_input_1"]
    assert [o.name for o in model.graph.output] == ["output1"]
    assert_matches(m, tmp_onnx, {"actual_input_1": torch.randn(2, 4)})
    with pytest.raises(ValueError, match="weights"):
        pt2onnx.export(m, (X,), tmp_onnx, input_names=["x"] + [f"w{i}" for i in range(40)])


class Frames(torch.nn.Module):  # a dim that must be a multiple of 20 (wav2vec2's samples)
    def forward(self, x):
        return x.reshape(-1, 20).sum(1)


def test_refused_dynamic_dims_get_the_fix_as_arguments(tmp_onnx):
    x = torch.randn(60)
    ds = {"x": {0: torch.export.Dim("samples")}}
    with pytest.raises(Exception) as e:
        pt2onnx.export(Frames(), (x,), tmp_onnx, dynamic_shapes=ds)
    notes = "\n".join(getattr(e.value, "__notes__", []))
    assert "fix_dynamic_shapes=True" in notes and "20*_samples" in notes
    with pytest.warns(UserWarning, match="fix_dynamic_shapes=True: torch.export derived"):
        pt2onnx.export(Frames(), (x,), tmp_onnx, dynamic_shapes={"x": {0: "samples"}},
                       fix_dynamic_shapes=True)
    dims = [d.dim_param or d.dim_value
            for d in onnx.load(tmp_onnx).graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["samples"]
    assert_matches(Frames(), tmp_onnx, {"x": torch.randn(140)})
