"""Encoder-decoders with a cache (export_pretrained task "seq2seq-with-past"):
greedy generation run entirely in onnxruntime (the encoder file once, then
the decoder file step by step with the caches fed back) equals transformers'
generate(do_sample=False) token for token, for T5, BART, Marian and Whisper.
Random weights from small configs, saved with save_pretrained; no hub."""

import os

import numpy as np
import onnx
import pytest
import torch

import zoo  # noqa: F401  (keeps torchvision's operator registrations out)
from pt2onnx import hf
from test_hf import no_network  # noqa: F401  (the fixture refuses the network)
from zoo_check import ort_session

NEW_TOKENS = 8
_SMALL = dict(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2,
              encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
              decoder_ffn_dim=64, max_position_embeddings=64)


def _t5():
    from transformers import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration(T5Config(
        vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))


def _bart():
    from transformers import BartConfig, BartForConditionalGeneration

    return BartForConditionalGeneration(BartConfig(
        **_SMALL, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        forced_bos_token_id=None, forced_eos_token_id=None))


def _marian():
    from transformers import MarianConfig, MarianMTModel

    return MarianMTModel(MarianConfig(**_SMALL, pad_token_id=0, eos_token_id=1,
                                      decoder_start_token_id=0, forced_eos_token_id=None))


def _whisper():
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    return WhisperForConditionalGeneration(WhisperConfig(
        vocab_size=128, num_mel_bins=16, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_source_positions=32, max_target_positions=32, pad_token_id=1,
        bos_token_id=2, eos_token_id=3, decoder_start_token_id=2, begin_suppress_tokens=None,
        suppress_tokens=None))


MODELS = {"t5": _t5, "bart": _bart, "marian": _marian, "whisper": _whisper}
# Random weights of this spread make the greedy tokens differ between the two
# inputs and (text) with the padding unmasked (checked below): a wrong mask or
# cross cache changes them.
WEIGHT_STD = {"t5": 0.2, "bart": 0.2, "marian": 0.3, "whisper": 0.2}


def _dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def _ort_greedy(enc_path, dec_path, enc_feeds, start, new_tokens):
    """The encoder once (last_hidden_state and the cross cache), then one
    decoder step per token from decoder_start_token_id, the self-attention
    cache starting empty and fed back, all in onnxruntime. No token of the
    decoder sequence is chosen twice (generate's no_repeat_ngram_size=1):
    tiny random models otherwise repeat one token, and every step's choice
    then depends on the ranking of all the logits."""
    enc, dec = ort_session(enc_path), ort_session(dec_path)
    got = dict(zip([o.name for o in enc.get_outputs()], enc.run(None, enc_feeds)))
    ins = {i.name: i for i in dec.get_inputs()}
    past = {"past_key_values" + k[len("present"):]: v for k, v in got.items()
            if k.startswith("present.")}
    batch = next(iter(enc_feeds.values())).shape[0]
    for name, i in ins.items():
        if name.endswith((".decoder.key", ".decoder.value")):
            heads, head_dim = i.shape[1], i.shape[3]
            past[name] = np.zeros((batch, heads, 0, head_dim), np.float32)
    ids = np.full((batch, 1), start, np.int64)
    seen, tokens = ids.copy(), []
    outs = [o.name for o in dec.get_outputs()]
    for _ in range(new_tokens):
        feeds = {"decoder_input_ids": ids, **past}
        if "encoder_attention_mask" in ins:
            feeds["encoder_attention_mask"] = enc_feeds["attention_mask"]
        step = dict(zip(outs, dec.run(None, feeds)))
        logits = step["logits"][:, -1].copy()
        np.put_along_axis(logits, seen, -np.inf, -1)  # generate's no_repeat_ngram_size=1
        ids = logits.argmax(-1).astype(np.int64)[:, None]
        seen = np.concatenate([seen, ids], 1)
        tokens.append(ids)
        for k, v in step.items():
            if k.startswith("present."):
                past["past_key_values" + k[len("present"):]] = v
    return np.concatenate(tokens, 1)


@pytest.mark.parametrize("arch", [pytest.param(a, marks=[pytest.mark.slow] if a == "t5" else [])
                                  for a in sorted(MODELS)])
