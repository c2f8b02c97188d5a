"""custom_translation_table: user converters, turned into ONNX functions once
per export (glue only: the C++ core instantiates a function per node, see
src/convert/custom_converters.cpp; no Python runs in its conversion loop).

A converter is an onnxscript function (as torch.onnx accepts) or a plain
Python function that builds nodes through `g`, a FunctionBuilder:

    def scale_shift(g, x, *, scale, shift):
        return g.op("Add", g.op("Mul", x, g.op("CastLike", scale, x)), shift)

It is called once with one symbolic `Value` per tensor argument of the op (in
schema order, positionally) and, by keyword, the op's other arguments as
`AttrRef`s: references resolved per node from that node's arguments. Pass
an AttrRef to `g.op` as an attribute (`strides=stride`); as an input it
becomes a Constant of that attribute. Python arithmetic on it is refused:
its value is only known per node.
"""
from __future__ import annotations

import inspect
import re
from typing import Any, Callable, Mapping

import torch

# pt2onnx's domain for the functions it records (inlined per node; never in the file).
RECORD_DOMAIN = "pkg.pt2onnx.custom"


class Value:
    """A symbolic tensor inside a custom converter being recorded.

    A converter gets one per tensor argument of the op, and `g.op(...)` returns them. It
    has no data: pass it to `g.op` as an input.

    Args:
        name: The value's name in the recorded ONNX function.
    """

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"Value({self.name!r})"


