"""TorchScript models from code nobody here wrote (issue 36), shared by
tests/models/test_torchscript_models.py and bench/torchscript.py: every
torchvision classification and segmentation model scripted with
torch.jit.script (torchvision keeps them scriptable), timm models created
with scriptable=True and scripted, transformers models traced from configs
with torchscript=True, and the RNN / LSTM / GRU modules of PyTorch's
ModuleInfo database scripted. Random weights; small inputs where the model
allows. Each entry: name -> (make() -> (eager model, TorchScript model,
example args, other args, dynamic_axes)). The other args change the
batch (and sequence or image size where the model takes any)."""

from __future__ import annotations

import torch

# torchvision classification models; quick ones run in the quick loop.
TV_CLASSIFICATION = [
    "alexnet", "convnext_tiny", "densenet121", "efficientnet_b0", "efficientnet_v2_s",
    "googlenet", "inception_v3", "maxvit_t", "mnasnet0_5", "mobilenet_v2",
    "mobilenet_v3_small", "regnet_y_400mf", "resnet18", "resnet50", "resnext50_32x4d",
    "shufflenet_v2_x0_5", "squeezenet1_0", "swin_t", "swin_v2_t", "vgg11", "vit_b_16",
    "wide_resnet50_2",
]
TV_SEGMENTATION = ["fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"]
TIMM = ["resnet18", "efficientnet_b0", "mobilenetv3_small_050", "vit_tiny_patch16_224",
        "convnext_atto", "regnetx_002"]
HF = ["bert", "gpt2"]
RNN = ["nn.LSTM", "nn.GRU", "nn.RNN"]
QUICK = {"tv_resnet18", "tv_mobilenet_v3_small", "seg_lraspp_mobilenet_v3_large",
         "timm_resnet18", "hf_bert", "rnn_nn.LSTM"}


def _tv(name):
    def make():
        import torchvision.models as tvm

        kw = {"aux_logits": False, "init_weights": False} if name in (
            "googlenet", "inception_v3") else {}
        torch.manual_seed(0)
        m = getattr(tvm, name)(weights=None, **kw).eval()
        size = 299 if name == "inception_v3" else 224
        # vit / swin / maxvit take their image size only; others any.
        # Adaptive pooling to a fixed grid (alexnet, vgg) and fixed-size models: batch only.
        fixed = name.startswith(("vit", "swin", "maxvit", "vgg")) or name in (
            "inception_v3", "alexnet")
        other = size if fixed else 192
        x, x2 = torch.randn(1, 3, size, size), torch.randn(2, 3, other, other)
        axes = {0: "batch"} if fixed else {0: "batch", 2: "h", 3: "w"}
        ts = torch.jit.script(m)
        return m, ts, (x,), (x2,), {_first_input(ts): axes}
    return make


def _seg(name):
    def make():
        import torchvision.models.segmentation as seg

        torch.manual_seed(0)
        m = getattr(seg, name)(weights=None, weights_backbone=None).eval()
        ts = torch.jit.script(m)
        return (m, ts, (torch.randn(1, 3, 160, 160),), (torch.randn(2, 3, 128, 192),),
                {_first_input(ts): {0: "batch", 2: "h", 3: "w"}})
    return make


def _timm(name):
    def make():
        import timm

        torch.manual_seed(0)
        m = timm.create_model(name, pretrained=False, scriptable=True).eval()
        size = 224
        fixed = name.startswith("vit")
        other = size if fixed else 160
        axes = {0: "batch"} if fixed else {0: "batch", 2: "h", 3: "w"}
        ts = torch.jit.script(m)
        return (m, ts, (torch.randn(1, 3, size, size),), (torch.randn(2, 3, other, other),),
                {_first_input(ts): axes})
    return make


def _hf(name):
    def make():
        import transformers

        torch.manual_seed(0)
        if name == "bert":
            cfg = transformers.BertConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, intermediate_size=128,
                                          torchscript=True, return_dict=False)
            m = transformers.BertModel(cfg).eval()
        else:
            cfg = transformers.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                          torchscript=True, use_cache=False, return_dict=False)
            m = transformers.GPT2Model(cfg).eval()
        ids = torch.randint(0, 256, (1, 8))
        ids2 = torch.randint(0, 256, (3, 13))
        with torch.no_grad():
            traced = torch.jit.trace(m, (ids,), check_trace=False)
        return m, traced, (ids,), (ids2,), {"input_ids": {0: "batch", 1: "seq"}}
    return make


def _rnn(name):
    def make():
        from torch.testing._internal.common_modules import module_db

        info = next(i for i in module_db if i.name == name)
        torch.manual_seed(0)
        mi = info.module_inputs_func(info, device="cpu", dtype=torch.float32,
                                     requires_grad=False, training=False)[0]
        m = info.module_cls(*mi.constructor_input.args, **mi.constructor_input.kwargs).eval()
        args = mi.forward_input.args
        x = args[0]
        batch_first = getattr(m, "batch_first", False)
        seq_axis = 1 if batch_first and x.dim() == 3 else 0
        shape = list(x.shape)
        shape[seq_axis] += 3
        x2 = torch.randn(shape)
        ts = torch.jit.script(m)
        return m, ts, (x,), (x2,) + tuple(args[1:]), {_first_input(ts): {seq_axis: "seq"}}
    return make


def _first_input(ts) -> str:
    """The scripted forward's first argument name (torchvision's segmentation
    models call it `input`; a scripted nn.LSTM's forward is forward__0)."""
    from pt2onnx._torchscript import _forward

    return _forward(ts).schema.arguments[1].name


def models() -> dict:
    out = {}
    out.update({f"tv_{n}": _tv(n) for n in TV_CLASSIFICATION})
    out.update({f"seg_{n}": _seg(n) for n in TV_SEGMENTATION})
    out.update({f"timm_{n}": _timm(n) for n in TIMM})
    out.update({f"hf_{n}": _hf(n) for n in HF})
    out.update({f"rnn_{n}": _rnn(n) for n in RNN})
    return out


def outputs(value) -> list:
    """The tensors of a model's output, flattened (dicts by value order)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    out = []
    for v in value or []:
        out += outputs(v)
    return out
