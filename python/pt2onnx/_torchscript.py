"""TorchScript models as a front door: a ScriptModule (torch.jit.script,
torch.jit.trace, torch.jit.load, a torch.jit.ScriptModule subclass), a
ScriptFunction, or an nn.Module holding scripted submodules or calling script
functions becomes an FX GraphModule of ATen calls, which export() then
captures like any nn.Module (dynamic shapes, names, the C++ core after it).

The TorchScript graph is read with torch's own reader
(torch._export.converter.TS2FXGraphConverter: one FX call per TorchScript
node, `prim::If` as torch.cond), with one change: torch's reader unrolls
every `prim::Loop` and refuses one whose trip count or condition is not a
constant. Here a loop is decided when the FX graph runs (at capture):
- a trip count that is a plain int there and a condition the body leaves
  constant: the body runs that many times (unrolled, as torch's reader does;
  lists appended to in the body work only here);
- otherwise (a trip count from a tensor's value or a dynamic size, or a
  `while` whose condition the body computes): torch's while_loop, which the
  C++ core writes as an ONNX Loop. Its loop-carried values are tensors: ints,
  floats and bools carried by the TorchScript loop travel as 0-d tensors.
No op is converted here: the ATen calls go to the C++ core's converters."""

from __future__ import annotations

import contextlib
import operator
import re
import types
from typing import Any

import torch


def is_torchscript(model: Any) -> bool:
    return isinstance(model, (torch.jit.ScriptModule, torch.jit.ScriptFunction))


class TorchScriptError(RuntimeError):
    """A TorchScript graph with nodes that do not read into ATen calls."""


def _as_tensor(v: Any) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, (bool, torch.SymBool)):
        return torch.ops.aten.scalar_tensor.default(v, dtype=torch.bool)
    if isinstance(v, (int, torch.SymInt)):
        return torch.ops.aten.scalar_tensor.default(v, dtype=torch.int64)
    if isinstance(v, (float, torch.SymFloat)):
        return torch.ops.aten.scalar_tensor.default(v, dtype=torch.float64)
    raise TorchScriptError(
        f"a {type(v).__name__} carried through a loop whose trip count is not known at export: "
        "only tensors, ints, floats and bools can be loop-carried in ONNX Loop")


def _from_tensor(t: torch.Tensor, like: Any) -> Any:
    if isinstance(like, torch.Tensor):
        return t
    return t.item()


def _concrete(v: Any) -> bool:
    """A plain Python bool or int (TorchScript's constant `true` reads as 1)."""
    return type(v) in (bool, int)


def run_loop(body, trip, cond, n_locals: int, mutated: tuple, constant_cond: bool, *args):
    """prim::Loop at capture time. `body(*globals, i, *locals)` returns
    (condition, *locals, *updated values); `mutated` pairs (position among
    the updated values, index in globals) for the globals the body updates in
    place (appended lists, in-place ops); torch's reader also returns updates
    of the body's own inputs, which the loop-carried locals already hold."""
    locals_ = list(args[:n_locals])
    globals_ = list(args[n_locals:])
    static = (_concrete(trip) and _concrete(cond) and constant_cond)
    if static:
        i = 0
        while cond and i < trip:
            out = body(*globals_, i, *locals_)
            if not isinstance(out, (tuple, list)):
                out = (out,)
            cond = out[0]
            locals_ = list(out[1:1 + n_locals])
            for pos, g in mutated:
                globals_[g] = out[1 + n_locals + pos]
            i += 1
        return (*locals_, *(globals_[g] for _, g in mutated))
    return _while_loop(body, trip, cond, n_locals, mutated, locals_, globals_)


