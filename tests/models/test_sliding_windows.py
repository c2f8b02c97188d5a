"""Decoders whose cache keeps a sliding window (transformers' DynamicSlidingWindowLayer keeps
the last `sliding_window - 1` positions), exported as text-generation-with-past with a window
shorter than the prompt: capture rule 13 (python/pt2onnx/_capture_rules.py) puts the crop and
the window's mask sizes in the graph, so one file is right below, at and past the window.
Before: the capture fixed the file to one side of the window ("The size of tensor a (s60 +
s70) must match the size of tensor b (s31 + s70)", or a present cache of 4 positions where
transformers keeps 3)."""

import numpy as np
import pytest
import torch

import hf_tiny
import zoo  # noqa: F401  (keeps torchvision's operator registrations out)
import pt2onnx
from pt2onnx import hf
from test_hf import _ort_greedy, no_network  # noqa: F401  (the fixture refuses the network)

WINDOW = 4
PROMPT = 6  # longer than the window
NEW_TOKENS = 8


def _checkpoint(model_type, folder):
    """hf_tiny's tiny checkpoint with the window shortened to WINDOW."""
    from transformers import AutoModelForCausalLM

    config = hf_tiny.tiny_config(model_type, "text-generation")
    text = config.get_text_config(decoder=True)
    text.sliding_window = WINDOW
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).eval().save_pretrained(folder)
    return folder


# (model type, layer kinds in the tiny config: "s" window, "f" full; opset, target)
CASES = [
    ("mistral", "ss", 18, "standard"),
    pytest.param("mistral", "ss", 23, "standard", marks=pytest.mark.slow),
    pytest.param("mistral", "ss", 18, "onnxruntime", marks=pytest.mark.slow),
    ("gemma2", "sf", 18, "standard"),
    pytest.param("gpt_oss", "sf", 18, "standard", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("model_type,kinds,opset,target", CASES)
def test_sliding_window_greedy_generation_in_onnxruntime(model_type, kinds, opset, target,
                                                         tmp_path):
    from transformers import AutoModelForCausalLM

    ckpt = _checkpoint(model_type, str(tmp_path / model_type))
    onnx_path = str(tmp_path / "m.onnx")
    r = hf.export_pretrained(ckpt, "text-generation-with-past", onnx_path, cache=False,
                             opset=opset, target=target)
    assert r.checks["max_abs_error"] < 1e-4
    # Checked at the window (past W - 1), across it, with a prompt past it and after it.
    assert r.checks["verified_sizes"][3:] == [(1, 1, WINDOW - 1), (1, 2, WINDOW - 2),
                                              (1, WINDOW + 1, 0), (2, 3, WINDOW + 2)]
    import onnx

    m = onnx.load(onnx_path, load_external_data=False)
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in m.graph.input}
    past = "past_sliding_sequence_length" if "f" in kinds else "past_sequence_length"
    for i, kind in enumerate(kinds):
        expect = past if kind == "s" else "past_sequence_length"
        assert dims[f"past_key_values.{i}.key"][2] == expect

    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    torch.manual_seed(3)
    ids = torch.randint(3, model.config.get_text_config().vocab_size, (2, PROMPT))
    mask = torch.ones(2, PROMPT, dtype=torch.long)
    mask[1, :2] = 0  # a left-padded row
    model.generation_config.eos_token_id = None  # exactly NEW_TOKENS, no early stop
    with torch.no_grad():
        ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                             min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    got = _ort_greedy(onnx_path, ids.numpy(), mask.numpy(), NEW_TOKENS)
    np.testing.assert_array_equal(got, ref[:, PROMPT:].numpy())


def test_sliding_window_cache_as_transformers_keeps_it(tmp_path):
    """The file's present cache of a window layer is transformers' (the last W - 1 positions)
    below, at and past the window; plain pt2onnx.export, the cache an input of the model."""
    from transformers import AutoModelForCausalLM

    import onnxruntime as ort

    model = AutoModelForCausalLM.from_pretrained(
        _checkpoint("mistral", str(tmp_path / "ckpt")), dtype=torch.float32).eval()
    vocab = model.config.vocab_size

    def inputs(past, seq):
        torch.manual_seed(past * 10 + seq)
        return dict(input_ids=torch.randint(0, vocab, (2, seq)),
                    attention_mask=torch.ones(2, past + seq, dtype=torch.long),
                    past_key_values=hf._past(model, 2, past))  # a prefill of `past` tokens

    hf.prepare()
    example = inputs(WINDOW + 2, 3)
    ds = dict(input_ids={0: "batch", 1: "seq"}, attention_mask={0: "batch", 1: "total"},
              past_key_values=hf._hf_cache.dynamic_shapes(example["past_key_values"], "batch"))
    path = str(tmp_path / "m.onnx")
    pt2onnx.export(model, (), path, kwargs=example, dynamic_shapes=ds)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for past, seq in [(0, 2), (0, WINDOW + 3), (WINDOW - 2, 1), (WINDOW - 2, 2), (WINDOW - 1, 1),
                      (WINDOW, 1), (WINDOW + 5, 4)]:
        kw = inputs(past, seq)
        cached = kw["past_key_values"].layers[0].keys.shape[2]
        assert cached == min(past, WINDOW - 1)
        feeds = {"input_ids": kw["input_ids"].numpy(),
                 "attention_mask": kw["attention_mask"].numpy()}
        for i, layer in enumerate(kw["past_key_values"].layers):
            feeds[f"past_key_values.{i}.key"] = layer.keys.numpy()
            feeds[f"past_key_values.{i}.value"] = layer.values.numpy()
        got = dict(zip(names, sess.run(None, feeds)))
        with torch.no_grad():
            ref = model(**kw, use_cache=True)
        np.testing.assert_allclose(got["logits"], ref.logits.numpy(), atol=1e-4, rtol=1e-4)
        for i, layer in enumerate(ref.past_key_values.layers):
            assert got[f"present.{i}.key"].shape[2] == min(past + seq, WINDOW - 1)
            np.testing.assert_allclose(got[f"present.{i}.key"], layer.keys.numpy(), atol=1e-5)
            np.testing.assert_allclose(got[f"present.{i}.value"], layer.values.numpy(),
                                       atol=1e-5)
