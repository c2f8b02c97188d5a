"""`export(model, ..., cache_dir=...)`: the program cache (python/pt2onnx/_program_cache.py)
for nn.Modules, opt-in.

The key adds to the export's options and the versions what the capture of an nn.Module
reads besides its weights' values: every module's class (the source file of each class in
its MRO outside torch, hashed), its non-tensor attributes (values, recursively; functions
and classes by name and source file), the names, shapes, dtypes and strides of its
parameters and buffers, the values of plain tensor attributes (they become constants of
the program), training flags, and the inputs' structure, shapes, dtypes and non-tensor
values with the dynamic shapes. On a hit the parameters and buffers are read from the model
given (the program's own constants from the entry), so another model of the same classes
and configuration with other weights converts to the file a fresh capture writes.

What the key cannot see (docs/guides/modules.md states it): global state the forward reads
outside its modules (module-level variables of other files, environment variables, flags
set on torch), code it calls in files that define none of its module classes, and
attributes whose values cannot be described (an open file, a lock): a model holding one of
those is not cached (a warning says which attribute).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import inspect
import json
import os
import sys
import types
import warnings
import weakref
from typing import Any

import torch

from . import _core, _program_cache

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
# Module attributes that hold what the fingerprint reads separately (or nothing a capture uses).
_SKIPPED = {"_parameters", "_buffers", "_modules", "training", "_non_persistent_buffers_set"}
_DEPTH = 10


class Uncacheable(Exception):
    """A value the key cannot describe."""


@functools.lru_cache(maxsize=512)
def _file_hash(path: str, mtime_ns: int, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(fh.read())
    return h.hexdigest()


def _file_of(obj) -> str | None:
    """The source file of a class or function; for a class whose module is not in
    sys.modules (loaded from a path), the file of a function it defines."""
    try:
        return inspect.getsourcefile(obj)
    except (TypeError, OSError):
        pass
    for v in (vars(obj).values() if isinstance(obj, type) else [obj]):
        code = getattr(getattr(v, "__func__", v), "__code__", None)
        if code is not None:
            return code.co_filename
    return None


def _source(obj) -> str:
    """A class's or function's place: `module.qualname`, with its file's hash unless the
    file is torch's own (torch's version is in the key)."""
    name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
    path = _file_of(obj)
    if path and os.path.isfile(path) and not os.path.abspath(path).startswith(_TORCH_DIR):
        st = os.stat(path)
        name += "@" + _file_hash(os.path.abspath(path), st.st_mtime_ns, st.st_size)[:20]
    return name


def _tensor(t: torch.Tensor, values: bool) -> dict[str, Any]:
    out = {"tensor": [list(t.shape), str(t.dtype), list(t.stride()), t.device.type,
                      bool(t.requires_grad)]}
    if values:
        if t.is_meta or type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
            raise Uncacheable(f"a tensor of type {type(t).__name__}")
        data = t.detach().cpu().contiguous()
        out["sha256"] = hashlib.sha256(data.view(torch.uint8).numpy().tobytes()
                                       if data.numel() else b"").hexdigest()
    return out


def _describe(v: Any, depth: int = 0, values: bool = True,
              weights: dict[int, str] | None = None) -> Any:
    """A JSON value that changes whenever `v` does, as far as a capture can tell. A tensor
    that is one of the model's parameters or buffers (`weights`: id -> name; an LSTM keeps
    its parameters in a list too) is described by its name, not its values."""
    if depth > _DEPTH:
        raise Uncacheable("a value nested too deep")
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, torch.Tensor):
        if weights and id(v) in weights:
            return {"weight": weights[id(v)]}
        return _tensor(v, values)
    if isinstance(v, weakref.ref):
        return {"weakref": _describe(v(), depth + 1, values, weights)}
    if isinstance(v, (torch.dtype, torch.device, torch.memory_format, torch.layout,
                      torch.Size)):
        return {type(v).__name__: str(v)}
    if isinstance(v, enum.Enum):
        return {"enum": f"{_source(type(v))}.{v.name}"}
    if isinstance(v, (list, tuple)):
        return {type(v).__name__: [_describe(x, depth + 1, values, weights) for x in v]}
    if isinstance(v, (set, frozenset)):
        return {"set": sorted(repr(_describe(x, depth + 1, values, weights)) for x in v)}
    if isinstance(v, dict):
        return {"dict": [[_describe(k, depth + 1, values, weights),
                          _describe(x, depth + 1, values, weights)] for k, x in v.items()]}
    if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type)):
        return {"code": _source(v)}
    if isinstance(v, types.MethodType):
        return {"method": _source(v.__func__),
                "of": _describe(v.__self__, depth + 1, values, weights)}
    if isinstance(v, functools.partial):
        return {"partial": [_describe(x, depth + 1, values, weights)
                            for x in (v.func, v.args, v.keywords)]}
    if isinstance(v, torch.nn.Module):
        return {"module": _source(type(v))}  # its own state is described as a submodule
    if "Dim" in type(v).__name__:  # torch.export's Dim, derived dims, Dim.AUTO / DYNAMIC
        return {"dim": repr(v)}
    state = getattr(v, "__dict__", None)
    if state is not None and not isinstance(v, types.ModuleType):
        return {"object": _source(type(v)),
                "state": _describe(dict(state), depth + 1, values, weights)}
    raise Uncacheable(f"a value of type {type(v).__qualname__}")


def _model(model: torch.nn.Module) -> list[Any]:
    weights = {id(t): n for n, t in [*model.named_parameters(remove_duplicate=False),
                                     *model.named_buffers(remove_duplicate=False)]}
    out = []
    for name, m in model.named_modules(remove_duplicate=False):
        try:
            attrs = {k: _describe(v, weights=weights) for k, v in vars(m).items()
                     if k not in _SKIPPED}
        except Uncacheable as e:
            raise Uncacheable(f"module '{name or '<root>'}' ({type(m).__name__}): {e}") from None
        classes = [_source(c) for c in type(m).__mro__
                   if c not in (torch.nn.Module, object)]
        tensors = {k: (None if t is None else _tensor(t, values=False))
                   for k, t in [*m._parameters.items(), *m._buffers.items()]}
        out.append([name, classes, bool(m.training), sorted(m._non_persistent_buffers_set),
                    tensors, attrs])
    return out


def key_fields(model: torch.nn.Module, inputs: Any, options: dict[str, Any]):
    """The key of an nn.Module's export, or None (with a warning) when the model holds what
    the key cannot describe."""
    try:
        described = {"model": _model(model), "inputs": _describe(inputs, values=False),
                     "options": _describe(options, values=False)}
    except Uncacheable as e:
        warnings.warn(f"export(cache_dir=...): not cached: {e} cannot be part of the key",
                      stacklevel=3)
        return None
    return {
        "format": _program_cache.FORMAT,
        "kind": "nn.Module",
        "versions": {"torch": torch.__version__, "pt2onnx": _core.__version__,
                     "python": "%d.%d" % sys.version_info[:2],
                     "transformers": _program_cache.dist_version("transformers")},
        "sha256": hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest(),
    }


def weight_views(entry: dict[str, Any], model: torch.nn.Module, tensor_view):
    """The views of a kept program (entry's only part) for `model`: its parameters and
    buffers read from the model as a fresh export reads them (tensor_view is _export's), the
    program's own constants from the entry. Returns (views, what must stay alive). Raises
    HitFailed when the entry does not fit the model: each view naming one of the model's
    parameters or buffers must be marked to be read from the model (never from bytes kept in
    the entry) and have the dtype, shape and strides of the model's tensor, and each view
    so marked must name one."""
    part, folder = entry["parts"][0], entry["folder"]
    views, buf = _program_cache.stored_views(part)
    state = dict(model.named_parameters(remove_duplicate=False))
    state.update(model.named_buffers(remove_duplicate=False))
    keep: list = [buf]
    out = []
    for view, stored in zip(views, part["views"]):
        name, t, from_model = stored[0], state.get(stored[0]), len(stored) > 6
        if t is None and not from_model:
            out.append(view)  # a constant of the program
            continue
        if t is None or not from_model:
            raise _program_cache.HitFailed(folder, f"is not used (its weight '{name}' " + (
                "is not one of the model's tensors)" if t is None else
                "is one of the model's tensors, but would be read from the entry)"))
        mine = tensor_view(name, t, keep)
        if [mine[2], list(mine[3]), list(mine[4])] != stored[2:5]:
            raise _program_cache.HitFailed(folder, f"is not used (its weight '{name}' is "
                                           f"{stored[2]} {stored[3]}, the model's {mine[2]} "
                                           f"{list(mine[3])})")
        out.append(mine)
    return out, keep


def export_or_recapture(export, call: dict[str, Any], state: dict[str, Any] | None):
    """export(cache_dir=...): from the cache when it holds the model's program; when the
    kept program does not fit the model (HitFailed: the C++ core refuses it, a weight does
    not match, its file fails verification), once more with a fresh capture, which replaces
    the entry, after a warning naming it. `call`: export()'s arguments."""
    try:
        return export(**dict(call, _cache_read="try"), _state=state)
    except _program_cache.HitFailed as e:
        warnings.warn(str(e), _program_cache.CacheWarning, stacklevel=3)
        _program_cache.discard(e.folder)
        return export(**dict(call, _cache_read="no"), _state=state)
