"""export(): capture with torch.export, hand the serialized program and
zero-copy weight views to the C++ core. No conversion logic lives here."""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import operator
import os
import struct
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, Sequence

import torch

from ._core import ConversionError
from ._checkpoint_files import safetensors_files
from ._result import ExportResult, result_from_core
from . import (_autograd_symbolic, _compat, _core, _custom, _module_cache, _program_cache,
               _report, _torchscript, _training, _verify)
from ._capture_rules import capture_rules
from ._serialize import program_tree as _program
from ._serialize import tree_json
from ._training import TrainingMode

# export(target=...): what the written graph is made for (see export()).
TARGETS = ("standard", "onnxruntime")

# export(dtype=...): the float type the written model computes in, and the
# default verify_tolerance (atol, rtol) against PyTorch in float32 for each.
# float16 keeps 11 significant bits (relative step 9.8e-4), bfloat16 8 (7.8e-3):
# every rounded weight, input and intermediate adds errors of that order, so
# outputs of order 1 agree to ~1e-2 (float16) / ~5e-2 (bfloat16), not 1e-4.
DTYPES = {None: "float32", torch.float32: "float32", torch.float16: "float16",
          torch.bfloat16: "bfloat16", "float32": "float32", "float16": "float16",
          "bfloat16": "bfloat16"}
DTYPE_TOLERANCE = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}


def dtype_name(dtype: Any) -> str:
    """"float32" / "float16" / "bfloat16" for export(dtype=...); ValueError otherwise."""
    try:
        return DTYPES[dtype]
    except (KeyError, TypeError):
        raise ValueError("dtype must be torch.float32 (or None), torch.float16 or torch.bfloat16, "
                         f"not {dtype!r}") from None

DEFAULT_OPSET = 18

# torch.export (tracing, fake tensors, the serializer and our patch of its
# canonicalize) is not thread-safe: capture and serialization of concurrent
# exports run one at a time; the C++ stages after them run in parallel with
# the GIL released.
_CAPTURE_LOCK = threading.Lock()


class _Progress:
    """The progress line on stderr: "pt2onnx: <stage> [done / total]",
    rewritten in place, shown once the export has run for a second
    (PT2ONNX_PROGRESS_AFTER seconds) and only on a terminal; cleared at the
    end. verbose=False: never."""

    def __init__(self, verbose: bool | None, total_bytes: int = 0):
        stream = sys.stderr
        self.on = verbose is not False and hasattr(stream, "isatty") and stream.isatty()
        self.after = float(os.environ.get("PT2ONNX_PROGRESS_AFTER", "1.0"))
        self.start = time.perf_counter()
        self.last = 0.0
        self.shown = False
        self.total = total_bytes

    def __call__(self, stage: str, fraction: float = 0.0) -> None:
        if not self.on:
            return
        now = time.perf_counter()
        if now - self.start < self.after or (now - self.last < 0.1 and 0 < fraction < 1):
            return
        self.last = now
        line = f"pt2onnx: {stage}"
        if stage == "writing" and self.total:
            line += f" {fraction * self.total / 1e9:.2f} / {self.total / 1e9:.2f} GB"
        sys.stderr.write("\r\033[K" + line)
        sys.stderr.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _dim_name(d: Any) -> str | None:
    """The user's name for a dynamic dim spec (Dim('batch'), 'batch'), if any."""
    if isinstance(d, str):
        return d
    root = getattr(d, "root", None)  # derived dims (2 * Dim("t")) name their root
    if root is not None:
        return getattr(root, "__name__", None)
    name = getattr(d, "__name__", None)
    if name and not name.startswith("_") and name not in ("DYNAMIC", "AUTO", "STATIC"):
        return name
    return None


def _to_torch_spec(d: Any) -> Any:
    # torch.onnx accepts strings as dim names; torch.export wants Dim objects.
    return torch.export.Dim.DYNAMIC if isinstance(d, str) else d


def _check_axis(axis: Any, rank: int | None, where: str) -> int:
    """`axis` as a non-negative int, either sign convention; a ValueError
    naming `where` when it is out of range (it would give a static model).
    rank None (not a tensor): the type is checked only."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"{where}: axis {axis!r} is not an int")
    if rank is None:
        return axis
    if not -rank <= axis < rank:
        valid = f"valid: {-rank}..{rank - 1}" if rank else "a scalar has no axes"
        raise ValueError(f"{where}: axis {axis} is out of range for rank {rank} ({valid})")
    return axis + rank if axis < 0 else axis


def _nested_axes_spec(spec: Any, value: Any, where: str, key: str,
                      in_names: dict[str, dict[int, str]]) -> Any:
    """The torch.export form of one input's dynamic spec. Inside nested
    inputs (tuples, lists, dicts of tensors) the spec mirrors the input; the
    dim names of a tensor at path p of input `key` go to in_names under the
    ONNX input's name, `key.p` (the C++ core's naming of flattened inputs)."""
    if isinstance(value, (tuple, list)) and not isinstance(value, _CacheLayers) \
            and isinstance(spec, (tuple, list)) and len(spec) == len(value):
        return type(spec)(_nested_axes_spec(s, v, f"{where}[{i}]", f"{key}.{i}", in_names)
                          for i, (s, v) in enumerate(zip(spec, value)))
    if isinstance(value, Mapping) and isinstance(spec, Mapping) and set(spec) <= set(value):
        return {k: _nested_axes_spec(s, value[k], f"{where}[{k!r}]", f"{key}.{k}", in_names)
                for k, s in spec.items()}
    children = _pytree_children(value)
    if children is not None and isinstance(spec, (tuple, list)) and len(spec) == len(children):
        # A registered pytree class (a transformers cache): the spec lists its
        # children in flatten order, as torch.export reads it.
        return type(spec)(_nested_axes_spec(s, v, f"{where}[{i}]",
                                            f"{key}.{name}" if name else key, in_names)
                          for i, (s, (name, v)) in enumerate(zip(spec, children)))
    out, names = _axes_spec(spec, value, where)
    if names:
        in_names[key] = names
    return out


class _CacheLayers(list):
    """One child list of a DynamicCache (keys or values): element i is named
    `i.key` / `i.value`, as the C++ core names a DynamicCache's leaves."""

    def __init__(self, tensors, field_name):
        super().__init__(tensors)
        self.field_name = field_name


class _CachePart:
    """A DynamicCache inside an EncoderDecoderCache: its leaves are named
    `i.<part>.key` / `i.<part>.value` (part: decoder, encoder), as the C++
    core names them."""

    def __init__(self, cache, part):
        self.cache, self.part = cache, part


def _pytree_children(value: Any) -> list[tuple[str, Any]] | None:
    """(name, child) pairs of a value of a registered pytree class other than
    tuple / list / dict, named by its keys; None for anything else."""
    from torch.utils import _pytree

    if isinstance(value, _CacheLayers):
        return [(f"{i}.{value.field_name}", v) for i, v in enumerate(value)]
    if isinstance(value, _CachePart):
        kids = _pytree.SUPPORTED_NODES[type(value.cache)].flatten_fn(value.cache)[0]
        return [("", _CacheLayers(kids[0], f"{value.part}.key")),
                ("", _CacheLayers(kids[1], f"{value.part}.value"))]
    node = _pytree.SUPPORTED_NODES.get(type(value))
    if node is None or isinstance(value, (tuple, list, dict)):
        return None
    if node.flatten_with_keys_fn is not None:
        pairs = node.flatten_with_keys_fn(value)[0]
        names = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", i))))
                 for i, (k, _) in enumerate(pairs)]
        kids = [v for _, v in pairs]
    else:
        kids = list(node.flatten_fn(value)[0])
        names = [str(i) for i in range(len(kids))]
    if type(value).__name__ == "DynamicCache" and names == ["key_cache", "value_cache"]:
        return [("", _CacheLayers(kids[0], "key")), ("", _CacheLayers(kids[1], "value"))]
    if type(value).__name__ == "EncoderDecoderCache" and names == [
            "self_attention_cache", "cross_attention_cache"]:
        return [("", _CachePart(kids[0], "decoder")), ("", _CachePart(kids[1], "encoder"))]
    return list(zip(names, kids))


def _axes_spec(spec: Any, value: Any, where: str) -> tuple[Any, dict[int, str]]:
    """(torch.export form, {axis: name}) of one input's dynamic spec; axes are
    checked against `value` when it is a tensor."""
    names: dict[int, str] = {}
    rank = value.dim() if isinstance(value, torch.Tensor) else None
    if isinstance(spec, Mapping):
        out = {}
        for axis, d in spec.items():
            if rank is not None:
                axis = _check_axis(axis, rank, where)
            out[axis] = _to_torch_spec(d)
            n = _dim_name(d)
            if n and rank is not None:
                names[int(axis)] = n
        return out, names
    if isinstance(spec, (list, tuple)) and rank is not None:
        if len(spec) != rank:
            raise ValueError(f"{where}: gives {len(spec)} axes for an input of rank {rank}")
        out_l = []
        for axis, d in enumerate(spec):
            out_l.append(_to_torch_spec(d))
            n = _dim_name(d) if d is not None else None
            if n:
                names[axis] = n
        return type(spec)(out_l), names
    return spec, names


def _forward_params(model: torch.nn.Module) -> list[str]:
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


