"""Tiny random-weight transformers checkpoints for any model type in transformers'
auto mappings, to drive a sweep of "every architecture for every task".

Nothing here is a hand-picked list of models: the model types of a task are the keys
of the auto mappings (`MODEL_FOR_*_MAPPING_NAMES`) behind the task's auto classes, and
a type's tiny config is its config class's defaults with every size field shrunk by a
table of field-name rules (`_INT_RULES`, `_LIST_RULES`), recursing into sub-configs.
The few per-model overrides (`_OVERRIDES`) each say why a generic rule cannot work.

Works with transformers 5.x and 4.57 (public APIs of both: the mapping-name dicts,
`AutoConfig.for_model`, `PretrainedConfig.to_dict/from_dict`, `_from_config`,
`save_pretrained`). No hub, no download.

    python tests/models/hf_tiny.py --task text-generation --out /tmp/tiny
    python tests/models/hf_tiny.py --task fill-mask --model-type bert roberta --out /tmp/tiny
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import math
import os
import re
import sys
import time
import types
import warnings


def _hide_unloadable_torchvision_ops() -> None:
    """torchvision's wheel may be built for another torch (the CPU torch here): if its
    compiled operators cannot load, keep it from registering their fake kernels, so
    that transformers' imports of torchvision (image processors, detection models)
    still succeed."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or "torchvision" in sys.modules or not spec.submodule_search_locations:
        return
    lib = os.path.join(list(spec.submodule_search_locations)[0], "_C.so")
    if not os.path.exists(lib):
        return
    import torch

    try:
        torch.ops.load_library(lib)
    except (OSError, RuntimeError):
        sys.modules.setdefault("torchvision._meta_registrations",
                               types.ModuleType("torchvision._meta_registrations"))


_hide_unloadable_torchvision_ops()

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers.models.auto import configuration_auto, modeling_auto  # noqa: E402

# ---- tasks -> auto classes -> model types -------------------------------------------

# optimum's task names -> transformers' auto classes.
_TASK_AUTO_CLASSES = {
    "audio-classification": ("AutoModelForAudioClassification",),
    "audio-frame-classification": ("AutoModelForAudioFrameClassification",),
    "audio-xvector": ("AutoModelForAudioXVector",),
    "automatic-speech-recognition": ("AutoModelForSpeechSeq2Seq", "AutoModelForCTC"),
    "depth-estimation": ("AutoModelForDepthEstimation",),
    "feature-extraction": ("AutoModel",),
    "fill-mask": ("AutoModelForMaskedLM",),
    "image-classification": ("AutoModelForImageClassification",),
    "image-segmentation": ("AutoModelForImageSegmentation", "AutoModelForSemanticSegmentation",
                           "AutoModelForInstanceSegmentation",
                           "AutoModelForUniversalSegmentation"),
    "image-to-image": ("AutoModelForImageToImage",),
    "keypoint-detection": ("AutoModelForKeypointDetection",),
    "time-series-forecasting": ("AutoModelForTimeSeriesPrediction",),
    "image-to-text": ("AutoModelForImageTextToText",),
    "masked-im": ("AutoModelForMaskedImageModeling",),
    "multiple-choice": ("AutoModelForMultipleChoice",),
    "object-detection": ("AutoModelForObjectDetection",),
    "question-answering": ("AutoModelForQuestionAnswering",),
    "reinforcement-learning": ("AutoModel",),
    "semantic-segmentation": ("AutoModelForSemanticSegmentation",),
    "text-to-audio": ("AutoModelForTextToSpectrogram", "AutoModelForTextToWaveform"),
    "text-generation": ("AutoModelForCausalLM",),
    "text2text-generation": ("AutoModelForSeq2SeqLM",),
    "text-classification": ("AutoModelForSequenceClassification",),
    "token-classification": ("AutoModelForTokenClassification",),
    "zero-shot-image-classification": ("AutoModelForZeroShotImageClassification",),
    "zero-shot-object-detection": ("AutoModelForZeroShotObjectDetection",),
}

# auto class -> the name of its mapping in transformers.models.auto.modeling_auto.
_AUTO_MAPPING_NAMES = {
    "AutoModel": "MODEL_MAPPING_NAMES",
    "AutoModelForAudioClassification": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForAudioFrameClassification": "MODEL_FOR_AUDIO_FRAME_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForAudioXVector": "MODEL_FOR_AUDIO_XVECTOR_MAPPING_NAMES",
    "AutoModelForSpeechSeq2Seq": "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "AutoModelForCTC": "MODEL_FOR_CTC_MAPPING_NAMES",
    "AutoModelForDepthEstimation": "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES",
    "AutoModelForMaskedLM": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "AutoModelForImageClassification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForImageSegmentation": "MODEL_FOR_IMAGE_SEGMENTATION_MAPPING_NAMES",
    "AutoModelForSemanticSegmentation": "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
    "AutoModelForInstanceSegmentation": "MODEL_FOR_INSTANCE_SEGMENTATION_MAPPING_NAMES",
    "AutoModelForUniversalSegmentation": "MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES",
    "AutoModelForImageToImage": "MODEL_FOR_IMAGE_TO_IMAGE_MAPPING_NAMES",
    "AutoModelForKeypointDetection": "MODEL_FOR_KEYPOINT_DETECTION_MAPPING_NAMES",
    "AutoModelForTimeSeriesPrediction": "MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES",
    "AutoModelForImageTextToText": "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "AutoModelForMaskedImageModeling": "MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES",
    "AutoModelForMultipleChoice": "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES",
    "AutoModelForObjectDetection": "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
    "AutoModelForQuestionAnswering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "AutoModelForTextToSpectrogram": "MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES",
    "AutoModelForTextToWaveform": "MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES",
    "AutoModelForCausalLM": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "AutoModelForSeq2SeqLM": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "AutoModelForSequenceClassification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForTokenClassification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForZeroShotImageClassification":
        "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForZeroShotObjectDetection": "MODEL_FOR_ZERO_SHOT_OBJECT_DETECTION_MAPPING_NAMES",
}


