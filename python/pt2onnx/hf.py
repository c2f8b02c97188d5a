"""Hugging Face transformers, end to end: the one module of pt2onnx that knows
about transformers.

- `prepare()` makes transformers' models capturable: it registers
  `DynamicCache` as a pytree node with transformers' own export registration
  (so a cache is an input and an output of the exported graph, named
  `past_key_values.<layer>.key` / `present.<layer>.key` by the C++ core), and,
  when torchvision is installed but its compiled operators cannot load with
  this torch (its PyPI wheel is built against CUDA torch), keeps torchvision
  from registering them so that transformers' imports of it succeed.
  Nothing else is needed: transformers' attention masks already trace under
  torch.export (measured with transformers 5.23), and every op they use is
  converted in C++.
- `prepare()` also registers `EncoderDecoderCache` (transformers has no
  export registration for it): the C++ core names its leaves
  `past_key_values.<i>.decoder.key` (self-attention) and
  `past_key_values.<i>.encoder.key` (cross-attention), `present.<i>...` as
  outputs, as optimum does.
- `export_pretrained(path, task)` exports a local checkpoint directory (as
  `save_pretrained` writes it) for a task, with example inputs and dynamic
  shapes chosen for the task, and verifies the file in onnxruntime
  (seq2seq-with-past: an encoder file and a decoder-step file).
- `main()` is the `pt2onnx-pretrained` command (python/pt2onnx/_pretrained_command.py,
  which imports no torch until a program cache miss or the verification needs it).

Nothing here reaches the network: checkpoints load with local_files_only and
the hub's offline mode.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import sys
import time
import types
from typing import Any

import torch

from . import _checkpoint_config, _cli
from . import _export as _export_mod
from . import _pretrained_command, _program_cache
from . import _verify as _verify_mod
from ._checkpoint_files import safetensors_files, seq2seq_paths
from ._pretrained_command import TASKS, main  # noqa: F401 - pt2onnx.hf.main: the command
from ._core import ConversionError
from ._export import ExportResult, export



def _torchvision_ops_unloadable() -> bool:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or "torchvision" in sys.modules or not spec.submodule_search_locations:
        return False
    lib = os.path.join(list(spec.submodule_search_locations)[0], "_C.so")
    if not os.path.exists(lib):
        return False
    try:
        torch.ops.load_library(lib)
    except (OSError, RuntimeError):
        return True
    return False


def prepare() -> None:
    """Make transformers' models capturable by torch.export.

    Registers transformers' `DynamicCache` as a pytree node with transformers' own export
    registration, so a cache is an input and an output of the exported graph (named
    `past_key_values.<layer>.key` / `present.<layer>.key` by the C++ core), and
    `EncoderDecoderCache`, which transformers has no export registration for (leaves named
    `past_key_values.<i>.decoder.key` for self-attention and
    `past_key_values.<i>.encoder.key` for cross-attention, `present.<i>...` as outputs, as
    optimum does). When torchvision is installed but its compiled operators cannot load
    with this torch, keeps torchvision from registering them, so that transformers' imports
    of it succeed.

    Idempotent; call it before importing transformers' models. The other functions of this
    module call it themselves.
    """
    if _torchvision_ops_unloadable():
        sys.modules.setdefault("torchvision._meta_registrations",
                               types.ModuleType("torchvision._meta_registrations"))
    from transformers import DynamicCache
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    if DynamicCache not in torch.utils._pytree.SUPPORTED_NODES:
        register_dynamic_cache_export_support()
    _register_encoder_decoder_cache()


_EDC_KEYS = ["self_attention_cache", "cross_attention_cache"]


def _register_encoder_decoder_cache() -> None:
    """transformers' EncoderDecoderCache as a pytree node (transformers has no
    export registration for it): its two DynamicCaches, self-attention then
    cross-attention, keyed by their attribute names; the C++ core names the
    leaves past_key_values.<i>.decoder.key / .encoder.key (present.<i>... as
    an output). Unflattened without looking at the sizes (no shape guard):
    every cross-attention layer it holds counts as computed (is_updated)."""
    from transformers import EncoderDecoderCache
    from transformers.cache_utils import DynamicCache

    pytree = torch.utils._pytree
    if EncoderDecoderCache in pytree.SUPPORTED_NODES:
        return

    def flatten(c):
        return [c.self_attention_cache, c.cross_attention_cache], list(_EDC_KEYS)

    def flatten_with_keys(c):
        return ([(pytree.MappingKey(k), getattr(c, k)) for k in _EDC_KEYS], list(_EDC_KEYS))

    def unflatten(values, context):
        parts = dict(zip(context, values))
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        cache.self_attention_cache = parts["self_attention_cache"]
        cache.cross_attention_cache = parts["cross_attention_cache"]
        cache.is_updated = {i: True for i in range(len(cache.cross_attention_cache.layers))}
        return cache

    pytree.register_pytree_node(
        EncoderDecoderCache, flatten, unflatten,
        serialized_type_name=f"{EncoderDecoderCache.__module__}.{EncoderDecoderCache.__name__}",
        flatten_with_keys_fn=flatten_with_keys)


# ---- example inputs per task ---------------------------------------------------

def _accepts(model: torch.nn.Module, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


def _text_inputs(model, batch: int, seq: int, past: int = 0) -> dict[str, Any]:
    vocab = model.config.vocab_size
    d: dict[str, Any] = {"input_ids": torch.randint(0, vocab, (batch, seq))}
    mask = torch.ones(batch, past + seq, dtype=torch.long)
    if batch > 1 and past + seq > 1:
        mask[0, 0] = 0  # a left-padded row: the mask is live data
    d["attention_mask"] = mask
    if _accepts(model, "token_type_ids") and getattr(model.config, "type_vocab_size", 0) > 1:
        d["token_type_ids"] = torch.zeros(batch, seq, dtype=torch.long)
    return d


def _image_inputs(model, batch: int) -> dict[str, Any]:
    cfg = model.config
    size = cfg.image_size if isinstance(cfg.image_size, int) else cfg.image_size[0]
    return {"pixel_values": torch.randn(batch, cfg.num_channels, size, size)}


def _audio_inputs(model, batch: int) -> dict[str, Any]:
    cfg = model.config
    # Whisper-like encoders take exactly 2 * max_source_positions frames.
    return {"input_features": torch.randn(batch, cfg.num_mel_bins,
                                          2 * cfg.max_source_positions)}


def _past(model, batch: int, past: int):
    """A DynamicCache of `past` positions, made by the model itself (a
    prefill run), so any decoder's layer count, heads and head size fit.
    past 0: an empty cache (what the first step, the prefill, is fed). A
    model without weight data (fake parameters) runs the prefill on fake
    tensors, for the shapes only; the cache is then zeros of those shapes."""
    ids = torch.randint(0, model.config.vocab_size, (batch, max(past, 1)))
    fake_mode = getattr(next(model.parameters()), "fake_mode", None)
    empty = fake_mode is not None
    with torch.no_grad(), fake_mode or contextlib.nullcontext():
        out = model(input_ids=fake_mode.from_tensor(ids) if empty else ids, use_cache=True)
    cache = out.past_key_values
    if empty:
        from transformers import DynamicCache

        zeros = DynamicCache()
        for i, layer in enumerate(cache.layers):
            zeros.update(torch.zeros(layer.keys.shape, dtype=layer.keys.dtype),
                         torch.zeros(layer.values.shape, dtype=layer.values.dtype), i)
        cache = zeros
    if past == 0:
        from transformers import DynamicCache

        empty = DynamicCache()
        for i, layer in enumerate(cache.layers):
            empty.update(layer.keys[:, :, :0], layer.values[:, :, :0], i)
        cache = empty
    return cache


class _TaskInputs:
    """Example inputs of one task at (batch, seq, past), and its dynamic shapes."""

    def __init__(self, model, task: str):
        self.model, self.task = model, task
        self.main = getattr(model, "main_input_name", "input_ids")

    def make(self, batch: int, seq: int, past: int = 0) -> dict[str, Any]:
        m = self.model
        if self.main == "pixel_values":
            return _image_inputs(m, batch)
        if self.task == "seq2seq":
            d = (_audio_inputs(m, batch) if self.main == "input_features"
                 else _text_inputs(m, batch, seq))
            d["decoder_input_ids"] = torch.randint(0, m.config.vocab_size,
                                                   (batch, max(seq // 2, 1)))
            return d
        d = _text_inputs(m, batch, seq, past)
        if self.task == "text-generation-with-past":
            if _accepts(m, "position_ids"):
                pos = d["attention_mask"].cumsum(-1) - 1
                d["position_ids"] = pos.clamp(min=0)[:, past:]
            d["past_key_values"] = _past(m, batch, past)
        return d

    def dynamic_shapes(self, inputs: dict[str, Any]) -> dict[str, Any]:
        ds: dict[str, Any] = {}
        for k, v in inputs.items():
            if k == "past_key_values":
                n = len(v.layers)
                axes = {0: "batch_size", 2: "past_sequence_length"}
                ds[k] = [[axes] * n, [axes] * n]
            elif k == "attention_mask" and self.task == "text-generation-with-past":
                ds[k] = {0: "batch_size", 1: "total_sequence_length"}
            elif k == "decoder_input_ids":
                ds[k] = {0: "batch_size", 1: "decoder_sequence_length"}
            elif k in ("pixel_values", "input_features"):
                ds[k] = {0: "batch_size"}
            else:
                ds[k] = {0: "batch_size", 1: "sequence_length"}
        return ds


# ---- encoder-decoders with a cache (seq2seq-with-past) -------------------------

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

        enc = self.model.get_encoder()(**inputs).last_hidden_state
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        # One decoder step on any token fills the cross cache; the rest of
        # the step feeds no output and is removed from the file.
        start = torch.zeros(enc.shape[0], 1, dtype=torch.long, device=enc.device)
        self.model(decoder_input_ids=start, attention_mask=mask, encoder_outputs=(enc,),
                   past_key_values=cache, use_cache=True)
        return {"last_hidden_state": enc,
                "past_key_values": EncoderDecoderCache(DynamicCache(),
                                                       cache.cross_attention_cache)}


class _TextEncoder(_Seq2SeqEncoder):
    def forward(self, input_ids, attention_mask):
        return self._run({"input_ids": input_ids, "attention_mask": attention_mask},
                         attention_mask)


class _SpeechEncoder(_Seq2SeqEncoder):
    def forward(self, input_features):
        return self._run({"input_features": input_features}, None)


class _Seq2SeqDecoder(torch.nn.Module):
    """The decoder file, one step: decoder_input_ids, encoder_attention_mask
    (text models) and the EncoderDecoderCache (past_key_values.<i>.decoder.*:
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
        d_model = getattr(self.model.config, "d_model", None) or self.model.config.hidden_size
        enc = cross.new_zeros(cross.shape[0], cross.shape[2], d_model)
        out = self.model(decoder_input_ids=decoder_input_ids, attention_mask=mask,
                         encoder_outputs=(enc,), past_key_values=past_key_values, use_cache=True)
        return {"logits": out.logits,
                "past_key_values": EncoderDecoderCache(out.past_key_values.self_attention_cache,
                                                       DynamicCache())}


class _TextDecoder(_Seq2SeqDecoder):
    def forward(self, decoder_input_ids, encoder_attention_mask, past_key_values):
        return self._run(decoder_input_ids, encoder_attention_mask, past_key_values)


class _SpeechDecoder(_Seq2SeqDecoder):
    def forward(self, decoder_input_ids, past_key_values):
        return self._run(decoder_input_ids, None, past_key_values)


class _Seq2SeqInputs:
    """Example inputs of the encoder and decoder files at (batch, encoder
    length, decoder length, past), and their dynamic shapes."""

    def __init__(self, model):
        self.model = model
        self.speech = getattr(model, "main_input_name", "input_ids") == "input_features"

    def parts(self):
        m = self.model
        if self.speech:
            return _SpeechEncoder(m).eval(), _SpeechDecoder(m).eval()
        return _TextEncoder(m).eval(), _TextDecoder(m).eval()

    def make(self, batch: int, seq: int, dec: int, past: int):
        m = self.model
        enc_in = (_audio_inputs(m, batch) if self.speech else _text_inputs(m, batch, seq))
        mask = enc_in.get("attention_mask")
        # The caches, made by the model itself (a run over past + 1 decoder
        # tokens), so any layer count, heads and head size fit; on fake
        # weights (weights="empty") zeros of the shapes a fake run gives.
        fake_mode = getattr(next(m.parameters()), "fake_mode", None)
        ids = torch.randint(0, m.config.vocab_size, (batch, past + 1))
        run_in = dict(enc_in, decoder_input_ids=ids)
        with torch.no_grad(), fake_mode or contextlib.nullcontext():
            if fake_mode is not None:
                run_in = {k: fake_mode.from_tensor(v) for k, v in run_in.items()}
            cache = m(**run_in, use_cache=True).past_key_values

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
            "decoder_input_ids": torch.randint(0, m.config.vocab_size, (batch, dec))}
        if mask is not None:
            dec_in["encoder_attention_mask"] = mask
        dec_in["past_key_values"] = edc
        return enc_in, dec_in

    def dynamic_shapes(self, enc_in, dec_in):
        enc_ds = {k: ({0: "batch_size"} if k == "input_features"
                      else {0: "batch_size", 1: "encoder_sequence_length"}) for k in enc_in}
        cache = dec_in["past_key_values"]
        n_self = len(cache.self_attention_cache.layers)
        n_cross = len(cache.cross_attention_cache.layers)
        s = {0: "batch_size", 2: "past_decoder_sequence_length"}
        c = {0: "batch_size", 2: "encoder_sequence_length"}
        dec_ds = {"decoder_input_ids": {0: "batch_size", 1: "decoder_sequence_length"}}
        if "encoder_attention_mask" in dec_in:
            dec_ds["encoder_attention_mask"] = {0: "batch_size", 1: "encoder_sequence_length"}
        dec_ds["past_key_values"] = [[[s] * n_self, [s] * n_self],
                                     [[c] * n_cross, [c] * n_cross]]
        return enc_ds, dec_ds


