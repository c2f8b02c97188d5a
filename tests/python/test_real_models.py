"""Model definitions nobody here wrote, built with random weights (no hub):
torchvision's resnet18 and mobilenet_v2 (in-place ReLU / ReLU6 of the
training IR) and a transformers LlamaForCausalLM from a 2-layer config
(rotary embedding under torch.no_grad(): a grad-mode wrapper). Each is
exported with a dynamic batch and compared with PyTorch in onnxruntime on new
inputs at two batch sizes (fp32 atol/rtol 1e-4)."""

import numpy as np
import pytest
import torch

import pt2onnx
from conftest import ort_session
from opinfo_harness import hide_torchvision_ops


def _check(model, make, tmp_onnx, dynamic_shapes, batches=(1, 3), atol=1e-4, rtol=1e-4):
    model.eval()
    pt2onnx.export(model, make(2), tmp_onnx, dynamic_shapes=dynamic_shapes)
    sess = ort_session(tmp_onnx)
    names = [i.name for i in sess.get_inputs()]
    for b in batches:
        args = make(b)
        got = sess.run(None, {n: a.numpy() for n, a in zip(names, args)})
        with torch.no_grad():
            exp = model(*args)
        exp = exp if isinstance(exp, tuple) else (exp,)
        for g, e in zip(got, exp):
            assert g.shape == tuple(e.shape)
            np.testing.assert_allclose(g, e.numpy(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_torchvision(name, tmp_onnx):
    hide_torchvision_ops()
    import torchvision.models as tvm

    torch.manual_seed(0)
    model = getattr(tvm, name)(weights=None)
    batch = torch.export.Dim("batch", min=1, max=64)
    _check(model, lambda b: (torch.randn(b, 3, 64, 64),), tmp_onnx, {"x": {0: batch}})


def test_transformers_llama(tmp_onnx):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64)
    llama = LlamaForCausalLM(cfg).eval()

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    ep = torch.export.export(Logits(llama), (torch.randint(0, 128, (2, 8)),))
    assert any("wrap_with_set_grad_enabled" in str(n.target) for n in ep.graph.nodes)
    batch = torch.export.Dim("batch", min=1, max=64)
    _check(Logits(llama), lambda b: (torch.randint(0, 128, (b, 8)),), tmp_onnx,
           {"input_ids": {0: batch}})
