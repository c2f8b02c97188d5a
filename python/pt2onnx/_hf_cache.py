"""transformers' DynamicCache as a pytree node, with its state-space / linear-attention layers.

transformers 5 holds every decoder's cache in a `DynamicCache` whose `.layers` are attention
layers (`DynamicLayer`, `DynamicSlidingWindowLayer`: keys, values), linear-attention layers
(`LinearAttentionLayer`: conv states and recurrent states, Mamba's, LFM2's, ...) and layers of
both (`LinearAttentionAndFullAttentionLayer`, ...). transformers' own export registration
(transformers/integrations/executorch.py) takes attention layers only.

The registration here flattens a cache of attention layers only exactly as transformers does
({key_cache: [...], value_cache: [...]}, the files' names and the program cache unchanged);
a cache holding another kind of layer is flattened layer by layer: one dict per layer, with
`key`, `value` (attention), `conv_state`, `recurrent_state` (linear attention; a layer of
several states adds `conv_state_<j>`, ...), keyed by the layer's index, so the C++ core names
the leaves `past_key_values.<i>.conv_state` (`present.<i>.conv_state` as an output). The
context keeps each layer's class and sizes; the unflatten rebuilds layers of the same kinds,
their states counted as given (`has_previous_state`): a state of zeros is the state before
the first token.

`state_space_capture(model)` replaces, while capturing only, the Mamba / FalconMamba / Jamba
mixers' forward by the same arithmetic starting from the given state whatever the sequence length
(transformers' full-sequence path starts its scan from zeros and ignores the state; its
one-token path is another branch): conv over the cached conv state followed by the tokens, the
selective scan as torch's `scan` (an ONNX Scan) from the recurrent state.
"""

from __future__ import annotations

import contextlib

import torch

_PLAIN = ("DynamicLayer", "DynamicSlidingWindowLayer", "DummyLayer")

# Parts of a layer that grow with the tokens seen, and the axis they grow along.
_SEQ_AXIS = {"key": 2, "value": 2, "indexer_key": 1, "indexer_position_ids": 2}
_INDEXER_PARTS = {"indexer_key": "indexer_keys", "indexer_position_ids": "indexer_position_ids"}


def _is_plain(cache) -> bool:
    from transformers import cache_utils

    plain = tuple(getattr(cache_utils, n) for n in _PLAIN if hasattr(cache_utils, n))
    return all(type(layer) in plain for layer in cache.layers)


def _is_linear(layer) -> bool:
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    return isinstance(layer, LinearAttentionCacheLayerMixin)


def _state_key(kind: str, j: int) -> str:
    return kind if j == 0 else f"{kind}_{j}"


def _layer_parts(layer) -> tuple[dict, dict]:
    """(names -> tensors, description) of one layer of a layered cache."""
    parts: dict = {}
    desc: dict = {"class": f"{type(layer).__module__}.{type(layer).__qualname__}"}
    if getattr(layer, "sliding_window", None) is not None:
        desc["sliding_window"] = int(layer.sliding_window)
    if getattr(layer, "keys", None) is not None and getattr(layer, "values", None) is not None:
        parts["key"], parts["value"] = layer.keys, layer.values
    # A sparse-attention indexer's keys (DynamicIndexedLayer: DeepSeek-V3.2, GLM-MoE-DSA).
    for name, attr in _INDEXER_PARTS.items():
        if getattr(layer, attr, None) is not None:
            parts[name] = getattr(layer, attr)
    if _is_linear(layer):
        desc["number_of_states"] = layer.number_of_states
        for j in range(layer.number_of_states):
            if layer.conv_states.get(j) is not None:
                parts[_state_key("conv_state", j)] = layer.conv_states[j]
            if layer.recurrent_states.get(j) is not None:
                parts[_state_key("recurrent_state", j)] = layer.recurrent_states[j]
    desc["parts"] = list(parts)
    return parts, desc


def _flatten(cache):
    from transformers.integrations import executorch as ex

    if _is_plain(cache):
        return ex._flatten_cache_dict(ex._get_cache_dict(cache),
                                      ex._get_dynamic_cache_layout(cache))
    layers, descs = [], []
    for layer in cache.layers:
        parts, desc = _layer_parts(layer)
        layers.append(parts)
        descs.append(desc)
    # [[layer names], [layer descriptions]]: the C++ core reads the first list as the keys.
    return layers, [[str(i) for i in range(len(layers))], descs]