class AttrRef:
    """A non-tensor argument of the op in a custom converter, resolved per node.

    The converter runs once per export, not once per node, so the op's non-tensor arguments
    (ints, floats, lists, strings) are references that the C++ core resolves from each
    node's arguments (an ONNX attribute reference, `ref_attr_name`). Pass one to `g.op` as
    an attribute (`strides=stride`); as an input it becomes a Constant of that attribute.
    Python arithmetic or tests on it raise TypeError: its value is only known per node.

    Args:
        name: The argument's name in the op's schema.
        onnx_type: Its ONNX AttributeProto type.
    """

    __slots__ = ("name", "onnx_type")

    def __init__(self, name: str, onnx_type: int):
        self.name = name
        self.onnx_type = onnx_type

    def __repr__(self) -> str:
        return f"AttrRef({self.name!r})"

    def _refuse(self, *_: Any) -> Any:
        raise TypeError(
            f"argument {self.name!r} of a custom converter is an attribute reference, resolved "
            "per node by the C++ core: pass it to g.op(...) as an attribute as it is (Python "
            "arithmetic or tests on it cannot be recorded)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _refuse
    __floordiv__ = __mod__ = __neg__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __bool__ = __int__ = __float__ = __index__ = __iter__ = __len__ = __getitem__ = _refuse


class FunctionBuilder:
    """`g` in a custom converter: records the nodes it builds into one ONNX function.

    pt2onnx makes one per converter and passes it as the converter's first argument; the
    C++ core then instantiates the function at every node of the op.

    Args:
        opset: The export's opset.
        custom_opsets: The versions of custom domains (`export(custom_opsets=...)`).

    Attributes:
        opset: The export's opset, for converters that depend on it.
    """

    def __init__(self, opset: int, custom_opsets: Mapping[str, int]):
        import onnx  # only needed when custom converters are given

        self._onnx = onnx
        self.opset = opset  # the export's opset, for converters that depend on it
        self._custom_opsets = dict(custom_opsets)
        self._nodes: list[Any] = []
        self._domains: dict[str, int] = {}
        self._refs: dict[str, AttrRef] = {}
        self._n = 0

    def _fresh(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def op(self, op_type: str, *inputs: Any, outputs: int = 1, **attrs: Any) -> Any:
        """Add a node to the function.

        Args:
            op_type: The operator: "Conv", or "mydomain::Foo" for a custom domain
                ("onnx::" and "ai.onnx::" mean the default domain). A custom domain's
                version is taken from `custom_opsets`, 1 when not given there.
            *inputs: The node's inputs: Values, None (an omitted optional input), attribute
                references (made Constants of their value), or Python numbers, lists and
                tensors (made Constants, as `constant()` makes them).
            outputs: The number of outputs of the node.
            **attrs: The node's attributes: Python numbers, strings, lists, tensors, or the
                op's non-tensor arguments (attribute references, resolved per node).
                torch.onnx's suffixed keys are accepted: `alpha_f`, `dims_i`, `mode_s`,
                `value_t` give the attribute's type (float, int, string, tensor; a list of
                that type too) and the suffix is dropped from its name.

        Returns:
            Value | tuple[Value, ...]: The output Value when `outputs` is 1, else a tuple of
                `outputs` Values.

        Raises:
            TypeError: An attribute is a Value, a suffixed key refers to an argument of
                another type, or a tensor constant is bfloat16.
        """
        helper = self._onnx.helper
        domain, _, name = op_type.rpartition("::")
        if domain in ("onnx", "ai.onnx"):
            domain = ""
        if domain:
            self._domains[domain] = self._custom_opsets.get(domain, 1)
        names = []
        for i, x in enumerate(inputs):
            if x is None:
                names.append("")
            elif isinstance(x, Value):
                names.append(x.name)
            elif isinstance(x, AttrRef):
                names.append(self.op("Constant", **{_CONSTANT_ATTR[x.onnx_type]: x}).name)
            else:
                names.append(self.constant(x).name)
        outs = [self._fresh(name.lower()) for _ in range(outputs)]
        node_attrs = []
        for key, v in attrs.items():
            k, kind = _attribute_name(key)
            if kind is not None:
                v = _typed_attribute(op_type, key, kind, v)
            if isinstance(v, AttrRef):
                self._refs[v.name] = v
                node_attrs.append(self._onnx.AttributeProto(name=k, ref_attr_name=v.name,
                                                            type=v.onnx_type))
            elif isinstance(v, Value):
                raise TypeError(f"{op_type}: attribute {k!r} is a tensor Value; attributes are "
                                "constants or the op's non-tensor arguments")
            else:
                if isinstance(v, torch.Tensor):
                    v = _tensor_proto(v)
                node_attrs.append(helper.make_attribute(k, v))
        node = helper.make_node(name, names, outs, domain=domain or None,
                                name=self._fresh("n"))
        node.attribute.extend(node_attrs)
        self._nodes.append(node)
        vals = tuple(Value(o) for o in outs)
        return vals[0] if outputs == 1 else vals

    def constant(self, value: Any, dtype: torch.dtype | None = None) -> Value:
        """Add a Constant node.

        Args:
            value: A tensor, or a Python number or list (float becomes float32, int
                int64, bool bool).
            dtype: The constant's dtype, overriding the above; None: as described.

        Returns:
            Value: The constant.
        """
        t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
        if dtype is not None:
            t = t.to(dtype)
        elif not isinstance(value, torch.Tensor) and t.dtype == torch.float64:
            t = t.to(torch.float32)
        return self.op("Constant", value=t)


# torch.onnx's attribute keys: `alpha_f`, `dims_i`, `mode_s`, `value_t` (the
# suffix gives the type, a list of that type too), as its g.op takes them.
_SUFFIXED = re.compile(r"^(.+)_([ifst])$")
_SUFFIX_TYPES = {"f": (1, 6), "i": (2, 7), "s": (3, 8), "t": (4, None)}


def _attribute_name(key: str) -> tuple[str, str | None]:
    """(attribute name, torch.onnx type suffix or None) of a g.op keyword."""
    m = _SUFFIXED.match(key)
    return (m.group(1), m.group(2)) if m else (key, None)


def _typed_attribute(op_type: str, key: str, kind: str, v: Any) -> Any:
    """A value given under a torch.onnx suffix, as that type (a Python float
    for `_f` even when an int was passed, as torch.onnx writes it)."""
    one, many = _SUFFIX_TYPES[kind]
    if isinstance(v, AttrRef):
        if v.onnx_type not in (one, many) and not (kind == "f" and v.onnx_type in (2, 7)):
            raise TypeError(f"{op_type}: attribute {key!r} refers to argument {v.name!r}, which "
                            "is not of the suffix's type")
        return v
    if kind == "t":
        return v if isinstance(v, torch.Tensor) else torch.tensor(v)
    cast = {"f": float, "i": int, "s": str}[kind]
    if isinstance(v, (list, tuple)):
        return [cast(x) for x in v]
    if kind == "i" and isinstance(v, bool):
        return int(v)
    return cast(v)


# The Constant attribute holding an attribute of each AttributeProto type.
_CONSTANT_ATTR = {1: "value_float", 2: "value_int", 3: "value_string", 6: "value_floats",
                  7: "value_ints", 8: "value_strings"}


def _tensor_proto(t: torch.Tensor) -> Any:
    from onnx import numpy_helper

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        raise TypeError("bfloat16 constants in custom converters: pass float32 and Cast")
    return numpy_helper.from_array(t.numpy())


def _attr_type(ty: Any) -> int | None:
    """AttributeProto type of a schema argument's type; None for a tensor."""
    s = str(ty)
    if s.startswith("Optional[") and s.endswith("]"):
        s = s[len("Optional["):-1]
    if s == "Tensor":
        return None
    table = {"int": 2, "SymInt": 2, "bool": 2, "ScalarType": 2, "MemoryFormat": 2, "Layout": 2,
             "float": 1, "Scalar": 1, "str": 3, "Device": 3,
             "List[int]": 7, "List[SymInt]": 7, "List[bool]": 7, "int[]": 7, "SymInt[]": 7,
             "List[float]": 6, "float[]": 6, "List[str]": 8, "str[]": 8}
    if s in table:
        return table[s]
    raise TypeError(f"arguments of type {ty} cannot be passed to a custom converter")


def _default_attr(name: str, onnx_type: int, value: Any) -> Any:
    """An AttributeProto holding a schema default (the JSON omits defaults)."""
    from onnx import helper

    if onnx_type == 2:
        value = int(value)
    elif onnx_type == 1:
        value = float(value)
    elif onnx_type == 7:
        value = [int(v) for v in value]
    elif onnx_type == 6:
        value = [float(v) for v in value]
    elif onnx_type == 3:
        value = str(value)
    return helper.make_attribute(name, value)


def resolve_target(target: Any) -> tuple[str, Any]:
    """(program spelling "torch.ops.ns.op.overload", its OpOverload)."""
    if hasattr(target, "_opoverload"):  # torch.library.custom_op's CustomOpDef
        target = target._opoverload
    if isinstance(target, torch._ops.OpOverloadPacket):
        target = target.default
    if isinstance(target, str):
        name = target.removeprefix("torch.ops.").replace("::", ".")
        parts = name.split(".")
        if len(parts) == 2:
            parts.append("default")
        if len(parts) != 3:
            raise ValueError(f"custom_translation_table: cannot read target {target!r} "
                             "(expected 'ns::op', 'ns.op.overload' or an op overload)")
        try:
            target = getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
        except (AttributeError, RuntimeError):
            raise ValueError(f"custom_translation_table: no op {target!r} is registered with "
                             "torch (define it or import the library that does first)") from None
    if not isinstance(target, torch._ops.OpOverload):
        raise TypeError("custom_translation_table keys must be op overloads "
                        "(torch.ops.mylib.foo.default), custom ops or 'ns::op' strings, "
                        f"not {type(target).__name__}")
    return "torch.ops." + str(target), target


# register_custom_op_symbolic's table: "ns::op" -> {opset: symbolic function}.
_SYMBOLICS: dict[str, dict[int, Callable[..., Any]]] = {}


def _symbolic_name(symbolic_name: Any) -> str:
    if not isinstance(symbolic_name, str) or not re.fullmatch(r"[A-Za-z_]\w*::\w+",
                                                              symbolic_name):
        raise ValueError(f"symbolic_name must be 'namespace::op' (e.g. 'custom_ops::foo'), "
                         f"not {symbolic_name!r}")
    return symbolic_name


def register_custom_op_symbolic(symbolic_name: str, symbolic_fn: Callable[..., Any],
                                opset_version: int) -> None:
    """Register a torch.onnx symbolic function as the converter of an op.

    As `torch.onnx.register_custom_op_symbolic`, with its meaning: every later export (in
    this process) at opset `opset_version` or above converts the op with `symbolic_fn`.
    Where several opsets are registered for one op, the highest at or below the export's
    opset is used. A `custom_translation_table` entry for the same op wins. Registering the
    same op and opset again replaces the function.

    Args:
        symbolic_name: The op, as "namespace::op" (e.g. "custom_ops::foo"); its default
            overload is converted.
        symbolic_fn: A torch.onnx symbolic function, `symbolic_fn(g, *args)`: called once
            with the op's arguments in schema order (tensors as Values, the others as
            per-node attribute references, which torch.onnx's parse_args passes through),
            building nodes with `g.op` (torch.onnx's attribute suffixes: `alpha_f`,
            `dims_i`, ...) and returning the output Value(s).
        opset_version: The lowest opset the registration applies to.

    Raises:
        ValueError: `symbolic_name` is not "namespace::op".
        TypeError: `symbolic_fn` is not callable, or `opset_version` is not an int.

    Runnable examples: [custom ops and converters](../guides/custom-ops.md).
    """
    name = _symbolic_name(symbolic_name)
    if not callable(symbolic_fn):
        raise TypeError(f"symbolic_fn must be a function, not {symbolic_fn!r}")
    if isinstance(opset_version, bool) or not isinstance(opset_version, int):
        raise TypeError(f"opset_version must be an int, not {opset_version!r}")
    _SYMBOLICS.setdefault(name, {})[opset_version] = symbolic_fn


def unregister_custom_op_symbolic(symbolic_name: str, opset_version: int) -> None:
    """Forget a registration of `register_custom_op_symbolic`.

    As `torch.onnx.unregister_custom_op_symbolic`. Does nothing if there is no such
    registration.

    Args:
        symbolic_name: The op, as "namespace::op", as it was registered.
        opset_version: The opset it was registered at; registrations at other opsets stay.

    Raises:
        ValueError: `symbolic_name` is not "namespace::op".
    """
    versions = _SYMBOLICS.get(_symbolic_name(symbolic_name), {})
    versions.pop(opset_version, None)
    if not versions:
        _SYMBOLICS.pop(symbolic_name, None)


def record_registered(opset: int, custom_opsets: Mapping[str, int],
                      skip: set[str]) -> list[tuple[str, bytes]]:
    """The registered symbolics that apply at `opset` (the highest registered
    opset at or below it), as recorded functions; ops in `skip` (given in
    custom_translation_table) left out."""
    out = []
    for name, versions in sorted(_SYMBOLICS.items()):
        usable = [v for v in versions if v <= opset]
        if not usable:
            continue
        target, _ = resolve_target(name)
        if target in skip:
            continue
        out.append(record(name, versions[max(usable)], opset, custom_opsets, positional=True))
    return out


def record(target: Any, fn: Callable[..., Any], opset: int,
           custom_opsets: Mapping[str, int], positional: bool = False) -> tuple[str, bytes]:
    """(target, serialized FunctionProto) of one custom_translation_table entry."""
    from onnx import helper

    name, overload = resolve_target(target)
    if isinstance(fn, (list, tuple)):
        if len(fn) != 1:
            raise ValueError(f"custom_translation_table[{name}]: give one function (overloads "
                             "by input type are not supported)")
        fn = fn[0]
    schema = overload._schema
    tensor_args, attr_args = [], {}
    for a in schema.arguments:
        t = _attr_type(a.type)
        if str(a.type) in ("List[Tensor]", "Tensor[]", "List[Optional[Tensor]]"):
            raise TypeError(f"custom_translation_table[{name}]: tensor-list argument {a.name!r} "
                            "is not supported by custom converters")
        if t is None:
            tensor_args.append(a.name)
        else:
            attr_args[a.name] = (t, a)

    if hasattr(fn, "to_function_proto"):  # an onnxscript function
        proto = fn.to_function_proto()
    elif callable(fn):
        g = FunctionBuilder(opset, custom_opsets)
        inputs = [Value(a) for a in tensor_args]
        params = inspect.signature(fn).parameters
        var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
        if positional:  # a torch.onnx symbolic: every argument in schema order
            by_name = {a: Value(a) for a in tensor_args}
            by_name.update({k: AttrRef(k, t) for k, (t, _) in attr_args.items()})
            out = fn(g, *(by_name[a.name] for a in schema.arguments))
        else:
            kwargs = {k: AttrRef(k, t) for k, (t, _) in attr_args.items()
                      if var_kw or k in params}
            out = fn(g, *inputs, **kwargs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        for o in outs:
            if not isinstance(o, Value):
                raise TypeError(f"custom_translation_table[{name}]: the converter must return "
                                f"Values made by g.op (or a tuple of them), not {o!r}")
        # Outputs must be distinct node outputs: an input returned as is gets an Identity.
        seen: set[str] = set()
        out_names = []
        for o in outs:
            if o.name in seen or o.name in tensor_args:
                o = g.op("Identity", o)
            seen.add(o.name)
            out_names.append(o.name)
        opsets = [helper.make_opsetid("", opset)]
        opsets += [helper.make_opsetid(d, v) for d, v in sorted(g._domains.items())]
        proto = helper.make_function(RECORD_DOMAIN, name, [a for a in tensor_args], out_names,
                                     g._nodes, opsets, attributes=sorted(g._refs))
    else:
        raise TypeError(f"custom_translation_table[{name}]: {fn!r} is neither an onnxscript "
                        "function nor a Python function")
    # The program omits arguments at their schema default: give the function
    # those defaults, so that references to them resolve.
    plain = []
    for attr_name in list(proto.attribute):
        entry = attr_args.get(attr_name)
        if entry is not None and entry[1].has_default_value() \
                and entry[1].default_value is not None:
            proto.attribute_proto.append(_default_attr(attr_name, entry[0],
                                                       entry[1].default_value))
        else:
            plain.append(attr_name)
    del proto.attribute[:]
    proto.attribute.extend(plain)
    return name, proto.SerializeToString()


def record_table(table: Mapping[Any, Any] | None, opset: int,
                 custom_opsets: Mapping[str, int] | None) -> list[tuple[str, bytes]]:
    """The table's converters, then the registered torch.onnx symbolics
    (register_custom_op_symbolic) of ops the table does not convert: every
    path (export, export_pretrained, the torch.compile backend, the functions
    file for the command) sees both."""
    if table and not isinstance(table, Mapping):
        raise TypeError("custom_translation_table must be a dict {op: function}")
    out = [record(t, fn, opset, custom_opsets or {}) for t, fn in (table or {}).items()]
    return out + record_registered(opset, custom_opsets or {}, {t for t, _ in out})


def check_custom_opsets(custom_opsets: Any) -> dict[str, int]:
    if custom_opsets is None:
        return {}
    if not isinstance(custom_opsets, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 1
            for k, v in custom_opsets.items()):
        raise TypeError(f"custom_opsets must be a dict {{domain: version >= 1}}, "
                        f"not {custom_opsets!r}")
    return dict(custom_opsets)


def save_custom_converters(table: Mapping[Any, Any], path: Any, opset: int | None = None,
                           custom_opsets: Mapping[str, int] | None = None) -> None:
    """Write custom converters to an ONNX file of functions for the `pt2onnx` command.

    The command converts a `.pt2` with them: `pt2onnx m.pt2 --functions path`. Each
    converter becomes a function named after its target. Ops registered with
    `register_custom_op_symbolic` that the table does not convert are written too. Needs
    the onnx package.

    Args:
        table: The converters, `{op: fn}`, as `export(custom_translation_table=...)` takes
            them.
        path: The file to write (str or `os.PathLike`).
        opset: The ONNX opset the converters are recorded at; None:
            `pt2onnx.DEFAULT_OPSET`.
        custom_opsets: `{"domain": version}` for the custom domains the converters' nodes
            use (1 for a domain not given); the file's opset_import carries them.

    Runnable examples: [custom ops and converters](../guides/custom-ops.md).
    """
    import os

    from onnx import helper

    from . import _core
    from ._export import DEFAULT_OPSET

    opset = DEFAULT_OPSET if opset is None else int(opset)
    custom_opsets = check_custom_opsets(custom_opsets)
    import onnx

    functions = []
    for _, proto in record_table(table, opset, custom_opsets):
        f = onnx.FunctionProto()
        f.ParseFromString(proto)
        functions.append(f)
    imports = [helper.make_opsetid("", opset), helper.make_opsetid(RECORD_DOMAIN, 1)]
    imports += [helper.make_opsetid(d, v) for d, v in sorted(custom_opsets.items())]
    graph = helper.make_graph([], "custom_converters", [], [])
    model = helper.make_model(graph, opset_imports=imports, functions=functions,
                              producer_name="pt2onnx", producer_version=_core.__version__,
                              ir_version=max(8, _core.ir_version_for_opset(opset)))
    with open(os.fspath(path), "wb") as fh:
        fh.write(model.SerializeToString())
