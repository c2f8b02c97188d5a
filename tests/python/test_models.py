"""The spine's acceptance models: each exports, passes the full ONNX checker
and matches PyTorch in onnxruntime on inputs other than the export inputs
(fp32: atol 1e-4, rtol 1e-4), at opsets 17, 18 and 21."""

import onnx
import pytest
import torch
from conftest import assert_matches, assert_same_both_ways
from models import CNN, GPT, MLP, ResNet18, randomize_bn

import pt2onnx

OPSETS = [17, 18, 21]


def check(path):
    onnx.checker.check_model(path, full_check=True)
    return onnx.load(path, load_external_data=False)


def input_dims(model_proto, i=0):
    dims = model_proto.graph.input[i].type.tensor_type.shape.dim
    return [d.dim_param or d.dim_value for d in dims]


@pytest.mark.parametrize("opset", OPSETS)
def test_mlp(tmp_onnx, opset):
    torch.manual_seed(0)
    m = MLP().eval()
    r = pt2onnx.export(m, (torch.randn(4, 32),), tmp_onnx, opset=opset)
    assert r.opset == opset
    assert_same_both_ways(m, (torch.randn(4, 32),), tmp_onnx, opset=opset)
    mp = check(tmp_onnx)
    assert mp.opset_import[0].version == opset
    assert input_dims(mp) == [4, 32]
    assert_matches(m, tmp_onnx, {"x": torch.randn(4, 32)})


@pytest.mark.parametrize("opset", OPSETS)
def test_cnn_dynamic_batch(tmp_onnx, opset):
    torch.manual_seed(1)
    m = randomize_bn(CNN()).eval()
    batch = torch.export.Dim("batch")
    pt2onnx.export(m, (torch.randn(2, 3, 32, 32),), tmp_onnx, opset=opset,
                   dynamic_shapes={"x": {0: batch}})
    assert_same_both_ways(m, (torch.randn(2, 3, 32, 32),), tmp_onnx, opset=opset,
                          dynamic_shapes={"x": {0: batch}})
    mp = check(tmp_onnx)
    assert input_dims(mp) == ["batch", 3, 32, 32]
    out_dims = [d.dim_param or d.dim_value for d in mp.graph.output[0].type.tensor_type.shape.dim]
    assert out_dims == ["batch", 10]
    for b in (1, 3, 7):
        assert_matches(m, tmp_onnx, {"x": torch.randn(b, 3, 32, 32)})


@pytest.mark.parametrize("opset", OPSETS)
def test_resnet18(tmp_onnx, opset):
    torch.manual_seed(2)
    m = randomize_bn(ResNet18()).eval()
    pt2onnx.export(m, (torch.randn(2, 3, 64, 64),), tmp_onnx, opset=opset,
                   dynamic_shapes={"x": {0: "batch"}})
    assert_same_both_ways(m, (torch.randn(2, 3, 64, 64),), tmp_onnx, opset=opset,
                          dynamic_shapes={"x": {0: "batch"}})
    check(tmp_onnx)
    for b in (1, 2, 5):
        assert_matches(m, tmp_onnx, {"x": torch.randn(b, 3, 64, 64)})


@pytest.mark.parametrize("opset", OPSETS)
def test_gpt_dynamic_batch_and_sequence(tmp_onnx, opset):
    torch.manual_seed(3)
    m = GPT().eval()
    idx = torch.randint(0, 512, (2, 16))
    ds = {"idx": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=128)}}
    r = pt2onnx.export(m, (idx,), tmp_onnx, opset=opset, dynamic_shapes=ds)
    assert_same_both_ways(m, (idx,), tmp_onnx, opset=opset, dynamic_shapes=ds)
    mp = check(tmp_onnx)
    assert input_dims(mp) == ["batch", "seq"]
    # The tied head shares the embedding's initializer: stored once.
    vocab_by_d = [i.name for i in mp.graph.initializer if list(i.dims) == [512, 64]]
    assert len(vocab_by_d) == 1, vocab_by_d
    assert r.weight_bytes < sum(p.numel() * 4 for p in m.parameters()) + 4096
    for b, t in ((1, 1), (3, 7), (2, 33)):
        assert_matches(m, tmp_onnx, {"idx": torch.randint(0, 512, (b, t))})


CORE_ATEN_CASES = {
    "mlp": (MLP, lambda: (torch.randn(4, 32),), {"x": {0: torch.export.Dim("batch")}},
            lambda: {"x": torch.randn(3, 32)}),
    "cnn": (lambda: randomize_bn(CNN()), lambda: (torch.randn(2, 3, 32, 32),),
            {"x": {0: torch.export.Dim("batch")}}, lambda: {"x": torch.randn(1, 3, 32, 32)}),
    "resnet18": (lambda: randomize_bn(ResNet18()), lambda: (torch.randn(2, 3, 64, 64),), None,
                 lambda: {"x": torch.randn(2, 3, 64, 64)}),
    "gpt": (GPT, lambda: (torch.randint(0, 512, (2, 16)),),
            {"idx": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=128)}},
            lambda: {"idx": torch.randint(0, 512, (3, 9))}),
}


@pytest.mark.parametrize("name", sorted(CORE_ATEN_CASES))
def test_core_aten_ir(tmp_onnx, name):
    """The same models after run_decompositions() (core ATen: convolution,
    _native_batch_norm_legit_no_training, addmm, native_layer_norm, the
    decomposed attention) convert and match too."""
    make, args, ds, new_inputs = CORE_ATEN_CASES[name]
    torch.manual_seed(4)
    m = make().eval()
    ep = torch.export.export(m, args(), dynamic_shapes=ds).run_decompositions()
    pt2onnx.export(ep, f=tmp_onnx)
    check(tmp_onnx)
    assert_matches(m, tmp_onnx, new_inputs())


@pytest.mark.parametrize(
    "opset", [o for o in range(pt2onnx.MIN_OPSET, pt2onnx.MAX_OPSET + 1) if o not in OPSETS]
)
def test_every_accepted_opset(tmp_onnx, opset):
    """Beyond the 17/18/21 matrix: every opset export() accepts loads and
    matches, on the CNN and the decoder."""
    torch.manual_seed(5)
    cnn = randomize_bn(CNN()).eval()
    pt2onnx.export(cnn, (torch.randn(2, 3, 32, 32),), tmp_onnx, opset=opset,
                   dynamic_shapes={"x": {0: "batch"}})
    check(tmp_onnx)
    assert_matches(cnn, tmp_onnx, {"x": torch.randn(3, 3, 32, 32)})
    gpt = GPT(layers=1).eval()
    pt2onnx.export(gpt, (torch.randint(0, 512, (2, 8)),), tmp_onnx, opset=opset,
                   dynamic_shapes={"idx": {0: "batch", 1: "seq"}})
    check(tmp_onnx)
    assert_matches(gpt, tmp_onnx, {"idx": torch.randint(0, 512, (1, 5))})