def _flatten_with_keys(cache):
    from transformers.integrations import executorch as ex

    pytree = torch.utils._pytree
    if _is_plain(cache):
        return ex._flatten_cache_dict_with_keys(ex._get_cache_dict(cache),
                                                ex._get_dynamic_cache_layout(cache))
    values, context = _flatten(cache)
    return [(pytree.SequenceKey(i), v) for i, v in enumerate(values)], context


def _layered(context) -> bool:
    return (isinstance(context, (list, tuple)) and len(context) == 2
            and isinstance(context[1], (list, tuple))
            and all(isinstance(d, dict) and "class" in d for d in context[1]))


def _layer_class(qualified: str):
    """A cache layer class of transformers.cache_utils, by name only: a pytree context may
    come from a file (a .pt2 that torch.export.load reads while this registration is active),
    so nothing else is imported or built from it."""
    from transformers import cache_utils

    module, _, name = qualified.rpartition(".")
    cls = getattr(cache_utils, name, None) if module == cache_utils.__name__ else None
    bases = tuple(b for b in (getattr(cache_utils, "CacheLayerMixin", None),
                              getattr(cache_utils, "LinearAttentionCacheLayerMixin", None),
                              getattr(cache_utils, "DummyLayer", None)) if b)
    if not isinstance(cls, type) or not issubclass(cls, bases):
        raise ValueError(f"a DynamicCache layer of class {qualified!r}: not one of "
                         "transformers.cache_utils' cache layers")
    return cls


def _unflatten(values, context):
    from transformers.integrations import executorch as ex

    if not _layered(context):
        if any(w is not None for w in context[1]):
            return _unflatten_windowed(values, context)
        return ex._unflatten_dynamic_cache(values, context)
    layers = []
    for parts, desc in zip(values, context[1]):
        cls = _layer_class(desc["class"])
        kwargs = {k: desc[k] for k in ("sliding_window", "number_of_states") if k in desc}
        if not all(map(_positive_int, kwargs.values())):
            raise ValueError(f"a DynamicCache layer's sizes are not positive ints: {kwargs}")
        layer = cls(**kwargs)
        if "key" in parts:
            _hold(layer, parts["key"], parts["value"])
        if "indexer_key" in parts:
            layer.lazy_initialization_indexer(parts["indexer_key"])
            layer.indexer_keys = parts["indexer_key"]
        if "indexer_position_ids" in parts:
            layer.indexer_position_ids = parts["indexer_position_ids"]
        if "number_of_states" in desc:
            _set_states(layer, parts, desc["number_of_states"])
        layers.append(layer)
    return _cache_of(layers)


def _positive_int(v) -> bool:
    """A size read from a flattened cache's context (which a `.pt2` or cache entry carries:
    untrusted) is a positive int an int32 holds."""
    return type(v) is int and 0 < v < 1 << 31


def _unflatten_windowed(values, context):
    """A cache of attention layers some of which have a window, as transformers' own
    unflatten makes it, except that a window layer holds the states given as they are
    (transformers' crops them to the window: a cache given longer than the window, or
    cropped in the graph while capturing, rule 13, is kept as given)."""
    from itertools import zip_longest

    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    keys, layout = context
    parts = torch.utils._pytree._dict_unflatten(values, keys)
    layers = []
    for k, v, w in zip_longest(parts["key_cache"], parts["value_cache"], layout):
        if w is not None and not _positive_int(w):
            raise ValueError(f"a DynamicCache layer's sliding window is not a positive int: {w!r}")
        layer = DynamicSlidingWindowLayer(sliding_window=w) if w is not None else DynamicLayer()
        if k is not None and v is not None:
            _hold(layer, k, v)
        layers.append(layer)
    return _cache_of(layers)