def test_seq2seq_greedy_generation_in_onnxruntime(arch, tmp_path):
    torch.manual_seed(0)
    model = MODELS[arch]().eval()
    with torch.no_grad():  # wider than the init: the tokens then depend on the encoder's input
        for p in model.parameters():
            p.normal_(0, WEIGHT_STD[arch])
    ckpt = str(tmp_path / arch)
    model.save_pretrained(ckpt)
    # The reference is the checkpoint's model (Marian's sinusoidal position
    # tables are not saved: made again at load).
    model = type(model).from_pretrained(ckpt).eval()
    f = str(tmp_path / "out" / "model.onnx")
    os.makedirs(os.path.dirname(f))
    # Marian's sinusoidal position tables are parameters its checkpoint does
    # not hold (made at init): weights="empty" cannot read them.
    r = hf.export_pretrained(ckpt, "seq2seq-with-past", f,
                             weights="memory" if arch == "marian" else "empty")
    enc_path, dec_path = hf.seq2seq_paths(f)
    assert (enc_path, dec_path) == (str(tmp_path / "out" / "model.encoder.onnx"),
                                    str(tmp_path / "out" / "model.decoder.onnx"))
    assert r.path == dec_path and r.checks["encoder"].path == enc_path
    assert r.checks["max_abs_error"] < 1e-4 and len(r.checks["verified_sizes"]) == 3

    # Names and dims: optimum's.
    speech = arch == "whisper"
    n_dec = model.config.decoder_layers if hasattr(model.config, "decoder_layers") else \
        model.config.num_decoder_layers
    enc_m, dec_m = onnx.load(enc_path), onnx.load(dec_path)
    for m in (enc_m, dec_m):
        onnx.checker.check_model(m, full_check=True)
    cross = [f"{i}.encoder.{kv}" for kv in ("key", "value") for i in range(n_dec)]
    selfc = [f"{i}.decoder.{kv}" for kv in ("key", "value") for i in range(n_dec)]
    assert [i.name for i in enc_m.graph.input] == (
        ["input_features"] if speech else ["input_ids", "attention_mask"])
    assert [o.name for o in enc_m.graph.output] == ["last_hidden_state"] + [
        "present." + c for c in cross]
    assert [i.name for i in dec_m.graph.input] == (
        ["decoder_input_ids"] + ([] if speech else ["encoder_attention_mask"])
        + ["past_key_values." + c for c in selfc + cross])
    assert [o.name for o in dec_m.graph.output] == ["logits"] + ["present." + c for c in selfc]
    dec_in = {i.name: _dims(i) for i in dec_m.graph.input}
    assert dec_in["decoder_input_ids"] == ["batch_size", "decoder_sequence_length"]
    assert dec_in["past_key_values.0.decoder.key"][:3:2] == ["batch_size",
                                                             "past_decoder_sequence_length"]
    assert dec_in["past_key_values.1.encoder.value"][:3:2] == ["batch_size",
                                                               "encoder_sequence_length"]
    enc_out = {o.name: _dims(o) for o in enc_m.graph.output}
    assert len(enc_out["present.0.encoder.key"]) == 4 and enc_out["last_hidden_state"][0] == \
        "batch_size"

    # Two inputs; for text the second is right-padded by three (the mask matters).
    torch.manual_seed(3)
    if speech:
        feats = torch.randn(2, 16, 64)
        gen_in = {"input_features": feats}
    else:
        ids = torch.randint(3, 128, (2, 9))
        mask = torch.ones(2, 9, dtype=torch.long)
        ids[1, 6:] = model.config.pad_token_id
        mask[1, 6:] = 0
        gen_in = {"input_ids": ids, "attention_mask": mask}
    model.generation_config.eos_token_id = None  # exactly NEW_TOKENS, no early stop
    gen = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
               num_beams=1, no_repeat_ngram_size=1)
    with torch.no_grad():
        ref = model.generate(**gen_in, **gen)
        if not speech:
            unmasked = model.generate(input_ids=ids, attention_mask=torch.ones_like(mask), **gen)
            assert (unmasked[1] != ref[1]).any()  # the padding matters
    assert (ref[0] != ref[1]).any()  # so does the encoder's input
    start = model.config.decoder_start_token_id
    if not speech:  # Whisper's generate returns the new tokens only
        assert ref.shape[1] == NEW_TOKENS + 1 and (ref[:, 0] == start).all()
    ref_tokens = ref[:, -NEW_TOKENS:].numpy()
    assert ref_tokens.shape == (2, NEW_TOKENS)
    assert all(len(set(row)) == NEW_TOKENS for row in ref_tokens.tolist())
    got = _ort_greedy(enc_path, dec_path, {k: v.numpy() for k, v in gen_in.items()}, start,
                      NEW_TOKENS)
    np.testing.assert_array_equal(got, ref_tokens)


