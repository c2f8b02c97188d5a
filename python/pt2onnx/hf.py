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
from ._checkpoint_files import safetensors_files, seq2seq_paths  # noqa: F401 - hf.seq2seq_paths
from . import _hf_cache, _hf_inputs, _hf_seq2seq, _hf_tasks
from ._hf_inputs import accepts, audio_inputs, text_inputs
from ._hf_seq2seq import prefixed_source
from ._hf_tasks import TASKS, Task  # noqa: F401 - pt2onnx.hf.TASKS: the task names
from ._pretrained_command import main  # noqa: F401 - pt2onnx.hf.main: the command
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

    Registers transformers' `DynamicCache` as a pytree node, as transformers' own export
    registration does for a cache of attention layers (python/pt2onnx/_hf_cache.py), so a
    cache is an input and an output of the exported graph (named
    `past_key_values.<layer>.key` / `present.<layer>.key` by the C++ core; a state-space or
    linear-attention layer's states `past_key_values.<layer>.conv_state` / `.recurrent_state`),
    and
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
    _hf_cache.register()
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

def _past(model, batch: int, past: int):
    """A DynamicCache of `past` positions, made by the model itself (a
    prefill run), so any decoder's layer count, heads and head size fit.
    past 0: an empty cache (what the first step, the prefill, is fed). A
    model without weight data (fake parameters) runs the prefill on fake
    tensors, for the shapes only; the cache is then zeros of those shapes."""
    ids = torch.randint(0, _hf_inputs.vocab_size(model.config), (batch, max(past, 1)))
    fake_mode = getattr(next(model.parameters()), "fake_mode", None)
    empty = fake_mode is not None
    with torch.no_grad(), fake_mode or contextlib.nullcontext(), _eager_experts(model, empty):
        out = model(input_ids=fake_mode.from_tensor(ids) if empty else ids, use_cache=True)
    # Mamba's models name their cache cache_params.
    cache = getattr(out, "past_key_values", None)
    if cache is None:
        cache = getattr(out, "cache_params", None)
    if cache is None or not hasattr(cache, "layers") and not hasattr(
            cache, "self_attention_cache"):
        raise ValueError(
            f"{type(model).__name__} returns no cache transformers' DynamicCache holds (its "
            f"output: {', '.join(k for k in out.keys()) or 'nothing'}): it cannot be exported "
            "as text-generation-with-past; export it as text-generation (every step from "
            "the whole sequence)")
    if type(cache).__name__ == "EncoderDecoderCache" and not any(
            getattr(layer, "keys", None) is not None
            for layer in cache.cross_attention_cache.layers):
        # An encoder model run as a decoder (Megatron-BERT, RemBERT, RoCBERT): its cache is
        # an encoder-decoder one whose cross-attention part is empty; it takes its
        # self-attention part alone, as BERT's own decoders do.
        cache = cache.self_attention_cache

    def zeros(t):
        return torch.zeros(t.shape, dtype=t.dtype)

    if empty:
        cache = _hf_cache.rebuild(cache, lambda t, axis: zeros(t), zeros)
    if past == 0:
        # No token yet: attention layers hold none, state layers the state before the first
        # token (zeros: transformers' prefill pads the conv inputs with zeros and starts its
        # scan from zeros).
        cache = _hf_cache.rebuild(cache, lambda t, axis: t.narrow(axis, 0, 0), zeros)
    return cache


@contextlib.contextmanager
def _eager_experts(model, fake: bool):
    """Mixture-of-experts layers gather each token's experts' weights (transformers'
    "batched_mm" implementation) while `fake`: outside torch.compile transformers picks torch's
    grouped matmul, whose fake-tensor function takes bfloat16 only, and its "eager" one sizes
    tensors by the routing (nonzero), which fake tensors cannot; so a float32 model without
    weight data could not make its example cache. The capture is unaffected (under
    torch.export transformers never picks grouped_mm for float32)."""
    configs = {id(m.config): m.config for m in model.modules()
               if hasattr(getattr(m, "config", None), "_experts_implementation_internal")}
    saved = {k: c._experts_implementation_internal for k, c in configs.items()}
    try:
        if fake:
            for c in configs.values():
                if c._experts_implementation_internal is not None:
                    c._experts_implementation_internal = "batched_mm"
        yield
    finally:
        for k, c in configs.items():
            c._experts_implementation_internal = saved[k]


class _TaskInputs:
    """Example inputs of a task at (batch, seq, past), their dynamic axes, and the module the
    file is captured from: the model itself for the generation tasks (their outputs, caches
    included, named in C++), else the model returning the task's outputs only, under
    optimum's names (_hf_inputs.task_module)."""

    def __init__(self, model, task: Task | str, folder: str | None = None):
        task = _hf_tasks.resolve(task) if isinstance(task, str) else task
        self.model, self.task, self.folder = model, task, folder
        self.kind = _hf_inputs.modality(task, model)
        self._module = None

    def make(self, batch: int, seq: int, past: int = 0) -> dict[str, Any]:
        m = self.model
        if self.kind == "seq2seq":
            d = _hf_inputs.encoder_inputs(m, batch, seq, self.folder)[0]
            d["decoder_input_ids"] = torch.randint(0, _hf_inputs.vocab_size(m.config),
                                                   (batch, max(seq // 2, 1)))
            return d
        if self.kind != "decoder":
            return _hf_inputs.make_inputs(self.kind, m, batch, seq, self.folder)[0]
        d = text_inputs(m, batch, seq, past)
        if self.task.with_past:
            if accepts(m, "position_ids"):
                pos = d["attention_mask"].cumsum(-1) - 1
                d["position_ids"] = pos.clamp(min=0)[:, past:]
            d["past_key_values"] = _past(m, batch, past)
        return d

    def module(self, inputs: dict[str, Any]) -> torch.nn.Module:
        """What is captured and compared: the same module object for every size."""
        if self._module is None:
            outputs = () if self.kind == "decoder" and self.task.with_past else (
                self.task.outputs or ("logits",))
            if self.kind == "text+vision" and self.task.name == "feature-extraction":
                outputs = _hf_tasks.TASKS_BY_NAME["zero-shot-image-classification"].outputs
            if outputs:
                self._module = _hf_inputs.task_module(self.model, outputs, list(inputs))
            elif ((not accepts(self.model, "past_key_values")
                   and accepts(self.model, "cache_params"))
                  or _hf_cache.has_mamba_mixers(self.model)):
                self._module = _hf_cache.step_module(self.model, list(inputs))
            else:
                self._module = self.model
        return self._module

    def weights(self, source):
        """The checkpoint's weight source for `module()` (its names under `model.`)."""
        return source if self._module is self.model else prefixed_source(source, self.model)

    def dynamic_shapes(self, inputs: dict[str, Any]) -> dict[str, Any]:
        if self.kind not in ("decoder", "seq2seq"):
            return _hf_inputs.make_inputs(self.kind, self.model, 2, 8, self.folder)[1]
        ds: dict[str, Any] = {}
        for k, v in inputs.items():
            if k == "past_key_values":
                ds[k] = _hf_cache.dynamic_shapes(v)
            elif k == "attention_mask" and self.task.with_past:
                ds[k] = {0: "batch_size", 1: "total_sequence_length"}
            elif k == "decoder_input_ids":
                ds[k] = {0: "batch_size", 1: "decoder_sequence_length"}
            elif k in ("pixel_values", "input_features"):
                ds[k] = {0: "batch_size"}
            else:
                ds[k] = {0: "batch_size", 1: "sequence_length"}
        return ds


def task_of(path: str | os.PathLike, task: str | Task | None) -> Task:
    """The task of a name or one of optimum's synonyms; None: inferred from the checkpoint's
    config.json (its architectures), as the command does without --task."""
    if isinstance(task, Task):
        return task
    if task is None:
        return _hf_tasks.infer(_checkpoint_config.read_config(os.fspath(path)))
    return _hf_tasks.resolve(task)


def tasks_of_checkpoint(path: str | os.PathLike) -> list[str]:
    """The tasks a checkpoint can be exported as: those with a transformers class for its
    config's type; the one inferred without a task first (`pt2onnx-pretrained --list-tasks`)."""
    raw = _checkpoint_config.read_config(os.fspath(path))
    try:
        inferred = [_hf_tasks.infer(raw).name]
    except ValueError:
        inferred = []
    found = []
    for task in _hf_tasks.TASK_TABLE:
        config = _config(path, task)
        try:
            _model_class(task, config)
        except ValueError:
            continue
        found.append(task.name)
    return inferred + [t for t in found if t not in inferred]


def _model_class(task: Task, config):
    """The first of the task's auto classes whose mapping holds the config's type (or
    optimum's custom class of the pair, or the class config.json's architectures names where
    the task's auto class maps it for another config type)."""
    import transformers as tr

    _check_task_fits(task, config)
    custom = _hf_tasks.CUSTOM_CLASSES.get((task.name, getattr(config, "model_type", "")))
    if custom is not None:
        return getattr(tr, custom)
    for name in task.auto:
        auto = getattr(tr, name, None)
        if auto is not None and type(config) in auto._model_mapping:
            return auto
    named = _architecture_class(task, config)
    if named is not None:
        return named
    raise ValueError(f"transformers has no {' / '.join(task.auto)} class for model type "
                     f"{getattr(config, 'model_type', '?')!r}: it cannot be exported as "
                     f"{task.name} (pt2onnx-pretrained --list-tasks DIR says what it can)")


def _architecture_class(task: Task, config):
    """A sub-model saved alone (MusicGen's, Emu3's or Mllama's text decoder: config.json of the
    sub-config's type, which no auto class maps) loads as the class its architectures names,
    when that class is one the task's auto classes map and its config class is the config's.
    Only names in transformers' auto mappings are looked up (config.json is untrusted)."""
    import transformers as tr

    archs = getattr(config, "architectures", None)
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    for name in task.auto if arch else ():
        auto = getattr(tr, name, None)
        names = getattr(getattr(auto, "_model_mapping", None), "_model_mapping", {})
        mapped = {n for v in names.values() for n in ((v,) if isinstance(v, str) else v)}
        cls = getattr(tr, arch, None) if arch in mapped else None
        if cls is not None and getattr(cls, "config_class", None) is type(config):
            return cls
    return None


def _check_task_fits(task: Task, config) -> None:
    """Tasks whose auto class maps models that do not fit them: ValueError naming why."""
    trajectory = _hf_inputs.is_trajectory_config(config)
    if trajectory != (task.inputs == "trajectory") and task.name != "feature-extraction":
        kind = getattr(config, "model_type", "?")
        raise ValueError(
            f"model type {kind!r} reads trajectories (states, actions): it can be exported as "
            f"reinforcement-learning or feature-extraction, not as {task.name}" if trajectory
            else f"model type {kind!r} does not read trajectories (states, actions): it cannot "
            "be exported as reinforcement-learning (Decision Transformers can)")
    if task.name.startswith("image-to-text") and not getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"model type {getattr(config, 'model_type', '?')!r} is not an "
                         f"encoder-decoder: {task.name} exports vision encoder-decoders "
                         "(VisionEncoderDecoder, Pix2Struct), as optimum does")
    if task.name in _hf_tasks.PAIRED and not getattr(config, "is_encoder_decoder", False):
        # transformers maps decoders that read audio through their own encoder (Qwen2-Audio,
        # Voxtral, Granite Speech, ...) under the sequence-to-sequence auto classes too.
        raise ValueError(f"model type {getattr(config, 'model_type', '?')!r} is a decoder, not "
                         f"an encoder-decoder: {task.name} writes an encoder file and a "
                         "decoder-step file with a cross-attention cache, which it has not")


@contextlib.contextmanager
def offline():
    """The hub's offline mode while transformers reads and builds a checkpoint: every request
    huggingface_hub would make raises instead (a config.json naming a hub model, as a DETR
    config saved by transformers 4.x names its backbone, is then an error, not a download).
    huggingface_hub reads HF_HUB_OFFLINE once, when it is imported, so the variable set after
    transformers was imported changes nothing: its module constant is set for the duration."""
    import huggingface_hub.constants as hub

    saved = hub.HF_HUB_OFFLINE
    hub.HF_HUB_OFFLINE = True
    # transformers 5 asks the hub whether a backbone named by a 4.x config (DETR's "resnet50")
    # is a hub model before it takes it for a timm architecture; offline, nothing named is
    # (a local folder neither: a path in an untrusted config.json is not followed).
    try:
        import transformers.backbone_utils as backbone
    except ImportError:  # transformers 4.x: its own module, no such request
        backbone = None
    api = getattr(backbone, "hf_api", None)
    if api is not None:
        backbone.hf_api = _OfflineHub
    try:
        yield
    finally:
        hub.HF_HUB_OFFLINE = saved
        if api is not None:
            backbone.hf_api = api


class _OfflineHub:
    """transformers' hf_api() while offline: no repository exists."""

    @staticmethod
    def repo_exists(*args, **kwargs) -> bool:
        return False


def _config(path: str | os.PathLike, task: Task, pad_token_id: int | None = None):
    path = os.fspath(path)
    # config.json read as a regular file of sane size, and checked against the weights before
    # transformers builds anything from it (python/pt2onnx/_checkpoint_config.py).
    raw = _checkpoint_config.read_config(path)
    _checkpoint_config.check(path, raw)
    prepare()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig

    with _checkpoint_config.allocation_errors(path, raw), offline():
        config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    if hasattr(config, "use_cache"):
        # Set before the model is built: encoder-decoders copy it into their stacks.
        config.use_cache = task.with_past
    if pad_token_id is not None:
        _set_pad_token_id(config, pad_token_id)
    return config


def _set_pad_token_id(config, pad_token_id: int) -> None:
    """optimum-cli's --pad_token_id: the padding token of a config that states none (a
    decoder's sequence classifier reads each row's last non-padding token), on the config
    and its text sub-config."""
    vocab = _hf_inputs.vocab_size(config)
    if type(pad_token_id) is not int or not 0 <= pad_token_id < vocab:
        raise ValueError(f"pad_token_id must be a token id of the vocabulary (0 to {vocab - 1}), "
                         f"not {pad_token_id!r}")
    config.pad_token_id = pad_token_id
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else None
    if text is not None and text is not config:
        text.pad_token_id = pad_token_id


def load_pretrained(path: str | os.PathLike, task: str, *,
                    pad_token_id: int | None = None) -> torch.nn.Module:
    """Load the model of a local checkpoint directory for a task.

    The model class follows the task (`AutoModelForCausalLM` for text generation,
    `AutoModel` for feature-extraction, `AutoModelForImageClassification`,
    `AutoModelForSeq2SeqLM` or `AutoModelForSpeechSeq2Seq` for seq2seq); its config's
    `use_cache` is True for the "-with-past" tasks only. Never touches the network:
    `local_files_only`, no remote code, and the hub's offline mode while the checkpoint is
    read and built (`offline()`).

    Args:
        path: The checkpoint directory (config.json and the weights).
        task: A task name as `export_pretrained` takes it (None: inferred).
        pad_token_id: The padding token's id set on the config, as `export_pretrained`
            takes it (None: config.json's).

    Returns:
        torch.nn.Module: The model, in eval mode, in float32.

    Raises:
        ValueError: An unknown task, or config.json does not fit the checkpoint's weights
            (see `export_pretrained`).
        FileNotFoundError: `path` holds no config.json.
        MemoryError: Building the model ran out of memory (the message names the sizes).
    """
    task = task_of(path, task)
    config = _config(path, task, pad_token_id)
    with _checkpoint_config.allocation_errors(path, config), offline():
        model = _model_class(task, config).from_pretrained(path, config=config,
                                                           local_files_only=True,
                                                           trust_remote_code=False,
                                                           dtype=torch.float32)
    return model.eval()


def empty_pretrained(path: str | os.PathLike, task: str, *, pad_token_id: int | None = None):
    """Build the model of a local checkpoint directory without loading its weights.

    The model is built from the checkpoint's config for `task` (as `load_pretrained`
    chooses its class) under `pt2onnx.init_empty_weights()`: its parameters have no data
    (fake tensors), its buffers are computed as at init. No weight is loaded; the weight
    source returned has `export()` read the checkpoint's safetensors files instead,
    converting float weights stored in another type (bfloat16, float16) to float32 as
    `from_pretrained(dtype=torch.float32)` loads them.

    Args:
        path: The checkpoint directory (config.json and safetensors files).
        task: A task name as `export_pretrained` takes it (None: inferred).
        pad_token_id: The padding token's id set on the config, as `export_pretrained`
            takes it (None: config.json's).

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

    task = task_of(path, task)
    config = _config(path, task, pad_token_id)
    with init_empty_weights(), _checkpoint_config.allocation_errors(path, config), offline():
        cls = _model_class(task, config)
        model = (cls.from_config(config, dtype=torch.float32, trust_remote_code=False)
                 if hasattr(cls, "from_config")  # an auto class; else a model class of optimum's
                 else cls._from_config(config, dtype=torch.float32))
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


# Windows up to this long are checked on both sides; a longer one costs prompts of its length.
_WINDOW_CHECKED = 512


def window_sizes(cache, sizes) -> list[tuple[int, int, int]]:
    """(batch, seq, past) sizes on both sides of each sliding window W of `cache` not among
    `sizes`: a step at the window (past W - 1), one crossing it (past W - 2, two tokens), a
    prompt past it and a step after it; windows over _WINDOW_CHECKED are left out."""
    out: list[tuple[int, int, int]] = []
    for w in _hf_cache.windows(cache):
        if 2 <= w <= _WINDOW_CHECKED:
            for size in [(1, 1, w - 1), (1, 2, w - 2), (1, w + 1, 0), (2, 3, w + 2)]:
                if size not in sizes and size not in out:
                    out.append(size)
    return out


def _verify(path: str, inputs: _TaskInputs, sizes, atol: float, rtol: float) -> float:
    """Max abs difference of every output, onnxruntime against PyTorch, over
    fresh inputs at `sizes` ((batch, seq, past) triples): export(verify=True)'s
    comparison; VerificationError on a mismatch."""
    sess = _verify_mod.session(path)
    worst = 0.0
    for size in sizes:
        kw = inputs.make(*size)
        worst = max(worst, _verify_mod.compare_or_raise(
            sess, inputs.module(kw), kw, atol, rtol, scaled=True,
            refused=f"verify: PyTorch fails at {size}",
            differs=f"verify: {path} differs from PyTorch at (batch, seq, past) {size}"))
    return worst


def export_pretrained(
    path: str | os.PathLike,
    task: str | None,
    f: str | os.PathLike | None = None,
    *,
    opset: int | None = None,
    verify: bool = True,
    atol: float | None = None,
    rtol: float | None = None,
    target: str = "standard",
    dtype: torch.dtype | str | None = None,
    weights: str = "auto",
    verbose: bool | None = None,
    external_data: bool | str | None = True,
    quantize: str | dict | None = None,
    cache: bool = True,
    cache_dir: str | os.PathLike | None = None,
    pad_token_id: int | None = None,
) -> ExportResult:
    """Export a local transformers checkpoint to ONNX for a task, and verify it.

    The checkpoint is exported with example inputs and dynamic batch and sequence lengths
    chosen for the task, then checked in onnxruntime against PyTorch on fresh inputs of
    other sizes. Nothing reaches the network: the checkpoint loads with local_files_only
    and the hub's offline mode.

    Args:
        path: The checkpoint directory: config.json and the weights, as `save_pretrained`
            writes them.
        task: One of `TASKS` (optimum's task names; its synonyms too, e.g.
            "sequence-classification", and the earlier "seq2seq" / "seq2seq-with-past"), or
            None: inferred from config.json's architectures. The file's inputs, outputs and
            dynamic axes are optimum's for the task (the table in
            [Tasks](../guides/transformers.md#tasks)). Among them:

            - "text-generation-with-past": a decoder step: input_ids, attention_mask,
              position_ids, past_key_values.<i>.key/value -> logits, present.<i>.key/value;
              one file serves prefill, with an empty cache, and decode;
            - "text-classification", "token-classification", "fill-mask" (logits),
              "question-answering" (start_logits, end_logits), "multiple-choice",
              "feature-extraction" (last_hidden_state), the audio and vision tasks;
            - "text2text-generation-with-past" / "automatic-speech-recognition-with-past":
              encoder-decoder generation with a cache, in two files (see `seq2seq_paths`);
              for f = <stem>.onnx, <stem>.encoder.onnx: input_ids, attention_mask (or
              Whisper's input_features) -> last_hidden_state, present.<i>.encoder.key/value
              (the decoder's cross-attention cache, computed once); <stem>.decoder.onnx, one
              decoder step: decoder_input_ids, encoder_attention_mask (text models),
              past_key_values.<i>.decoder.key/value (the self-attention cache, past length 0
              on the first step), past_key_values.<i>.encoder.key/value (the encoder
              file's) -> logits, present.<i>.decoder.key/value. These are optimum's names.
        f: The ONNX file to write; None: `<path>/model.onnx`. Its folder is created if
            missing.
        opset: `export()`'s opset; None: `pt2onnx.DEFAULT_OPSET`.
        verify: Check the file in onnxruntime against PyTorch on fresh inputs of other
            sizes (needs onnxruntime). With weights="empty" PyTorch then loads the weights,
            after the export: use verify=False for models larger than memory.
        atol: The check's absolute tolerance; None: `export()`'s verify tolerance of the
            dtype (1e-4 for float32, 1e-2 for float16, 5e-2 for bfloat16). It is scaled by
            each output's largest magnitude where that is above 1 (float32 rounding grows
            with the values), as the model zoo's tests compare.
        rtol: The check's relative tolerance; None: the dtype's default, as for `atol`.
        target: `export()`'s: "onnxruntime" writes onnxruntime's fused operators (the
            decoder's inputs and outputs stay the same, so one generation loop serves both
            targets); "standard" (default) ONNX operators.
        dtype: `export()`'s: torch.float16 writes weights, logits and the KV cache in
            float16 (the model is loaded and compared in float32).
        weights: "auto" (default): "empty", and "memory" when the checkpoint's tensors need
            transformers' conversion while loading (per-expert tensors that the model holds
            merged, as transformers 5 builds mixture-of-experts layers): then
            `checks["weights"]` says so. "empty" builds the model from its config without
            weight data
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
        pad_token_id: The padding token's id, set on the config before the model is built,
            for a checkpoint whose config.json states none (a decoder's sequence classifier
            finds each row's last token by it; transformers refuses batches of more than one
            row without it); optimum-cli's `--pad_token_id`. None: config.json's.

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
    if weights not in ("auto", "empty", "memory"):
        raise ValueError(f"weights must be 'auto', 'empty' or 'memory', not {weights!r}")
    f = os.fspath(f) if f is not None else os.path.join(os.fspath(path), "model.onnx")
    options = _pretrained_command.export_options(opset, target, name, external_data, quantize,
                                                 pad_token_id)
    load = dict(pad_token_id=pad_token_id)
    use_cache = cache and weights in ("auto", "empty")
    cache_dir = _program_cache.default_dir() if cache_dir is None else os.fspath(cache_dir)
    task = task_of(path, task)
    if use_cache:
        result = _pretrained_command.from_cache(cache_dir, path, task.name, f, options, verify,
                                                atol, rtol)
        if result is not None:
            return result
    with _cli.output_folder(os.path.dirname(os.path.abspath(f))), _pad_token_hint():
        states: list[dict[str, Any]] = []
        export_kw = dict(options, verbose=verbose)
        export_kw.pop("pad_token_id", None)
        if weights == "memory":
            model, source = load_pretrained(path, task, **load), None
            result = _export_pretrained_to(model, None, task, f, export_kw, states, path)
        else:
            model, source = empty_pretrained(path, task, **load)
            try:
                result = _export_pretrained_to(model, source, task, f, export_kw, states, path)
            except _WeightsNeedConversion:
                if weights == "empty":
                    raise
                # weights="auto": the checkpoint's tensors need transformers' conversion
                # (per-expert tensors merged, say), which the C++ core's file-to-file copy does
                # not do: loaded with from_pretrained instead, and said in the result.
                model, source, states = load_pretrained(path, task, **load), None, []
                result = _export_pretrained_to(model, None, task, f, export_kw, states, path)
                result.checks["weights"] = ("memory: the checkpoint's tensors need "
                                            "transformers' conversion while loading")
                use_cache = False
        if verify:  # PyTorch needs the weights to run: with weights="empty" loaded only now
            verify_into(result, model if source is None else None, path, task, f, atol, rtol,
                        pad_token_id)
        if use_cache:
            entry = _store_programs(cache_dir, path, task.name, options, states)
            result.checks["program_cache"] = {"result": "miss", "entry": entry}
        return result


@contextlib.contextmanager
def _pad_token_hint():
    """transformers' refusal of a decoder's classifier without a padding token, with the
    option that gives one (the API's and the command's names)."""
    try:
        yield
    except ValueError as e:
        if "no padding token is defined" not in str(e):
            raise
        raise ValueError(f"{e} (config.json states no pad_token_id: pass --pad_token_id ID, "
                         "export_pretrained(pad_token_id=ID))") from e


class _WeightsNeedConversion(ConversionError):
    """The checkpoint's tensors do not fit the model built from its config."""


def _pair(task: Task, model) -> bool:
    """An encoder file and a decoder-step file (python/pt2onnx/_hf_seq2seq.py)."""
    return task.with_past and _hf_inputs.modality(task, model) == "seq2seq"


def _export_pretrained_to(model, source, task: Task, f, export_kw, states, folder=None):
    """The export itself (no verification); `states` gets export()'s `_state` of each file
    written, which the program cache stores."""
    inputs = _TaskInputs(model, task, folder)
    torch.manual_seed(0)
    try:
        if _pair(task, model):
            return _hf_seq2seq.export_with_past(model, source, f, export_kw, states, folder)
        example = inputs.make(2, 8, 4 if task.with_past else 0)
        states.append({})
        with _hf_cache.state_space_capture(model):
            return export(inputs.module(example), (), f, kwargs=example,
                          dynamic_shapes=inputs.dynamic_shapes(example),
                          weights=inputs.weights(source), **export_kw, _state=states[-1])
    except ConversionError as e:
        if source is None or "the weights do not fit the model" not in str(e):
            raise
        hint = (f"{e}\n(transformers converts some checkpoints' tensors while loading them, "
                "e.g. merging experts; weights='memory' / --weights memory loads the model "
                "with from_pretrained first)")
        # Only names missing (src/core/weight_source.cpp's lists): tensors transformers
        # renames, merges or computes. A tensor of another shape or type is an error as is.
        if "have no data" in str(e) and "differ from the model's" not in str(e):
            raise _WeightsNeedConversion(hint) from None
        raise ConversionError(hint) from None


def verify_into(result: ExportResult, model, path, task, f, atol, rtol,
                pad_token_id: int | None = None) -> None:
    """export_pretrained's check of the file(s) written at `f` against PyTorch on fresh
    inputs of other sizes, into `result`: checks "max_abs_error" and "verified_sizes",
    timings "verify". `model` None: the checkpoint is loaded (with its weights) here."""
    t0 = time.perf_counter()
    task = task_of(path, task)
    if model is None:
        model = load_pretrained(path, task, pad_token_id=pad_token_id)
    if _pair(task, model):
        result.checks.update(_hf_seq2seq.verify_with_past(model, f, atol, rtol,
                                                             os.fspath(path)))
    else:
        inputs = _TaskInputs(model, task, os.fspath(path))
        torch.manual_seed(1)
        sizes = ([(1, 1, 7), (3, 5, 0), (2, 3, 2)] if task.with_past
                 else [(1, 5, 0), (3, 11, 0)])
        if inputs.kind == "decoder" and task.with_past:
            sizes += window_sizes(inputs.make(1, 1, 1)["past_key_values"], sizes)
        result.checks["max_abs_error"] = _verify(f, inputs, sizes, atol, rtol)
        result.checks["verified_sizes"] = sizes
    result.timings["verify"] = time.perf_counter() - t0


def _store_programs(cache_dir, path, task, options, states) -> str | None:
    """Keeps the programs just captured in the cache (python/pt2onnx/_program_cache.py);
    the entry's folder, or None when they cannot be kept (a custom converter, say)."""
    from ._serialize import tree_json

    roles = ["encoder", "decoder"] if len(states) == 2 else [""]
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