def _hold(layer, keys, values) -> None:
    """An attention layer holding `keys`, `values` as given: a window layer is not cropped
    (transformers' update would crop it; rule 13's update while capturing would add the crop
    to the graph), its count of tokens seen their number."""
    if getattr(layer, "sliding_window", None) is None:
        layer.update(keys, values)
        return
    import inspect

    init = layer.lazy_initialization  # dtype, device (transformers 4.57: keys only)
    init(keys, values) if len(inspect.signature(init).parameters) > 1 else init(keys)
    layer.keys, layer.values = keys, values
    layer.cumulative_length = keys.shape[-2]


def _cache_of(layers):
    from transformers import DynamicCache

    cache = DynamicCache()  # layers replicated on demand: none, all are given
    cache.layers = list(layers)
    cache.layer_class_to_replicate = None
    return cache


def _set_states(layer, parts: dict, n: int) -> None:
    for j in range(n):
        conv = parts.get(_state_key("conv_state", j))
        rec = parts.get(_state_key("recurrent_state", j))
        for t in (conv, rec):
            if t is not None and layer.device is None:
                layer.dtype, layer.device = t.dtype, t.device
        if conv is not None:
            layer.conv_states[j] = conv
            layer.conv_kernel_size[j] = conv.shape[-1]
            layer.is_conv_states_initialized[j] = True
        if rec is not None:
            layer.recurrent_states[j] = rec
            layer.is_recurrent_states_initialized[j] = True
        # A state given is a state (zeros: before the first token).
        layer.has_previous_state[j] = conv is not None or rec is not None


def _flatten_spec(cache, spec):
    from transformers.integrations import executorch as ex

    if _is_plain(cache):
        return ex._flatten_cache_dict_spec(ex._get_cache_dict(cache),
                                           ex._get_dynamic_cache_layout(cache), spec)
    return _flatten(cache)[0]


def register() -> None:
    """DynamicCache as a pytree node with this module's flatten (transformers' own for a cache
    of attention layers only); one registered before (transformers' own) is replaced."""
    from transformers import DynamicCache

    pytree = torch.utils._pytree
    node = pytree.SUPPORTED_NODES.get(DynamicCache)
    if node is not None and node.flatten_fn is _flatten:
        return
    if node is not None:
        pytree._deregister_pytree_node(DynamicCache)
        torch.fx._pytree.SUPPORTED_NODES.pop(DynamicCache, None)
    pytree.register_pytree_node(
        DynamicCache, _flatten, _unflatten,
        serialized_type_name=f"{DynamicCache.__module__}.{DynamicCache.__name__}",
        flatten_with_keys_fn=_flatten_with_keys)
    torch.fx._pytree.register_pytree_flatten_spec(DynamicCache, _flatten_spec)


def windows(cache) -> list[int]:
    """The sliding windows of a cache's layers, each once, in increasing order."""
    return sorted({w for w in (getattr(layer, "sliding_window", None)
                               for layer in getattr(cache, "layers", ())) if w is not None})


def has_states(cache) -> bool:
    """Whether a cache holds a linear-attention (state) layer."""
    return any(_is_linear(layer) for layer in getattr(cache, "layers", ()))


def rebuild(cache, attention, state):
    """A cache of the same layer kinds, each tensor that grows with the tokens seen (keys,
    values, an indexer's keys) mapped by `attention(tensor, sequence axis)`, each conv /
    recurrent state by `state`."""
    if _is_plain(cache):
        # Each layer's kind and window kept, the states as given (not cropped again).
        windows = [getattr(layer, "sliding_window", None) for layer in cache.layers]
        # As transformers flattens it: the layers holding states (those sharing another's,
        # Gemma 3n's last ones, hold none and are made empty again).
        keys = [attention(layer.keys, 2) for layer in cache.layers if layer.keys is not None]
        values = [attention(layer.values, 2) for layer in cache.layers
                  if layer.values is not None]
        return _unflatten_windowed([keys, values], [["key_cache", "value_cache"], windows])
    values, context = _flatten(cache)
    mapped = [{k: (attention(v, _SEQ_AXIS[k]) if k in _SEQ_AXIS else state(v))
               for k, v in parts.items()} for parts in values]
    return _unflatten(mapped, context)


