"""Rules pt2onnx gives torch.export for the duration of a capture.

1. Recurrent layers with a dynamic sequence length.

torch.export keeps `aten.lstm.input` / `gru.input` / `rnn_tanh.input` /
`rnn_relu.input` in the graph, but computes their output shapes by running
their Python decomposition on fake tensors, which loops over the time steps:
the sequence length is specialized to the example's, and a dynamic sequence
dim fails to export ("specialized it to be a constant"). The rules here give
the output shapes (and torch's strides) directly, so the sequence stays
symbolic; the ops themselves are converted in C++ (src/convert/rnn.cpp).
The decomposition is registered as the ops' Python Autograd and
CompositeImplicitAutograd kernels (what the tracer calls for the output
metadata), and FakeTensorMode reaches it below autograd: all are replaced, for
fake tensors only.

2. nn.TransformerEncoder / TransformerDecoder given a mask and no
`is_causal`: torch checks whether the mask is causal by comparing its values
(`_detect_is_causal_mask`), a data-dependent branch torch.export cannot
capture ("Could not guard on data-dependent expression"). `is_causal` is only
a hint (the mask is applied either way), so while capturing an undecided
mask counts as not causal: the graph applies the mask as given.

3. transformers' mixture-of-experts layers set to the "eager" experts
implementation (a Python loop over the experts that were hit, a
data-dependent loop torch.export cannot capture): while capturing they run
transformers' "grouped_mm" implementation, the same arithmetic over the
token rows sorted by expert, which converts to one product per expert over
its rows only (src/convert/moe.cpp). Pass the model: `capture_rules(model)`.

torch.export removes fake rules of the ops it preserves when it returns, so
the rules are installed around each capture: `pt2onnx.export` does it;
wrap your own `torch.export.export` call in `capture_rules()` to save a
`.pt2` with a dynamic sequence length for the `pt2onnx` command.
"""

import contextlib

import torch

_RNN_OPS = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def _bind(func, args, kwargs):
    names = [a.name for a in func._schema.arguments]
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return bound


def _rnn_fake(fake_mode, func, *args, **kwargs):
    a = _bind(func, args, kwargs)
    x, hx = a["input"], a["hx"]
    hs = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    dirs = 2 if a["bidirectional"] else 1
    # h0 is [layers * dirs, batch, out] (out = proj_size for a projected LSTM).
    out = hs[0].shape[2]
    # torch's batch_first output is the transpose of a sequence-major tensor.
    if a["batch_first"]:
        y = x.new_empty((x.shape[1], x.shape[0], dirs * out)).transpose(0, 1)
    else:
        y = x.new_empty((x.shape[0], x.shape[1], dirs * out))
    return (y, *[h.new_empty(h.shape) for h in hs])


def _decomposition_kernel(op, original):
    def kernel(*args, **kwargs):
        x = args[0] if args else kwargs.get("input")
        mode = getattr(x, "fake_mode", None)
        if mode is None or original is None:
            return original(*args, **kwargs) if original else NotImplemented
        return _rnn_fake(mode, op, *args, **kwargs)

    return kernel


def _ops():
    return [getattr(torch.ops.aten, name).input for name in _RNN_OPS]


def _detect_is_causal_mask(original):
    from torch._subclasses.fake_tensor import is_fake

    def detect(mask, is_causal=None, size=None):
        # Non-strict capture only (strict capture traces torch's function).
        if torch.compiler.is_dynamo_compiling():
            return original(mask, is_causal, size)
        if is_causal is None and mask is not None and is_fake(mask):
            return False
        return original(mask, is_causal, size)

    return detect


def _eager_experts_configs(model):
    """The configs of `model`'s transformers experts layers (classes wrapped by
    transformers' use_experts_implementation: they hold `_is_expert_parallel`
    and read config._experts_implementation at each call) set to "eager"."""
    if not isinstance(model, torch.nn.Module):
        return []
    found = {}
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if (hasattr(m, "_is_expert_parallel") and cfg is not None
                and getattr(cfg, "_experts_implementation", None) == "eager"):
            found[id(cfg)] = cfg
    return list(found.values())


@contextlib.contextmanager
def capture_rules(model=None):
    """Installs pt2onnx's capture rules for torch.export (recurrent layers with
    a dynamic sequence length, transformer masks, and, given the model,
    transformers' eager experts loops) for the duration of the block."""
    from torch._subclasses import fake_impls
    from torch.nn.modules import transformer

    keys = (torch._C.DispatchKey.Autograd, torch._C.DispatchKey.CompositeImplicitAutograd)
    added, saved = [], {}
    for op in _ops():
        if not fake_impls._is_op_registered_to_fake_rule(op):
            fake_impls.register_op_impl(op)(_rnn_fake)
            added.append(op)
        for key in keys:
            original = op.py_kernels.get(key)
            if original is not None:
                saved[(op, key)] = original
                op.py_kernels[key] = _decomposition_kernel(op, original)
        op._dispatch_cache.clear()
    detect = transformer._detect_is_causal_mask
    transformer._detect_is_causal_mask = _detect_is_causal_mask(detect)
    experts = _eager_experts_configs(model)
    for cfg in experts:
        cfg._experts_implementation = "grouped_mm"
    try:
        yield
    finally:
        for cfg in experts:
            cfg._experts_implementation = "eager"
        transformer._detect_is_causal_mask = detect
        for (op, key), original in saved.items():
            op.py_kernels[key] = original
        for op in _ops():
            op._dispatch_cache.clear()
        for op in added:
            if fake_impls.op_implementations_dict.get(op) is _rnn_fake:
                fake_impls._deregister_op_impl(op)