def _bound_inputs(model, args, kwargs) -> dict[str, Any]:
    """forward's parameter names -> the values given (empty if they do not bind)."""
    try:
        bound = inspect.signature(model.forward).bind(*args, **(kwargs or {}))
    except (TypeError, ValueError):
        return {}
    return dict(bound.arguments)


def _dynamic_shapes(model, args, kwargs, dynamic_shapes, dynamic_axes, input_names, output_names):
    """torch.export dynamic_shapes + dim_param names for inputs and outputs."""
    params = _forward_params(model)
    values = _bound_inputs(model, args, kwargs)
    in_names: dict[str, dict[int, str]] = {}
    out_names: dict[int, dict[int, str]] = {}
    if dynamic_shapes is not None and dynamic_axes is not None:
        raise ValueError("give dynamic_shapes or dynamic_axes, not both")
    if dynamic_shapes is not None:
        if isinstance(dynamic_shapes, Mapping):
            ds = {}
            for key, spec in dynamic_shapes.items():
                if params and key not in params:
                    raise ValueError(f"dynamic_shapes names {key!r}, which is not an argument of "
                                     f"forward (its arguments: {', '.join(params)})")
                ds[key] = _nested_axes_spec(spec, values.get(key), f"dynamic_shapes[{key!r}]",
                                            key, in_names)
            return ds, in_names, out_names
        if not isinstance(dynamic_shapes, (list, tuple)):
            raise TypeError("dynamic_shapes must be a dict keyed by forward's argument names or a "
                            f"tuple in their order, not {type(dynamic_shapes).__name__}")
        if params and len(dynamic_shapes) > len(values):
            raise ValueError(f"dynamic_shapes has {len(dynamic_shapes)} entries but forward is "
                             f"given {len(values)} inputs ({', '.join(values)})")
        ds_l = []
        for i, spec in enumerate(dynamic_shapes):
            p = params[i] if i < len(params) else None
            if p:
                ds_l.append(_nested_axes_spec(spec, values.get(p), f"dynamic_shapes[{i}]", p,
                                              in_names))
            else:
                ds_l.append(_axes_spec(spec, None, f"dynamic_shapes[{i}]")[0])
        return type(dynamic_shapes)(ds_l), in_names, out_names
    if dynamic_axes is None:
        return None, in_names, out_names
    # torch.onnx's dynamic_axes: keys are input / output names, values a list of
    # axes or {axis: name}. Output axes are checked by the core (it knows the
    # output ranks).
    def axes_of(key, v, value=None):
        where = f"dynamic_axes[{key!r}]"
        if isinstance(v, Mapping):
            pairs = [(a, str(n)) for a, n in v.items()]
        elif isinstance(v, (list, tuple)):
            pairs = [(a, f"{key}_dynamic_axes_{k + 1}") for k, a in enumerate(v)]
        else:
            raise TypeError(f"{where} must be a list of axes or a dict axis -> name, "
                            f"not {type(v).__name__}")
        out = {}
        rank = value.dim() if isinstance(value, torch.Tensor) else None
        for a, n in pairs:
            out[_check_axis(a, rank, where)] = n
        return out

    # input_names name the flattened tensor inputs in order, as in torch.onnx
    # (LSTM's (input, (h0, c0)) -> input, h0, c0); dynamic_axes may use those
    # names or pt2onnx's own (the argument name, `hx.0` inside structures).
    user_in = list(input_names) if input_names else []
    leaf = [0]
    n_pos = len(args)
    ds: dict[str, Any] = {}
    known = set()

    def nested(value, name):
        if isinstance(value, torch.Tensor):
            i = leaf[0]
            leaf[0] += 1
            alias = user_in[i] if i < len(user_in) else name
            key = alias if alias in dynamic_axes else (name if name in dynamic_axes else None)
            if key is None:
                return None
            known.add(key)
            in_names[name] = axes_of(key, dynamic_axes[key], value)
            return {a: torch.export.Dim.DYNAMIC for a in in_names[name]}
        if isinstance(value, (tuple, list)):
            # A structure of Nones where nothing is dynamic: torch.export
            # wants the input's structure either way.
            kids = [nested(v, f"{name}.{i}") for i, v in enumerate(value)]
            return tuple(kids) if isinstance(value, tuple) else kids
        if isinstance(value, Mapping):
            return {k: nested(v, f"{name}.{k}") for k, v in value.items()}
        return None

    for i, p in enumerate(params):
        if i >= n_pos and p not in (kwargs or {}):
            continue
        ds[p] = nested(values.get(p), p)
    for j, o in enumerate(output_names or []):
        if o in dynamic_axes:
            known.add(o)
            out_names[j] = axes_of(o, dynamic_axes[o])
    unknown = set(dynamic_axes) - known
    if unknown:
        raise ValueError(f"dynamic_axes names no input or output: {sorted(unknown)}")
    return ds, in_names, out_names


