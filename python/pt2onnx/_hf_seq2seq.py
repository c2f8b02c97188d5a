"""Encoder-decoders with a cache (text2text-generation-with-past,
automatic-speech-recognition-with-past, image-to-text-with-past): an encoder file and a
decoder-step file, their example inputs and dynamic axes, and their check against PyTorch
(hf.py's flow calls these).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from . import _verify as _verify_mod
from ._checkpoint_files import seq2seq_paths
from ._export import export
from ._hf_inputs import accepts, encoder_inputs, main_input, vocab_size


class _Seq2SeqEncoder(torch.nn.Module):
    """The encoder file: the encoder's last_hidden_state and the decoder's
    cross-attention cache (present.<i>.encoder.key/value), computed once per
    input by the model's own decoder layers. torch.export cannot capture
    "compute the cross cache on the first step, reuse it after" in one
    decoder graph without a torch.cond around the whole decoder (whose
    branches torch's serializer refuses: tensor constants of the attention
    masks inside them), so the cross cache comes from the encoder file and
    the decoder always reads it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def _run(self, inputs: dict[str, Any], mask):
        from transformers import DynamicCache, EncoderDecoderCache

        enc = _encode(self.model, inputs)
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        # One decoder step on any token fills the cross cache; the rest of
        # the step feeds no output and is removed from the file.
        start = torch.zeros(enc.shape[0], 1, dtype=torch.long, device=enc.device)
        masked = {} if mask is None else {"attention_mask": mask}
        self.model(decoder_input_ids=start, encoder_outputs=_encoder_outputs(enc),
                   past_key_values=cache, use_cache=True, **masked)
        return {"last_hidden_state": enc,
                "past_key_values": EncoderDecoderCache(DynamicCache(),
                                                       cache.cross_attention_cache)}


def _encode(model, inputs: dict[str, Any]):
    """The encoder's last hidden state, the encoder run alone as generate runs it (Switch
    Transformers' whole forward with use_cache passes it to its encoder, which refuses it)."""
    encoder = model.get_encoder()
    if accepts(encoder, "use_cache"):
        inputs = dict(inputs, use_cache=False)
    out = encoder(**inputs)
    # Some encoders (NLLB-MoE's, ProphetNet's, T5Gemma's) return a tuple.
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


class _TextEncoder(_Seq2SeqEncoder):
    def forward(self, input_ids, attention_mask):
        return self._run({"input_ids": input_ids, "attention_mask": attention_mask},
                         attention_mask)


class _SpeechEncoder(_Seq2SeqEncoder):
    def forward(self, input_features):
        return self._run({"input_features": input_features}, None)


class _WaveformEncoder(_Seq2SeqEncoder):
    def forward(self, input_values):
        return self._run({"input_values": input_values}, None)


class _ImageEncoder(_Seq2SeqEncoder):
    def forward(self, pixel_values):
        return self._run({"pixel_values": pixel_values}, None)


class _PatchEncoder(_Seq2SeqEncoder):
    """Pix2Struct: the patches' mask is the decoder's cross-attention mask too."""

    def forward(self, flattened_patches, attention_mask):
        return self._run({"flattened_patches": flattened_patches,
                          "attention_mask": attention_mask}, attention_mask)


