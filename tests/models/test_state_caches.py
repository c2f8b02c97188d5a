"""Decoders whose cache holds state-space / linear-attention states (transformers 5's
DynamicCache of LinearAttentionLayer: conv and recurrent states), exported as
text-generation-with-past: the states are inputs past_key_values.<i>.conv_state /
.recurrent_state (batch dynamic, the rest static) and outputs present.<i>..., and a greedy
loop in onnxruntime (the prompt with zero states, then one token per step with the states fed
back) gives transformers' generate's tokens. Before: "'MambaCausalLMOutput' object has no
attribute 'past_key_values'" (Mamba names its cache cache_params). And a sparse-attention
indexer's key cache (DynamicIndexedLayer: GLM-MoE-DSA, DeepSeek-V3.2) as
past_key_values.<i>.indexer_key, beside the layer's keys and values (before: "Cannot call
`update_indexer` on layer 0 which is a DynamicLayer")."""

import numpy as np
import pytest
import torch

import hf_tiny
import zoo  # noqa: F401  (keeps torchvision's operator registrations out)
from pt2onnx import hf
from test_hf import _ort_greedy, no_network  # noqa: F401  (the fixture refuses the network)

NEW_TOKENS = 8


def _checkpoint(model_type, folder, overrides):
    """hf_tiny's tiny checkpoint; with `overrides`, its config changed (a hybrid's tiny config
    has no attention layer among its two: one is made an attention layer) and rebuilt."""
    hf_tiny.tiny_checkpoint(model_type, "text-generation", folder)
    if overrides:
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(folder)
        for k, v in overrides.items():
            setattr(config, k, v)
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).eval().save_pretrained(folder)
    return folder


# (model type, config overrides, layer kinds: "s" conv + recurrent states, "a" key + value)
CASES = [
    ("mamba", {}, "ss"),
    ("falcon_mamba", {}, "ss"),
    ("mamba2", {}, "ss"),
    ("jamba", dict(attn_layer_offset=1, attn_layer_period=2), "sa"),
    pytest.param("bamba", dict(attn_layer_indices=[1]), "sa", marks=pytest.mark.slow),
    # A sparse-attention indexer's keys beside each layer's (DynamicIndexedLayer), its top-k
    # shorter than the prompt.
    ("glm_moe_dsa", dict(index_topk=4), "ii"),
    # Mamba, an MLP layer holding no cache (transformers' DummyLayer: no inputs), attention.
    ("nemotron_h", {}, "s-a"),
]


@pytest.mark.parametrize("model_type,overrides,kinds", CASES)
def test_state_cache_greedy_generation_in_onnxruntime(model_type, overrides, kinds, tmp_path):
    from transformers import AutoModelForCausalLM

    ckpt = _checkpoint(model_type, str(tmp_path / model_type), overrides)
    onnx_path = str(tmp_path / "m.onnx")
    r = hf.export_pretrained(ckpt, "text-generation-with-past", onnx_path, cache=False)
    assert r.checks["max_abs_error"] < 1e-4
    assert r.checks["verified_sizes"] == [(1, 1, 7), (3, 5, 0), (2, 3, 2)]

    import onnx

    m = onnx.load(onnx_path, load_external_data=False)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    parts = {"s": ("conv_state", "recurrent_state"), "a": ("key", "value"),
             "i": ("key", "value", "indexer_key"), "-": ()}
    cache = [f"{i}.{p}" for i, k in enumerate(kinds) for p in parts[k]]
    with_pos = ["position_ids"] if hf.accepts(model, "position_ids") else []
    assert [i.name for i in m.graph.input] == ["input_ids", "attention_mask"] + with_pos + [
        f"past_key_values.{c}" for c in cache]
    assert [o.name for o in m.graph.output] == ["logits"] + [f"present.{c}" for c in cache]
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in m.graph.input}
    if kinds[0] == "s":
        assert dims["past_key_values.0.conv_state"][0] == "batch_size"
        assert all(isinstance(d, int) for d in dims["past_key_values.0.recurrent_state"][1:])
    if kinds[0] == "i":
        assert dims["past_key_values.0.indexer_key"][:2] == ["batch_size", "past_sequence_length"]

    torch.manual_seed(3)
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    model.generation_config.eos_token_id = None  # exactly NEW_TOKENS, no early stop
    with torch.no_grad():
        ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                             min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    ref_tokens = ref[:, ids.shape[1]:].numpy()
    got = _ort_greedy(onnx_path, ids.numpy(), mask.numpy(), NEW_TOKENS)
    assert ref_tokens.shape == (2, NEW_TOKENS)
    np.testing.assert_array_equal(got, ref_tokens)
