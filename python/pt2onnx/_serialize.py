"""The program for the C++ core, as torch's serializer describes it: either
its tree of schema dataclasses, handed to the C++ reader as Python objects
(`program_tree`, what export() uses: no JSON text is built, and the C++
reader walks the tree in place, src/python/program_object.cpp), or
torch.export.save's models/model.json byte for byte (`serialize_program`,
for the tests and benchmarks). Both made faster by removing work
in torch's serializer whose result is thrown away.

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
- `_dataclass_to_dict` + json.dumps: the tree written as JSON text, which
  the C++ core would parse back (program_tree skips both);
- `_print_sympy`: sympy's srepr of every symbolic size and stride, though a
  program has a handful of distinct expressions.
Here the listing is skipped, `_Union.create` looks up each class's field
names once, and each distinct expression is printed once. What torch's code
decides (which nodes, arguments, names, expressions) is untouched: every
program the test suite exports is converted both ways, the tree read in
place and torch's serializer's JSON as it ships, and the ONNX files must be
the same bytes (tests/conftest.py); tests/python/test_serialize.py checks
the JSON of the fast path against torch's."""

from __future__ import annotations

import contextlib
import dataclasses
import logging

import torch


def serialize_program(ep: torch.export.ExportedProgram, *, fast: bool = True) -> bytes:
    """The JSON torch.export.save writes as models/model.json (weights are not
    serialized: the C++ core reads them in place). `fast=False` is torch's
    serializer as it ships, less the discarded canonicalize(): the reference
    the tests compare the fast path with."""
    return _serialized(ep, fast, None)


def program_tree(ep: torch.export.ExportedProgram):
    """torch's serializer's description of `ep` before it becomes JSON: a
    torch._export.serde.schema.ExportedProgram dataclass, which the C++
    core's reader takes as it is (`_core.convert(program=...)`). The same
    content as serialize_program(ep): the JSON is this tree written out."""
    tree = []
    _serialized(ep, True, tree.append)
    return tree[0]


def tree_json(tree) -> bytes:
    """The JSON of a `program_tree` (what serialize_program returns for its program), written
    from the tree already made: the program cache keeps it without serializing twice."""
    from torch._export.serde import serialize as serde

    return serde._to_json_bytes(tree)


def _serialized(ep, fast, keep_tree):
    from torch._export.serde import serialize as serde

    kwargs = dict(serialize_state_dict=False, serialize_constants=False,
                  serialize_example_inputs=False)
    saved_specs = _plain_output_specs(ep)
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_patched(serde, "canonicalize",
                                         lambda program, constants=None: program))
            stack.enter_context(_patched(serde.GraphModuleSerializer, "serialize_argument_spec",
                                         _sym_bool_spec(serde)))
            stack.enter_context(_graph_lists(serde))
            stack.enter_context(_sym_functions(serde))
            if fast:
                stack.enter_context(_fast_serializer(serde, ep.graph_module))
            if keep_tree is not None:
                # Not written out: the tree is what the C++ reader takes.
                stack.enter_context(_patched(serde, "_to_json_bytes",
                                             lambda obj: keep_tree(obj) or b""))
            return serde.serialize(ep, **kwargs).exported_program
    finally:
        for entry, spec in saved_specs:
            entry.signature.out_spec = spec


def _sym_bool_spec(serde):
    """torch's serialize_argument_spec, which raises "TODO" for a SymBool
    output ((x > 0).any().item() returned from forward), written as
    as_sym_bool as the schema has it."""
    torch_spec = serde.GraphModuleSerializer.serialize_argument_spec

    def spec(self, x):
        if isinstance(x, torch.export.graph_signature.SymBoolArgument):
            return serde.Argument.create(
                as_sym_bool=serde.SymBoolArgument.create(as_name=x.name))
        return torch_spec(self, x)

    return spec


