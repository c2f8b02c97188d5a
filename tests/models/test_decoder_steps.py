"""One decoder step (new tokens, a padding attention mask, the KV cache) of
transformers decoders from small configs, exported with plain pt2onnx.export
as a user writes it, in the two forms the cache takes (issue 34):

- "cache": `past_key_values=DynamicCache(...)` passed to the model itself;
- "flat": a wrapper whose forward takes flat past key / value tensors and
  builds the DynamicCache inside.

Batch, new tokens, past length and mask length are dynamic; the file must
load in onnxruntime (every file is also held to ONNX's rules by the suite's
conftest) and match PyTorch on other sizes and another padding. Before issue
34 all but Mistral's wrote two nodes of one name (the padding-mask lookup's
GatherND split into one Gather per axis, both named after it), which
onnxruntime refuses. The suite's generation tests go through
export_pretrained, whose programs take the cache another way, so nothing
caught it."""

import numpy as np
import pytest
import torch

import pt2onnx
import zoo  # noqa: F401  (keeps torchvision's operator registrations out)
from pt2onnx import hf
from zoo_check import ort_session

LAYERS = 2
_ATTN = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16)
_MOE_SMALL = dict(num_experts_per_tok=2)

# arch -> (config class, model class, extra config fields)
DECODERS = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(sliding_window=4)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(sliding_window=4)),
    "granite": ("GraniteConfig", "GraniteForCausalLM", {}),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}),
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM", {}),
    "cohere": ("CohereConfig", "CohereForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=4)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=4, **_MOE_SMALL)),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(num_experts=4, moe_intermediate_size=32, **_MOE_SMALL)),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", dict(num_experts=4, **_MOE_SMALL)),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  dict(num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                       **_MOE_SMALL)),
    "phimoe": ("PhimoeConfig", "PhimoeForCausalLM", dict(num_local_experts=4, **_MOE_SMALL)),
}
# The quick loop: the two forms on one dense decoder and one mixture of experts.
QUICK = {"qwen2", "qwen3_moe"}


def _model(arch):
    import transformers

    cfg_cls, model_cls, extra = DECODERS[arch]
    cfg = getattr(transformers, cfg_cls)(vocab_size=128, num_hidden_layers=LAYERS,
                                         max_position_embeddings=64, bos_token_id=1,
                                         eos_token_id=2, pad_token_id=0, **_ATTN, **extra)
    torch.manual_seed(0)
    return getattr(transformers, model_cls)(cfg).eval(), cfg


class _FlatCache(torch.nn.Module):
    """The cache as flat tensors, made a DynamicCache inside forward."""

    def __init__(self, model, cfg):
        super().__init__()
        self.model, self.cfg = model, cfg

    def forward(self, input_ids, attention_mask, k0, v0, k1, v1):
        from transformers import DynamicCache

        cache = DynamicCache([(k0, v0), (k1, v1)], config=self.cfg)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         past_key_values=cache, use_cache=True)
        return (out.logits, *[t for layer in out.past_key_values.layers
                              for t in (layer.keys, layer.values)])


def _step_inputs(batch, past, new, pad):
    """New tokens, a mask over past + new with `pad` left-padded positions in
    row 0, and a random cache of `past` positions."""
    ids = torch.randint(3, 128, (batch, new))
    mask = torch.ones(batch, past + new, dtype=torch.long)
    mask[0, :pad] = 0
    kv = [torch.randn(batch, 2, past, 16) for _ in range(2 * LAYERS)]
    return ids, mask, kv


@pytest.mark.parametrize("form", ["cache", "flat"])
@pytest.mark.parametrize("arch", [
    pytest.param(a, marks=[] if a in QUICK else [pytest.mark.slow]) for a in DECODERS])