def _as_auto(spec: Any) -> Any:
    """Every dynamic dim of a dynamic_shapes structure (Dim.DYNAMIC, a named
    Dim, a derived one) as Dim.AUTO (fix_dynamic_shapes=True)."""
    from torch.export.dynamic_shapes import _DimHint

    if isinstance(spec, torch.export.Dim) or (isinstance(spec, _DimHint) and
                                              spec is not torch.export.Dim.STATIC):
        return torch.export.Dim.AUTO
    if isinstance(spec, Mapping):
        return {k: _as_auto(v) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(_as_auto(v) for v in spec)
    return spec


def _auto_fixed(ep: Any) -> str:
    """What torch.export made of the dims fix_dynamic_shapes=True left to it:
    each user input's shape and the ranges of its symbols."""
    shapes = []
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in ep.graph_signature.user_inputs:
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and any(not isinstance(d, int) for d in val.shape):
            shapes.append(f"{node.name}: [{', '.join(str(d) for d in val.shape)}]")
    ranges = ", ".join(f"{k} in [{v.lower}, {v.upper}]" for k, v in ep.range_constraints.items())
    return "; ".join(shapes) + (f" ({ranges})" if ranges else "")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_dims(spec: Any, value: Any) -> Any:
    """`spec` (the user's dynamic spec of one input, or None) with Dim.DYNAMIC
    at every int inside `value`: torch.export then keeps the int a SymInt
    input instead of inlining its example value."""
    if _is_int(value):
        return torch.export.Dim.DYNAMIC if spec is None else spec
    if isinstance(value, torch.Tensor):
        return spec
    if isinstance(value, (tuple, list)) and (spec is None or isinstance(spec, (tuple, list))):
        if spec is not None and len(spec) != len(value):
            return spec
        out = [_int_dims(None if spec is None else s, v)
               for s, v in zip(spec if spec is not None else [None] * len(value), value)]
        return out if isinstance(value, list) else tuple(out)
    if isinstance(value, Mapping) and (spec is None or isinstance(spec, Mapping)):
        return {k: _int_dims(None if spec is None else spec.get(k), v) for k, v in value.items()}
    return spec


def _has_leaf(value: Any, pred) -> bool:
    import torch.utils._pytree as pytree

    return any(pred(v) for v in pytree.tree_leaves(value))


def _scalar_inputs(model, args, kwargs, ds, bools=True):
    """Python scalars in the inputs become ONNX inputs: ints stay dynamic
    (Dim.DYNAMIC: a 0-d int64 input the graph reads wherever the int is
    used), floats (and, with `bools`, bools) are passed as 0-d float32 (bool)
    tensors and turned back into Python values (.item(): a SymFloat /
    SymBool) by a wrapper of forward. Without `bools` they are inlined by
    torch.export (the retry when the model branches on them in Python, which
    cannot become ONNX data): a warning says so. Returns (dynamic_shapes,
    args, kwargs, the pytree paths of the inputs passed as tensors)."""
    import torch.utils._pytree as pytree

    params = _forward_params(model)

    def key(k):
        for attr in ("idx", "key", "name"):
            if hasattr(k, attr):
                return str(getattr(k, attr))
        return str(k)

    for path, v in pytree.tree_flatten_with_path((args, kwargs or {}))[0]:
        if isinstance(v, bool) and not bools:
            # Named as the ONNX input would be: forward's argument, then the path.
            i = path[1].idx if path[0].idx == 0 else None
            root = (params[i] if i < len(params) else f"input_{i}") if i is not None \
                else key(path[1])
            where = ".".join([root] + [key(k) for k in path[2:]])
            warnings.warn(f"pt2onnx: input '{where}' is a bool: it is exported as the constant "
                          f"{v}, not as an input: the model's Python code branches on it, which "
                          "torch.export cannot turn into data", stacklevel=4)
    values = _bound_inputs(model, args, kwargs)
    if values and _has_leaf(values, _is_int):
        if ds is None:
            ds = {p: _int_dims(None, v) for p, v in values.items()}
        elif isinstance(ds, Mapping):
            ds = {p: _int_dims(ds.get(p), v) for p, v in values.items()}
        elif isinstance(ds, (list, tuple)):
            vals = list(values.values())
            ds = type(ds)(_int_dims(s, vals[i]) if i < len(vals) else s for i, s in enumerate(ds))
    floats = []

    def wrap(path, v):
        if isinstance(v, bool):
            if not bools:
                return v
            floats.append(path)
            return torch.tensor(v)
        if isinstance(v, float):
            floats.append(path)
            return torch.tensor(v, dtype=torch.float32)
        return v

    args, kwargs = pytree.tree_map_with_path(wrap, (args, kwargs or {}))
    return ds, args, kwargs, floats


@contextlib.contextmanager
def _float_inputs_as_items(model, float_paths):
    """While capturing: forward gets back Python numbers (.item() of the 0-d
    tensors the float inputs were passed as). The wrapper keeps forward's
    signature, so argument names do not change."""
    if not float_paths:
        yield
        return
    import torch.utils._pytree as pytree

    wanted = set(float_paths)
    original = model.forward
    had_attr = "forward" in model.__dict__

    @functools.wraps(original)
    def forward(*a, **k):
        def unwrap(path, v):
            return v.item() if path in wanted and isinstance(v, torch.Tensor) else v

        a, k = pytree.tree_map_with_path(unwrap, (a, k))
        return original(*a, **k)

    model.forward = forward
    try:
        yield
    finally:
        if had_attr:
            model.forward = original
        else:
            del model.forward


def _capture(model, args, kwargs, dynamic_shapes, dynamic_axes, input_names, output_names,
             strict=False, fix_dynamic_shapes=False):
    """torch.export.export of `model` as export() captures it (dynamic shapes,
    scalar inputs), plus the dim names of inputs and outputs. Callers hold
    _CAPTURE_LOCK; the tests save this capture to compare with the .pt2 path."""
    ds, in_dim_names, out_dim_names = _dynamic_shapes(
        model, args, kwargs, dynamic_shapes, dynamic_axes, input_names, output_names
    )
    # Widened by the dims the user asked for (a Dim.AUTO of theirs is not widened; one made
    # below from their Dim.DYNAMIC is).
    args, kwargs = _widened_examples(model, args, kwargs, ds)
    if fix_dynamic_shapes:
        # torch.export derives the constraints it would refuse the given dims for
        # (a dim that must be a multiple of 20) itself; the warning below says which.
        ds = _as_auto(ds)
    sds, sargs, skwargs, float_paths = _scalar_inputs(model, args, kwargs, ds)
    out = _capture_with(model, args, kwargs, ds, sds, sargs, skwargs, float_paths,
                        in_dim_names, out_dim_names, strict)
    if fix_dynamic_shapes:
        warnings.warn("pt2onnx: fix_dynamic_shapes=True: torch.export derived the dynamic dims' "
                      f"constraints itself: {_auto_fixed(out[0])}", stacklevel=3)
    else:
        narrowed = _narrowed_ranges(out[0])
        if narrowed:
            warnings.warn("pt2onnx: torch.export narrowed dynamic dims while capturing (the "
                          "model's code compares them with constants): the file is right for "
                          f"these sizes only: {narrowed}", stacklevel=3)
    return out


def _narrowed_ranges(ep: Any) -> str:
    """The input dims torch.export gave an upper bound while capturing (a branch on a window,
    a top-k, a capacity: the file holds the branch taken), named by the first input dim that
    has the symbol. Lower bounds are left out: a dim that is a sum of two (a mask as long as
    the cache and the new tokens) is at least 4 by torch's own rule that dims are >= 2."""
    where: dict[str, str] = {}
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in ep.graph_signature.user_inputs:
            continue
        val = node.meta.get("val")
        for axis, d in enumerate(getattr(val, "shape", ())):
            expr = getattr(getattr(d, "node", None), "expr", None)
            if expr is not None and getattr(expr, "is_Symbol", False):
                where.setdefault(str(expr), f"{node.name} dim {axis}")
    out = []
    for sym, r in ep.range_constraints.items():
        unbounded = str(r.upper) in ("int_oo", "oo")
        if str(sym) in where and not unbounded:
            out.append(f"{where[str(sym)]} at most {r.upper}")
    return ", ".join(out)


def _widened_examples(model, args, kwargs, ds):
    """Example inputs whose dims asked to be dynamic have size 0 or 1 (torch.onnx
    scripts export with batch 1 and dynamic_axes) grown to size 2 along those
    dims, for capture only: torch.export specializes a dim of example size 0 or
    1 and then refuses the dynamic request. Not a Dim.AUTO dim: torch
    specializes those as it documents, and a single-channel image must keep
    its 1. (torch's backed_size_oblivious avoids the refusal but lets sizes
    computed from such a dim bake in the example's 1: a ViT then reshapes to
    [197, 3072] at every batch.) Returns (args, kwargs), the same objects when
    nothing grows."""
    def widens(d):
        # Dim.AUTO asks torch to specialize what cannot be dynamic, a size-1 dim included
        # (a single-channel image): grown, its 1 would become a 2 the model refuses.
        return d is not None and d is not torch.export.Dim.AUTO

    def grow(value, spec):
        if isinstance(value, torch.Tensor):
            axes = [a for a, d in (spec.items() if isinstance(spec, Mapping) else ())
                    if isinstance(a, int) and widens(d)]
            if isinstance(spec, (list, tuple)):
                axes = [i for i, d in enumerate(spec) if widens(d)]
            for a in axes:
                if 0 <= a < value.dim() and value.shape[a] <= 1:
                    shape = list(value.shape)
                    shape[a] = 2
                    value = (value.expand(shape) if value.shape[a] == 1 else
                             torch.zeros(shape, dtype=value.dtype)).clone()
            return value
        if isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)):
            out = [grow(v, sp) for v, sp in zip(value, spec)] + list(value[len(spec):])
            return type(value)(out) if isinstance(value, tuple) else out
        if isinstance(value, Mapping) and isinstance(spec, Mapping):
            return {k: grow(v, spec.get(k)) for k, v in value.items()}
        return value

    if ds is None:
        return args, kwargs
    if isinstance(ds, Mapping):
        params = _forward_params(model)
        new_args = tuple(grow(a, ds.get(params[i])) if i < len(params) else a
                         for i, a in enumerate(args))
        new_kwargs = {k: grow(v, ds.get(k)) for k, v in (kwargs or {}).items()}
    else:
        new_args = tuple(grow(a, sp) for a, sp in zip(args, ds)) + tuple(args[len(ds):])
        new_kwargs = kwargs
    same = all(x is y for x, y in zip(new_args, args)) and all(
        new_kwargs[k] is v for k, v in (kwargs or {}).items())
    return (args, kwargs) if same else (new_args, new_kwargs if kwargs is not None else None)


def _capture_with(model, args, kwargs, ds, sds, sargs, skwargs, float_paths, in_dim_names,
                  out_dim_names, strict):
    if sds is ds and not float_paths:
        with capture_rules(model):
            ep = torch.export.export(model, args, kwargs=kwargs, dynamic_shapes=ds, strict=strict)
        return ep, in_dim_names, out_dim_names

    def attempt(sds, sargs, skwargs, float_paths):
        with _float_inputs_as_items(model, float_paths), capture_rules(model):
            return torch.export.export(model, sargs, kwargs=skwargs, dynamic_shapes=sds,
                                       strict=strict)

    has_bool = _has_leaf((args, kwargs or {}), lambda v: isinstance(v, bool))
    try:
        try:
            return attempt(sds, sargs, skwargs, float_paths), in_dim_names, out_dim_names
        except Exception:  # noqa: BLE001 - a Python branch on a bool: bools become constants
            if not has_bool:
                raise
            # The bools as constants (warned about by _scalar_inputs), ints and floats still inputs.
            sds, sargs, skwargs, float_paths = _scalar_inputs(model, args, kwargs, ds,
                                                              bools=False)
            if sds is ds and not float_paths:
                with capture_rules(model):
                    ep = torch.export.export(model, args, kwargs=kwargs, dynamic_shapes=ds,
                                             strict=strict)
                return ep, in_dim_names, out_dim_names
            return attempt(sds, sargs, skwargs, float_paths), in_dim_names, out_dim_names
    except Exception as e:  # noqa: BLE001 - retried as plain torch.export; its error is raised
        # The model's Python code depends on a scalar's value (a loop bound,
        # an `if`): torch.export's own behaviour, the scalars as constants.
        why = (str(e).strip().splitlines() or [type(e).__name__])[0]
        warnings.warn("pt2onnx: the int / float inputs are exported as constants (their example "
                      f"values): torch.export could not keep them inputs ({why}); usually the "
                      "model's Python code depends on their values (a loop bound, an `if`)",
                      stacklevel=4)
        with capture_rules(model):
            ep = torch.export.export(model, args, kwargs=kwargs, dynamic_shapes=ds,
                                     strict=strict)
        return ep, in_dim_names, out_dim_names


def _quantize_spec(q: Any) -> str:
    """export(quantize=) as the C++ core's spec: "int4" / "int8", then
    ",key=value" settings (checked there)."""
    if q is None or q == "":
        return ""
    if isinstance(q, str):
        return q
    if isinstance(q, Mapping):
        d = dict(q)
        kind = d.pop("dtype", None)
        if kind not in ("int4", "int8"):
            raise ValueError(f"quantize={q!r}: needs 'dtype': 'int4' or 'int8'")
        items = [kind] + [f"{k}={int(v)}" for k, v in d.items()]
        return ",".join(items)
    raise TypeError(f"quantize must be 'int4', 'int8', a dict or None, not {q!r}")


def _is_fake(t: torch.Tensor) -> bool:
    """A tensor without data: on the meta device, or a FakeTensor."""
    from torch._subclasses.fake_tensor import is_fake

    return t.is_meta or is_fake(t)