def _prefixed_source(source, model):
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


def _export_seq2seq_with_past(model, source, f, export_kw, states):
    enc_path, dec_path = seq2seq_paths(f)
    inputs = _Seq2SeqInputs(model)
    torch.manual_seed(0)
    enc_in, dec_in = inputs.make(2, 8, 3, 4)
    enc_ds, dec_ds = inputs.dynamic_shapes(enc_in, dec_in)
    encoder, decoder = inputs.parts()
    results = []
    for part, path, kw, ds in ((encoder, enc_path, enc_in, enc_ds),
                               (decoder, dec_path, dec_in, dec_ds)):
        states.append({})
        results.append(export(part, (), path, kwargs=kw, dynamic_shapes=ds,
                              weights=_prefixed_source(source, model), **export_kw,
                              _state=states[-1]))
    result = results[1]
    result.checks["encoder"] = results[0]
    return result


def _verify_seq2seq_with_past(model, f, atol, rtol) -> dict[str, Any]:
    enc_path, dec_path = seq2seq_paths(f)
    inputs = _Seq2SeqInputs(model)
    encoder, decoder = inputs.parts()
    import onnxruntime as ort

    torch.manual_seed(1)
    sizes = [(1, 5, 1, 0), (3, 11, 1, 6), (2, 6, 3, 2)]
    sessions = [ort.InferenceSession(p, providers=["CPUExecutionProvider"])
                for p in (enc_path, dec_path)]
    worst = 0.0
    for size in sizes:
        for sess, path, part, kw in zip(sessions, (enc_path, dec_path), (encoder, decoder),
                                        inputs.make(*size)):
            try:
                run = _verify_mod._compare(sess, part, (), kw, atol, rtol)
            except _verify_mod._TorchRefused as e:
                raise _verify_mod.VerificationError(
                    f"verify: PyTorch fails at {size}: {e}") from e
            if "failures" in run:
                raise _verify_mod.VerificationError(
                    f"verify: {path} differs from PyTorch at (batch, encoder length, "
                    f"decoder length, past) {size}: " + "; ".join(run["failures"]))
            worst = max([worst, *run["max_abs_diff"].values()])
    return {"max_abs_error": worst, "verified_sizes": sizes}