def run_if(pred, then_branch, else_branch, kinds: tuple, *args):
    """prim::If at capture: a predicate that is a Python bool there (a
    shape, a flag, `self.training`) runs its branch only, as Python would; a
    tensor or SymBool predicate becomes torch.cond (an ONNX If), whose
    branches return tensors: ints, floats and bools travel as 0-d tensors."""
    if isinstance(pred, torch.Tensor) and pred.numel() == 1 and not _is_fake(pred):
        pred = bool(pred)
    if _concrete(pred):
        return (then_branch if pred else else_branch)(*args)
    n_outputs = len(kinds)
    if n_outputs == 0:
        return None
    for k in kinds:
        if k not in _SCALAR_KIND and k != "Tensor":
            raise TorchScriptError(
                f"an if on a tensor's value (an ONNX If) returns a {k}: an If's branches can "
                "return only tensors, ints, floats and bools")
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    where = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def branch(fn):
        def run(*ts):
            full = list(args)
            for i, t in zip(where, ts):
                full[i] = t
            out = fn(*full)
            out = [out] if n_outputs == 1 else list(out)
            return tuple(_as_tensor(v) for v in out)
        return run

    if isinstance(pred, torch.Tensor):
        pred = pred.reshape(()).to(torch.bool) if pred.dtype != torch.bool else pred.reshape(())
    res = torch.cond(pred, branch(then_branch), branch(else_branch), tuple(tensors))
    res = [t if k not in _SCALAR_KIND else _SCALAR_KIND[k](t.item()) for t, k in zip(res, kinds)]
    return res[0] if n_outputs == 1 else tuple(res)


_SCALAR_KIND = {"int": int, "float": float, "bool": bool}


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import is_fake
    return is_fake(t) or t.device.type == "meta"


def _while_loop(body, trip, cond, n_locals, mutated, locals_, globals_):
    from torch._higher_order_ops.while_loop import while_loop

    mut_idx = [g for _, g in mutated]
    likes = locals_ + [globals_[g] for g in mut_idx]
    fixed = [g for j, g in enumerate(globals_) if j not in mut_idx]
    fixed_idx = [j for j in range(len(globals_)) if j not in mut_idx]
    for v in fixed:
        if not isinstance(v, (torch.Tensor, int, float, bool, torch.SymInt, torch.SymFloat,
                              torch.SymBool, type(None), str, torch.dtype, torch.device)):
            raise TorchScriptError(
                f"a {type(v).__name__} used in a loop whose trip count is not known at export")
    # Symbolic values the body reads: tensors in, values again inside; plain
    # Python numbers stay constants.
    fixed_t = [_as_tensor(v) if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool))
               else v for v in fixed]
    tensor_fixed = [j for j, v in enumerate(fixed_t) if isinstance(v, torch.Tensor)]
    const_fixed = {j: v for j, v in enumerate(fixed_t) if not isinstance(v, torch.Tensor)}

    def rebuild_globals(extra, carried_mut):
        g = [None] * len(globals_)
        for k, j in enumerate(fixed_idx):
            g[j] = const_fixed[k] if k in const_fixed else _from_tensor(
                extra[tensor_fixed.index(k)], fixed[k])
        for k, j in enumerate(mut_idx):
            g[j] = _from_tensor(carried_mut[k], likes[n_locals + k])
        return g

    def cond_fn(i, n, c, *rest):
        return torch.logical_and(i < n, c)

    # The globals the body only reads are closed over (while_loop lifts them).
    extra = tuple(fixed_t[j] for j in tensor_fixed)

    def body_fn(i, n, c, *carried):
        g = rebuild_globals(extra, carried[n_locals:])
        loc = [_from_tensor(t, like) for t, like in zip(carried[:n_locals], likes)]
        out = body(*g, _from_tensor(i, 0), *loc)
        if not isinstance(out, (tuple, list)):
            out = (out,)
        updated = [out[1 + n_locals + pos] for pos, _ in mutated]
        new = [_as_tensor(v) for v in (*out[1:1 + n_locals], *updated)]
        return (i + 1, n.clone(), _as_tensor(out[0]).to(torch.bool).reshape(()), *new)

    if _concrete(trip):
        # A `while` loop's trip count is INT64_MAX; the core writes scalars
        # through a double, exact for powers of two: 2**62 iterations is as endless.
        trip = min(trip, 2**62)
    init = (torch.zeros((), dtype=torch.int64), _as_tensor(trip).to(torch.int64).reshape(()),
            _as_tensor(cond).to(torch.bool).reshape(()), *(_as_tensor(v) for v in likes))
    out = while_loop(cond_fn, body_fn, init)
    res = [_from_tensor(t, like) for t, like in zip(out[3:], likes)]
    return tuple(res)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """TorchScript's aten::__interpolate (F.interpolate in scripted code) as
    F.interpolate itself: its torch.ops kernel reads the sizes as ints,
    which fixes dynamic sizes to the example's."""
    if isinstance(size, (list, tuple)) and len(size) == 1:
        size = size[0]
    if isinstance(scale_factor, (list, tuple)) and len(scale_factor) == 1:
        scale_factor = scale_factor[0]
    flag = (lambda v: None if v is None else bool(v))  # TorchScript's bools read as 0 / 1
    return torch.nn.functional.interpolate(input, size, scale_factor, mode, flag(align_corners),
                                           flag(recompute_scale_factor), bool(antialias))