def _tensor_view(name: str, t: torch.Tensor, keep: list):
    """The C++ core's view of one tensor (address 0: a fake tensor, its data
    to come from weights=)."""
    t = t.detach()
    if _is_fake(t):
        return (name, 0, str(t.dtype), list(t.shape), [], 0)
    if t.device.type != "cpu":
        t = t.cpu()  # the only copy: weights living on an accelerator
    storage = t.untyped_storage()
    avail = storage.nbytes() - t.storage_offset() * t.element_size()
    keep.append(t)
    return (name, t.data_ptr(), str(t.dtype), list(t.shape), list(t.stride()), max(avail, 0))


def _weight_views(ep: torch.export.ExportedProgram):
    """(fqn, address, dtype, sizes, strides, readable bytes) for every weight,
    plus the tensors that must stay alive while the C++ core reads them.
    Fake weights (meta device) get address 0."""
    views, keep = [], []
    seen = set()
    for spec in ep.graph_signature.input_specs:
        fqn = spec.target
        if fqn is None or fqn in seen:
            continue
        seen.add(fqn)
        if fqn in ep.state_dict:
            t = ep.state_dict[fqn]
        elif fqn in ep.constants:
            t = ep.constants[fqn]
        else:
            continue
        if not isinstance(t, torch.Tensor):
            continue  # custom objects: the converter reports them
        _add_views(views, fqn, t, keep)
    return views, keep