def _model_class(task: str, config):
    import transformers as tr

    if task in ("seq2seq", "seq2seq-with-past"):
        # Text (T5, BART) or speech (Whisper) encoder-decoders.
        speech = tr.AutoModelForSpeechSeq2Seq
        return speech if type(config) in speech._model_mapping else tr.AutoModelForSeq2SeqLM
    return {"text-generation-with-past": tr.AutoModelForCausalLM,
            "text-generation": tr.AutoModelForCausalLM,
            "feature-extraction": tr.AutoModel,
            "image-classification": tr.AutoModelForImageClassification}[task]


def _config(path: str | os.PathLike, task: str):
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}; got {task!r}")
    path = os.fspath(path)
    # config.json read as a regular file of sane size, and checked against the weights before
    # transformers builds anything from it (python/pt2onnx/_checkpoint_config.py).
    raw = _checkpoint_config.read_config(path)
    _checkpoint_config.check(path, raw)
    prepare()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig

    with _checkpoint_config.allocation_errors(path, raw):
        config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    if hasattr(config, "use_cache"):
        # Set before the model is built: encoder-decoders copy it into their stacks.
        config.use_cache = task in ("text-generation-with-past", "seq2seq-with-past")
    return config


def load_pretrained(path: str | os.PathLike, task: str) -> torch.nn.Module:
    """Load the model of a local checkpoint directory for a task.

    The model class follows the task (`AutoModelForCausalLM` for text generation,
    `AutoModel` for feature-extraction, `AutoModelForImageClassification`,
    `AutoModelForSeq2SeqLM` or `AutoModelForSpeechSeq2Seq` for seq2seq); its config's
    `use_cache` is True for the "-with-past" tasks only. Never touches the network:
    `local_files_only`, no remote code, and `HF_HUB_OFFLINE=1` in the environment unless it
    is set.

    Args:
        path: The checkpoint directory (config.json and the weights).
        task: One of `TASKS`, as `export_pretrained` takes it.

    Returns:
        torch.nn.Module: The model, in eval mode, in float32.

    Raises:
        ValueError: An unknown task, or config.json does not fit the checkpoint's weights
            (see `export_pretrained`).
        FileNotFoundError: `path` holds no config.json.
        MemoryError: Building the model ran out of memory (the message names the sizes).
    """
    config = _config(path, task)
    with _checkpoint_config.allocation_errors(path, config):
        model = _model_class(task, config).from_pretrained(path, config=config,
                                                           local_files_only=True,
                                                           trust_remote_code=False,
                                                           dtype=torch.float32)
    return model.eval()