@pytest.mark.slow
def test_seq2seq_with_past_command(tmp_path):
    """pt2onnx-pretrained --task seq2seq-with-past writes and verifies both files."""
    import subprocess
    import sys

    torch.manual_seed(0)
    ckpt = str(tmp_path / "whisper")
    _whisper().eval().save_pretrained(ckpt)
    out = str(tmp_path / "w.onnx")
    r = subprocess.run([sys.executable, "-m", "pt2onnx.hf", ckpt, "--task", "seq2seq-with-past",
                        "-o", out, "-q"], capture_output=True, text=True,
                       env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=600)
    assert r.returncode == 0, r.stderr
    enc, dec = hf.seq2seq_paths(out)
    assert enc in r.stdout and dec in r.stdout
    assert "verified in onnxruntime at (batch, encoder length, decoder length, past)" in r.stdout
    assert [i.name for i in onnx.load(dec).graph.input][:2] == [
        "decoder_input_ids", "past_key_values.0.decoder.key"]
    assert not os.path.exists(out)


@pytest.mark.parametrize("model_type", ["vision-encoder-decoder", "pix2struct"])
def test_image_to_text_greedy_generation_in_onnxruntime(model_type, tmp_path):
    """image-to-text-with-past, inferred from the checkpoint's architectures (a
    VisionEncoderDecoderModel; Pix2Struct...ForConditionalGeneration): the image encoder file
    once, then the decoder steps, give generate's tokens. Pix2Struct's patches (a dynamic
    count, the second image's last one padding) also feed the decoder's cross-attention
    mask."""
    import hf_tiny
    from pt2onnx import _hf_inputs

    ckpt = str(tmp_path / "ckpt")
    hf_tiny.tiny_checkpoint(model_type, "image-to-text", ckpt)
    torch.manual_seed(0)
    model = hf.load_pretrained(ckpt, "image-to-text-with-past")
    with torch.no_grad():  # wider than the init: the tokens then depend on the image
        for p in model.parameters():
            p.normal_(0, 0.3)
    model.save_pretrained(ckpt)
    f = str(tmp_path / "out" / "model.onnx")
    assert hf.main([ckpt, "-o", f, "--no-cache", "-q"]) == 0
    enc_path, dec_path = hf.seq2seq_paths(f)
    enc_in = {i.name for i in onnx.load(enc_path, load_external_data=False).graph.input}
    torch.manual_seed(3)
    if model_type == "pix2struct":
        assert enc_in == {"flattened_patches", "attention_mask"}
        gen_in = _hf_inputs.patch_inputs(model, 2, 9)  # 22 patches; export's were 20
    else:
        assert enc_in == {"pixel_values"}
        gen_in = _hf_inputs.image_inputs(model, 2)
    start = next(v for v in (getattr(model.config, "decoder_start_token_id", None),
                             getattr(model.generation_config, "decoder_start_token_id", None),
                             getattr(model.config.get_text_config(decoder=True),
                                     "bos_token_id", None), 1) if v is not None)
    model.generation_config.eos_token_id = None  # exactly NEW_TOKENS, no early stop
    with torch.no_grad():
        ref = model.generate(**gen_in, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             do_sample=False, num_beams=1, no_repeat_ngram_size=1,
                             decoder_start_token_id=start)
    ref_tokens = ref[:, -NEW_TOKENS:].numpy()
    assert (ref_tokens[0] != ref_tokens[1]).any()  # the image matters
    got = _ort_greedy(enc_path, dec_path, {k: v.numpy() for k, v in gen_in.items()}, start,
                      NEW_TOKENS)
    np.testing.assert_array_equal(got, ref_tokens)
