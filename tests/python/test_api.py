"""export() follows torch.onnx.export's conventions: dynamic_shapes (Dim,
Dim.DYNAMIC / AUTO, strings), dynamic_axes, input_names / output_names,
ExportedProgram input, f=None, optimize=False; and the result object."""

import onnx
import pytest
import torch
import torch.nn as nn
from conftest import assert_matches, run_ort
from models import MLP, GPT

import pt2onnx


class TwoIn(nn.Module):
    def forward(self, x, y):
        return x * 2 + y.sum(-1, keepdim=True), x.mean(-1)


def dims(vi):
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def test_dynamic_axes_torch_onnx_form(tmp_onnx):
    m = TwoIn()
    x, y = torch.randn(2, 3), torch.randn(2, 5)
    pt2onnx.export(m, (x, y), tmp_onnx, input_names=["a", "b"], output_names=["s", "mean"],
                   dynamic_axes={"a": {0: "batch"}, "b": {0: "batch", 1: "feat"},
                                 "s": {0: "batch"}, "mean": [0]})
    mp = onnx.load(tmp_onnx)
    assert [i.name for i in mp.graph.input] == ["a", "b"]
    assert [o.name for o in mp.graph.output] == ["s", "mean"]
    assert dims(mp.graph.input[0]) == ["batch", 3]
    assert dims(mp.graph.input[1]) == ["batch", "feat"]
    assert dims(mp.graph.output[0]) == ["batch", 3]
    assert dims(mp.graph.output[1]) == ["mean_dynamic_axes_1"]
    onnx.checker.check_model(mp, full_check=True)
    assert_matches(m, tmp_onnx, {"a": torch.randn(4, 3), "b": torch.randn(4, 9)})


@pytest.mark.parametrize("spec", ["dim", "dynamic", "auto", "string", "tuple"])
def test_dynamic_shapes_forms(tmp_onnx, spec):
    m = MLP().eval()
    D = torch.export.Dim
    ds = {
        "dim": {"x": {0: D("batch")}},
        "dynamic": {"x": {0: D.DYNAMIC}},
        "auto": {"x": {0: D.AUTO}},
        "string": {"x": {0: "batch"}},
        "tuple": ({0: D("batch")},),
    }[spec]
    pt2onnx.export(m, (torch.randn(3, 32),), tmp_onnx, dynamic_shapes=ds)
    mp = onnx.load(tmp_onnx)
    d0 = dims(mp.graph.input[0])[0]
    assert isinstance(d0, str) and d0  # symbolic
    if spec in ("dim", "string", "tuple"):
        assert d0 == "batch"
    for b in (1, 6):
        assert_matches(m, tmp_onnx, {"x": torch.randn(b, 32)})


def test_every_dim_auto_specializes_a_single_channel_as_torch_does(tmp_onnx):
    """Dim.AUTO on every dim of a grayscale image: torch.export keeps batch
    and the spatial dims symbolic and specializes the channel (size 1, which
    the weights fix). pt2onnx grows size-1 dims asked to be dynamic to 2 for
    capture (torch.onnx scripts export with batch 1), but not Dim.AUTO ones:
    grown, the channel became a 2 the convolution refused."""
    m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU()).eval()
    D = torch.export.Dim
    pt2onnx.export(m, (torch.randn(2, 1, 6, 7),), tmp_onnx,
                   dynamic_shapes=({i: D.AUTO for i in range(4)},))
    shape = dims(onnx.load(tmp_onnx).graph.input[0])
    assert shape[1] == 1 and all(isinstance(d, str) for d in (shape[0], shape[2], shape[3]))
    assert_matches(m, tmp_onnx, {"input": torch.randn(3, 1, 9, 5)})
    # A batch of 1 the user asked to be dynamic is still grown with
    # fix_dynamic_shapes=True (which hands torch Dim.AUTO for it).
    mlp = MLP().eval()
    with pytest.warns(UserWarning, match="fix_dynamic_shapes=True"):
        pt2onnx.export(mlp, (torch.randn(1, 32),), tmp_onnx, dynamic_shapes={"x": {0: "batch"}},
                       fix_dynamic_shapes=True)
    assert dims(onnx.load(tmp_onnx).graph.input[0]) == ["batch", 32]
    assert_matches(mlp, tmp_onnx, {"x": torch.randn(5, 32)})