def dynamic_shapes(cache, batch="batch_size", past="past_sequence_length"):
    """torch.export's dynamic_shapes of a cache, as this module flattens it: batch dims and
    the attention layers' sequence dims dynamic, every other state dim static."""
    found = windows(cache)
    full = any(getattr(layer, "sliding_window", None) is None
               and getattr(layer, "keys", None) is not None for layer in cache.layers)

    def axes(layer):
        # A window-cropped layer's length is its own dim (a window's, beside the full layers).
        w = getattr(layer, "sliding_window", None)
        if w is None or not full and len(found) == 1:
            return {0: batch, 2: past}
        name = "past_sliding_sequence_length"
        return {0: batch, 2: name if len(found) == 1 else f"{name}_{w}"}

    if _is_plain(cache):
        attention = [axes(layer) for layer in cache.layers if layer.keys is not None]
        return [attention, attention]

    def part_axes(layer, k):
        if k not in _SEQ_AXIS:
            return {0: batch}
        a = axes(layer)
        return {0 if k != "indexer_position_ids" else 1: batch, _SEQ_AXIS[k]: a[2]}

    return [{k: part_axes(layer, k) for k in parts}
            for layer, parts in zip(cache.layers, _flatten(cache)[0])]


# ---- the Mamba mixers while capturing ----------------------------------------------------

def _mamba_forward(self, original, hidden_states, cache_params=None, attention_mask=None,
                   **kwargs):
    if cache_params is None:
        return original(hidden_states, cache_params=cache_params,
                        attention_mask=attention_mask, **kwargs)
    from torch._higher_order_ops.scan import scan

    def mask(h, m):
        return h if m is None else (h * m[:, :, None]).to(h.dtype)

    layer = cache_params.layers[self.layer_idx]
    conv_state, ssm_state = layer.conv_states[0], layer.recurrent_states[0]
    seq = hidden_states.shape[1]
    dtype = hidden_states.dtype
    projected = self.in_proj(mask(hidden_states, attention_mask)).transpose(1, 2)
    A = -torch.exp(self.A_log.float())
    x, gate = projected.chunk(2, dim=1)
    # The conv over the cached inputs followed by the new ones; the last kernel-size inputs
    # are the new conv state.
    full = torch.cat([conv_state.to(x.dtype), x], dim=-1)
    new_conv = full[:, :, -conv_state.shape[-1]:]
    x = torch.nn.functional.conv1d(full.to(self.conv1d.weight.dtype), self.conv1d.weight,
                                   self.conv1d.bias, groups=self.intermediate_size)
    x = self.act(x[:, :, -seq:]).to(dtype)
    x = mask(x.transpose(1, 2), attention_mask)  # (batch, seq, intermediate)
    time_step, B, C = torch.split(self.x_proj(x),
                                  [self.time_step_rank, self.ssm_state_size, self.ssm_state_size],
                                  dim=-1)
    if hasattr(self, "dt_layernorm"):  # FalconMamba: norms on B, C and dt
        time_step = self.dt_layernorm(time_step)
        B = self.b_layernorm(B)
        C = self.c_layernorm(C)
    dt = self.dt_proj.weight @ time_step.transpose(1, 2)  # (batch, intermediate, seq)
    if self.dt_proj.bias is not None:
        dt = dt + self.dt_proj.bias.float()[:, None]
    dt = torch.nn.functional.softplus(dt)
    dA = torch.exp(A[None, :, None, :] * dt[:, :, :, None])  # (batch, inter, seq, state)
    dBx = dt[:, :, :, None] * B[:, None, :, :].float() * x.transpose(1, 2)[:, :, :, None].float()

    def step(h, xs):
        a, bx, c = xs
        h = a * h + bx
        return h, (h.to(dtype) * c[:, None, :].to(dtype)).sum(-1)

    final, ys = scan(step, ssm_state.float(),
                     (dA.permute(2, 0, 1, 3), dBx.permute(2, 0, 1, 3), C.transpose(0, 1)))
    y = ys.permute(1, 2, 0)  # (batch, inter, seq)
    y = y + x.transpose(1, 2) * self.D.float()[None, :, None]
    y = y * torch.nn.functional.silu(gate)
    layer.conv_states[0] = new_conv
    layer.recurrent_states[0] = final.to(ssm_state.dtype)
    return self.out_proj(y.transpose(1, 2).to(dtype))


