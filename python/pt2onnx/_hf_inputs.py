"""Example inputs and dynamic axes of each input modality of a task (python/pt2onnx/_hf_tasks.py),
and the module whose outputs are the task's.

Inputs are made at (batch, seq, past) and named, with their dynamic axes, as optimum's
exporter names them (batch_size, sequence_length, num_choices, text_batch_size /
image_batch_size, past_sequence_length, total_sequence_length), so files are interchangeable.
Sizes a model fixes (an image size, a spectrogram length) come from its config, else from the
checkpoint's preprocessor_config.json, else the default transformers' processors use.
"""

from __future__ import annotations

import inspect
import json
import os
from typing import Any

import torch

from ._hf_tasks import Task

# What transformers' image processors resize to when neither config.json nor
# preprocessor_config.json says (ViTImageProcessor's and most others' default).
DEFAULT_IMAGE_SIZE = 224
# The widest per-position feature an example input is made with (a config's state_dim,
# patch width, ...): config.json is the user's file, and the inputs are made before the
# weights' shapes are compared with it.
MAX_FEATURES = 1 << 20


def accepts(model: torch.nn.Module, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


def _config_value(config, *names):
    """The first of `names` set on the config or its vision / encoder sub-config (a vision
    encoder-decoder's image size is its encoder's)."""
    for cfg in (config, getattr(config, "vision_config", None), getattr(config, "encoder", None)):
        for n in names:
            v = getattr(cfg, n, None) if cfg is not None else None
            if v is not None:
                return v
    return None


def _preprocessor_size(folder: str | None) -> int | None:
    """The image size a checkpoint's preprocessor_config.json crops or resizes to."""
    path = os.path.join(folder, "preprocessor_config.json") if folder else None
    if not path or not os.path.isfile(path):
        return None
    from ._checkpoint_files import read_regular_file

    try:
        d = json.loads(read_regular_file(path, 1 << 20))
    except (OSError, ValueError):
        return None
    for key in ("crop_size", "size"):
        v = d.get(key) if isinstance(d, dict) else None
        if isinstance(v, dict):
            v = v.get("height") or v.get("shortest_edge")
        if isinstance(v, int) and 0 < v <= 4096:
            return v
    return None


def vocab_size(config) -> int:
    """The vocabulary of the text a model reads: its config's, else its text (decoder)
    config's (composite configs: Gemma 3, speech-to-text models built on a language model)."""
    vocab = getattr(config, "vocab_size", None)
    if vocab is None and hasattr(config, "get_text_config"):
        vocab = getattr(config.get_text_config(decoder=True), "vocab_size", None)
    if not isinstance(vocab, int) or vocab <= 0:
        raise ValueError(f"{type(config).__name__} states no vocabulary size: pt2onnx cannot "
                         "make example token ids for it")
    return vocab


def text_inputs(model, batch: int, seq: int, past: int = 0) -> dict[str, Any]:
    vocab = vocab_size(model.config)
    d: dict[str, Any] = {"input_ids": torch.randint(0, vocab, (batch, seq))}
    eos = getattr(model.config, "eos_token_id", None)
    if (getattr(model.config, "is_encoder_decoder", False) and type(eos) is int
            and 0 <= eos < vocab and type(model).__name__.endswith("ForSequenceClassification")):
        # BART-style classifiers read the hidden state at each row's one end-of-sequence token
        # (transformers refuses rows without one), as a tokenizer ends every text.
        ids = d["input_ids"]
        ids[ids == eos] = (eos + 1) % vocab
        ids[:, -1] = eos
    mask = torch.ones(batch, past + seq, dtype=torch.long)
    if batch > 1 and past + seq > 1:
        mask[0, 0] = 0  # a left-padded row: the mask is live data
    if accepts(model, "attention_mask"):
        d["attention_mask"] = mask
    if accepts(model, "token_type_ids") and (getattr(model.config, "type_vocab_size", 0) or 0) > 1:
        d["token_type_ids"] = torch.zeros(batch, seq, dtype=torch.long)
    return d


def image_inputs(model, batch: int, folder: str | None = None) -> dict[str, Any]:
    cfg = model.config
    size = _config_value(cfg, "image_size") or _preprocessor_size(folder) or DEFAULT_IMAGE_SIZE
    h, w = (size, size) if isinstance(size, int) else tuple(size)[:2]
    channels = _config_value(cfg, "num_channels") or 3
    return {"pixel_values": torch.randn(batch, channels, h, w)}


def main_input(model, default: str = "input_ids") -> str:
    """The model's main input's name; a speech encoder-decoder's generic `inputs` is its
    encoder's (SpeechEncoderDecoder over Wav2Vec2: input_values, which its forward takes too)."""
    name = getattr(model, "main_input_name", default)
    if name == "inputs" and hasattr(model, "get_encoder"):
        name = getattr(model.get_encoder(), "main_input_name", default)
    return name


def audio_inputs(model, batch: int, seq: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The audio input a model's config implies, and its dynamic axes: Whisper-like encoders'
    log-mel frames (exactly 2 * max_source_positions), Speech2Text's filter-bank frames, AST's
    spectrogram patches (max_length x num_mel_bins), a raw waveform (wav2vec2, HuBERT, ...:
    long enough for the feature encoder's receptive field)."""
    cfg = model.config
    name = main_input(model, "input_values")
    mels, frames = getattr(cfg, "num_mel_bins", None), getattr(cfg, "max_source_positions", None)
    batch_axis, seq_axes = {0: "batch_size"}, {0: "batch_size", 1: "sequence_length"}
    if name == "input_features" and mels and frames:
        return {name: torch.randn(batch, mels, 2 * frames)}, {name: batch_axis}
    if name == "input_features" and getattr(cfg, "input_feat_per_channel", None):
        per = cfg.input_feat_per_channel * getattr(cfg, "input_channels", 1)
        return {name: torch.randn(batch, 16 + 4 * seq, per)}, {name: seq_axes}
    if name == "input_features" and getattr(cfg, "feature_projection_input_dim", None):
        # Wav2Vec2-BERT: stacked filter-bank frames.
        return ({name: torch.randn(batch, 16 + 4 * seq, cfg.feature_projection_input_dim)},
                {name: seq_axes})
    if name == "input_values" and mels and getattr(cfg, "max_length", None):
        return {name: torch.randn(batch, cfg.max_length, mels)}, {name: batch_axis}
    if name == "input_values":
        # 0.6 to 1 s at 16 kHz (optimum's example is 1 s): x-vector TDNNs need hundreds of frames.
        return {name: torch.randn(batch, 16 * (400 + 50 * seq))}, {name: seq_axes}
    raise ValueError(f"pt2onnx does not know the audio input {name!r} of "
                     f"{type(model).__name__} (config {type(cfg).__name__})")


def patch_inputs(model, batch: int, seq: int) -> dict[str, Any]:
    """Pix2Struct's input: `4 + 2 * seq` flattened patches (the count is dynamic: row and
    column embeddings, not a fixed grid), each its row and column (from 1, as its image
    processor numbers them) then its pixels; the mask marks the patches (the first row's last
    one is padding, zeros, as the processor pads to max_patches)."""
    vision = getattr(model.config, "vision_config", None)
    width, rows = (getattr(vision, n, None) for n in ("patch_embed_hidden_size", "seq_len"))
    if not (type(width) is int and type(rows) is int and 0 < width <= MAX_FEATURES
            and rows > 1):
        raise ValueError(f"{type(model.config).__name__}'s vision_config states no "
                         "patch_embed_hidden_size and seq_len: pt2onnx cannot make its patches")
    n = 4 + 2 * seq
    index = torch.arange(n)
    side = max(int(n ** 0.5), 1)
    row = (index // side + 1).clamp(max=rows - 1).float().view(1, n, 1).expand(batch, n, 1)
    col = (index % side + 1).clamp(max=rows - 1).float().view(1, n, 1).expand(batch, n, 1)
    patches = torch.cat([row, col, torch.randn(batch, n, width)], dim=-1)
    mask = torch.ones(batch, n, dtype=torch.long)
    if batch > 1:
        mask[0, -1] = 0
        patches[0, -1] = 0
    return {"flattened_patches": patches, "attention_mask": mask}


def encoder_inputs(model, batch: int, seq: int, folder: str | None = None):
    """An encoder-decoder's encoder inputs at (batch, seq), and their dynamic axes: text
    (input_ids, attention_mask), speech (input_features / input_values), an image
    (pixel_values: fixed size) or Pix2Struct's patches (flattened_patches, attention_mask)."""
    main = main_input(model)
    seq_axes = {0: "batch_size", 1: "encoder_sequence_length"}
    if main in ("input_features", "input_values"):
        return audio_inputs(model, batch, seq)
    if main == "pixel_values":
        return image_inputs(model, batch, folder), {"pixel_values": {0: "batch_size"}}
    if main == "flattened_patches":
        d = patch_inputs(model, batch, seq)
        return d, {k: seq_axes for k in d}
    d = text_inputs(model, batch, seq)
    return d, {k: seq_axes for k in d}


def series_inputs(model, batch: int) -> dict[str, Any]:
    cfg = model.config
    return {"past_values": torch.randn(batch, cfg.context_length, cfg.num_input_channels)}


def is_trajectory_config(config) -> bool:
    """A config of a model that reads episodes (the Decision Transformer's state_dim, act_dim
    and max_ep_len), not text or pixels."""
    return all(type(getattr(config, n, None)) is int
               for n in ("state_dim", "act_dim", "max_ep_len"))


def trajectory_inputs(model, batch: int, seq: int) -> dict[str, Any]:
    """An episode's last `seq` steps as the Decision Transformer reads them (optimum's names
    and order):
    states, actions and returns-to-go per step, the steps' timesteps (below max_ep_len) and
    an attention mask (the first row left-padded, as episodes shorter than the context are)."""
    cfg = model.config
    dims = {n: getattr(cfg, n, None) for n in ("state_dim", "act_dim", "max_ep_len")}
    if not all(type(v) is int and 0 < v <= MAX_FEATURES for v in dims.values()):
        raise ValueError(f"{type(cfg).__name__} is not a trajectory model's config (it states "
                         f"no state_dim, act_dim and max_ep_len of 1 to {MAX_FEATURES}: {dims}): "
                         "the reinforcement-learning task exports Decision Transformers")
    mask = torch.ones(batch, seq, dtype=torch.long)
    if batch > 1 and seq > 1:
        mask[0, 0] = 0
    return {"states": torch.randn(batch, seq, dims["state_dim"]),
            "actions": torch.randn(batch, seq, dims["act_dim"]),
            "timesteps": torch.randint(0, dims["max_ep_len"], (batch, seq)),
            "returns_to_go": torch.randn(batch, seq, 1),
            "attention_mask": mask}


def modality(task: Task, model) -> str:
    """The task's input modality for this model: a text-and-vision model (CLIP) exported as
    feature-extraction takes both, as optimum exports it; a vision or audio model exported as
    feature-extraction its own input; a speech encoder-decoder loaded for
    automatic-speech-recognition is a seq2seq model."""
    cfg = model.config
    if task.name.startswith("image-to-text") and main_input(model) not in (
            "pixel_values", "flattened_patches"):
        raise ValueError(f"{type(model).__name__} reads a prompt ({main_input(model)}) with the "
                         "image's placeholder tokens in it: pt2onnx's image-to-text exports "
                         "encoders of the image alone (VisionEncoderDecoder, Pix2Struct, "
                         "PP-FormulaNet)")
    if task.name == "feature-extraction" and is_trajectory_config(cfg):
        return "trajectory"  # optimum's feature-extraction of a Decision Transformer
    if task.name == "feature-extraction":
        if getattr(cfg, "text_config", None) is not None and accepts(model, "pixel_values") \
                and accepts(model, "input_ids"):
            return "text+vision"
        main = main_input(model)
        if main == "pixel_values":
            return "vision"
        if main in ("input_values", "input_features"):
            return "audio"
    if task.inputs == "audio" and getattr(cfg, "is_encoder_decoder", False):
        return "seq2seq"
    return task.inputs


def make_inputs(kind: str, model, batch: int, seq: int, folder: str | None = None):
    """Example inputs of one modality at (batch, seq), and their dynamic axes as optimum
    names them (the cache kinds are hf.py's)."""
    text_axes = {0: "batch_size", 1: "sequence_length"}
    if kind == "text":
        d = text_inputs(model, batch, seq)
        return d, {k: text_axes for k in d}
    if kind == "choices":  # batch x choices x seq; `seq` picks 2..4 choices
        n = 2 + seq % 3
        d = text_inputs(model, batch * n, seq)
        return ({k: v.reshape(batch, n, seq) for k, v in d.items()},
                {k: {0: "batch_size", 1: "num_choices", 2: "sequence_length"} for k in d})
    if kind == "vision":
        return image_inputs(model, batch, folder), {"pixel_values": {0: "batch_size"}}
    if kind == "audio":
        return audio_inputs(model, batch, seq)
    if kind == "text+vision":  # as many texts as images + 1: the two batches are two dims
        d = text_inputs(_TextView(model), batch + 1, seq)
        axes = {k: {0: "text_batch_size", 1: "sequence_length"} for k in d}
        d["pixel_values"] = image_inputs(model, batch, folder)["pixel_values"]
        axes["pixel_values"] = {0: "image_batch_size"}
        return d, axes
    if kind == "series":
        return series_inputs(model, batch), {"past_values": {0: "batch_size"}}
    if kind == "trajectory":
        d = trajectory_inputs(model, batch, seq)
        return d, {k: text_axes for k in d}
    raise ValueError(f"unknown input modality {kind!r}")


class _TextView:
    """A text-and-vision model seen as its text tower: the vocabulary is text_config's."""

    def __init__(self, model):
        self.config = getattr(model.config, "text_config", model.config)
        self.forward = model.forward


def task_module(model, outputs: tuple[str, ...], input_names) -> torch.nn.Module:
    """`model` whose forward takes exactly `input_names` (positional-or-keyword, so
    torch.export names the graph inputs after them) and returns the task's outputs as a dict
    (the file's output names). Its parameters are the model's under the prefix `model.`."""

    def forward(self, **kwargs):
        out = self.model(**kwargs)
        return {name: out[name] for name in self.task_outputs}

    wrapper = named_inputs_module(model, forward, input_names, "TaskOutputs")
    wrapper.task_outputs = tuple(outputs)
    return wrapper


def named_inputs_module(model, forward, input_names, suffix: str) -> torch.nn.Module:
    """A module holding `model` (as `model`, its config as `config`) whose `forward(self,
    **kwargs)` is shown to torch.export as taking exactly `input_names`, positional-or-keyword,
    so the graph inputs are named after them."""
    p = inspect.Parameter
    forward.__signature__ = inspect.Signature(
        [p("self", p.POSITIONAL_OR_KEYWORD)] + [p(n, p.POSITIONAL_OR_KEYWORD) for n in input_names])
    cls = type(f"{type(model).__name__}{suffix}", (torch.nn.Module,), {"forward": forward})
    wrapper = cls()
    wrapper.model = model
    wrapper.config = model.config
    return wrapper.eval()