def tensor_size(t):
    return list(t.shape)


def tensor_size_dim(t, dim):
    return t.shape[dim]


def device_of(t):
    return t.device


def device_type(d):
    return d.type


def clone_tensor(v):
    return v.clone() if isinstance(v, torch.Tensor) else v


def new_tensor(data, dtype=None, device=None, requires_grad=False):
    """aten::tensor(data, dtype, device, requires_grad): from Python numbers a
    constant, from traced values (SymInts, 0-d tensors) torch._refs.tensor."""
    from torch._export import converter as tsc
    if isinstance(dtype, int):
        dtype = tsc._TORCH_ENUM_TO_DTYPE[dtype]
    flat = data if isinstance(data, (list, tuple)) else [data]
    plain = all(type(v) in (int, float, bool) for v in flat)
    make = torch.tensor if plain else torch._refs.tensor
    return make(data, dtype=dtype, device=device, requires_grad=bool(requires_grad))


_SCALAR_TYPES = {"int", "float", "bool", "number", "Scalar"}
_SCALAR_OPS = {
    "aten::add": operator.add, "aten::sub": operator.sub, "aten::mul": operator.mul,
    "aten::div": operator.truediv, "aten::floordiv": operator.floordiv,
    "aten::remainder": operator.mod, "aten::neg": operator.neg, "aten::pow": operator.pow,
    "aten::eq": operator.eq, "aten::ne": operator.ne, "aten::lt": operator.lt,
    "aten::le": operator.le, "aten::gt": operator.gt, "aten::ge": operator.ge,
}


def _list_slice(xs, start=None, end=None, step=1):
    return xs[start:end:step]


def _list_set_item(xs, i, v):
    # In place, as TorchScript does: a branch run at capture (run_if) gets
    # the enclosing block's list object itself.
    xs[i] = v
    return xs


# TorchScript's list operations as Python's, by schema name (torch.ops.aten's
# list overloads refuse the Python lists and SymInts of a capture).
_LIST_OPS = {
    "aten::slice.t": _list_slice, "aten::copy.t": list, "aten::list.t": list,
    "aten::mul.left_t": operator.mul, "aten::mul.right_": operator.mul,
    "aten::add.t": operator.add, "aten::eq.int_list": operator.eq,
    "aten::ne.int_list": operator.ne, "aten::__getitem__.t": operator.getitem,
    "aten::len.t": len, "aten::format": lambda fmt, *a: fmt.format(*a), "aten::_set_item.t": _list_set_item, "aten::count.int": lambda xs, v: xs.count(v),
}


def _dict_items(d):
    return list(d.items())


def _container_op(name: str):
    """Dict operations (torchvision's segmentation models return a dict) as
    Python's, by schema name: aten::_set_item.str, aten::__getitem__.Dict_str,
    aten::keys.str, ..."""
    base, _, overload = name.partition(".")
    if not overload or not (overload.startswith("Dict") or overload in (
            "str", "int", "bool", "float", "Tensor") and base in (
            "aten::_set_item", "aten::keys", "aten::values", "aten::items")):
        return None
    return {"aten::_set_item": _list_set_item, "aten::__getitem__": operator.getitem,
            "aten::len": len, "aten::keys": lambda d: list(d.keys()),
            "aten::values": lambda d: list(d.values()), "aten::items": _dict_items,
            "aten::__contains__": operator.contains}.get(base)


# Tensor metadata read as Python values at capture (static or SymInt), by schema name.
_TENSOR_METADATA = {
    "aten::dim": torch.Tensor.dim, "aten::numel": torch.Tensor.numel,
    "aten::is_floating_point": torch.Tensor.is_floating_point,
    "aten::is_complex": torch.Tensor.is_complex, "aten::element_size": torch.Tensor.element_size,
}