class _Seq2SeqDecoder(torch.nn.Module):
    """The decoder file, one step: decoder_input_ids, encoder_attention_mask
    (text models, Pix2Struct) and the EncoderDecoderCache (past_key_values.<i>.decoder.*:
    the self-attention cache, empty on the first step; .encoder.*: the
    encoder file's cross cache) -> logits and present.<i>.decoder.key/value.
    The cross cache is read, never recomputed, and not returned (it does not
    change). The model is given a zero encoder_hidden_states of the cross
    cache's length: its layers only test that there is one."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def _run(self, decoder_input_ids, mask, past_key_values):
        from transformers import DynamicCache, EncoderDecoderCache

        cross = past_key_values.cross_attention_cache.layers[0].keys
        enc = cross.new_zeros(cross.shape[0], cross.shape[2], _encoder_width(self.model))
        masked = {} if mask is None else {"attention_mask": mask}
        out = self.model(decoder_input_ids=decoder_input_ids,
                         encoder_outputs=_encoder_outputs(enc), past_key_values=past_key_values,
                         use_cache=True, **masked)
        return {"logits": out.logits,
                "past_key_values": EncoderDecoderCache(out.past_key_values.self_attention_cache,
                                                       DynamicCache())}


def _encoder_outputs(enc):
    """The encoder's output as the model's forward takes it: a model output object (T5Gemma
    reads `.last_hidden_state`, NLLB-MoE `.router_logits` too; the others take a tuple as
    well), its fields but the last hidden state None."""
    from transformers.modeling_outputs import MoEModelOutput

    return MoEModelOutput(last_hidden_state=enc)


def _encoder_width(model) -> int:
    """The width of the encoder's last_hidden_state (a vision encoder-decoder projects it to
    the decoder's, so the stand-in must have the encoder's)."""
    cfg = getattr(model.get_encoder(), "config", None) or model.config  # FSMT's has none
    width = getattr(cfg, "d_model", None) or getattr(cfg, "hidden_size", None)
    if type(width) is not int:
        raise ValueError(f"{type(model.get_encoder()).__name__}'s config states no d_model or "
                         "hidden_size: pt2onnx cannot size the decoder's encoder states")
    return width


class _TextDecoder(_Seq2SeqDecoder):
    def forward(self, decoder_input_ids, encoder_attention_mask, past_key_values):
        return self._run(decoder_input_ids, encoder_attention_mask, past_key_values)


class _UnmaskedDecoder(_Seq2SeqDecoder):
    """Encoders whose output has no padding to mask: speech frames, a waveform, an image."""

    def forward(self, decoder_input_ids, past_key_values):
        return self._run(decoder_input_ids, None, past_key_values)


class _Seq2SeqInputs:
    """Example inputs of the encoder and decoder files at (batch, encoder
    length, decoder length, past), and their dynamic shapes."""

    def __init__(self, model, folder: str | None = None):
        self.model, self.folder = model, folder
        self.main = main_input(model)

    def parts(self):
        m = self.model
        encoder, decoder = {"input_features": (_SpeechEncoder, _UnmaskedDecoder),
                            "input_values": (_WaveformEncoder, _UnmaskedDecoder),
                            "pixel_values": (_ImageEncoder, _UnmaskedDecoder),
                            "flattened_patches": (_PatchEncoder, _TextDecoder),
                            }.get(self.main, (_TextEncoder, _TextDecoder))
        return encoder(m).eval(), decoder(m).eval()

    def make(self, batch: int, seq: int, dec: int, past: int):
        m = self.model
        enc_in = encoder_inputs(m, batch, seq, self.folder)[0]
        mask = enc_in.get("attention_mask")
        # The caches, made by the model itself (a run over past + 1 decoder
        # tokens), so any layer count, heads and head size fit; on fake
        # weights (weights="empty") zeros of the shapes a fake run gives.
        fake_mode = getattr(next(m.parameters()), "fake_mode", None)
        ids = torch.randint(0, vocab_size(m.config), (batch, past + 1))
        with torch.no_grad(), fake_mode or contextlib.nullcontext():
            run_in = enc_in if fake_mode is None else {
                k: fake_mode.from_tensor(v) for k, v in enc_in.items()}
            if fake_mode is not None:
                ids = fake_mode.from_tensor(ids)
            masked = {} if mask is None else {"attention_mask": run_in["attention_mask"]}
            cache = m(decoder_input_ids=ids, encoder_outputs=_encoder_outputs(_encode(m, run_in)),
                      use_cache=True, **masked).past_key_values

        def real(t):
            return torch.zeros(t.shape, dtype=t.dtype) if fake_mode is not None else t

        from transformers import DynamicCache, EncoderDecoderCache

        self_c, cross_c = DynamicCache(), DynamicCache()
        for i, layer in enumerate(cache.self_attention_cache.layers):
            self_c.update(real(layer.keys)[:, :, :past], real(layer.values)[:, :, :past], i)
        for i, layer in enumerate(cache.cross_attention_cache.layers):
            cross_c.update(real(layer.keys), real(layer.values), i)
        edc = EncoderDecoderCache(self_c, cross_c)
        dec_in: dict[str, Any] = {
            "decoder_input_ids": torch.randint(0, vocab_size(m.config), (batch, dec))}
        if mask is not None:
            dec_in["encoder_attention_mask"] = mask
        dec_in["past_key_values"] = edc
        return enc_in, dec_in

    def dynamic_shapes(self, enc_in, dec_in):
        # Speech: the frames' dims as _hf_inputs.audio_inputs makes them (Whisper's fixed,
        # Speech2Text's and SeamlessM4T's dynamic); an image's encoder length is fixed.
        enc_ds = encoder_inputs(self.model, 1, 1, self.folder)[1]
        cache = dec_in["past_key_values"]
        n_self = len(cache.self_attention_cache.layers)
        n_cross = len(cache.cross_attention_cache.layers)
        s = {0: "batch_size", 2: "past_decoder_sequence_length"}
        c = {0: "batch_size"} if self.main == "pixel_values" else {
            0: "batch_size", 2: "encoder_sequence_length"}
        dec_ds = {"decoder_input_ids": {0: "batch_size", 1: "decoder_sequence_length"}}
        if "encoder_attention_mask" in dec_in:
            dec_ds["encoder_attention_mask"] = {0: "batch_size", 1: "encoder_sequence_length"}
        dec_ds["past_key_values"] = [[[s] * n_self, [s] * n_self],
                                     [[c] * n_cross, [c] * n_cross]]
        return enc_ds, dec_ds


def prefixed_source(source, model):
    """`source` for a wrapper holding `model` as its `model` attribute: its
    parameter names gain the prefix `model.`; a file uses part of the
    checkpoint (the encoder file no decoder self-attention), so unused
    tensors are allowed."""
    if source is None:
        return None
    import copy

    src = copy.copy(source)
    src.aliases = {k: list(v) for k, v in source.aliases.items()}
    src.allow_unused = True
    groups: dict[int, list[str]] = {}  # tied weights: one tensor under several names
    for name, t in [*model.named_parameters(remove_duplicate=False),
                    *model.named_buffers(remove_duplicate=False)]:
        groups.setdefault(id(t), []).append(name)
    for group in groups.values():
        others = [o for n in group for o in (n, *source.aliases.get(n, []))]
        for name in group:
            src.aliases[f"model.{name}"] = list(dict.fromkeys(others))
    return src


def export_with_past(model, source, f, export_kw, states, folder=None):
    enc_path, dec_path = seq2seq_paths(f)
    inputs = _Seq2SeqInputs(model, folder)
    torch.manual_seed(0)
    enc_in, dec_in = inputs.make(2, 8, 3, 4)
    enc_ds, dec_ds = inputs.dynamic_shapes(enc_in, dec_in)
    encoder, decoder = inputs.parts()
    results = []
    for part, path, kw, ds in ((encoder, enc_path, enc_in, enc_ds),
                               (decoder, dec_path, dec_in, dec_ds)):
        states.append({})
        results.append(export(part, (), path, kwargs=kw, dynamic_shapes=ds,
                              weights=prefixed_source(source, model), **export_kw,
                              _state=states[-1]))
    result = results[1]
    result.checks["encoder"] = results[0]
    return result


def verify_with_past(model, f, atol, rtol, folder=None) -> dict[str, Any]:
    enc_path, dec_path = seq2seq_paths(f)
    inputs = _Seq2SeqInputs(model, folder)
    encoder, decoder = inputs.parts()
    torch.manual_seed(1)
    sizes = [(1, 5, 1, 0), (3, 11, 1, 6), (2, 6, 3, 2)]
    sessions = [_verify_mod.session(p) for p in (enc_path, dec_path)]
    worst = 0.0
    for size in sizes:
        for sess, path, part, kw in zip(sessions, (enc_path, dec_path), (encoder, decoder),
                                        inputs.make(*size)):
            worst = max(worst, _verify_mod.compare_or_raise(
                sess, part, kw, atol, rtol, scaled=True,
                refused=f"verify: PyTorch fails at {size}",
                differs=f"verify: {path} differs from PyTorch at (batch, encoder length, "
                        f"decoder length, past) {size}"))
    return {"max_abs_error": worst, "verified_sizes": sizes}