_MIXERS = ("MambaMixer", "FalconMambaMixer", "JambaMambaMixer")


@contextlib.contextmanager
def state_space_capture(model):
    """For the duration of a capture: the Mamba / FalconMamba / Jamba mixers of `model` given a
    cache run from its states at any sequence length (the module docstring)."""
    mixers = [m for m in model.modules() if type(m).__name__ in _MIXERS]
    saved = []
    try:
        for m in mixers:
            original = m.forward
            saved.append((m, "forward" in m.__dict__, m.__dict__.get("forward")))

            def fwd(*args, _m=m, _orig=original, **kwargs):
                return _mamba_forward(_m, _orig, *args, **kwargs)

            m.forward = fwd
        yield
    finally:
        for m, had, f in saved:
            if had:
                m.forward = f
            else:
                del m.forward


def has_mamba_mixers(model) -> bool:
    return any(type(m).__name__ in _MIXERS for m in model.modules())


def step_module(model, input_names):
    """`model` as a decoder step taking `input_names` (positional-or-keyword: the file's input
    names) and returning {logits, past_key_values}: the file's names are those of every decoder
    (past_key_values.<i>.* -> present.<i>.*), also for a model taking its cache as
    `cache_params` (Mamba's; its attention mask, of the past and new tokens as for every
    decoder, is given to it for the new tokens only). Run eagerly (PyTorch's answer, what the
    file is checked against), several tokens after earlier ones go through transformers' own
    one-token steps: its full-sequence path of a Mamba mixer starts its scan from zeros,
    dropping the recurrent state. Its parameters are the model's under the prefix `model.`."""
    import inspect

    cache_arg = "cache_params" if "cache_params" in inspect.signature(model.forward).parameters \
        and "past_key_values" not in inspect.signature(model.forward).parameters \
        else "past_key_values"

    def run(self, kw):
        kw = dict(kw)
        kw[cache_arg] = kw.pop("past_key_values", None)
        if cache_arg == "cache_params" and kw.get("attention_mask") is not None:
            kw["attention_mask"] = kw["attention_mask"][:, -kw["input_ids"].shape[1]:]
        out = self.model(**kw, use_cache=True)
        return out.logits, out[cache_arg]

    def forward(self, **kwargs):
        ids, mask = kwargs["input_ids"], kwargs.get("attention_mask")
        seq = ids.shape[1]
        past = 0 if mask is None else mask.shape[1] - seq
        if torch.compiler.is_exporting() or past == 0 or seq == 1:
            logits, cache = run(self, kwargs)
            return {"logits": logits, "past_key_values": cache}
        logits, cache = [], kwargs.get("past_key_values")
        for t in range(seq):
            kw = {k: (v[:, t:t + 1] if k in ("input_ids", "position_ids") else v)
                  for k, v in kwargs.items()}
            if mask is not None:
                kw["attention_mask"] = mask[:, :past + t + 1]
            kw["past_key_values"] = cache
            step, cache = run(self, kw)
            logits.append(step)
        return {"logits": torch.cat(logits, dim=1), "past_key_values": cache}

    from ._hf_inputs import named_inputs_module

    return named_inputs_module(model, forward, input_names, "Step")


# ---- sliding-window layers while capturing ------------------------------------------------

def _sliding_update(self, key_states, value_states, *args, **kwargs):
    """DynamicSlidingWindowLayer.update without a branch on the cache's length: the new
    states are appended and the last `sliding_window - 1` kept (all while fewer), the kept
    length computed as a max in the graph, so one file holds below, at and past the window."""
    if not self.is_initialized:
        self.lazy_initialization(key_states, value_states)
    self.cumulative_length = self.cumulative_length + key_states.shape[-2]
    full_keys = torch.cat([self.keys, key_states], dim=-2)
    full_values = torch.cat([self.values, value_states], dim=-2)
    n = full_keys.shape[-2]
    start = torch.sym_max(n - (self.sliding_window - 1), 0)
    self.keys = full_keys.narrow(-2, start, n - start)
    self.values = full_values.narrow(-2, start, n - start)
    return full_keys, full_values