def test_decoder_step_exports_and_matches(arch, form, tmp_path):
    from transformers import DynamicCache

    hf.prepare()
    model, cfg = _model(arch)
    ids, mask, kv = _step_inputs(batch=2, past=4, new=3, pad=2)
    # Dim.DYNAMIC: torch.export cannot prove the sliding-window mask's guards
    # on named Dims. The past length: Dim.AUTO, since a sliding-window layer's
    # cache, cropped to its window, is of static length.
    batch = new = total = torch.export.Dim.DYNAMIC
    kv_dims = {0: batch, 2: torch.export.Dim.AUTO}
    path = str(tmp_path / "step.onnx")
    if form == "flat":
        module = _FlatCache(model, cfg)
        names = ["k0", "v0", "k1", "v1"]
        pt2onnx.export(module, (ids, mask, *kv), path, dynamic_shapes={
            "input_ids": {0: batch, 1: new}, "attention_mask": {0: batch, 1: total},
            **{n: kv_dims for n in names}})
    else:
        cache = DynamicCache([(kv[0], kv[1]), (kv[2], kv[3])], config=cfg)
        kwargs = {"input_ids": ids, "attention_mask": mask, "past_key_values": cache}
        dynamic_shapes = {"input_ids": {0: batch, 1: new}, "attention_mask": {0: batch, 1: total},
                          "past_key_values": [[kv_dims, kv_dims]] * LAYERS}
        pt2onnx.export(model, (), path, kwargs=kwargs, dynamic_shapes=dynamic_shapes)
    sess = ort_session(path)
    # Other sizes and padding: batch 3, 5 cached positions, 2 new tokens. A sliding-window
    # layer's count of tokens seen (a Python int in transformers' cache) comes from the mask
    # while capturing (capture rule 13), so the file holds at other past lengths too; before,
    # the capture baked the example's count in and the file matched only torch.export's own
    # program at the exported past length.
    ids, mask, kv = _step_inputs(batch=3, past=5, new=2, pad=3)
    mask[2, :1] = 0
    cache = DynamicCache([(kv[0], kv[1]), (kv[2], kv[3])], config=cfg)
    # The cache form's inputs are the cache's leaves as constructed (a
    # sliding-window layer's cropped), keys of every layer, then values.
    leaves = [layer.keys for layer in cache.layers] + [layer.values for layer in cache.layers]
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, past_key_values=cache)
    keys = [layer.keys for layer in out.past_key_values.layers]
    values = [layer.values for layer in out.past_key_values.layers]
    if form == "cache":
        feeds, expected = [ids, mask, *leaves], [out.logits, *keys, *values]
    else:
        feeds = [ids, mask, *kv]
        expected = [out.logits] + [t for kv_pair in zip(keys, values) for t in kv_pair]
    got = sess.run(None, {i.name: t.numpy() for i, t in zip(sess.get_inputs(), feeds)})
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e.numpy(), atol=1e-4, rtol=1e-4)


# The command converts the same step saved as a .pt2 (no Python conversion
# path, so the suite's conftest does not see its files): each file is held to
# ONNX's rules here and run against the program torch.export.load gives back.
CLI_OPTIONS = [[], ["--target", "onnxruntime"],
               ["--target", "onnxruntime", "--dtype", "float16", "--modules-as-functions", "all"],
               ["--opset", "14", "--target", "onnxruntime", "--quantize", "int4"]]


@pytest.mark.parametrize("options", CLI_OPTIONS, ids=[" ".join(o) or "default" for o in CLI_OPTIONS])
def test_decoder_step_through_the_command(options, tmp_path):
    import importlib.util
    import os
    import subprocess
    import sysconfig

    hf.prepare()
    model, cfg = _model("qwen2")
    ids, mask, kv = _step_inputs(batch=2, past=4, new=3, pad=2)
    dyn = torch.export.Dim.DYNAMIC
    kv_dims = {0: dyn, 2: dyn}
    ep = torch.export.export(_FlatCache(model, cfg), (ids, mask, *kv), dynamic_shapes={
        "input_ids": {0: dyn, 1: dyn}, "attention_mask": {0: dyn, 1: dyn},
        **{n: kv_dims for n in ["k0", "v0", "k1", "v1"]}})
    pt2, out = str(tmp_path / "step.pt2"), str(tmp_path / "step.onnx")
    torch.export.save(ep, pt2)
    cli = os.environ.get("PT2ONNX_CLI", os.path.join(sysconfig.get_path("scripts"), "pt2onnx"))
    r = subprocess.run([cli, pt2, "-o", out, "-q", *options], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    spec = importlib.util.spec_from_file_location(
        "onnx_rules_cli", os.path.join(os.path.dirname(__file__), "..", "onnx_rules.py"))
    rules = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rules)
    rules.check_model_file(out, "onnxruntime" if "onnxruntime" in options else "standard")

    sess = ort_session(out)
    ids, mask, kv = _step_inputs(batch=3, past=5, new=2, pad=3)
    with torch.no_grad():
        expected = [t.numpy() for t in ep.module()(ids, mask, *kv)]
    half = "float16" in options
    feeds = {i.name: (t.numpy().astype(np.float16) if half and t.is_floating_point()
                      else t.numpy()) for i, t in zip(sess.get_inputs(), [ids, mask, *kv])}
    got = sess.run(None, feeds)
    for g, e in zip(got, expected, strict=True):
        if "--quantize" in options:  # the README's int4 bound: cosine similarity 0.95
            g64, e64 = g.astype(np.float64).ravel(), e.astype(np.float64).ravel()
            assert g64 @ e64 / (np.linalg.norm(g64) * np.linalg.norm(e64)) > 0.95
        else:
            tol = 1e-2 if half else 1e-4
            np.testing.assert_allclose(g.astype(np.float32), e, atol=tol, rtol=tol)
