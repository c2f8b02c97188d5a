"""The spine's acceptance models: each exports, passes the full ONNX checker
and matches PyTorch in onnxruntime on inputs other than the export inputs
(fp32: atol 1e-4, rtol 1e-4), at opsets 17, 18 and 21."""

import onnx
import pytest
import torch
from conftest import assert_matches
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
    check(tmp_onnx)
    for b in (1, 2, 5):
        assert_matches(m, tmp_onnx, {"x": torch.randn(b, 3, 64, 64)})


@pytest.mark.parametrize("opset", OPSETS)
def test_gpt_dynamic_batch_and_sequence(tmp_onnx, opset):
    torch.manual_seed(3)
    m = GPT().eval()
    idx = torch.randint(0, 512, (2, 16))
    r = pt2onnx.export(m, (idx,), tmp_onnx, opset=opset,
                       dynamic_shapes={"idx": {0: torch.export.Dim("batch"),
                                               1: torch.export.Dim("seq", max=128)}})
    mp = check(tmp_onnx)
    assert input_dims(mp) == ["batch", "seq"]
    # The tied head shares the embedding's initializer: stored once.
    vocab_by_d = [i.name for i in mp.graph.initializer if list(i.dims) == [512, 64]]
    assert len(vocab_by_d) == 1, vocab_by_d
    assert r.weight_bytes < sum(p.numel() * 4 for p in m.parameters()) + 4096
    for b, t in ((1, 1), (3, 7), (2, 33)):
        assert_matches(m, tmp_onnx, {"idx": torch.randint(0, 512, (b, t))})