def empty_pretrained(path: str | os.PathLike, task: str):
    """Build the model of a local checkpoint directory without loading its weights.

    The model is built from the checkpoint's config for `task` (as `load_pretrained`
    chooses its class) under `pt2onnx.init_empty_weights()`: its parameters have no data
    (fake tensors), its buffers are computed as at init. No weight is loaded; the weight
    source returned has `export()` read the checkpoint's safetensors files instead,
    converting float weights stored in another type (bfloat16, float16) to float32 as
    `from_pretrained(dtype=torch.float32)` loads them.

    Args:
        path: The checkpoint directory (config.json and safetensors files).
        task: One of `TASKS`, as `export_pretrained` takes it.

    Returns:
        tuple: `(model, weights)`: the model, in eval mode, in float32, and the weight
            source (`checkpoint_weights(model, path)`) to pass as `export(weights=...)`.

    Raises:
        ValueError: An unknown task, or config.json does not fit the checkpoint's weights
            (see `export_pretrained`).
        FileNotFoundError: `path` holds no config.json or no safetensors file.
        MemoryError: Building the model ran out of memory (the message names the sizes).
    """
    from ._export import init_empty_weights

    config = _config(path, task)
    with init_empty_weights(), _checkpoint_config.allocation_errors(path, config):
        model = _model_class(task, config).from_config(config, dtype=torch.float32,
                                                       trust_remote_code=False)
    model.eval()
    return model, checkpoint_weights(model, path)