@contextlib.contextmanager
def _sym_functions(serde):
    """torch's serializer writes a call on SymInts / SymFloats / SymBools only
    for the functions in its _SYM_OPS; the others torch places in graphs on
    symbolic values (math.ceil / floor, round, abs, xor, torch._sym_sqrt and
    the other math functions: torch.fx.experimental.sym_node's
    METHOD_TO_OPERATOR, the table torch's own tracing records them from) fail
    with an assertion. They are written the same way for the duration, as
    target `<module>.<name>` with their parameter names; the C++ core converts
    them (src/convert/symint.cpp)."""
    table = getattr(serde, "_SYM_OPS", None)
    try:
        from torch.fx.experimental.sym_node import METHOD_TO_OPERATOR
    except ImportError:
        METHOD_TO_OPERATOR = {}
    extra = {f for f in [*METHOD_TO_OPERATOR.values(), torch.sym_int]
             if getattr(f, "__name__", "<lambda>") != "<lambda>"} - set(table or ())
    if not isinstance(table, set) or not extra:
        yield
        return
    table |= extra
    try:
        yield
    finally:
        table -= extra


def _graph_lists(serde):
    """Feature-detected: only a torch with torch.ops.higher_order.switch
    (>= 2.14), whose switch(index, [branch graphs], operands) takes a list of
    graphs, which torch's serializer has no argument kind for."""
    if not hasattr(torch.ops.higher_order, "switch"):
        return contextlib.nullcontext()
    return _patched(serde.GraphModuleSerializer, "serialize_hoo_inputs", _graph_list_inputs(serde))


def _graph_list_inputs(serde):
    """torch's serialize_hoo_inputs, with a positional argument that is a
    list of subgraphs (switch's branches, get_attr nodes of GraphModules)
    written as that many as_graph arguments in its place: torch's serializer
    rejects such a list ("getattr nodes containing tensors should not appear
    in the graph"), and its schema has no list-of-graphs kind. The C++ reader
    sees switch(index, branch0, ..., branchN-1, operands)."""
    torch_inputs = serde.GraphModuleSerializer.serialize_hoo_inputs

    def is_graph(a):
        return (isinstance(a, torch.fx.Node) and a.op == "get_attr"
                and isinstance(getattr(a.graph.owning_module, a.target, None),
                               torch.fx.GraphModule))

    def inputs(self, args, kwargs):
        flat = []
        for a in args:
            if isinstance(a, (list, tuple)) and a and all(is_graph(g) for g in a):
                flat.extend(a)
            else:
                flat.append(a)
        return torch_inputs(self, flat, kwargs)

    return inputs


def graph_program_tree(gm: torch.fx.GraphModule, signature, module_call_graph,
                       range_constraints):
    """program_tree for a graph that is not an ExportedProgram (the
    torch.compile backend's AOTAutograd graphs, described by the caller as
    torch.export would describe them): torch's GraphModuleSerializer on it
    directly, the program's other fields filled as torch's
    ExportedProgramSerializer fills them (operator set version, range
    constraints, schema version, the ATen dialect's verifier name)."""
    from torch._export.serde import schema
    from torch._export.serde import serialize as serde

    with _fast_serializer(serde, gm), _graph_lists(serde), _sym_functions(serde):
        graph_module = serde.GraphModuleSerializer(signature, module_call_graph).serialize(gm)
    return schema.ExportedProgram(
        graph_module=graph_module,
        opset_version={"aten": torch._C._get_max_operator_version()},
        range_constraints=serde.serialize_range_constraints(range_constraints),
        schema_version=schema.SchemaVersion(major=serde.SCHEMA_VERSION[0],
                                            minor=serde.SCHEMA_VERSION[1]),
        verifiers=["ATEN"], torch_version=torch.__version__)


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
def _fast_serializer(serde, graph_module):
    from torch._export.serde.union import _Union

    with contextlib.ExitStack() as stack:
        if "create" in _Union.__dict__:
            torch_create = _Union.__dict__["create"].__func__
            stack.enter_context(_patched(_Union, "create",
                                         classmethod(_union_creator(torch_create))))
        if "_print_sympy" in serde.__dict__:
            stack.enter_context(_patched(serde, "_print_sympy", _sympy_printer(serde._print_sympy)))
        if not serde.log.isEnabledFor(logging.DEBUG):
            # Only this program's graph modules, only while it serializes.
            graphs = [m for m in graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
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