def _add_views(views: list, fqn: str, t: torch.Tensor, keep: list):
    """A plain tensor's view; for a tensor subclass that torch.export
    traces through (torchao's quantized weights: the graph reads them with
    export.access_subclass_inner_tensor), its inner tensors' as `fqn.attr`."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if is_traceable_wrapper_subclass(t):
        attrs, _ = t.__tensor_flatten__()
        for a in attrs:
            inner = getattr(t, a)
            if isinstance(inner, torch.Tensor):
                _add_views(views, f"{fqn}.{a}", inner, keep)
        return
    views.append(_tensor_view(fqn, t, keep))


@dataclass
class _WeightSource:
    """export(weights=...) as the C++ core takes it (see WeightSource in
    include/pt2onnx/pt2onnx.h): safetensors files, in-memory tensors, and the
    other names of tied weights."""

    files: list[str] = field(default_factory=list)
    tensors: list[tuple] = field(default_factory=list)
    aliases: dict[str, list[str]] = field(default_factory=dict)
    allow_unused: bool = False
    convert_floats: bool = False
    keep: list = field(default_factory=list)

    def names(self) -> set[str] | None:
        """The names of the tensors this source holds (the safetensors files'
        headers read, not their data); None when a file cannot be read (the
        C++ core reports it)."""
        out = {t[0] for t in self.tensors}
        for path in self.files:
            try:
                with open(path, "rb") as fh:
                    (size,) = struct.unpack("<Q", fh.read(8))
                    out.update(k for k in json.loads(fh.read(size)) if k != "__metadata__")
            except (OSError, ValueError, struct.error):
                return None
        return out


def _weight_source(weights: Any, model: Any) -> _WeightSource | None:
    """export(weights=...): a state dict, a .safetensors file or list of
    them, or a checkpoint directory."""
    if weights is None:
        return None
    src = _WeightSource()
    if isinstance(weights, _WeightSource):  # pt2onnx.hf's
        src = weights
    elif isinstance(weights, Mapping):
        for name, t in weights.items():
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"weights[{name!r}] is a {type(t).__name__}, not a tensor")
            if _is_fake(t):
                raise ValueError(f"weights[{name!r}] is on the meta device: it has no data")
            src.tensors.append(_tensor_view(str(name), t, src.keep))
    elif isinstance(weights, (str, os.PathLike)):
        src.files = safetensors_files(weights)
    elif isinstance(weights, (list, tuple)) and weights and all(
            isinstance(w, (str, os.PathLike)) for w in weights):
        src.files = [os.fspath(w) for w in weights]
    else:
        raise TypeError("weights must be a state dict, a .safetensors file, a list of them or a "
                        f"checkpoint directory, not {type(weights).__name__}")
    if isinstance(model, torch.nn.Module):
        # Tied weights: one object under several names; a checkpoint keeps one.
        names: dict[int, list[str]] = {}
        for n, p in model.named_parameters(remove_duplicate=False):
            names.setdefault(id(p), []).append(n)
        for n, b in model.named_buffers(remove_duplicate=False):
            names.setdefault(id(b), []).append(n)
        for group in names.values():
            if len(group) > 1:
                for n in group:
                    src.aliases.setdefault(n, []).extend(m for m in group if m != n)
    return src


@contextlib.contextmanager
def _meta_as_fake(model):
    """Parameters and buffers on the meta device (a model built under
    `torch.device("meta")` or accelerate's init_empty_weights) stand in as
    fake CPU tensors while torch.export captures, as init_empty_weights()
    makes them: meta tensors meeting CPU inputs fail inside torch ("Expected
    all tensors to be on the same device"). The model is restored afterwards;
    tied weights stay tied. Yields the names of the meta buffers, whose data
    must come from weights= like the parameters'."""
    if not isinstance(model, torch.nn.Module):
        yield []
        return
    swapped, fakes, buffers, mode = [], {}, [], None
    for prefix, module in model.named_modules(remove_duplicate=False):
        for table, is_param in ((module._parameters, True), (module._buffers, False)):
            for name, t in list(table.items()):
                if t is None or not t.is_meta:
                    continue
                fake = fakes.get(id(t))
                if fake is None:
                    if mode is None:
                        from torch._subclasses.fake_tensor import FakeTensorMode

                        mode = FakeTensorMode(allow_non_fake_inputs=True)
                    with mode:
                        fake = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
                    if is_param:
                        fake = torch.nn.Parameter(fake, requires_grad=t.requires_grad)
                    fakes[id(t)] = fake
                swapped.append((table, name, t))
                table[name] = fake
                if not is_param:
                    buffers.append(f"{prefix}.{name}" if prefix else name)
    try:
        yield buffers
    finally:
        for table, name, t in reversed(swapped):
            table[name] = t


def _check_meta_buffers(meta_buffers, fake, source):
    """A buffer built on the meta device has no data, and a checkpoint rarely
    holds the buffers a model computes at init (a rotary inv_freq, registered
    non-persistent): one error naming those weights= does not hold, and the
    fix, before the C++ core would report a missing weight."""
    if not meta_buffers or source is None:
        return
    fake = set(fake)
    held = source.names()
    if held is None:  # names not known before conversion
        return
    missing = [b for b in meta_buffers if b in fake and b not in held
               and not any(a in held for a in source.aliases.get(b, []))]
    if missing:
        raise ValueError(
            f"buffer '{missing[0]}' is on the meta device and weights= does not hold it"
            f"{f' ({len(missing)} such buffers: ' + ', '.join(missing[:5]) + ')' if len(missing) > 1 else ''}"
            ": it is computed when the model is built (a rotary inv_freq, say), so no checkpoint "
            "has it. Build the model under pt2onnx.init_empty_weights() instead of the meta "
            "device (parameters without data, buffers computed as usual), or give the buffer "
            "its values before exporting")


@contextlib.contextmanager
def init_empty_weights():
    """Build models without weight data, in a `with` block.

    Inside the block, every parameter a module registers becomes a fake tensor (torch's
    FakeTensor: dtype, shape and device, no storage) as it is registered, so initializing
    it costs nothing, while buffers are made as usual (the rotary inv_freq and other values
    a model computes at init keep their data). Export such a model with `weights=` naming
    where its parameters are. A model built under `torch.device("meta")` (as accelerate's
    init_empty_weights and transformers build them) exports the same way, but its buffers
    are on the meta device too: those a model computes at init (a rotary inv_freq), which
    no checkpoint holds, then have no data, and export names them.

    The block replaces `torch.nn.Module.register_parameter` (process-wide) until it exits.

    Runnable examples:
    [models bigger than memory](../guides/transformers.md#models-bigger-than-memory-weights-read-in-place).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    register = torch.nn.Module.register_parameter

    def register_fake(module, name, param):
        register(module, name, param)
        if param is not None and not _is_fake(param):
            with mode:
                fake = torch.empty_strided(param.shape, param.stride(), dtype=param.dtype,
                                           device=param.device)
            fake = torch.nn.Parameter(fake, requires_grad=param.requires_grad)
            # transformers' init functions skip what it marks loaded: no
            # initialization of fake data (some read values, e.g. ViT's).
            fake._is_hf_initialized = True
            module._parameters[name] = fake

    torch.nn.Module.register_parameter = register_fake
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def _weight_names(ep, model, input_names):
    """torch.onnx's input_names past the model's own inputs name its weights,
    in the order of the model's state_dict (as torch.onnx's TorchScript
    exporter lists them after the inputs): (the names of the inputs, {weight:
    name})."""
    if not input_names:
        return input_names, {}
    from torch.export.graph_signature import InputKind, SymIntArgument, TensorArgument

    specs = ep.graph_signature.input_specs
    n_user = sum(1 for sp in specs if sp.kind == InputKind.USER_INPUT
                 and isinstance(sp.arg, (TensorArgument, SymIntArgument)))
    if len(input_names) <= n_user:
        return input_names, {}
    weights = [sp.target for sp in specs if sp.kind in (InputKind.PARAMETER, InputKind.BUFFER)]
    if isinstance(model, torch.nn.Module):
        order = {k: i for i, k in enumerate(model.state_dict(keep_vars=True))}
        weights.sort(key=lambda t: order.get(t, len(order)))
    extra = list(input_names[n_user:])
    if len(extra) > len(weights):
        raise ValueError(f"input_names has {len(input_names)} names; the model has {n_user} "
                         f"inputs and {len(weights)} weights (names past the inputs name the "
                         "weights, as in torch.onnx)")
    return list(input_names[:n_user]), dict(zip(weights, extra))


def _trace(model, args, kwargs, training):
    """capture="trace" (torch.onnx's TorchScript exporter's capture, and
    dynamo=False): the nn.Module recorded by torch.jit.trace, read as a traced
    ScriptModule; its control flow is fixed to the example inputs'."""
    if kwargs:
        raise ValueError("capture='trace' takes positional inputs only (torch.jit.trace); "
                         f"got kwargs {sorted(kwargs)}")
    warnings.warn("pt2onnx: capture='trace' records the model's run on the example inputs "
                  "(torch.jit.trace): Python control flow (ifs, loop counts) is fixed to what "
                  "those inputs took; the default capture (torch.export) keeps it or fails "
                  "saying where", stacklevel=3)
    # Not under no_grad: with gradients off, modules take fast paths of fused
    # kernels (MultiheadAttention's _native_multi_head_attention) that the
    # trace would record; torch.onnx's exporter traces with them on too.
    with _training.module_mode(model, training), _compat.exporting():
        return torch.jit.trace(model, args, check_trace=False)


def _check_arguments(f, kwargs, dynamic_axes, opset, input_names, output_names, external_data,
                     optimize, strict) -> int:
    """Type and range checks of export()'s arguments, each error naming its
    argument (the core's bindings would otherwise print a signature dump).
    Returns the opset to use."""
    def kind(v):
        return type(v).__name__

    if f is not None and not isinstance(f, (str, os.PathLike)):
        raise TypeError(f"f must be a file path (str or os.PathLike), a binary file object or None, "
                        f"not {kind(f)}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(f"kwargs must be a dict of keyword arguments, not {kind(kwargs)}")
    if dynamic_axes is not None and not isinstance(dynamic_axes, Mapping):
        raise TypeError(f"dynamic_axes must be a dict keyed by input/output names, "
                        f"not {kind(dynamic_axes)}")
    for arg, names in (("input_names", input_names), ("output_names", output_names)):
        if names is None:
            continue
        if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
            raise TypeError(f"{arg} must be a list of str, not {kind(names)}")
        for i, n in enumerate(names):
            if not isinstance(n, str) or not n:
                raise TypeError(f"{arg}[{i}] must be a non-empty str, not {n!r}")
        dup = sorted({n for n in names if list(names).count(n) > 1})
        if dup:
            raise ValueError(f"{arg} repeats {dup}")
    if external_data is not None and not isinstance(external_data, bool) and not (
            isinstance(external_data, str) and _core.external_data_shards(external_data)):
        raise TypeError("external_data must be True, False, None or 'shards:SIZE' (e.g. "
                        f"'shards:2GB'), not {external_data!r}")
    for arg, v in (("optimize", optimize), ("strict", strict)):
        if not isinstance(v, bool):
            raise TypeError(f"{arg} must be True or False, not {v!r}")
    if opset is None:
        return DEFAULT_OPSET
    if isinstance(opset, bool):
        raise TypeError(f"opset must be an int, not {opset!r}")
    try:
        value = operator.index(opset)  # ints and numpy ints; not 18.7 or "18"
    except TypeError:
        raise TypeError(f"opset must be an int in {_core.MIN_OPSET}..{_core.MAX_OPSET}, "
                        f"not {opset!r} ({kind(opset)})") from None
    if not (_core.MIN_OPSET <= value <= _core.MAX_OPSET):
        raise ValueError(f"opset must be in {_core.MIN_OPSET}..{_core.MAX_OPSET}, got {value}")
    return value


def _module_function_classes(arg: Any) -> tuple[bool, list[str]]:
    """export_modules_as_functions as (every submodule?, qualified class
    names as torch.export's nn_module_stack spells them)."""
    if isinstance(arg, bool):
        return arg, []
    if isinstance(arg, (str, bytes, type)) or not isinstance(arg, Collection):
        raise TypeError("export_modules_as_functions must be True, False or a set of nn.Module "
                        f"classes, not {arg!r}")
    names = []
    for c in arg:
        if not (isinstance(c, type) and issubclass(c, torch.nn.Module)):
            raise TypeError("export_modules_as_functions must hold nn.Module classes; got "
                            f"{c!r} ({type(c).__name__})")
        names.append(torch.typename(c))
    return False, sorted(set(names))


def export(
    model: torch.nn.Module | torch.export.ExportedProgram,
    args: Any = (),
    f: str | os.PathLike | None = None,
    *,
    kwargs: dict[str, Any] | None = None,
    dynamic_shapes: Any = None,
    dynamic_axes: Mapping[str, Any] | None = None,
    opset: int | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    external_data: bool | str | None = True,
    optimize: bool = True,
    strict: bool = False,
    fallback: str | None = None,
    custom_translation_table: Mapping[Any, Any] | None = None,
    custom_opsets: Mapping[str, int] | None = None,
    training: TrainingMode = TrainingMode.EVAL,
    verify: bool = False,
    verify_tolerance: tuple[float, float] | None = None,
    report: str | os.PathLike | None = None,
    export_modules_as_functions: bool | Collection[type[torch.nn.Module]] = False,
    inline: bool = False,
    target: str = "standard",
    dtype: torch.dtype | str | None = None,
    weights: Any = None,
    verbose: bool | None = None,
    quantize: str | Mapping[str, Any] | None = None,
    capture: str = "export",
    fix_dynamic_shapes: bool = False,
    opset_version: int | None = None,
    export_params: bool = True,
    keep_initializers_as_inputs: bool = False,
    do_constant_folding: bool = True,
    operator_export_type: Any = None,
    dynamo: bool = True,
    autograd_inlining: bool = True,
    profile: bool = False,
    dump_exported_program: bool = False,
    artifacts_dir: str | os.PathLike = ".",
    example_outputs: Any = None,
    use_external_data_format: bool | None = None,
    cache_dir: str | os.PathLike | None = None,
    _state: dict[str, Any] | None = None,
    _cache_read: str = "auto",
) -> ExportResult:
    """Export a PyTorch model to ONNX.

    The model is captured with torch.export (or read from its TorchScript graph); the
    captured program is converted, optimized and written by the C++ core. The arguments
    follow `torch.onnx.export`, under its names and with its meanings, so a script written
    for it runs with `pt2onnx.export` in its place; the arguments that exist only for that
    compatibility come last below. `torch.onnx.is_in_onnx_export()` (and
    `pt2onnx.is_in_onnx_export()`) is True while the model is captured.

    Args:
        model: The model: an `nn.Module`, a `torch.export.ExportedProgram` (converted as it
            was captured), or a TorchScript model (`torch.jit.script` / `trace` / `load`, a
            `ScriptModule` subclass, a `ScriptFunction`) or an `nn.Module` holding scripted
            parts. A TorchScript graph is read into ATen calls (no new trace), its loops and
            ifs on tensor values kept as ONNX `Loop` / `If`.
        args: The example positional inputs of `forward`: a tuple, a list (taken as a
            tuple) or a single input. Python ints among the inputs become int64
            graph inputs (dynamic), floats and bools 0-d float32 / bool inputs; where the
            model's Python code depends on their values (a loop bound, an `if`), they are
            exported as constants instead, with a warning.
        f: Where the model goes: a file path (str or `os.PathLike`); a binary file object
            (opened with "wb", or `io.BytesIO`), into which the model is written whole,
            weights inline, so at most 2 GiB; or None: no file, the model is returned in
            memory as `result.model_bytes`, weights inline.
        kwargs: The example keyword inputs of `forward`, a dict.
        dynamic_shapes: The dynamic dims in torch.export's form: a dict keyed by
            `forward`'s argument names, or a tuple in their order. Each input's entry is
            `{axis: dim}` or a list with one dim per axis (None: static), nested like the
            input for tuples, lists and dicts of tensors. A dim is a `torch.export.Dim`,
            `Dim.DYNAMIC` / `Dim.AUTO`, or a string naming it (`{"x": {0: "batch"}}`); the
            names given become the ONNX dims' names. Negative axes count from the end. An
            example input of size 0 or 1 along a dynamic dim is widened to 2 for capture,
            which would otherwise fix the dim. Not together with `dynamic_axes`, and not
            with an ExportedProgram, whose dims were fixed at capture.
        dynamic_axes: The dynamic dims in torch.onnx's form: `{name: {axis: dim_name}}` or
            `{name: [axes]}` (then named `<name>_dynamic_axes_1`, ...). A name is an input's,
            as `input_names` gives it or `forward`'s argument name (`hx.0` inside a
            structure), or an output's from `output_names`. Not together with
            `dynamic_shapes`. With an ExportedProgram only `{input: {axis: name}}` is taken:
            names for the dims the program already has dynamic.
        opset: The ONNX opset to write, from `pt2onnx.MIN_OPSET` to `pt2onnx.MAX_OPSET`;
            None: `pt2onnx.DEFAULT_OPSET`.
        input_names: Names for the graph inputs, in the order of the flattened inputs, as in
            torch.onnx (LSTM's `(input, (h0, c0))` gives three). Names past the model's
            inputs name its weights too, in `state_dict` order (torch.onnx's AlexNet
            example).
        output_names: Names for the graph outputs, in order.
        external_data: Where the weights go. True (default, as torch.onnx.export): weights
            of 1 KiB and more go to `<f>.data` beside `f` (`<f>.1.data` while `<f>.data`
            belongs to the model being replaced). False: one file. None: automatic, external
            data above about 1.8 GB. `"shards:2GB"`: the weights are split into data files of
            at most that size (`<f>.data`, `<f>.1.data`, ...; a larger tensor fills a file
            alone). Each tensor in a data file is 4096-aligned.
        optimize: Run the C++ core's optimization passes (constant folding, fusions);
            False writes the graph as converted. `target`'s fusions need it.
        strict: torch.export's strict mode (`torch.export.export(strict=...)`); default
            False, non-strict capture.
        fallback: What to do with ops no converter handles. None (default): a
            `ConversionError`. `"custom_domain"`: they are written as nodes of domain
            `pkg.torch.ops`, which a runtime must implement, listed in the result's
            `fallback_ops` and in a warning.
        custom_translation_table: `{op: fn}`: `op` is converted with `fn`. `op` is an op
            overload (`torch.ops.mylib.foo.default`), a `torch.library.custom_op`, an
            `"ns::op"` string, or an aten op, to override pt2onnx's converter. `fn` is an
            onnxscript function or a Python function building nodes through `g.op(...)`
            (see `pt2onnx._custom`). Ops registered with `register_custom_op_symbolic` are
            converted with their symbolic unless the table converts them.
        custom_opsets: `{"domain": version}`: the versions of the custom domains the
            converters' nodes use (1 for a domain not given).
        training: The mode the model is captured in, a `TrainingMode` (torch.onnx's are
            accepted). EVAL (default) captures the model in eval mode, TRAINING in train
            mode, PRESERVE in the mode it is in; the model's (and each submodule's) mode is
            restored afterwards. Ops follow the mode they were captured in: dropout in
            train mode is ONNX Dropout with training_mode true (random at run time), batch
            norm in train mode normalizes with the batch statistics. In training mode
            (TRAINING, or PRESERVE of a model in train mode) the buffers the forward updates
            are extra outputs after the model's own, named `<buffer>_updated` in the order
            of the model's buffers: batch norm's running_mean and running_var (torch's
            update: momentum, unbiased batch variance) and num_batches_tracked. torch.onnx
            (dynamo=False) computes the running statistics too but leaves them out of the
            graph.
        verify: Run the written model in onnxruntime against PyTorch on the example inputs
            and, with dynamic dims, on inputs whose dynamic dims are one larger. The max
            differences go to the result's `checks["verify"]`; differences beyond
            `verify_tolerance` raise `pt2onnx.VerificationError` (the file is kept for
            inspection). Needs onnxruntime. Refused for a training-mode export, a model
            without weight data, `pkg.torch.ops` fallback nodes, and (onnxruntime's Python
            API takes no bfloat16 arrays) a bfloat16 model with float inputs.
        verify_tolerance: `(atol, rtol)` for `verify`. Default by `dtype`: (1e-4, 1e-4)
            for float32, (1e-2, 1e-2) for float16, (5e-2, 5e-2) for bfloat16. With
            `quantize`, verify=True needs it given.
        report: A path: a markdown report of the export is written there (stages and
            times, inputs and outputs, the op histogram, ops without a converter, the
            verification), also when the export fails. True (torch.onnx's form): the report
            goes to `artifacts_dir`, named after the model's class and the time. None or
            False: no report.
        export_modules_as_functions: torch.onnx's option. True, or a set of `nn.Module`
            classes: the calls of every submodule (of those classes) are written as calls of
            ONNX model-local functions, one per class and body (domain: the class's Python
            module), weights passed as inputs. False (default): no functions.
        inline: True writes every function call as its body again (default False).
        target: What the graph is written for. "standard" (default): ONNX operators only,
            fused into the opset's own fused operators where it has them
            (LayerNormalization from 17, Gelu from 20, RMSNormalization / Attention /
            RotaryEmbedding from 23). "onnxruntime": onnxruntime's contrib operators
            (com.microsoft) where onnxruntime runs them faster; such a file needs
            onnxruntime. Fusions run only with optimize=True.
        dtype: The float type the written model computes in. torch.float32 or None
            (default): as captured. torch.float16 or torch.bfloat16 (or their names
            "float16", "bfloat16"): the model's float32 weights, inputs, outputs (a KV cache
            included) and computation are written in that type, keeping in float32 what
            precision needs: norm statistics (hand-written norms' mean of squares, the fused
            norms' stash_type=1), softmax and summing reductions, cast to float32 and back.
            The weights are converted in a copy at export time; float64 values stay float64.
            Capture the model in float32: the comparison with PyTorch (verify=True) runs it
            in float32.
        weights: Where the weight data comes from, for a model built without it (fake
            parameters, e.g. under `pt2onnx.init_empty_weights()` or torch's
            `FakeTensorMode`, or parameters on the meta device): a state dict, a
            `.safetensors` file or a list of them (a checkpoint's shards), or a checkpoint
            directory (model.safetensors.index.json and its shards, or *.safetensors).
            Capture runs on the fake weights; the C++ core maps the files, checks every
            tensor's name, dtype and shape against the program's parameters and buffers (a
            missing, unused or mismatched tensor is an error naming it), and copies their
            bytes file-to-file into the external data, so the weights never pass through
            memory. Tied weights are written once; buffers the model computed at init
            (rotary inv_freq) are taken from the model unless the source holds them (a
            model built on the meta device has no buffer data: the source must hold its
            buffers, and one it lacks is an error naming it). A
            source tensor replaces the model's own data where both exist. None (default):
            the model's own weights.
        verbose: None (default) or True: a progress line on stderr when it is a terminal
            and the export runs longer than a second (the stage, and bytes written of the
            total while writing); False: never.
        quantize: "int4" or "int8" quantizes the float weights that Linear / MatMul layers
            multiply by (lm heads included; embeddings, convolutions and norms stay float)
            while they are written, in C++ from the weight bytes: blocks of `block_size`
            values along the input dim (int4: 32; int8: one block per output channel) with
            a float scale each, symmetric (default) or asymmetric (a zero point per block).
            target="onnxruntime" writes com.microsoft MatMulNBits (with `accuracy_level`,
            default 4: onnxruntime's int8 compute on CPU; 0 computes in float); "standard"
            writes DequantizeLinear + MatMul (blocks and int4 need opset >= 21). A dict
            sets the rest: `{"dtype": "int4", "block_size": 64, "symmetric": False,
            "accuracy_level": 0, "embeddings": True}`; "embeddings" also quantizes the
            embedding tables (rows of whole blocks) to com.microsoft GatherBlockQuantized
            (onnxruntime) or Gather + blocked DequantizeLinear (standard, opset >= 21). A
            string may carry the settings after commas, as the `pt2onnx` command takes them
            (`"int4,block_size=64,asymmetric"`). None (default): no quantization.
            verify=True then needs `verify_tolerance`.
        capture: How an `nn.Module` is captured. "export" (default): torch.export.
            "trace": torch.jit.trace, torch.onnx's TorchScript exporter's capture: control
            flow is fixed to the example inputs' (a warning says so), and inputs must be
            positional.
        fix_dynamic_shapes: True: the dynamic dims (`dynamic_shapes` or `dynamic_axes`)
            are given to torch.export as `Dim.AUTO`, so it derives constraints it would
            otherwise refuse them for (a dim that must be a multiple of 20), as torch.onnx
            does silently; a warning says what it derived. Without it, such a refusal
            carries a note with the fix.
        opset_version: (torch.onnx compatibility) torch.onnx's name for `opset`; when both
            are given they must agree.
        export_params: (torch.onnx compatibility) False: parameters and buffers become
            graph inputs after the model's own, without initializers.
        keep_initializers_as_inputs: (torch.onnx compatibility) True: the initializers are
            also listed as graph inputs.
        do_constant_folding: (torch.onnx compatibility) False means optimize=False (the
            optimization passes are what folds constants).
        operator_export_type: (torch.onnx compatibility) A
            `torch.onnx.OperatorExportTypes` (or its name). ONNX: the default behaviour.
            ONNX_FALLTHROUGH and ONNX_ATEN_FALLBACK: `fallback="custom_domain"`. ONNX_ATEN
            (every op as an ATen node) and RAW (TorchScript IR) have no equivalent: errors.
        dynamo: (torch.onnx compatibility) False means capture="trace" (torch.onnx's
            TorchScript exporter traced nn.Modules).
        autograd_inlining: (torch.onnx compatibility) Accepted, as torch.onnx's new
            exporter does: autograd.Functions are always inlined unless they have a
            `symbolic`, which is then used.
        profile: (torch.onnx compatibility) True: a cProfile listing of the export (its 40
            costliest functions) is written to `artifacts_dir`, its path in
            `result.checks["profile"]`.
        dump_exported_program: (torch.onnx compatibility) True: the captured program is
            saved as a .pt2 file in `artifacts_dir`, its path in
            `result.checks["exported_program"]`.
        artifacts_dir: (torch.onnx compatibility) Where report=True, profile=True and
            dump_exported_program=True write their files (default: the current
            directory).
        example_outputs: (torch.onnx compatibility, old) Accepted and not used: the
            outputs come from capture.
        use_external_data_format: (torch.onnx compatibility, old) Given, it decides where
            the weights go, as it did in torch.onnx: True = external_data=True (a `.data`
            file), False = external_data=False (one file, at most 2 GiB).
        cache_dir: A folder for the program cache (opt-in, nn.Modules captured with
            torch.export): the captured program is kept there, keyed by the model's module
            classes (their source files), its non-tensor attributes, its parameters' and
            buffers' names, shapes and dtypes, the inputs' shapes and dtypes, every option
            and the versions of torch and pt2onnx; a later export of a model with the same
            key converts the kept program with that model's weights, skipping capture, and
            writes the same file a capture would. `checks["program_cache"]` says "hit" or
            "miss". What the key cannot see (global state the forward reads outside its
            modules' files) is listed in
            [the nn.Module guide](../guides/modules.md#the-program-cache). The folder must
            be the current user's alone, and each hit is checked whole: see [what the cache
            trusts](../guides/transformers.md#what-the-cache-trusts-and-what-it-checks).

    Returns:
        ExportResult: The files written, the graph's size, seconds per stage (`timings`),
            the ops written as fallback nodes and the checks run.

    Raises:
        pt2onnx.ConversionError: The conversion failed (the message is the C++ core's);
            the previous file at `f`, if any, is then left as it was.
        pt2onnx.VerificationError: With verify=True, the model's outputs differ from
            PyTorch's beyond `verify_tolerance`, onnxruntime could not run it, or it is
            not installed.
        ValueError: Arguments that contradict each other or are out of range (each error
            names the argument).
        TypeError: An argument of the wrong type (the error names it).

    Runnable examples: [exporting nn.Modules](../guides/modules.md).
    """
    # torch.onnx.export's names and meanings, as pt2onnx's own (pt2onnx._compat).
    opset, opset_version = _compat.resolve_opset(opset, opset_version), None
    fallback = _compat.operator_export_fallback(operator_export_type, fallback)
    operator_export_type = None
    _compat.check_bools(fix_dynamic_shapes=fix_dynamic_shapes, export_params=export_params,
                        do_constant_folding=do_constant_folding,
                        keep_initializers_as_inputs=keep_initializers_as_inputs, dynamo=dynamo,
                        autograd_inlining=autograd_inlining, profile=profile,
                        dump_exported_program=dump_exported_program)
    if not do_constant_folding:  # the passes are what folds constants
        optimize, do_constant_folding = False, True
    if capture not in ("export", "trace"):
        raise ValueError(f"capture must be 'export' or 'trace', not {capture!r}")
    if not dynamo:  # torch.onnx's TorchScript exporter traces nn.Modules
        capture, dynamo = "trace", True
    # Older torch.onnx arguments its documentation's examples still pass:
    # example_outputs (outputs now come from capture) and use_external_data_format.
    example_outputs = None
    if use_external_data_format is not None:
        if not isinstance(use_external_data_format, bool):
            raise TypeError("use_external_data_format must be True or False, not "
                            f"{use_external_data_format!r}")
        external_data = use_external_data_format  # torch.onnx's default was one file
        use_external_data_format = None
    report = _compat.report_path(report, artifacts_dir, model)
    if profile:
        call = {k: v for k, v in locals().items() if k != "_state"}
        call["profile"] = False
        box: list = []
        with _compat.profiled(True, artifacts_dir, model, box):
            result = export(**call, _state=_state)
        result.checks["profile"] = box[0]
        return result
    if _compat.is_file_object(f):  # the whole model into the file object
        call = {k: v for k, v in locals().items() if k != "_state"}
        call["f"] = None
        try:
            result = export(**call, _state=_state)
        except ConversionError as e:
            if "2 GiB" in str(e):
                raise ConversionError(
                    f"{e}\nf is a file object, which takes the model whole; pass f as a file "
                    "path so the weights go to external data beside it (<f>.data)") from None
            raise
        _compat.write_to_file_object(f, result.model_bytes)
        return result
    if report is not None:  # the export itself, then its report (also of a failure)
        call = {k: v for k, v in locals().items() if k not in ("report", "_state")}
        return _report.around(export, call, report)
    if cache_dir is not None and _cache_read == "auto":  # a hit that fails: captured anew
        call = {k: v for k, v in locals().items() if k != "_state"}
        return _module_cache.export_or_recapture(export, call, _state)
    t0 = time.perf_counter()
    opset = _check_arguments(f, kwargs, dynamic_axes, opset, input_names, output_names,
                             external_data, optimize, strict)
    if fallback not in (None, "custom_domain"):
        raise ValueError(f"fallback must be None or 'custom_domain', not {fallback!r}")
    custom_opsets = _custom.check_custom_opsets(custom_opsets)
    custom_functions = _custom.record_table(custom_translation_table, opset, custom_opsets)
    training = _training.check(training)
    core_training = _training.core_mode(model, training)
    if verify and core_training == "training":
        raise ValueError("verify=True compares with PyTorch in eval mode; a training-mode export "
                         "(dropout draws, batch statistics, extra outputs) cannot be verified so")
    all_functions, function_classes = _module_function_classes(export_modules_as_functions)
    if not isinstance(inline, bool):
        raise TypeError(f"inline must be True or False, not {inline!r}")
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(map(repr, TARGETS))}, not {target!r}")
    dtype = dtype_name(dtype)
    quantize = _quantize_spec(quantize)
    if quantize and verify and verify_tolerance is None:
        raise ValueError("verify=True with quantize= needs verify_tolerance=(atol, rtol): "
                         "quantized weights change the outputs by more than rounding")
    if not isinstance(args, tuple):
        args = (args,) if not isinstance(args, list) else tuple(args)
    in_dim_names: dict[str, dict[int, str]] = {}
    out_dim_names: dict[int, dict[int, str]] = {}
    run_model = model  # what verify=True runs in PyTorch (the TorchScript model itself)
    meta_buffers: list[str] = []  # buffers of `model` on the meta device, as captured
    if isinstance(model, torch.export.ExportedProgram):
        if dynamic_shapes is not None:
            raise ValueError("dynamic shapes are fixed at capture; pass them to torch.export "
                             "(dynamic_axes={input: {axis: name}} can still name its dynamic dims)")
        if dynamic_axes is not None:
            # Names for dims the program already has dynamic, as the command's --dim-name.
            for key, axes in dynamic_axes.items():
                if not isinstance(axes, Mapping) or not all(
                        isinstance(n, str) for n in axes.values()):
                    raise TypeError("with an ExportedProgram, dynamic_axes only names its dynamic "
                                    f"dims: {{input: {{axis: name}}}}; got {key!r}: {axes!r}")
                in_dim_names[key] = {_check_axis(a, None, f"dynamic_axes[{key!r}]"): n
                                     for a, n in axes.items()}
        ep = model
    elif _torchscript.is_torchscript(model) or (capture == "trace" and
                                                isinstance(model, torch.nn.Module)):
        if not _torchscript.is_torchscript(model):
            model = _trace(model, args, kwargs, training)
        # TorchScript: its graph read into an FX module of ATen calls (loops
        # and ifs kept), captured below like any nn.Module.
        args, kwargs = _torchscript.bind_inputs(model, args, kwargs), None
        with _training.module_mode(model, training):
            model = _torchscript.to_graph_module(model)
    elif not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be an nn.Module, ExportedProgram or TorchScript model, "
                        f"not {type(model)}")
    cache_fields = cached = hit = None
    if cache_dir is not None:
        if not isinstance(model, torch.nn.Module) or run_model is not model:
            raise ValueError("cache_dir= keeps the capture of an nn.Module (capture='export'); "
                             "an ExportedProgram or a TorchScript or traced model has none to "
                             "keep")
        cache_fields = _module_cache.key_fields(model, (args, kwargs), dict(
            dynamic_shapes=dynamic_shapes, dynamic_axes=dynamic_axes, opset=opset,
            input_names=input_names, output_names=output_names, external_data=external_data,
            optimize=optimize, strict=strict, fallback=fallback, custom_opsets=custom_opsets,
            training=str(training), functions=[all_functions, function_classes],
            inline=inline, target=target, dtype=dtype, quantize=quantize,
            fix_dynamic_shapes=fix_dynamic_shapes, export_params=export_params,
            keep_initializers_as_inputs=keep_initializers_as_inputs))
        if cache_fields is not None and not custom_functions and _cache_read == "try":
            cached = _program_cache.lookup(cache_dir, cache_fields, model_views=True)
    progress = _Progress(verbose)
    with _CAPTURE_LOCK:
        if cached is not None:  # the kept program, this model's weights
            hit = _module_cache.weight_views(cached, model, _tensor_view)
        if hit is not None:
            part = cached["parts"][0]
            stored = _program_cache.decode_call(part["call"])
            program = part["program"]
            in_dim_names, out_dim_names = stored["input_dim_names"], stored["output_dim_names"]
            input_names, weight_names = stored["input_names"], stored["weight_names"]
            weight_views, keep_alive = hit
            meta_buffers = [n for n, b in model.named_buffers() if b.is_meta]
            t1 = t2 = time.perf_counter()
        else:
            if not isinstance(model, torch.export.ExportedProgram):
                progress("capturing")
                symbolics: dict[str, Any] = {}
                with _training.module_mode(model, training), _torchscript.script_parts(model), \
                        _compat.exporting(), _autograd_symbolic.symbolic_functions(symbolics), \
                        _compat.trace_hint(capture, model), _meta_as_fake(model) as meta_buffers:
                    ep, in_dim_names, out_dim_names = _capture(
                        model, args, kwargs, dynamic_shapes, dynamic_axes, input_names,
                        output_names, strict, fix_dynamic_shapes)
                # autograd.Functions exported through their `symbolic` (torch.onnx's rule).
                custom_functions += [_custom.record(t, fn, opset, custom_opsets, positional=True)
                                     for t, fn in symbolics.items()]
            t1 = time.perf_counter()
            if dump_exported_program:  # torch.onnx's: the captured program, for debugging
                dumped = _compat.artifact(artifacts_dir, run_model, ".pt2")
                torch.export.save(ep, dumped)
            progress("serializing")
            input_names, weight_names = _weight_names(ep, run_model, input_names)
            program = _program(ep)
            if _state is not None:
                _state.update(program=program, opset=opset, custom_functions=custom_functions,
                              exported_program=ep, in_dim_names=in_dim_names,
                              out_dim_names=out_dim_names)
            weight_views, keep_alive = _weight_views(ep)
            t2 = time.perf_counter()
    source = _weight_source(weights, model)
    fake = [v[0] for v in weight_views if v[1] == 0 and math.prod(v[3]) > 0]
    _check_meta_buffers(meta_buffers, fake, source)
    if fake and source is None:
        raise ValueError(f"weight '{fake[0]}' is on the meta device (or fake): it has no data to "
                         f"export ({len(fake)} such weights); pass weights= (a state dict, "
                         "safetensors files or a checkpoint directory)")
    if fake and verify:
        raise ValueError("verify=True runs the model in PyTorch, which a model built without "
                         "weight data (meta device) cannot do; export with verify=False and "
                         "check the file against a model loaded with its weights")
    if source is None:
        source = _WeightSource()
    if progress.on:  # bytes as captured (a dtype= conversion changes them; the line is a guide)
        progress.total = sum(math.prod(v[3]) * getattr(torch, v[2][6:]).itemsize
                             for v in weight_views if v[2].startswith("torch."))

    shard_bytes = 0
    if isinstance(external_data, str):  # "shards:2GB"
        ext, shard_bytes = "always", _core.external_data_shards(external_data)
    elif external_data is None:
        ext = "auto"
    else:
        ext = "always" if external_data else "never"
    # f=None: the model in memory (model_bytes), weights inline, no file.
    path = "" if f is None else os.fspath(f)
    try:
        call = dict(
            program=program,
            weights=weight_views,
            output_path=path,
            opset=opset,
            optimize=optimize,
            external_data=ext,
            input_names=list(input_names or []),
            output_names=list(output_names or []),
            input_dim_names=in_dim_names,
            output_dim_names=out_dim_names,
            fallback=fallback or "",
            custom_functions=custom_functions,
            custom_opsets=custom_opsets,
            training=core_training,
            all_modules_as_functions=all_functions,
            modules_as_functions=function_classes,
            inline_functions=inline,
            target=target,
            dtype=dtype,
            quantize=quantize,
            source_files=source.files,
            source_tensors=source.tensors,
            source_aliases=source.aliases,
            allow_unused=source.allow_unused,
            convert_floats=source.convert_floats,
            progress=progress if progress.on else None,
            shard_bytes=shard_bytes,
            in_memory=f is None,
            export_params=export_params,
            keep_initializers_as_inputs=keep_initializers_as_inputs,
            weight_names=weight_names,
        )
        if _state is not None:  # what the program cache replays (python/pt2onnx/_program_cache.py)
            _state.update(convert=call, keep_alive=keep_alive)
        if hit is not None:  # the call holds what this export asks for (HitFailed if not)
            _program_cache.check_request(cached, call)
        with _program_cache.converting_hit(cached["folder"] if hit is not None else None):
            r = _core.convert(**call)
        model_bytes = r["model_bytes"]
        # The entry's part now, while the constants' views point at live memory (a tensor
        # on an accelerator is viewed through a CPU copy that keep_alive alone holds).
        new_part = _cache_part(ep, call) if cache_fields is not None and hit is None else None
    finally:
        progress.done()
        del keep_alive, source
    t3 = time.perf_counter()
    if r["fallback_ops"]:
        warnings.warn("no converter for " + "; ".join(
            f"{op['target']} ({op['count']} node{'s' if op['count'] > 1 else ''}, first at "
            f"{op['where']})" for op in r["fallback_ops"])
            + ": written as pkg.torch.ops nodes, which a runtime must implement", stacklevel=2)
    if (all_functions or function_classes) and not inline and not r["functions"]:
        warnings.warn("export_modules_as_functions: no call of "
                      + (", ".join(function_classes) or "a submodule")
                      + " in the model; no functions written", stacklevel=2)
    if dump_exported_program:
        result_checks = {"exported_program": dumped}
    else:
        result_checks = {}
    if _state is not None:
        _state["core"] = r
    result = result_from_core(r, None if f is None else path,
                              {"cache lookup": t1 - t0} if hit is not None else
                              {"capture": t1 - t0, "serialize": t2 - t1})
    result.timings["total"] = t3 - t0
    result.checks.update(result_checks)
    if verify:
        if result.fallback_ops:
            raise ValueError("verify=True cannot run a model with pkg.torch.ops fallback nodes "
                             "in onnxruntime")
        t4 = time.perf_counter()
        atol, rtol = verify_tolerance if verify_tolerance is not None else DTYPE_TOLERANCE[dtype]
        with _training.module_mode(run_model, training), _program_cache.verifying_hit(
                cached["folder"] if hit is not None else None, result):
            result.checks["verify"] = _verify.verify(
                path if f is not None else model_bytes, run_model, args, kwargs, atol, rtol)
        result.timings["verify"] = time.perf_counter() - t4
    if cache_fields is not None:
        result.checks["program_cache"] = (
            {"result": "hit", "entry": cached["folder"]} if hit is not None else
            {"result": "miss", "entry": None if new_part is None else _program_cache.store(
                cache_dir, cache_fields, [new_part], _program_cache.sources_in_use())})
    return result