def _sliding_mask_sizes(self, query_length):
    """(kv_length, kv_offset) of the keys the attention sees, the cached ones (whatever
    their number: cropped to the window or not) followed by the new ones, the first of
    them at the position `cumulative_length - cached`."""
    cached = 0 if self.keys is None else self.keys.shape[-2]
    return cached + query_length, self.cumulative_length - cached


def _count_seen(cache, attention_mask, new_tokens) -> None:
    """Each window layer's count of tokens seen before the new ones, which a window-cropped
    cache no longer holds: the 2D attention mask covers them and the new ones."""
    if not (isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2
            and new_tokens is not None):
        return
    for layer in getattr(cache, "layers", ()):
        if getattr(layer, "is_sliding", False) and hasattr(layer, "cumulative_length"):
            layer.cumulative_length = attention_mask.shape[-1] - new_tokens


def _preprocess_mask_arguments(original):
    def preprocess(config, inputs_embeds, attention_mask, past_key_values, *args, **kwargs):
        _count_seen(past_key_values, attention_mask,
                    None if inputs_embeds is None else inputs_embeds.shape[1])
        return original(config, inputs_embeds, attention_mask, past_key_values, *args, **kwargs)

    return preprocess


def _count_seen_hook(module, args, kwargs):
    """Before a transformers model's forward: the counts, for the positions it computes from
    the cache's length (`get_seq_length`) when not given position_ids."""
    import inspect

    try:
        bound = inspect.signature(module.forward).bind_partial(*args, **kwargs).arguments
    except TypeError:
        return None
    new = bound.get("input_ids")
    if not isinstance(new, torch.Tensor) or new.dim() != 2:
        new = bound.get("inputs_embeds")
    if isinstance(new, torch.Tensor) and new.dim() >= 2:
        _count_seen(bound.get("past_key_values"), bound.get("attention_mask"), new.shape[1])
    return None


def sliding_window_hooks(model) -> list:
    """Rule 13's forward pre-hooks on the transformers models in `model` (removed by the
    caller through the handles returned); for use beside `sliding_window_patches()`'s."""
    import sys

    modeling = sys.modules.get("transformers.modeling_utils")
    base = getattr(modeling, "PreTrainedModel", None)
    if base is None or not isinstance(model, torch.nn.Module):
        return []
    return [m.register_forward_pre_hook(_count_seen_hook, with_kwargs=True)
            for m in model.modules() if isinstance(m, base)]


def sliding_window_patches():
    """(owner, attribute, replacement) for capturing transformers' sliding-window caches,
    when transformers' cache is imported (capture rule 13, python/pt2onnx/_capture_rules.py).

    transformers' DynamicSlidingWindowLayer keeps `sliding_window - 1` positions and counts
    the tokens seen (`cumulative_length`, a Python int: not in the flattened cache, and not
    recoverable from a cropped one). Captured as is, its branches on that count fix the
    file to one side of the window. While capturing: the count is the 2D attention mask's
    length less the new tokens (the mask covers every token seen, as the files' inputs
    are), the cache is cropped with a max in the graph, and the mask sizes come from the
    cached length and the count: the same keys, positions and mask as transformers' at
    every length."""
    import inspect
    import sys

    layer = getattr(sys.modules.get("transformers.cache_utils"), "DynamicSlidingWindowLayer", None)
    preprocess = getattr(sys.modules.get("transformers.masking_utils"),
                         "_preprocess_mask_arguments", None)
    if layer is None or preprocess is None:
        return []
    # transformers 5's forms only (4.x sized masks from a cache_position argument).
    sizes = list(inspect.signature(layer.get_mask_sizes).parameters)
    args = list(inspect.signature(preprocess).parameters)
    if sizes[1:] != ["query_length"] or args[:4] != ["config", "inputs_embeds", "attention_mask",
                                                     "past_key_values"]:
        return []
    masking = sys.modules["transformers.masking_utils"]
    return [(layer, "update", _sliding_update), (layer, "get_mask_sizes", _sliding_mask_sizes),
            (masking, "_preprocess_mask_arguments", _preprocess_mask_arguments(preprocess))]