def _available(auto_class: str) -> bool:
    return (hasattr(transformers, auto_class)
            and hasattr(modeling_auto, _AUTO_MAPPING_NAMES[auto_class]))


# optimum's task name -> the auto classes of the installed transformers (those it lacks
# are left out).
AUTO_CLASSES: dict[str, tuple[str, ...]] = {
    task: tuple(c for c in classes if _available(c))
    for task, classes in _TASK_AUTO_CLASSES.items()
}


def _mapping(auto_class: str) -> dict:
    return getattr(modeling_auto, _AUTO_MAPPING_NAMES[auto_class])


def model_types(task: str) -> list[str]:
    """Every model type the task's auto classes map, sorted."""
    types_ = set()
    for auto_class in AUTO_CLASSES[task]:
        types_.update(_mapping(auto_class))
    configs = configuration_auto.CONFIG_MAPPING
    if task == "reinforcement-learning":  # AutoModel's types with trajectories (a state size)
        types_ = {t for t in types_ if t in configs
                  and "state_dim" in inspect.signature(configs[t].__init__).parameters}
    if task == "image-to-text":  # the encoder-decoders, not the vision-language decoders
        types_ = {t for t in types_ if t in configs
                  and getattr(configs[t](), "is_encoder_decoder", False)}
    return sorted(types_)


# optimum's classes for pairs no auto class maps (its TasksManager._CUSTOM_CLASSES).
_CUSTOM_CLASSES = {("time-series-forecasting", "patchtst"): "PatchTSTForPrediction",
                   ("time-series-forecasting", "patchtsmixer"): "PatchTSMixerForPrediction"}


def model_class(task: str, model_type: str):
    """The transformers class the first of the task's auto classes that maps
    model_type maps it to (or optimum's class for the pair)."""
    if (task, model_type) in _CUSTOM_CLASSES:
        return getattr(transformers, _CUSTOM_CLASSES[(task, model_type)])
    for auto_class in AUTO_CLASSES[task]:
        names = _mapping(auto_class).get(model_type)
        if names is None:
            continue
        if isinstance(names, (list, tuple)):  # several classes for one type: the first
            names = names[0]
        cls = getattr(transformers, names, None)
        if cls is None:
            raise LookupError(f"transformers has no class {names} ({auto_class}, {model_type})")
        return cls
    raise LookupError(f"no auto class of task {task} maps model type {model_type}")


# ---- the tiny sizes ------------------------------------------------------------------

HIDDEN = 64         # hidden_size, d_model, n_embd, dim, embed_dim ...
HEADS = 4           # attention heads (key/value heads: 2, or as many as heads, or 1)
HEAD_DIM = HIDDEN // HEADS
INTERMEDIATE = 128  # feed-forward sizes
MOE_INTERMEDIATE = 32
EXPERTS = 4
TOP_K = 2
VOCAB = 256
POSITIONS = 512
LAYERS = 2
IMAGE = 64          # image side, rounded to a multiple of the patch size
WINDOW = 16         # sliding/local attention windows
RANK = 32           # low-rank projections (MLA's q/kv lora ranks ...)
WIDTH_LIST_MAX = 64  # the widest entry of per-stage width lists after scaling
MAX_KINDS = 8       # layers kept to have one of each kind of layer, at most


def _heads(v, ctx):
    return HEADS if v >= HEADS else (2 if v >= 2 else 1)


def _kv_heads(v, ctx):
    heads = ctx.get("heads_old")
    if heads is not None and v == heads:  # multi-head attention: as many as heads
        return ctx["heads_new"]
    if v <= 1:  # multi-query attention
        return v
    return min(2, ctx.get("heads_new", HEADS))


def _cap(n):
    return lambda v, ctx: min(v, n)


def _layers(v, ctx):
    return min(v, ctx["layers"])


def _positions(v, ctx):
    return min(v, POSITIONS)


# (pattern, rule) for int fields, the first full match of the field name wins. A rule
# gets the value and the config's context (old/new heads and layers).
_ID_PATTERN = r".*token_ids?|.*token_index|.*_token|.*_patch_id"