def _saved_names(model) -> dict[str, str]:
    """Model key -> checkpoint key where save_pretrained renames it
    (transformers' weight conversion mapping: GPT-NeoX's lm_head is saved as
    embed_out). Found by running transformers' own reverse mapping on one
    marker tensor per key: a rename passes the marker through under its new
    name. Keys that a conversion merges or splits (not a rename) keep their
    names; the weight check then names them."""
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:
        return {}
    keys = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    markers = {k: torch.zeros(1) for k in keys}
    owner = {id(t): k for k, t in markers.items()}
    try:
        saved = revert_weight_conversion(model, dict(markers))
    except Exception:  # noqa: BLE001 - a conversion that needs real tensors: names kept
        return {}
    return {owner[id(t)]: k for k, t in dict(saved).items()
            if id(t) in owner and owner[id(t)] != k}


def checkpoint_weights(model, path: str | os.PathLike):
    """Make the `export(weights=...)` source of a model from its checkpoint directory.

    The source reads the safetensors files of the checkpoint, with the names
    `save_pretrained` gave its tensors (transformers' renames, such as GPT-NeoX's lm_head
    saved as embed_out); float weights stored in another type are converted to the model's
    while streamed. A checkpoint of another head of the same model (a ...ForCausalLM
    checkpoint exported as feature-extraction, or the reverse) is read too: its names carry
    (or lack) the base model's prefix, and the other head's weights are not read.

    Args:
        model: The transformers model, built without weight data (as `empty_pretrained`
            or `pt2onnx.init_empty_weights()` builds it).
        path: The checkpoint directory holding the safetensors files.

    Returns:
        The weight source, to pass as `export(model, ..., weights=...)`.

    Raises:
        FileNotFoundError: `path` holds no safetensors file, or its index names shards
            that are not there.
        ValueError: Its model.safetensors.index.json is not a safetensors index.
    """
    from ._export import _WeightSource

    source = _WeightSource(files=safetensors_files(path), convert_floats=True)
    for name, saved in _saved_names(model).items():
        source.aliases.setdefault(name, []).append(saved)
    # A checkpoint of another head of the same model (a ...ForCausalLM
    # checkpoint exported as feature-extraction, or the reverse): its names
    # carry (or lack) the base model's prefix, and the other head's weights
    # are not read.
    config = model.config
    arch = (getattr(config, "architectures", None) or [type(model).__name__])[0]
    prefix = getattr(model, "base_model_prefix", "")
    if arch != type(model).__name__ and prefix:
        source.allow_unused = True
        for name, _ in list(model.named_parameters()) + list(model.named_buffers()):
            other = name[len(prefix) + 1:] if name.startswith(prefix + ".") else f"{prefix}.{name}"
            source.aliases.setdefault(name, []).append(other)
    return source