def _values_read(block) -> set:
    """Names of the values the nodes of `block` and its sub-blocks read."""
    names = set()
    for node in block.nodes():
        names.update(i.debugName() for i in node.inputs())
        for sub in node.blocks():
            names |= _values_read(sub)
    return names


def _converter_class():
    from torch._export import converter as tsc

    class Reader(tsc.TS2FXGraphConverter):
        """torch's TorchScript -> FX reader with loops decided at capture."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # torch's reader makes aten::size torch.ops.aten.sym_size, which
            # specializes the sizes: read them as the traced shape's SymInts.
            self.convert_aten_size = self._convert_size

        def _convert_size(self, node):
            ins = [self.get_fx_value_by_ir_value(i) for i in node.inputs()]
            fn = tensor_size if len(ins) == 1 else tensor_size_dim
            self.name_to_node[node.output().debugName()] = self.fx_graph.call_function(
                fn, tuple(ins))

        def convert_call_function_op(self, node):
            # TorchScript's arithmetic on ints and floats (aten::add.int,
            # aten::lt.float, ...) as Python's operators, which also take the
            # SymInts a loop's carried ints become (torch.ops.aten.add.int
            # refuses them).
            op = _SCALAR_OPS.get(node.kind())
            if op is not None and node.outputsSize() == 1 and all(
                    str(i.type()) in _SCALAR_TYPES for i in node.inputs()) and str(
                    node.output().type()) in _SCALAR_TYPES:
                args = tuple(self.get_fx_value_by_ir_value(i) for i in node.inputs())
                self.name_to_node[node.output().debugName()] = self.fx_graph.call_function(
                    op, args)
                return
            name = node.schema().split("(")[0]
            meta = (_TENSOR_METADATA.get(name) or _LIST_OPS.get(name) or _container_op(name)
                    or (interpolate if name.startswith("aten::__interpolate") else None))
            if meta is not None:
                # Read at capture as Python values (torch.ops.aten.dim would be
                # recorded as a graph op); a dict's _set_item returns nothing.
                args = tuple(self.get_fx_value_by_ir_value(i) for i in node.inputs())
                fx_node = self.fx_graph.call_function(meta, args)
                if node.outputsSize() == 1:
                    self.name_to_node[node.output().debugName()] = fx_node
                return
            super().convert_call_function_op(node)

        def convert_aten_append(self, node):
            target = self.get_fx_value_by_ir_value(node.inputsAt(0))
            if isinstance(target, torch.fx.Node):
                return super().convert_aten_append(node)
            # A list constant appended to in a block (torch's handler expects
            # an FX value): a new list, as torch's list_append makes.
            el = self.get_fx_value_by_ir_value(node.inputsAt(1))
            fx_node = self.fx_graph.call_function(tsc.list_append, (target, el))
            self.name_to_node[node.output().debugName()] = fx_node
            self.name_to_node[node.inputsAt(0).debugName()] = fx_node

        def convert_graph_outputs(self):
            super().convert_graph_outputs()
            # torch's reader clones a block input returned as it is (cond's
            # rule), also when it is not a tensor: clone tensors only.
            for n in self.fx_graph.nodes:
                if n.op == "call_function" and n.target is torch.clone and \
                        n.args[0].op == "placeholder":
                    n.target = clone_tensor
            # A tensor constant returned by a block (prim::Uninitialized's
            # placeholder tensor): an attribute, which generated code can name.
            out = next(n for n in reversed(self.fx_graph.nodes) if n.op == "output")

            def attr(v):
                if not isinstance(v, torch.Tensor):
                    return v
                key = f"_ts_constant_{len(self.name_to_constant)}"
                self.name_to_constant[key] = v
                with self.fx_graph.inserting_before(out):
                    return self.fx_graph.get_attr(key)

            out.args = (torch.fx.node.map_aggregate(out.args[0], attr),)

        def convert_prim_device(self, node):
            # Read at capture (torch's reader takes it from the static type,
            # None where shapes were not propagated).
            self.name_to_node[node.output().debugName()] = self.fx_graph.call_function(
                device_of, (self.get_fx_value_by_ir_value(node.input()),))

        def convert_prim_type(self, node):
            self.name_to_node[node.output().debugName()] = self.fx_graph.call_function(
                device_type, (self.get_fx_value_by_ir_value(node.input()),))

        def convert_prim_requires_grad(self, node):
            # Read by fast-path checks (MultiheadAttention's): True keeps the
            # composite path, the one torch.export records for such modules.
            self.name_to_node[node.output().debugName()] = True

        def convert_aten_tensor(self, node):
            # torch's handler calls a function local to it, which a
            # GraphModule's generated code cannot name; the same at module level.
            args, kwargs = self.get_args_kwargs(node, torch.ops.aten.tensor.default._schema)
            self.name_to_node[node.output().debugName()] = self.fx_graph.call_function(
                new_tensor, tuple(args), kwargs)

        def convert_aten_warn(self, node):
            """warnings.warn in scripted code (torchvision's deprecations): nothing to export."""


        def _identify_inputs_as_arguments(self, entry):
            # torch's search also reads the blocks' returned values: a block
            # that returns a value of the enclosing block unchanged (vit's
            # MultiheadAttention fast-path checks) failed with "Output not found".
            # And the parameters / buffers read in the blocks through an
            # attribute value of an enclosing block (torch lifts only those a
            # block reads with its own GetAttr: vit's MultiheadAttention).
            arguments = super()._identify_inputs_as_arguments(entry)
            lifted = (self.name_to_param, self.name_to_buffer, self.name_to_constant)
            for block in entry.blocks():
                for out in block.outputs():
                    name = out.debugName()
                    if name in self.name_to_node and name not in self.name_to_attribute_fqn:
                        arguments.add(name)
                for v in _values_read(block):
                    fqn = self.name_to_attribute_fqn.get(v)
                    if fqn is not None and any(fqn in d for d in lifted) and (
                            fqn in self.name_to_node or fqn in self.name_to_constant):
                        arguments.add(fqn)
            return arguments

        def convert_prim_If(self, node):
            self._check_set_attr_in_if_block(node)
            pred = self.get_fx_value_by_ir_value(node.inputsAt(0))
            arguments = set(self._identify_inputs_as_arguments(node))
            for block in node.blocks():
                arguments |= self.blocks_to_lifted_attrs[block]
            arguments = sorted(arguments)
            subgraph_nodes, _ = self._convert_block_to_subgraph(node, arguments)
            args = [self.get_fx_value_by_fqn(n) for n in arguments]
            kinds = tuple(str(o.type()) for o in node.outputs())
            out = self.fx_graph.call_function(
                run_if, (pred, subgraph_nodes[0], subgraph_nodes[1], kinds, *args))
            if node.outputsSize() == 1:
                self.name_to_node[node.output().debugName()] = out
            else:
                for i, o in enumerate(node.outputs()):
                    self.name_to_node[o.debugName()] = self.fx_graph.call_function(
                        operator.getitem, (out, i))

        def convert_prim_Loop(self, node):
            inputs = list(node.inputs())
            trip = self.get_fx_value_by_ir_value(inputs[0])
            cond = self.get_fx_value_by_ir_value(inputs[1])
            loop_locals = [inp.debugName() for inp in inputs[2:]]
            global_arguments = set(self._identify_inputs_as_arguments(node))
            for block in node.blocks():
                global_arguments |= self.blocks_to_lifted_attrs[block]
            global_arguments = sorted(global_arguments)
            subgraph_nodes, converters = self._convert_block_to_subgraph(node, global_arguments)
            sub = converters[0]
            # The body's updates, in the order its outputs list them: of the
            # enclosing block's values (globals) and of its own inputs.
            updated = list(sub.name_update_from_subblock_to_parent)
            mutated = tuple((pos, global_arguments.index(n)) for pos, n in enumerate(updated)
                            if n in global_arguments)
            mutated_names = [global_arguments[g] for _, g in mutated]
            if not self.is_top_level_graph():
                self.name_update_from_subblock_to_parent |= set(mutated_names)
            block = next(node.blocks())
            constant_cond = next(block.outputs()).node().kind() == "prim::Constant"
            args = [self.get_fx_value_by_fqn(n) for n in loop_locals + global_arguments]
            loop = self.fx_graph.call_function(
                run_loop, (subgraph_nodes[0], trip, cond, len(loop_locals), mutated,
                           constant_cond, *args))
            for i, outp in enumerate(node.outputs()):
                self.name_to_node[outp.debugName()] = self.fx_graph.call_function(
                    operator.getitem, (loop, i))
            for k, name in enumerate(mutated_names):
                self.name_to_node[name] = self.fx_graph.call_function(
                    operator.getitem, (loop, node.outputsSize() + k))

    return tsc, Reader


@contextlib.contextmanager
def _reader_for_blocks(tsc, reader):
    """torch's reader makes the readers of sub-blocks by its class's global
    name: the loop-aware class there too, for the conversion. And its
    rewrite of sym_size // scale, which symbolically traces its pattern anew
    for every block (70% of the reading time of vit_b_16, 821 blocks), only
    where the block has the division it rewrites."""
    saved = tsc.TS2FXGraphConverter, tsc.inplace_optimize_sym_size_div
    rewrite = saved[1]

    def sym_size_div(gm):
        if any(n.target is torch.ops.aten.div.Scalar_mode for n in gm.graph.nodes):
            rewrite(gm)

    tsc.TS2FXGraphConverter, tsc.inplace_optimize_sym_size_div = reader, sym_size_div
    try:
        yield
    finally:
        tsc.TS2FXGraphConverter, tsc.inplace_optimize_sym_size_div = saved


def _script_functions(fn: Any, found: dict, seen: set, depth: int = 0) -> None:
    """Script functions a Python function calls by a global name, there and
    in the Python functions it calls so (three levels): (globals dict,
    name) -> ScriptFunction."""
    fn = getattr(fn, "__func__", fn)  # a bound method's function
    if not isinstance(fn, types.FunctionType):  # builtins, classes, descriptors: no code
        return
    code = fn.__code__
    if id(code) in seen or depth > 3:
        return
    seen.add(id(code))
    g = fn.__globals__
    for name in code.co_names:
        v = g.get(name)
        if isinstance(v, torch.jit.ScriptFunction):
            found[(id(g), name)] = (g, name, v)
        elif isinstance(v, types.FunctionType) and not name.startswith("__"):
            _script_functions(v, found, seen, depth + 1)


@contextlib.contextmanager
def script_parts(model: torch.nn.Module):
    """An nn.Module that holds ScriptModules or calls script functions (the
    torch.onnx documentation's "mixing tracing and scripting"): during the
    block, each scripted submodule is its GraphModule and each script
    function its module's global name is called by is one, so torch.export
    captures through them with their loops and ifs (it cannot trace into
    TorchScript: a scripted submodule is called with the wrong arguments, a
    loop over int(tensor) stops at a data-dependent guard)."""
    swaps = []
    for parent in model.modules():
        if isinstance(parent, torch.jit.ScriptModule):
            continue
        for name, child in list(parent._modules.items()):
            if isinstance(child, torch.jit.ScriptModule):
                swaps.append((parent, name, child))
    found: dict = {}
    seen: set = set()
    for m in model.modules():
        if not isinstance(m, torch.jit.ScriptModule):
            _script_functions(type(m).forward, found, seen)
    if not swaps and not found:
        yield
        return
    patched = []
    try:
        for parent, name, child in swaps:
            parent._modules[name] = to_graph_module(child)
        for g, name, fn in found.values():
            patched.append((g, name, fn))
            g[name] = to_graph_module(fn)
        yield
    finally:
        for parent, name, child in swaps:
            parent._modules[name] = child
        for g, name, fn in patched:
            g[name] = fn


def _forward_name(ts: Any) -> str:
    """The method exported: forward, or for a module whose forward is
    overloaded (a scripted nn.LSTM / GRU / RNN compiles forward__0 for a
    tensor and forward__1 for a PackedSequence) the first overload taking a
    tensor."""
    names = ts._c._method_names()
    if "forward" in names:
        return "forward"
    for name in sorted(n for n in names if re.fullmatch(r"forward__\d+", n)):
        args = ts._c._get_method(name).schema.arguments
        if len(args) > 1 and str(args[1].type) == "Tensor":
            return name
    raise TorchScriptError("the ScriptModule has no forward method (nor a forward overload "
                           "taking a tensor) to export")


def _forward(ts: Any) -> Any:
    return ts._c._get_method(_forward_name(ts))


def bind_inputs(model: Any, args: tuple, kwargs: dict | None) -> tuple:
    """The TorchScript model's inputs as one positional tuple, in its
    schema's order: keyword arguments placed, defaults filled in (the graph
    has an input for each argument)."""
    if isinstance(model, torch._C.ScriptFunction):
        schema_args = list(model.schema.arguments)
    else:
        schema_args = list(_forward(model).schema.arguments[1:])
    kwargs = dict(kwargs or {})
    bound = list(args)
    if len(bound) > len(schema_args):
        raise TypeError(f"the TorchScript model takes {len(schema_args)} inputs "
                        f"({', '.join(a.name for a in schema_args)}); {len(bound)} were given")
    for a in schema_args[len(bound):]:
        if a.name in kwargs:
            bound.append(kwargs.pop(a.name))
        elif a.has_default_value():
            bound.append(a.default_value)
        else:
            raise TypeError(f"the TorchScript model's input {a.name!r} was not given")
    if kwargs:
        raise TypeError(f"the TorchScript model has no input named {sorted(kwargs)}")
    return tuple(bound)


def to_graph_module(model: Any) -> torch.fx.GraphModule:
    """The TorchScript model (ScriptModule or ScriptFunction) as an FX
    GraphModule of ATen calls, parameters and buffers under their names."""
    tsc, reader = _converter_class()
    ts = model
    if isinstance(model, torch.jit.ScriptModule):
        _forward_name(model)  # a clear error when there is none
    # TS2EPConverter's set-up (graph inlined, attributes lifted), without its
    # O(parameters^2) search for which state-dict entries are parameters.
    setup = object.__new__(tsc.TS2EPConverter)
    setup.ts_model = ts
    setup.ts_graph, setup.params = _graph_without_shapes(tsc, ts)
    setup.name_to_param, setup.name_to_buffer = {}, {}
    if not isinstance(ts, torch._C.ScriptFunction):
        params = {k for k, _ in ts.named_parameters()}
        for k, t in ts.state_dict().items():
            (setup.name_to_param if k in params else setup.name_to_buffer)[k] = t
    _name_inputs(setup.ts_graph, ts)
    setup.name_to_non_tensor_attributes, setup.name_to_constant = {}, {}
    setup.lift_get_attr()
    blocks_to_lifted_attrs, name_to_attribute_fqn = tsc.get_block_to_lifted_attrs(setup.ts_graph)
    graph_reader = reader(setup.ts_graph, setup.name_to_param, setup.name_to_buffer,
                          blocks_to_lifted_attrs, setup.name_to_non_tensor_attributes,
                          setup.name_to_constant, name_to_attribute_fqn)
    with _reader_for_blocks(tsc, reader):
        try:
            gm = graph_reader.convert()
        except Exception as e:  # noqa: BLE001 - read again, listing every node that fails
            failures = _failing_nodes(tsc, reader, setup, blocks_to_lifted_attrs,
                                      name_to_attribute_fqn)
            raise TorchScriptError(_unsupported_message(failures, e)) from e
    tsc.replace_quantized_ops_with_standard_ops(gm)
    _input_defaults(gm, ts)
    return gm


def _input_defaults(gm: torch.fx.GraphModule, ts: Any) -> None:
    """The forward's default values on the graph's inputs, so a scripted
    submodule called with fewer arguments (an Optional left out) works."""
    schema_args = ts.schema.arguments if isinstance(ts, torch._C.ScriptFunction) else \
        _forward(ts).schema.arguments[1:]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    changed = False
    for p, a in zip(placeholders, schema_args):
        if a.has_default_value() and not p.args:
            p.args = (a.default_value,)
            changed = True
    if changed:
        gm.recompile()


def _graph_without_shapes(tsc, ts):
    """torch's _create_jit_graph less the input-shape propagation: shapes are
    found at capture (symbolic where asked); the propagation needs example
    tensors for every input (a None default fails) and the reader does not
    use its static shapes (prim::device is read at capture here)."""
    C = torch._C
    if isinstance(ts, torch.jit.ScriptModule):
        name = _forward_name(ts)
        C._jit_pass_onnx_function_substitution(ts._c._get_method(name).graph)
        frozen = C._freeze_module(ts._c, preserveParameters=True,
                                  preservedAttrs=[name] if name != "forward" else [])
        if name != "forward":  # torch's parameter listing looks for `forward`:
            # the parameters stay attributes, which the reader lifts.
            return frozen._get_method(name).graph, []
        module, params = C._jit_onnx_list_model_parameters(frozen)
        return module._get_method(name).graph, params
    C._jit_pass_onnx_function_substitution(ts.graph)
    return ts.graph, []


def _name_inputs(graph, ts: Any) -> None:
    """The graph's inputs under the forward's argument names (TorchScript's
    value names carry suffixes, `x.1`, which FX reads as `x_1`), as export()
    names inputs and matches dynamic_axes / dynamic_shapes keys. Set on the
    TorchScript graph (a copy: the frozen module's), so the reader's
    placeholders take them."""
    if isinstance(ts, torch._C.ScriptFunction):
        names = [a.name for a in ts.schema.arguments]
    else:  # the first argument is the module, whatever its name
        names = [a.name for a in _forward(ts).schema.arguments[1:]]
    # The user's inputs come first (after the module itself where the graph
    # keeps it); the frozen module's parameters follow.
    inputs = [v for v in graph.inputs() if v.type().kind() != "ClassType"]
    for value, name in zip(inputs, names):
        if name.isidentifier():
            value.setDebugName(name)


def _failing_nodes(tsc, reader, setup, blocks_to_lifted_attrs, name_to_attribute_fqn) -> list:
    """The graph read again with every node's failure recorded and the
    reading going on (a node whose input failed is not listed again):
    [(kind, where, why)]."""
    failures: list = []

    class Explain(reader):
        def convert_node(self, node):
            try:
                super().convert_node(node)
            except Exception as e:  # noqa: BLE001 - recorded, reading goes on
                cause = e
                while cause.__cause__ is not None:
                    cause = cause.__cause__
                why = str(cause).strip().splitlines()[0] if str(cause).strip() else \
                    type(cause).__name__
                if isinstance(cause, ValueError) and why.endswith("not found"):
                    return  # an input that failed before: listed there
                if node.kind() in ("prim::If", "prim::Loop") and any(
                        f[3] for f in failures):
                    return  # its blocks' nodes are listed
                failures.append((node.kind(), _source_line(node), why, True))

        def convert_graph_outputs(self):
            try:
                super().convert_graph_outputs()
            except Exception:  # noqa: BLE001 - an output whose node failed
                pass

    explain = Explain(setup.ts_graph, setup.name_to_param, setup.name_to_buffer,
                      blocks_to_lifted_attrs, setup.name_to_non_tensor_attributes,
                      setup.name_to_constant, name_to_attribute_fqn)
    with _reader_for_blocks(tsc, Explain):
        try:
            explain.convert()
        except Exception:  # noqa: BLE001 - the list is what is wanted
            pass
    return [f[:3] for f in failures]


def _source_line(node) -> str:
    """`file:line` of a TorchScript node, or "" (torch.jit.load'ed code keeps
    its serialized source's lines)."""
    try:
        text = node.sourceRange()
    except Exception:  # noqa: BLE001 - no source kept
        return ""
    for line in str(text).splitlines():
        line = line.strip()
        if line.startswith("File "):
            return line
    return ""


def _unsupported_message(failures: list, e: BaseException) -> str:
    if not failures:
        cause = e
        while cause.__cause__ is not None:
            cause = cause.__cause__
        failures = [("?", "", f"{type(cause).__name__}: {cause}".splitlines()[0])]
    lines = [f"{len(failures)} TorchScript node{'s' if len(failures) > 1 else ''} could not be "
             "read into ATen calls; nothing was written:"]
    for kind, where, why in failures:
        lines.append(f"  {kind}" + (f" ({where})" if where else "") + f": {why}")
    return "\n".join(lines)


def check_loaded_graphs(model: Any, path: str) -> None:
    """The methods of a TorchScript model loaded from `path`, each inlined, checked node by
    node with the C++ core's rules for TorchScript files (`_core.torchscript_op_refusal`):
    the file's text was checked before loading (`_core.check_torchscript_file`); this is the
    same check on the graphs torch compiled from it, before any of them runs."""
    from . import _core

    def walk(block, method):
        for node in block.nodes():
            why = _core.torchscript_op_refusal(node.kind())
            if why is not None:
                where = _source_line(node)
                raise TorchScriptError(
                    f"{path}: method {method} uses {node.kind()}, which {why}"
                    + (f" ({where})" if where else "") + "; pt2onnx converts no such file")
            for sub in node.blocks():
                walk(sub, method)

    for name in model._c._method_names():
        walk(model._c._get_method(name).inlined_graph, name)