_INT_RULES = [
    # ids are renumbered below the vocabulary afterwards, not here
    (_ID_PATTERN, None),
    (r".*vocab_size.*|.*_vocab|num_embeddings|codebook_size|num_hash_buckets|n_vocab", _cap(VOCAB)),
    (r".*(key_value_heads|kv_heads|num_kv_heads|n_head_kv|num_key_value_groups)", _kv_heads),
    (r"(num_|n_)?(attention_)?heads|.*_attention_heads|n_heads?|num_heads|.*_num_heads|"
     r".*_n_heads|attention_heads|num_attention_heads.*", _heads),
    (r"qk_rope_head_dim|rotary_dim|rope_dim", _cap(HEAD_DIM // 2)),
    (r"qk_head_dim", None),  # derived below (nope + rope)
    (r".*head_dim|d_kv|d_head|dim_head|attention_head_size|kv_channels|.*_head_size|"
     r"attention_head_dim|.*head_dim_.*", _cap(HEAD_DIM)),
    (r"(kv|q)_lora_rank|.*_rank", _cap(RANK)),
    (r"(num_experts|n_routed_experts|num_local_experts|moe_num_experts|n_experts|"
     r"num_experts_per_layer|.*_num_experts)", _cap(EXPERTS)),
    (r"index_topk", _cap(64)),  # tokens a sparse-attention indexer keeps
    (r".*(experts_per_tok|experts_per_token|top_k|topk|moe_k|moe_topk)", _cap(TOP_K)),
    (r"n_group", _cap(2)),
    (r"(mamba_|ssm_)?n_?groups|mamba_ngroups", _cap(1)),  # SSM groups divide SSM heads
    (r".*num_groups|.*norm_groups", _cap(1)),  # group norms: groups divide the shrunk channels
    (r".*(d_state|state_size|state_dim)", _cap(16)),
    (r".*d_ssm", _cap(2 * HIDDEN)),
    (r"topk_group", _cap(1)),
    (r"(moe|expert|shared_expert|shared|share_expert)s?_.*(intermediate|hidden|ffn|dim).*|"
     r".*(moe|expert)_intermediate.*", _cap(MOE_INTERMEDIATE)),
    (r".*(intermediate_size|intermediate_dim|ffn_dim|ffn_hidden_size|d_ff|d_inner|dim_ff|"
     r"mlp_dim|dim_feedforward|feedforward_dim|linear_units|mlp_hidden_size|ff_size|"
     r"intermediate_size_mlp|inner_dim)", _cap(INTERMEDIATE)),
    (r"max_window_layers", lambda v, ctx: min(v, ctx["layers"])),
    (r"first_k_dense_replace|num_dense_layers", lambda v, ctx: min(v, ctx["layers"] - 1)),
    (r"num_filters", _cap(8)),  # doubled at every stage
    # doubled at every stage, and VQ-GAN blocks' group norms have 32 groups hard-coded
    (r"base_channels|.*_base_channels", _cap(32)),
    (r"num_latents|.*_num_latents|.*_n_latents", _cap(32)),  # latent-array length
    (r"(num_hidden_layers|num_layers|.*_per_block|n_layers?|layers|depth|num_blocks|.*_layers|"
     r".*_depth|num_hidden_blocks|n_blocks)", _layers),
    (r"max_.*positions?.*|n_positions|n_ctx|max_seq_len|max_sequence_length|"
     r".*_positions|max_length|seq_length|max_len|max_seq_length", _positions),
    (r"sliding_window|attention_window|local_attention|sliding_window_size|"
     r"attention_chunk_size|local_window_size|window_len|.*_window_len", _cap(WINDOW)),
    (r"(hidden_size|hidden_dim|d_model|d_latents|n_embd|dim|embed_dim|embedding_size|embedding_dim|"
     r"emb_dim|model_dim|word_embed_proj_dim|projection_dim|proj_dim|.*_hidden_size|"
     r".*_hidden_dim|.*_embed_dim|.*_emb_dim|.*_embedding_dim|.*projection_dim|"
     r"output_dim|out_hidden_size|hidden_channels|.*_channels|.*_out_dim|.*_in_dim|"
     r"latent_dim|codebook_dim|codevector_dim|.*_dim|.*_dimension|.*_size_global|"
     r"pooler_output_size|.*_embeds_hidden_size)", _cap(HIDDEN)),
]
_INT_RULES = [(re.compile(p), r) for p, r in _INT_RULES]


def _scale_widths(values, ctx):
    """Per-stage widths: divided by a common power of two (so ratios and divisibility
    by odd numbers hold) until the widest is at most WIDTH_LIST_MAX."""
    flat = [v for v in _flatten(values) if isinstance(v, int) and not isinstance(v, bool)]
    if not flat:
        return values
    f = 1
    while max(flat) // f > WIDTH_LIST_MAX and all(v % (2 * f) == 0 for v in flat if v > 1):
        f *= 2
    return _map_ints(values, lambda v: v // f if v > 1 else v)


def _scale_heads(values, ctx):
    flat = [v for v in _flatten(values) if isinstance(v, int) and v > 0]
    if not flat:
        return values
    g = math.gcd(*flat)
    return _map_ints(values, lambda v: v // g if v > 0 else v)


def _cutoffs(values, ctx):
    """Adaptive-softmax cutoffs: the same fractions of the shrunk vocabulary."""
    old = ctx.get("vocab_old")
    if not isinstance(old, int) or old <= VOCAB:
        return values
    return _map_ints(values, lambda v: max(1, v * VOCAB // old))


def _depth_list(values, ctx):
    return _map_ints(values, lambda v: min(v, 1))


_LIST_RULES = [
    (r"cutoffs|adaptive_cutoffs", _cutoffs),
    (r"depths|.*blocks_per_stage|stage_num_blocks|num_block_repeats|block_repeats|"
     r"stage_numb_of_layers|num_layers_per_stage|layers_per_stage", _depth_list),
    (r"num_heads|.*attention_heads.*|.*_heads_per_stage|heads", _scale_heads),
    (r"hidden_sizes|embed_dims?|dims|.*channels|conv_dim|tdnn_dim|neck_hidden_sizes|"
     r"embed_dim_per_stage|.*hidden_sizes|.*_feature_dims|out_features|"
     r"intermediate_feature_dims|.*channel_list|fine_fusion_dims|layer_list_out_channels|"
     r"stage_block_.*_channels|downsample_channels|post_process_channels",
     _scale_widths),
]
_LIST_RULES = [(re.compile(p), r) for p, r in _LIST_RULES]

# Layer-index lists whose count matters (features taken from those layers): kept as
# many, in order, the layer count raised to hold them.
_FEATURE_INDEX_LISTS = re.compile(
    r"backbone_out_indices|intermediate_hook_ids|deepstack_visual_indexes|"
    r"extract_layers|intermediate_layers_indices|spatial_target_layers|vision_feature_layers?|"
    r"feature_layers|hidden_layers_indices|.*_feature_layers?")
# Layer-index lists that pick out the layers of one kind (global attention among
# windowed ones, cross attention, dense among MoE ...): kept a strict subset when they
# were one, so that both kinds of layer remain.
_KIND_INDEX_LISTS = re.compile(
    r"global_attn_indexes|fullatt_block_indexes|cross_attention_layers|window_block_indexes|"
    r"mlp_only_layers|moe_layers|full_attn_idxs|rope_scaling_layers|attn_layer_indices|"
    r"global_attention_blocks|.*_layer_indices|.*_block_indexes|.*_attn_indexes|"
    r"attn_layer_indexes|expert_layer_indices|dense_layers|sparse_layers|"
    r"linear_attn_layers|full_attention_layers|.*_layer_ids|.*_layers_idx")
# Lists with one entry per layer (kinds, per-layer head counts, masks): cut to the new
# layer count keeping one of each kind.
_PER_LAYER_LISTS = re.compile(
    r"layer_types|block_types|layers_block_type|hybrid_override_pattern|attention_types|"
    r"no_rope_layers|num_attention_heads_per_layer|.*_per_layer|layer_.*_types|"
    r"mixer_types|layers_types|attn_type_list|.*_layer_types")


# Lists with one entry per stage or per convolution: a layer count equal to their
# length counts them, and stays.
_STAGED_LISTS = re.compile(
    r"conv_.*|.*_kernels?|.*_strides?|.*_kernel_sizes?|depths|hidden_sizes|patch_sizes|"
    r".*_ratios|.*_dilations?|.*_channels|.*_per_stage|tdnn_.*|embed_dims")


def _flatten(values):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _flatten(v)
        else:
            yield v


def _map_ints(values, fn):
    out = [_map_ints(v, fn) if isinstance(v, (list, tuple))
           else (fn(v) if isinstance(v, int) and not isinstance(v, bool) else v)
           for v in values]
    return type(values)(out) if isinstance(values, tuple) else out


def _is_int_list(v):
    return (isinstance(v, (list, tuple)) and v
            and all(isinstance(x, int) and not isinstance(x, bool) for x in v))


_LAYER_COUNT_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "depth",
                     "encoder_layers", "layers")


_BASE = []


def _base_defaults() -> dict:
    """PretrainedConfig's own attributes and defaults (in transformers 4.x these include
    generation parameters such as top_k=50, max_length=20: not sizes)."""
    if not _BASE:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _BASE.append(transformers.PretrainedConfig().to_dict())
    return _BASE[0]


def _is_subconfig(v):
    return isinstance(v, dict) and "model_type" in v


def _shrink(d: dict, ids: list) -> dict:
    """Shrinks one config dict (its sub-configs recursively); token-id fields are
    collected into ids as (dict, key) for renumbering afterwards."""
    d = dict(d)
    orig = dict(d)
    old_layers = next((d[k] for k in _LAYER_COUNT_KEYS
                       if isinstance(d.get(k), int) and not isinstance(d.get(k), bool)), None)
    per_layer = [k for k, v in d.items()
                 if isinstance(v, (list, tuple)) and old_layers and len(v) == old_layers > 1
                 and (_PER_LAYER_LISTS.fullmatch(k) or old_layers >= 6)
                 and not _is_subconfig(v)]
    plc = d.get("per_layer_config")
    plc = plc if isinstance(plc, dict) and plc and old_layers else None
    kind_lists = [k for k, v in d.items() if k not in per_layer and _is_int_list(v)
                  and _KIND_INDEX_LISTS.fullmatch(k) and old_layers]
    layers = LAYERS
    for k, v in d.items():
        if k not in per_layer and _is_int_list(v) and _FEATURE_INDEX_LISTS.fullmatch(k):
            layers = max(layers, len(set(v)))
    # a backbone over layers (not stages): its out_features "stageN" name layers
    stages = _backbone_stages(d, old_layers)
    if stages:
        layers = max(layers, len(set(stages)))
    # layer counts that count the entries of a list (conv feature-extractor layers,
    # hierarchical stages) stay as they are
    staged = {len(v) for k, v in d.items() if isinstance(v, (list, tuple))
              and k not in per_layer and _STAGED_LISTS.fullmatch(k)}
    counted = {k for k, v in d.items() if isinstance(v, int) and not isinstance(v, bool)
               and v > LAYERS and v in staged and _first_rule(k)
               and _first_rule(k)[1] is _layers}
    sel = list(range(min(layers, old_layers or layers)))
    if old_layers and (per_layer or plc or kind_lists):
        # which old layers to keep: the first ones, then one of each kind of layer
        # (per-layer values, per-layer overrides, membership of kind-index lists)
        shared = d.get("num_kv_shared_layers")
        shared = shared if isinstance(shared, int) and 0 < shared < old_layers else 0

        def kind(i):
            return ((i >= old_layers - shared,)  # last layers reusing earlier layers' cache
                    + tuple(repr(d[k][i]) for k in per_layer)
                    + (repr(plc.get(_plc_key(plc, i))) if plc else "",)
                    + tuple(i % old_layers in {x % old_layers for x in d[k]}
                            for k in kind_lists))
        kinds = {}
        for i in range(old_layers):
            kinds.setdefault(kind(i), i)
        if len(kinds) > MAX_KINDS:  # per-layer sizes all different: the first kinds
            kinds = dict(list(kinds.items())[:MAX_KINDS])
        sel = _select(old_layers, max(layers, min(len(kinds), old_layers)), kinds)
        layers = len(sel)
        if shared:
            d["num_kv_shared_layers"] = sum(i >= old_layers - shared for i in sel)
    heads_old = d.get("num_attention_heads", d.get("n_head", d.get("num_heads")))
    ctx = {"layers": layers, "old_layers": old_layers, "vocab_old": orig.get("vocab_size")}
    if stages:
        new = {x: layers - len(set(stages)) + 1 + i for i, x in enumerate(sorted(set(stages)))}
        d["out_features"] = [f"stage{new[x]}" for x in stages]
        if _is_int_list(d.get("out_indices")):
            d["out_indices"] = [new.get(x, x) for x in d["out_indices"]]
        d["stage_names"] = ["stem"] + [f"stage{i}" for i in range(1, layers + 1)]
    if isinstance(heads_old, int) and not isinstance(heads_old, bool):
        ctx["heads_old"] = heads_old
        ctx["heads_new"] = _heads(heads_old, ctx)

    for k, v in list(d.items()):
        if _is_subconfig(v):
            d[k] = _shrink(v, ids)
            continue
        if k == "is_encoder_decoder" or k in _base_defaults() and v == _base_defaults()[k] \
                and k != "model_type" and not re.fullmatch(_ID_PATTERN, k):
            # a generic attribute at its default (4.x: generation's top_k, max_length):
            # left out, the config class sets it (some 4.x classes refuse it as a kwarg,
            # and some pass is_encoder_decoder to the base class themselves)
            del d[k]
            continue
        if isinstance(v, bool) or v is None or k in counted or k == "num_kv_shared_layers" \
                or (stages and k in ("out_features", "out_indices", "stage_names")):
            continue
        if k in per_layer:
            cut = [v[i] for i in sel]
            d[k] = type(v)(_map_ints(cut, lambda x: _int_rule(k, x, ctx)))
        elif k == "per_layer_config" and plc:
            d[k] = {_plc_key(plc, j): _shrink(plc[_plc_key(plc, i)], ids)
                    for j, i in enumerate(sel) if _plc_key(plc, i) in plc}
        elif isinstance(v, int):
            if re.fullmatch(_ID_PATTERN, k):
                ids.append((d, k))
            else:
                d[k] = _int_rule(k, v, ctx)
        elif isinstance(v, (list, tuple)) and v:
            if re.fullmatch(r".*token_ids?|.*token_index", k) and _is_int_list(v):
                ids.append((d, k))
            elif k in kind_lists:
                keep = {x % old_layers for x in v}
                d[k] = type(v)(j for j, i in enumerate(sel) if i in keep)
            elif _is_int_list(v) and _FEATURE_INDEX_LISTS.fullmatch(k) and old_layers:
                d[k] = _rank_indices(v, old_layers, layers)
            else:
                for pattern, rule in _LIST_RULES:
                    if pattern.fullmatch(k):
                        d[k] = rule(v, ctx)
                        break
    if d.get("use_pretrained_backbone"):
        d["use_pretrained_backbone"] = False  # random weights, no download
    _fill_unset(d, ctx)
    _keep_multiples(d, orig)
    _make_consistent(d, orig)
    for k in ("rope_scaling", "rope_parameters"):
        if isinstance(d.get(k), dict):
            d[k] = _shrink_rope(d[k], d)
    return d


_HIDDEN_KEYS = ("hidden_size", "d_model", "n_embd", "dim", "embed_dim")


def _fill_unset(d: dict, ctx: dict) -> None:
    """Sizes some defaults leave unset (None) but the model needs."""
    hidden = next((d[k] for k in _HIDDEN_KEYS if isinstance(d.get(k), int)), None)
    heads = d.get("num_attention_heads")
    if "head_dim" in d and d["head_dim"] is None and isinstance(heads, int) and hidden:
        d["head_dim"] = hidden // heads
    if "num_key_value_heads" in d and d["num_key_value_heads"] is None \
            and isinstance(heads, int):
        d["num_key_value_heads"] = heads
    if "vocab_size" in d and d["vocab_size"] is None:
        d["vocab_size"] = VOCAB
    if "prediction_length" in d and d["prediction_length"] is None:  # time series
        d["prediction_length"] = 4
    moe = d.get("enable_moe_block")
    if moe is True or isinstance(d.get("moe_intermediate_size"), int) or (
            moe is None and "top_k_experts" in d):
        if "moe_intermediate_size" in d and d["moe_intermediate_size"] is None:
            d["moe_intermediate_size"] = MOE_INTERMEDIATE
        if "top_k_experts" in d and d["top_k_experts"] is None:
            d["top_k_experts"] = TOP_K
        for k in ("n_routed_experts", "num_experts", "num_local_experts"):
            if k in d and d[k] is None:
                d[k] = EXPERTS
        if "n_shared_experts" in d and d["n_shared_experts"] is None:
            d["n_shared_experts"] = 1
        if "num_experts_per_tok" in d and d["num_experts_per_tok"] is None:
            d["num_experts_per_tok"] = TOP_K


def _keep_multiples(d: dict, orig: dict) -> None:
    """An attention width that was 2, 3 or 4 times the hidden size stays that multiple
    of it (attention over a concatenation, [hidden, embeddings]); unnamed sizes equal
    to the hidden size stay equal to it."""
    h0 = next((orig[k] for k in _HIDDEN_KEYS if isinstance(orig.get(k), int)), None)
    hk = next((k for k in _HIDDEN_KEYS if isinstance(orig.get(k), int)), None)
    if not h0 or h0 <= 1:
        return
    h1 = d[hk]
    for k, v in orig.items():
        if k == hk or not isinstance(v, int) or isinstance(v, bool):
            continue
        if v == h0 and _first_rule(k) is None:
            d[k] = h1  # e.g. the groups of a depthwise convolution over the hidden size
        elif k == "attention_hidden_size" and v % h0 == 0 and v // h0 in (2, 3, 4):
            d[k] = h1 * (v // h0)


def _first_rule(k):
    return next((r for r in _INT_RULES if r[0].fullmatch(k)), None)


def _backbone_stages(d, old_layers):
    """The layer numbers in a layer-based backbone's out_features, or None."""
    feats = d.get("out_features")
    if not old_layers or not isinstance(feats, (list, tuple)) or not feats or any(
            isinstance(d.get(k), (list, tuple)) for k in ("depths", "hidden_sizes")):
        return None
    nums = [int(m.group(1)) for f in feats if isinstance(f, str)
            for m in [re.fullmatch(r"stage(\d+)", f)] if m]
    return nums if len(nums) == len(feats) and max(nums) > LAYERS else None


def _int_rule(k, v, ctx):
    if not isinstance(v, int) or isinstance(v, bool) or v <= 1:
        return v
    for pattern, rule in _INT_RULES:
        if pattern.fullmatch(k):
            return v if rule is None else rule(v, ctx)
    return v


def _plc_key(plc, i):
    """per_layer_config's keys are layer indices as strings, maybe zero-padded."""
    width = max(len(str(k)) for k in plc)
    return f"{i:0{width}d}" if all(isinstance(k, str) for k in plc) else i


def _select(old_n, n, kinds):
    """n old layer indices (at least one of each kind): the first layer of each kind,
    then the first others."""
    sel = set(kinds.values())
    i = 0
    while len(sel) < min(n, old_n):
        sel.add(i)
        i += 1
    return sorted(sel)


def _rank_indices(values, old_n, n):
    """Feature-layer indices -> as many distinct ones among the last layers of n, in
    the same order (negative ones stay negative)."""
    pos = sorted({v % old_n for v in values})
    new = {p: n - len(pos) + i for i, p in enumerate(pos)}
    out = [new[v % old_n] - (n if v < 0 else 0) for v in values]
    return type(values)(out) if isinstance(values, tuple) else out


def _shrink_rope(rope: dict, d: dict) -> dict:
    """rope_parameters / rope_scaling, d the config dict already shrunk."""
    rope = dict(rope)
    sec = rope.get("mrope_section")
    if _is_int_list(sec):  # multimodal rotary sections: sum to head_dim / 2
        head_dim = d.get("head_dim")
        if not isinstance(head_dim, int):
            head_dim = HEAD_DIM
        half = head_dim // 2
        total = sum(sec)
        new = [max(1, s * half // total) for s in sec]
        new[0] += half - sum(new)
        rope["mrope_section"] = new
    for k in ("original_max_position_embeddings",):
        if isinstance(rope.get(k), int):
            rope[k] = min(rope[k], POSITIONS)
    return rope


_SSM_HEADS = (("mamba_n_heads", "mamba_d_head"), ("mamba_num_heads", "mamba_head_dim"),
              ("n_mamba_heads", "mamba_headdim"), ("ssm_num_heads", "ssm_head_dim"))


def _make_consistent(d: dict, orig: dict) -> None:
    """Fields derived from others (generic relations, not models)."""
    # state-space mixers: heads * head_dim == expand * hidden_size
    expand = d.get("mamba_expand", d.get("expand"))
    hidden = d.get("hidden_size")
    if isinstance(expand, (int, float)) and isinstance(hidden, int):
        pairs = list(_SSM_HEADS)
        if "expand" in d and "num_attention_heads" not in d:
            pairs.append(("num_heads", "head_dim"))
        for nk, dk in pairs:
            if isinstance(d.get(nk), int) and isinstance(d.get(dk), int):
                inner = d.get("mamba_d_ssm")  # an explicit SSM width, else expand * hidden
                inner = inner if isinstance(inner, int) else int(expand * hidden)
                d[dk] = inner // d[nk]
    # attention over a width other than hidden_size: head_dim follows it
    if isinstance(d.get("attention_hidden_size"), int) and \
            isinstance(d.get("attention_head_dim"), int) and \
            isinstance(d.get("num_attention_heads"), int):
        d["attention_head_dim"] = d["attention_hidden_size"] // d["num_attention_heads"]
    if "qk_head_dim" in d and "qk_nope_head_dim" in d and "qk_rope_head_dim" in d:
        d["qk_head_dim"] = d["qk_nope_head_dim"] + d["qk_rope_head_dim"]
    if isinstance(d.get("qk_rope_head_dim"), int) and isinstance(d.get("head_dim"), int) \
            and isinstance(d.get("qk_nope_head_dim"), int):
        # multi-head latent attention: head_dim was the rope part, or nope + rope
        if orig.get("head_dim") == orig.get("qk_rope_head_dim"):
            d["head_dim"] = d["qk_rope_head_dim"]
        elif orig.get("head_dim") == orig.get("qk_rope_head_dim") + orig.get("qk_nope_head_dim"):
            d["head_dim"] = d["qk_rope_head_dim"] + d["qk_nope_head_dim"]
    # image side: a multiple of the patch size, about IMAGE
    patch = d.get("patch_size")
    patch = patch[0] if _is_int_list(patch) else patch
    for key in ("image_size", "img_size"):
        img = d.get(key)
        if isinstance(img, int) and not isinstance(img, bool) and img > IMAGE:
            d[key] = _image_side(img, patch)
        elif _is_int_list(img) and len(img) == 2 and max(img) > IMAGE:
            d[key] = type(img)(_image_side(s, patch) for s in img)
    # hierarchical (staged) models double the width at every stage: start narrower
    depths = d.get("depths")
    if _is_int_list(depths) and isinstance(d.get("embed_dim"), int) and len(depths) > 2:
        heads = d.get("num_heads")
        h0 = heads[0] if _is_int_list(heads) else 1
        start = max(16, HIDDEN >> (len(depths) - 2))
        d["embed_dim"] = min(d["embed_dim"], -(-start // h0) * h0)
        # Swin-style windows no larger than the last stage's side (transformers 5 Swin fails,
        # eagerly too, when a stage's side shrinks its window below its relative positions').
        img, patch, win = d.get("image_size"), d.get("patch_size"), d.get("window_size")
        if all(isinstance(v, int) and v > 0 for v in (img, patch, win)):
            d["window_size"] = max(1, min(win, img // patch >> (len(depths) - 1)))
    # n_group divides the experts
    n_exp = next((d[k] for k in ("n_routed_experts", "num_experts", "num_local_experts")
                  if isinstance(d.get(k), int)), None)
    if isinstance(d.get("n_group"), int) and n_exp and n_exp % d["n_group"]:
        d["n_group"] = 1
    if isinstance(d.get("num_experts_per_tok"), int) and n_exp:
        d["num_experts_per_tok"] = min(d["num_experts_per_tok"], n_exp)


def _image_side(side, patch):
    if isinstance(patch, int) and patch > 1:
        k = max(2, IMAGE // patch)
        return patch * k
    return IMAGE


def _renumber_ids(ids: list) -> None:
    """Token ids at or above the (shrunk) vocabulary -> distinct ids at its top, not
    taken by the ids kept; the same old id the same new id across the config tree."""
    def values(d, k):
        return d[k] if isinstance(d[k], (list, tuple)) else [d[k]]

    found = {x for d, k in ids for x in values(d, k) if isinstance(x, int)}
    kept = {x for x in found if 0 <= x < VOCAB}
    new, nxt = {}, VOCAB - 1
    for x in sorted(x for x in found if x >= VOCAB):
        while nxt in kept:
            nxt -= 1
        new[x] = nxt
        nxt -= 1
    for d, k in ids:
        v = d[k]
        if isinstance(v, (list, tuple)):
            d[k] = type(v)(new.get(x, x) if isinstance(x, int) else x for x in v)
        elif isinstance(v, int):
            d[k] = new.get(v, v)


# Per-model overrides where no generic rule can work: model_type -> fn(dict) applied to
# the shrunk config dict. Each says why.
def _gpt_neo(d):
    # attention_types is [[kinds, repeats]], its expansion must count num_layers
    d["attention_types"] = [[["global", "local"], d["num_layers"] // 2]]


def _lfm2_moe(d):
    # the defaults leave layer_types unset (the model indexes it): one conv, one attention
    d["layer_types"] = ["conv", "full_attention"][:d["num_hidden_layers"]]


def _zamba(d):
    # the shared transformer block is tied across hybrid layers: it needs two of them
    d["num_hidden_layers"] = 4
    other = next(t for t in d["layers_block_type"] if t != "hybrid")  # 5.x / 4.x names
    d["layers_block_type"] = [other, "hybrid"] * 2
    d["attn_layer_period"], d["attn_layer_offset"] = 2, 1  # 4.x derives the same list


def _hybrid_attention(field, value):
    # hybrids whose defaults put no attention layer among the first two (one every 8 layers,
    # or none listed: transformers 5 cannot then size an attention mask, "get_seq_length can
    # only be called on Attention layers"); checkpoints have them: one state, one attention
    def fix(d):
        d[field] = value if not callable(value) else value(d)
        if field == "attn_layer_offset":
            d["attn_layer_period"] = 2
    return fix


def _reformer(d):
    # axial position embeddings: dims sum to hidden_size, shape multiplies to positions
    d["axial_pos_embds_dim"] = [d["hidden_size"] // 4, d["hidden_size"] - d["hidden_size"] // 4]
    d["axial_pos_shape"] = [16, d["max_position_embeddings"] // 16]


def _dots3_note(d):
    # per-layer overrides widen qk_nope_head_dim so that nope + rope is head_dim
    text = d.get("text_config", d)
    for layer in (text.get("per_layer_config") or {}).values():
        if "qk_nope_head_dim" in layer:
            layer["qk_nope_head_dim"] = text["head_dim"] - text["qk_rope_head_dim"]


def _fun_asr_nano(d):
    # the adaptor's intermediate size is checked against a quarter of the text width
    d["adaptor_config"]["intermediate_size"] = d["text_config"]["hidden_size"] // 4


def _molmo2(d):
    # the adapter's feature layers index the vision config's layers (another sub-config)
    n = d["vision_config"]["num_hidden_layers"]
    d["adapter_config"]["vision_feature_layer"] = [n - 1, n - 2]


def _ernie4_5_vl_moe(d):
    # the rotary code's default 3-D sections [22, 22, 20] assume head_dim 128
    text = d["text_config"]
    half = (text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]) // 2
    rope = d["text_config"].setdefault("rope_parameters", {})
    rope["mrope_section"] = [half * 3 // 8, half * 3 // 8, half - 2 * (half * 3 // 8)]


def _beit_like(d, task):
    # its segmentation heads take exactly four feature layers
    if task in ("semantic-segmentation", "image-segmentation"):
        d["num_hidden_layers"] = 4
        d["out_indices"] = [1, 2, 3, 4]
        d["out_features"] = ["stage1", "stage2", "stage3", "stage4"]
        d["stage_names"] = ["stem"] + d["out_features"]


def _detr(d, task):
    # the segmentation mask head's group norm needs hidden + heads divisible by 8
    if task == "image-segmentation":
        d["encoder_attention_heads"] = d["decoder_attention_heads"] = 8


_OVERRIDES: dict = {"ernie4_5_vl_moe": _ernie4_5_vl_moe, "beit": _beit_like,
                    "data2vec-vision": _beit_like, "detr": _detr,
                    "gpt_neo": _gpt_neo, "lfm2_moe": _lfm2_moe, "zamba": _zamba,
                    "reformer": _reformer, "dots3_note": _dots3_note,
                    "dots3_note_text": _dots3_note, "fun_asr_nano": _fun_asr_nano,
                    "molmo2": _molmo2,
                    "jamba": _hybrid_attention("attn_layer_offset", 1),
                    "bamba": _hybrid_attention("attn_layer_indices", [1]),
                    "granitemoehybrid": _hybrid_attention(
                        "layer_types", ["linear_attention", "full_attention"]),
                    "recurrent_gemma": _hybrid_attention("block_types",
                                                         ["recurrent", "attention"])}


def _config_class(model_type: str):
    return configuration_auto.CONFIG_MAPPING[model_type]


def tiny_config(model_type: str, task: str | None = None):
    """The model type's config with every size field shrunk."""
    cls = _config_class(model_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = cls().to_dict()
    ids: list = []
    d = _shrink(base, ids)
    _renumber_ids(ids)
    if task == "text-generation" and "is_decoder" in base:
        d["is_decoder"] = True  # encoder types' causal-LM heads want a decoder config
    fix = _OVERRIDES.get(model_type)
    if fix is not None:
        if len(inspect.signature(fix).parameters) == 2:
            fix(d, task)
        else:
            fix(d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls.from_dict(d)


def _config_for(cls, config):
    """The config the class takes: the composite config's sub-config of the class's
    config class where the class is a part (a text-only causal LM of a multimodal
    type), as the auto classes do."""
    want = getattr(cls, "config_class", None)
    if want is None or isinstance(config, want):
        return config
    for name in (getattr(config, "sub_configs", None) or {}):
        sub = getattr(config, name, None)
        if isinstance(sub, want):
            return sub
    return config


def tiny_checkpoint(model_type: str, task: str, folder: str) -> dict:
    """Builds the tiny model of model_type for task with random weights (seed 0),
    float32, eval mode, and saves it (safetensors) in folder. Returns its class name,
    parameter count and the seconds it took."""
    t0 = time.perf_counter()
    cls = model_class(task, model_type)
    try:
        config = tiny_config(model_type, task)
    except Exception as e:
        raise RuntimeError(f"{model_type}: tiny config: {type(e).__name__}: {e}") from e
    config = _config_for(cls, config)
    text = config.get_text_config() if task == "text-classification" else None
    if text is not None and getattr(text, "pad_token_id", 0) is None:
        # A classifier fine-tuned on batches holds its padding token's id (transformers'
        # decoder classifiers refuse a batch without one: "Cannot handle batch sizes > 1 if no
        # padding token is defined"); base checkpoints of decoders often have none.
        text.pad_token_id = 0
    torch.manual_seed(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = cls._from_config(config)
    except Exception as e:
        raise RuntimeError(f"{model_type}: building {cls.__name__}: {type(e).__name__}: {e}") \
            from e
    model = model.to(torch.float32).eval()
    os.makedirs(folder, exist_ok=True)
    kwargs = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kwargs["safe_serialization"] = True  # transformers 4.x; 5.x always saves safetensors
    model.save_pretrained(folder, **kwargs)
    return {"model_type": model_type, "task": task, "class": cls.__name__,
            "parameters": sum(p.numel() for p in model.parameters()),
            "seconds": time.perf_counter() - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", required=True, choices=sorted(AUTO_CLASSES))
    ap.add_argument("--model-type", nargs="*", help="model types (default: all of the task's)")
    ap.add_argument("--out", required=True, help="folder: one sub-folder per model type")
    args = ap.parse_args(argv)
    todo = args.model_type or model_types(args.task)
    built = failed = 0
    t0 = time.perf_counter()
    for mt in todo:
        try:
            info = tiny_checkpoint(mt, args.task, os.path.join(args.out, mt))
        except Exception as e:  # noqa: BLE001 - one line per model type, go on
            failed += 1
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"failed {mt}: {msg[:300]}", flush=True)
        else:
            built += 1
            print(f"built  {mt}: {info['class']} {info['parameters']} parameters "
                  f"{info['seconds']:.2f}s", flush=True)
    print(f"{args.task}: {built} built, {failed} failed of {len(todo)} "
          f"in {time.perf_counter() - t0:.0f}s", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