def _verify(model, path: str, inputs: _TaskInputs, sizes, atol: float, rtol: float) -> float:
    """Max abs difference of every output, onnxruntime against PyTorch, over
    fresh inputs at `sizes` ((batch, seq, past) triples): export(verify=True)'s
    comparison; VerificationError on a mismatch."""
    import onnxruntime as ort

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    worst = 0.0
    for batch, seq, past in sizes:
        try:
            run = _verify_mod._compare(sess, model, (), inputs.make(batch, seq, past), atol, rtol)
        except _verify_mod._TorchRefused as e:
            raise _verify_mod.VerificationError(f"verify: PyTorch fails at {(batch, seq, past)}: "
                                                f"{e}") from e
        if "failures" in run:
            raise _verify_mod.VerificationError(
                f"verify: {path} differs from PyTorch at (batch, seq, past) "
                f"{(batch, seq, past)}: " + "; ".join(run["failures"]))
        worst = max([worst, *run["max_abs_diff"].values()])
    return worst


def export_pretrained(
    path: str | os.PathLike,
    task: str,
    f: str | os.PathLike | None = None,
    *,
    opset: int | None = None,
    verify: bool = True,
    atol: float | None = None,
    rtol: float | None = None,
    target: str = "standard",
    dtype: torch.dtype | str | None = None,
    weights: str = "empty",
    verbose: bool | None = None,
    external_data: bool | str | None = True,
    quantize: str | dict | None = None,
    cache: bool = True,
    cache_dir: str | os.PathLike | None = None,
) -> ExportResult:
    """Export a local transformers checkpoint to ONNX for a task, and verify it.

    The checkpoint is exported with example inputs and dynamic batch and sequence lengths
    chosen for the task, then checked in onnxruntime against PyTorch on fresh inputs of
    other sizes. Nothing reaches the network: the checkpoint loads with local_files_only
    and the hub's offline mode.

    Args:
        path: The checkpoint directory: config.json and the weights, as `save_pretrained`
            writes them.
        task: One of `TASKS`:

            - "text-generation-with-past": a decoder step: input_ids, attention_mask,
              position_ids, past_key_values.<i>.key/value -> logits, present.<i>.key/value;
              one file serves prefill, with an empty cache, and decode;
            - "text-generation": the same without a cache;
            - "feature-extraction": the base model;
            - "image-classification";
            - "seq2seq": the encoder-decoder forward with decoder_input_ids, no cache;
            - "seq2seq-with-past": encoder-decoder generation with a cache, in two files
              (see `seq2seq_paths`); for f = <stem>.onnx, <stem>.encoder.onnx: input_ids,
              attention_mask (or Whisper's input_features) -> last_hidden_state,
              present.<i>.encoder.key/value (the decoder's cross-attention cache, computed
              once); <stem>.decoder.onnx, one decoder step: decoder_input_ids,
              encoder_attention_mask (text models), past_key_values.<i>.decoder.key/value
              (the self-attention cache, past length 0 on the first step),
              past_key_values.<i>.encoder.key/value (the encoder file's) -> logits,
              present.<i>.decoder.key/value. These are optimum's names.
        f: The ONNX file to write; None: `<path>/model.onnx`. Its folder is created if
            missing.
        opset: `export()`'s opset; None: `pt2onnx.DEFAULT_OPSET`.
        verify: Check the file in onnxruntime against PyTorch on fresh inputs of other
            sizes (needs onnxruntime). With weights="empty" PyTorch then loads the weights,
            after the export: use verify=False for models larger than memory.
        atol: The check's absolute tolerance; None: `export()`'s verify tolerance of the
            dtype (1e-4 for float32, 1e-2 for float16, 5e-2 for bfloat16).
        rtol: The check's relative tolerance; None: the dtype's default, as for `atol`.
        target: `export()`'s: "onnxruntime" writes onnxruntime's fused operators (the
            decoder's inputs and outputs stay the same, so one generation loop serves both
            targets); "standard" (default) ONNX operators.
        dtype: `export()`'s: torch.float16 writes weights, logits and the KV cache in
            float16 (the model is loaded and compared in float32).
        weights: "empty" (default) builds the model from its config without weight data
            and has the C++ core copy the checkpoint's safetensors bytes into the external
            data file-to-file, so the export needs memory for the graph only, whatever the
            model's size; float weights stored in another type than float32 (a bfloat16
            checkpoint) are converted while streamed. "memory" loads the model with
            `from_pretrained` first (checkpoints without safetensors files need it). Both
            write the same file.
        verbose: `export()`'s: the progress line on stderr (False: none).
        external_data: `export()`'s ("shards:2GB": data files of at most 2 GB).
        quantize: `export()`'s ("int4" / "int8": Linear weights quantized while written).
            A quantized file differs from PyTorch by more than rounding, so verify=True then
            needs `atol` and `rtol` (pass verify=False to skip the check).
        cache: Keep the captured program in the program cache and, when the same config
            was exported before for the same task with the same options, library versions
            and model code, convert the kept program with this checkpoint's weights instead
            of capturing it again: the same file, byte for byte, without the capture (see
            [the program cache](../guides/transformers.md#the-program-cache)). Only with
            weights="empty". False: neither read nor write the cache.
        cache_dir: The cache's folder; None: `$PT2ONNX_CACHE_DIR`, else
            `pt2onnx/programs` under the user's cache directory (`$XDG_CACHE_HOME`,
            default ~/.cache). It must be the current user's alone (no group or other
            user may write it), or it is not used; what it trusts and checks:
            [trust](../guides/transformers.md#what-the-cache-trusts-and-what-it-checks).

    Returns:
        ExportResult: The export's result. With verify=True its `checks` has the
            verification's max abs error ("max_abs_error") and the input sizes checked
            ("verified_sizes"). With the cache, `checks["program_cache"]` says "hit" or
            "miss" and names the entry's folder (None when the program could not be kept);
            on a hit the timings start with "cache lookup" and have no "capture". For
            "seq2seq-with-past" it is the decoder's result, with the encoder's in
            `checks["encoder"]`.

    Raises:
        ValueError: An unknown task, `dtype` or `weights` value, or quantize with
            verify=True without `atol` and `rtol`; or config.json does not fit the
            checkpoint's weights (a layer count, the hidden size or the vocabulary other than
            the safetensors tensors' names and shapes imply: the field named, checked before
            the model is built), or is not a regular file of at most 64 MiB.
        FileNotFoundError: `path` holds no config.json (or, with weights="empty", no
            safetensors files).
        MemoryError: Building the model config.json describes ran out of memory (the
            message names the largest sizes config.json states).
        pt2onnx.ConversionError: The export failed; when the checkpoint's tensors do not
            fit the model built from its config (transformers converts some while loading),
            the message suggests weights="memory".
        pt2onnx.VerificationError: The file differs from PyTorch beyond `atol` / `rtol`.

    Runnable examples: [LLMs and transformers](../guides/transformers.md).
    """
    name = _export_mod.dtype_name(dtype)
    if quantize and verify and (atol is None or rtol is None):
        raise ValueError("export_pretrained(quantize=...) with verify=True needs atol and rtol "
                         "(quantized weights change the outputs by more than rounding); "
                         "or pass verify=False")
    atol, rtol = verify_tolerance(name, atol, rtol)
    if weights not in ("empty", "memory"):
        raise ValueError(f"weights must be 'empty' or 'memory', not {weights!r}")
    f = os.fspath(f) if f is not None else os.path.join(os.fspath(path), "model.onnx")
    options = dict(opset=opset, target=target, dtype=name, external_data=external_data,
                   quantize=quantize)
    use_cache = cache and weights == "empty"
    cache_dir = _program_cache.default_dir() if cache_dir is None else os.fspath(cache_dir)
    if use_cache:
        result = _pretrained_command.from_cache(cache_dir, path, task, f, options, verify,
                                                atol, rtol)
        if result is not None:
            return result
    with _cli.output_folder(os.path.dirname(os.path.abspath(f))):
        if weights == "empty":
            model, source = empty_pretrained(path, task)
        else:
            model, source = load_pretrained(path, task), None
        states: list[dict[str, Any]] = []
        result = _export_pretrained_to(model, source, task, f,
                                       dict(options, verbose=verbose), states)
        if verify:  # PyTorch needs the weights to run: with weights="empty" loaded only now
            verify_into(result, model if source is None else None, path, task, f, atol, rtol)
        if use_cache:
            entry = _store_programs(cache_dir, path, task, options, states)
            result.checks["program_cache"] = {"result": "miss", "entry": entry}
        return result