def test_derived_dim_named_from_its_root(tmp_onnx):
    class Halve(nn.Module):
        def forward(self, x):
            return x.reshape(x.shape[0] // 2, 2, -1)

    t = torch.export.Dim("t", min=1, max=64)
    pt2onnx.export(Halve(), (torch.randn(8, 3),), tmp_onnx, dynamic_shapes={"x": {0: 2 * t}})
    mp = onnx.load(tmp_onnx)
    assert dims(mp.graph.input[0]) == ["2*t", 3]
    assert dims(mp.graph.output[0]) == ["t", 2, 3]
    assert_matches(Halve(), tmp_onnx, {"x": torch.randn(14, 3)})


def test_exported_program_and_kwargs(tmp_onnx):
    m = TwoIn()
    ep = torch.export.export(m, (torch.randn(2, 3),), kwargs={"y": torch.randn(2, 4)})
    r = pt2onnx.export(ep, f=tmp_onnx)
    assert r.path == tmp_onnx
    mp = onnx.load(tmp_onnx)
    assert [i.name for i in mp.graph.input] == ["x", "y"]
    pt2onnx.export(m, (torch.randn(2, 3),), tmp_onnx, kwargs={"y": torch.randn(2, 4)})
    assert_matches(m, tmp_onnx, {"x": torch.randn(2, 3), "y": torch.randn(2, 4)})


def test_in_memory_result_and_timings():
    m = MLP().eval()
    r = pt2onnx.export(m, (torch.randn(2, 32),))
    assert r.path is None and r.model_bytes
    mp = onnx.load_from_string(r.model_bytes)
    assert mp.producer_name == "pt2onnx"
    assert set(r.timings) == {"capture", "serialize", "read", "convert", "optimize", "check", "write",
                             "total"}
    assert all(v >= 0 for v in r.timings.values())
    assert r.nodes == len(mp.graph.node) and r.initializers == len(mp.graph.initializer)
    assert "capture" in str(r)


def test_exported_program_dim_names(tmp_onnx):
    """An ExportedProgram's dynamic dims take names from dynamic_axes (as the
    command's --dim-name); reshaping dims is refused."""
    import onnx
    from torch.export import Dim

    m = torch.nn.Linear(3, 2)
    ep = torch.export.export(m, (torch.randn(4, 3),), dynamic_shapes=({0: Dim("b")},))
    pt2onnx.export(ep, None, tmp_onnx, dynamic_axes={"input": {0: "rows"}})
    dims = onnx.load(tmp_onnx).graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "rows"
    with pytest.raises(ValueError, match="fixed at capture"):
        pt2onnx.export(ep, None, tmp_onnx, dynamic_shapes=({0: Dim("b")},))
    with pytest.raises(TypeError, match="only names its dynamic dims"):
        pt2onnx.export(ep, None, tmp_onnx, dynamic_axes={"input": [0]})


def test_optimize_false_keeps_unoptimized_graph_and_same_results(tmp_path):
    torch.manual_seed(0)
    m = GPT(layers=1).eval()
    idx = torch.randint(0, 512, (2, 8))
    ds = {"idx": {0: "batch", 1: "seq"}}
    a, b = str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx")
    ra = pt2onnx.export(m, (idx,), a, dynamic_shapes=ds)
    rb = pt2onnx.export(m, (idx,), b, dynamic_shapes=ds, optimize=False)
    assert rb.nodes > ra.nodes
    feeds = {"idx": torch.randint(0, 512, (3, 11)).numpy()}
    _, oa = run_ort(a, feeds)
    _, ob = run_ort(b, feeds)
    assert (oa[0] == ob[0]).all()


def test_output_returning_an_input_and_a_value_twice(tmp_onnx):
    class Passthrough(nn.Module):
        def forward(self, x):
            y = x + 1
            return x, y, y

    pt2onnx.export(Passthrough(), (torch.randn(2),), tmp_onnx)
    mp = onnx.load(tmp_onnx)
    onnx.checker.check_model(mp, full_check=True)
    assert len({o.name for o in mp.graph.output}) == 3
    assert_matches(Passthrough(), tmp_onnx, {"x": torch.randn(2)})


def test_nodes_carry_module_path(tmp_onnx):
    torch.manual_seed(0)
    pt2onnx.export(GPT(layers=1).eval(), (torch.randint(0, 512, (1, 4)),), tmp_onnx, opset=21)
    mp = onnx.load(tmp_onnx)
    paths = {p.value for n in mp.graph.node for p in n.metadata_props if p.key == "namespace"}
    assert "blocks.0.qkv" in paths and "blocks.0.ln1" in paths
    assert any(n.name.startswith("scaled_dot_product_attention") for n in mp.graph.node)


class _Masked(nn.Module):
    """Multiplies by a mask of the ids' length: the two lengths must be one dim."""

    def forward(self, x, mask):
        return (x * mask).cumsum(-1)


@pytest.mark.parametrize("form", ["dynamic_shapes", "dynamic_axes"])
def test_dims_given_one_name_that_must_be_one_dim(tmp_onnx, form):
    """Each named dim is given to torch.export as its own Dim.DYNAMIC; where the model needs
    two of them equal, torch (2.13) makes them one, and the file names both as given."""
    x, mask = torch.randn(2, 6), torch.ones(2, 6)
    axes = {"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}}
    kw = (dict(dynamic_shapes=axes) if form == "dynamic_shapes"
          else dict(input_names=["x", "mask"], dynamic_axes=axes))
    pt2onnx.export(_Masked(), (x, mask), tmp_onnx, **kw)
    m = onnx.load(tmp_onnx)
    assert [[d.dim_param for d in i.type.tensor_type.shape.dim] for i in m.graph.input] == \
        [["batch", "seq"], ["batch", "seq"]]
    x2, mask2 = torch.randn(3, 11), (torch.rand(3, 11) > 0.5).float()
    got = run_ort(tmp_onnx, {"x": x2.numpy(), "mask": mask2.numpy()})[1][0]
    torch.testing.assert_close(torch.from_numpy(got), _Masked()(x2, mask2), atol=1e-5,
                               rtol=1e-5)


class _Windowed(nn.Module):
    """Branches on the length against a constant (a sliding window): torch.export keeps the
    branch of the example and bounds the dim."""

    def forward(self, x):
        if x.shape[1] <= 8:
            return x * 2
        return x[:, -8:] * 3


def test_narrowed_dims_are_said(tmp_onnx):
    with pytest.warns(UserWarning, match=r"right for these sizes only: x dim 1 at most 8"):
        pt2onnx.export(_Windowed(), (torch.randn(2, 6),), tmp_onnx,
                       dynamic_shapes={"x": {0: "batch", 1: "seq"}})
    import warnings

    with warnings.catch_warnings():  # no bound: no warning
        warnings.simplefilter("error")
        pt2onnx.export(_Masked(), (torch.randn(2, 6), torch.ones(2, 6)), tmp_onnx,
                       dynamic_shapes={"x": {1: "seq"}, "mask": {1: "seq"}})
