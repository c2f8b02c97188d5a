"""The program's JSON for the C++ core: torch.export.save's models/model.json,
byte for byte, made faster by removing work in torch's serializer whose
result is thrown away.

torch's serializer (torch._export.serde.serialize) is the only Python stage
between capture and the C++ core. Profiled on the bench models (cProfile,
bench/stage_costs.py), its time went to:
- canonicalize(): a self-test that deep-copies the whole program and whose
  result is discarded (60% before this module existed);
- `log.debug(..., graph_module.print_readable())`: the graph printed as
  Python source on every call, even with debug logging off (its argument is
  built before `debug` looks at the level);
- `_Union.create`: every union (each argument, size, stride) built by a
  `dataclasses.fields()` walk plus a `__post_init__` that checks the same
  class's field names again;
- `_dataclass_to_dict`: `is_dataclass` and `fields()` per object while the
  tree becomes dicts for json.dumps;
- `_print_sympy`: sympy's srepr of every symbolic size and stride, though a
  program has a handful of distinct expressions.
Here the listing is skipped, `_Union.create` and the dict walk look up each
class's field names once, and each distinct expression is printed once.
What torch's code decides
(which nodes, arguments, names, expressions) is untouched: the output is the
same bytes, checked against torch's own serializer on every program the test
suite exports (tests/conftest.py) and by the .pt2-vs-memory tests."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math

import torch

def serialize_program(ep: torch.export.ExportedProgram, *, fast: bool = True) -> bytes:
    """The JSON torch.export.save writes as models/model.json (weights are not
    serialized: the C++ core reads them in place). `fast=False` is torch's
    serializer as it ships, less the discarded canonicalize(): the reference
    the tests compare the fast path with."""
    from torch._export.serde import serialize as serde

    kwargs = dict(serialize_state_dict=False, serialize_constants=False,
                  serialize_example_inputs=False)
    saved_specs = _plain_output_specs(ep)
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_patched(serde, "canonicalize",
                                         lambda program, constants=None: program))
            if fast:
                stack.enter_context(_fast_serializer(serde, ep))
            return serde.serialize(ep, **kwargs).exported_program
    finally:
        for entry, spec in saved_specs:
            entry.signature.out_spec = spec


@contextlib.contextmanager
def _patched(owner, name, value):
    """`owner.name = value` for the duration (nothing if owner lacks it: a
    torch without that function serializes as it ships)."""
    missing = object()
    original = owner.__dict__.get(name, missing)
    if original is missing:
        yield
        return
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def _fast_serializer(serde, ep):
    from torch._export.serde.union import _Union

    with contextlib.ExitStack() as stack:
        if "create" in _Union.__dict__:
            torch_create = _Union.__dict__["create"].__func__
            stack.enter_context(_patched(_Union, "create",
                                         classmethod(_union_creator(torch_create))))
        stack.enter_context(_patched(serde, "_to_json_bytes", _to_json_bytes))
        if "_print_sympy" in serde.__dict__:
            stack.enter_context(_patched(serde, "_print_sympy", _sympy_printer(serde._print_sympy)))
        if not serde.log.isEnabledFor(logging.DEBUG):
            # Only this program's graph modules, only while it serializes.
            graphs = [m for m in ep.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
            for gm in graphs:
                object.__setattr__(gm, "print_readable", _no_listing)
            stack.callback(_restore_listings, graphs)
        yield


def _sympy_printer(torch_print):
    """torch's `_print_sympy` (sympy's srepr of a size's expression) once per
    expression object of this program: the same few symbols fill every
    tensor's sizes and strides, and sympy hands out one object per expression
    (its cache), so most sizes are the same objects. Keyed by identity, not
    equality (equal sympy numbers can print differently), each object kept
    alive while its id is a key."""
    printed: dict = {}

    def print_sympy(s):
        expr = s.node.expr if isinstance(s, (torch.SymInt, torch.SymBool, torch.SymFloat)) else s
        hit = printed.get(id(expr))
        if hit is None:
            hit = printed[id(expr)] = (expr, torch_print(s))
        return hit[1]

    return print_sympy


def _no_listing(*args, **kwargs):
    return ""


def _restore_listings(graphs):
    for gm in graphs:
        gm.__dict__.pop("print_readable", None)


# _Union.create, done once per class: the field names (all None but the one
# set) and each (class, tag) pair's tag object are cached. The first call for
# a class goes through torch's own create (its field-name check runs there).
_UNION_NONES: dict = {}
_UNION_TAGS: dict = {}


def _union_creator(torch_create):
    from torch._export.serde.union import _UnionTag

    def create(cls, **kwargs):
        nones = _UNION_NONES.get(cls)
        if nones is None or len(kwargs) != 1:
            obj = torch_create(cls, **kwargs)  # torch's, for its checks
            _UNION_NONES.setdefault(cls, {f.name: None for f in dataclasses.fields(cls)})
            return obj
        ((name, value),) = kwargs.items()
        tag = _UNION_TAGS.get((cls, name))
        if tag is None:
            if name not in nones:
                return torch_create(cls, **kwargs)  # torch's error
            tag = _UNION_TAGS[(cls, name)] = _UnionTag.create(name, cls)
        obj = object.__new__(cls)
        d = obj.__dict__
        d.update(nones)
        d[name] = value
        d["_type"] = tag
        return obj

    return create


def _to_json_bytes(obj) -> bytes:
    from torch._export.serde.serialize import EnumEncoder

    return json.dumps(_plain(obj), cls=EnumEncoder, allow_nan=False).encode("utf-8")


# torch's _dataclass_to_dict, with each type's handling found once: a union
# becomes {tag: value}, a dataclass {field: value} in field order, floats
# their JSON spelling; anything else (enums, bytes) is passed as it is.
_KIND: dict = {}
_getattr = object.__getattribute__


def _plain(obj):
    t = type(obj)
    kind = _KIND.get(t)
    if kind is None:
        kind = _KIND[t] = _kind_of(obj)
    if kind.__class__ is tuple:  # a dataclass: its field names (the commonest)
        return {name: _plain(_getattr(obj, name)) for name in kind}
    if kind == _PASS:
        return obj
    if kind == _UNION:
        tag = _getattr(obj, "_type")
        return {tag: _plain(_getattr(obj, tag))}
    if kind == _LIST:
        return [_plain(x) for x in obj]
    if kind == _FLOAT:
        if obj == math.inf:
            return "Infinity"
        if obj == -math.inf:
            return "-Infinity"
        return "NaN" if math.isnan(obj) else obj
    if kind == _DICT:
        return {k: _plain(v) for k, v in obj.items()}
    return tuple(_plain(x) for x in obj)  # _TUPLE


_PASS, _UNION, _LIST, _FLOAT, _DICT, _TUPLE = range(6)


def _kind_of(obj):
    from torch._export.serde.union import _Union

    # Subclasses (IntEnum is an int, a union tag a str) go by what torch's
    # function tests first: _Union, dataclass, list, tuple, dict, float.
    if isinstance(obj, _Union):
        return _UNION
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return tuple(f.name for f in dataclasses.fields(obj))
    if isinstance(obj, list):
        return _LIST
    if isinstance(obj, tuple):
        return _TUPLE
    if isinstance(obj, dict):
        return _DICT
    if isinstance(obj, float):
        return _FLOAT
    return _PASS


def _plain_output_specs(ep: torch.export.ExportedProgram):
    """torch.return_types results (max, sort, topk, svd, ...) have no
    serialization name, so torch's serializer refuses a program that returns
    one. The converter only needs the flat outputs: their tree is written as
    plain tuples. Returns (entry, original spec) pairs to restore afterwards."""
    import torch.utils._pytree as pytree

    def is_structseq(spec):
        # torch.return_types, and namedtuples registered with no serialization
        # name (torch's serializer refuses them): positional, as tuples.
        t = spec.type
        if isinstance(t, type) and t.__module__ == "torch.return_types":
            return True
        if t is not getattr(pytree, "namedtuple", None):
            return False
        node = pytree.SUPPORTED_SERIALIZED_TYPES.get(spec.context)
        return node is None or node.serialized_type_name == pytree.NO_SERIALIZED_TYPE_NAME_FOUND

    def kids(spec):
        return list(spec.children()) if hasattr(spec, "children") else spec.children_specs

    def plain(spec):
        old = kids(spec)
        children = [plain(c) for c in old]
        if is_structseq(spec):
            return pytree.TreeSpec(tuple, None, children)
        if any(a is not b for a, b in zip(children, old)):
            return pytree.TreeSpec(spec.type, spec.context, children)
        return spec

    saved = []
    for entry in getattr(ep, "_module_call_graph", []):
        sig = getattr(entry, "signature", None)
        if sig is None or sig.out_spec is None:
            continue
        new = plain(sig.out_spec)
        if new is not sig.out_spec:
            saved.append((entry, sig.out_spec))
            sig.out_spec = new
    return saved