def _cache_part(ep, call) -> dict[str, Any] | None:
    """export(cache_dir=...)'s entry part after a capture (python/pt2onnx/_module_cache.py):
    the program, the core's call, the constants' bytes; the parameters and buffers are the
    model's, read from it on a hit. None when it cannot be kept: a weight that is neither
    (a tensor subclass's inner tensors) would be kept with its values, so nothing is."""
    from torch.export.graph_signature import InputKind

    specs = ep.graph_signature.input_specs
    from_model = frozenset(sp.target for sp in specs
                           if sp.kind in (InputKind.PARAMETER, InputKind.BUFFER) and sp.target)
    constants = {sp.target for sp in specs if sp.kind == InputKind.CONSTANT_TENSOR}
    if any(v[0] not in from_model and v[0] not in constants for v in call["weights"]):
        return None
    return _program_cache.make_part("", tree_json(call["program"]), call, from_model)


def unconvertible_ops(
    model: torch.nn.Module | torch.export.ExportedProgram,
    args: Any = (),
    *,
    kwargs: dict[str, Any] | None = None,
    dynamic_shapes: Any = None,
    opset: int | None = None,
    strict: bool = False,
    custom_translation_table: Mapping[Any, Any] | None = None,
) -> list[dict[str, Any]]:
    """List the ops of a model that no converter handles, without writing anything.

    The model is captured as `export()` captures it, and the C++ core lists the ops of the
    program it has no converter for at `opset`.

    Args:
        model: An `nn.Module` (captured with torch.export) or a
            `torch.export.ExportedProgram`.
        args: The example positional inputs, as `export()` takes them.
        kwargs: The example keyword inputs, as `export()` takes them.
        dynamic_shapes: The dynamic dims in torch.export's form, as `export()` takes them.
        opset: The ONNX opset to check against; None: `pt2onnx.DEFAULT_OPSET`.
        strict: torch.export's strict mode, as in `export()`.
        custom_translation_table: Converters as `export()` takes them: their targets (and
            ops registered with `register_custom_op_symbolic`) count as converted.

    Returns:
        list[dict]: One dict per op target: "target", "count", "where" (the first node's
            module and source line), "converts_from" (the lowest opset that converts it, 0
            if none). Empty when the model exports.

    Runnable examples: [ops without a converter](../guides/custom-ops.md#ops-without-a-converter).
    """
    opset = _check_arguments(None, kwargs, None, opset, None, None, None, True, strict)
    custom_functions = _custom.record_table(custom_translation_table, opset, {})
    if isinstance(model, torch.export.ExportedProgram):
        ep = model
    else:
        if not isinstance(args, tuple):
            args = (args,) if not isinstance(args, list) else tuple(args)
        with _CAPTURE_LOCK:
            ep = _capture(model, args, kwargs, dynamic_shapes, None, None, None, strict)[0]
    with _CAPTURE_LOCK:
        program = _program(ep)
    return list(_core.unsupported_ops(program, opset, custom_functions))