def _export_pretrained_to(model, source, task, f, export_kw, states):
    """The export itself (no verification); `states` gets export()'s `_state` of each file
    written, which the program cache stores."""
    inputs = _TaskInputs(model, task)
    torch.manual_seed(0)
    try:
        if task == "seq2seq-with-past":
            return _export_seq2seq_with_past(model, source, f, export_kw, states)
        example = inputs.make(2, 8, 4 if task == "text-generation-with-past" else 0)
        states.append({})
        return export(model, (), f, kwargs=example,
                      dynamic_shapes=inputs.dynamic_shapes(example), weights=source,
                      **export_kw, _state=states[-1])
    except ConversionError as e:
        if source is None or "the weights do not fit the model" not in str(e):
            raise
        raise ConversionError(
            f"{e}\n(transformers converts some checkpoints' tensors while loading them, e.g. "
            "merging experts; weights='memory' / --weights memory loads the model with "
            "from_pretrained first)") from None


def verify_into(result: ExportResult, model, path, task, f, atol, rtol) -> None:
    """export_pretrained's check of the file(s) written at `f` against PyTorch on fresh
    inputs of other sizes, into `result`: checks "max_abs_error" and "verified_sizes",
    timings "verify". `model` None: the checkpoint is loaded (with its weights) here."""
    t0 = time.perf_counter()
    if model is None:
        model = load_pretrained(path, task)
    if task == "seq2seq-with-past":
        result.checks.update(_verify_seq2seq_with_past(model, f, atol, rtol))
    else:
        inputs = _TaskInputs(model, task)
        torch.manual_seed(1)
        sizes = ([(1, 1, 7), (3, 5, 0), (2, 3, 2)] if task == "text-generation-with-past"
                 else [(1, 5, 0), (3, 11, 0)])
        result.checks["max_abs_error"] = _verify(model, f, inputs, sizes, atol, rtol)
        result.checks["verified_sizes"] = sizes
    result.timings["verify"] = time.perf_counter() - t0


def _store_programs(cache_dir, path, task, options, states) -> str | None:
    """Keeps the programs just captured in the cache (python/pt2onnx/_program_cache.py);
    the entry's folder, or None when they cannot be kept (a custom converter, say)."""
    from ._serialize import tree_json

    roles = ["encoder", "decoder"] if task == "seq2seq-with-past" else [""]
    if len(states) != len(roles):
        return None
    parts = []
    for role, state in zip(roles, states):
        if "convert" not in state or isinstance(state["convert"]["program"], bytes):
            return None
        part = _program_cache.make_part(role, tree_json(state["convert"]["program"]),
                                        state["convert"])
        if part is None:
            return None
        parts.append(part)
    return _program_cache.store_pretrained(cache_dir, path, task, options, parts)


def verify_tolerance(dtype: str, atol: float | None, rtol: float | None):
    """export_pretrained's tolerances: those given, else export()'s for the dtype."""
    default_atol, default_rtol = _export_mod.DTYPE_TOLERANCE[dtype]
    return (default_atol if atol is None else atol, default_rtol if rtol is None else rtol)


if __name__ == "__main__":
    sys.exit(main())
