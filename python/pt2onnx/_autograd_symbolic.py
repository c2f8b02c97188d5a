"""autograd.Functions with a `symbolic` staticmethod, exported through it as
torch.onnx's TorchScript exporter does: during capture each call of such a
Function becomes one call of an op of its own (namespace pt2onnx_autograd),
so torch.export records the call, not the forward's insides; the symbolic
then converts that op like a register_custom_op_symbolic one (its arguments
in forward's order: tensors as Values, the rest as per-node attributes).

The op's outputs (their number, shapes and dtypes) come from running the
forward on the capture's fake tensors, outside the trace; a forward that
cannot run on fake tensors (a compiled extension without a fake
implementation) gets an error saying what to register."""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import torch

_NAMESPACE = "pt2onnx_autograd"
_LIB: Any = None
_OPS: dict[tuple, str] = {}  # (Function class, argument kinds) -> op name
_COUNTER = itertools.count()


class _Ctx:
    """A ctx for forward(ctx, ...) run outside autograd: saves nothing."""

    def __init__(self):
        self.needs_input_grad = ()
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def mark_dirty(self, *args):
        pass

    def mark_non_differentiable(self, *args):
        pass

    def set_materialize_grads(self, value):
        self.materialize_grads = value


def _kind(v: Any) -> str | None:
    if isinstance(v, torch.Tensor):
        return "Tensor"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, torch.SymInt)):
        return "SymInt"
    if isinstance(v, (float, torch.SymFloat)):
        return "float"
    if isinstance(v, str):
        return "str"
    return None


def _run_forward(cls, args):
    out = cls.forward(_Ctx(), *args)
    return out


def _define(cls, args, n_out: int) -> str:
    global _LIB
    if _LIB is None:
        _LIB = torch.library.Library(_NAMESPACE, "FRAGMENT")  # noqa: TOR901 - ours, kept alive
    params = inspect_names(cls, len(args))
    sig = ", ".join(f"{_kind(a)} {p}" for a, p in zip(args, params))
    ret = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
    name = f"{cls.__name__}_{next(_COUNTER)}"
    _LIB.define(f"{name}({sig}) -> {ret}")

    def impl(*a):
        with torch.no_grad():
            return _run_forward(cls, a)

    _LIB.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{_NAMESPACE}::{name}", impl, lib=_LIB)
    return name


def inspect_names(cls, n: int) -> list[str]:
    import inspect

    try:
        params = list(inspect.signature(cls.forward).parameters)[1:]  # less ctx
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(n):
        p = params[i] if i < len(params) and params[i].isidentifier() else f"arg{i}"
        names.append(p)
    return names


@contextlib.contextmanager
def symbolic_functions(used: dict):
    """During the block, Function.apply of a class with a `symbolic` calls
    its own op; `used` collects {op target: symbolic function}."""
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    # Function.apply as the class holds it: a classmethod (torch 2.13) or a C
    # classmethod_descriptor (2.14); either binds to a subclass through __get__.
    base = torch.autograd.Function.__dict__["apply"]

    def plain_apply(cls, *args, **kwargs):
        return base.__get__(None, cls)(*args, **kwargs)

    def apply(cls, *args, **kwargs):
        sym = getattr(cls, "symbolic", None)
        kinds = tuple(_kind(a) for a in args)
        if sym is None or kwargs or None in kinds:
            return plain_apply(cls, *args, **kwargs)
        key = (cls, kinds)
        name = _OPS.get(key)
        if name is None:
            try:
                with disable_proxy_modes_tracing():
                    out = _run_forward(cls, args)
            except Exception as e:  # noqa: BLE001 - said with what to do
                raise RuntimeError(
                    f"{cls.__qualname__} has a `symbolic`, so pt2onnx exports it through it "
                    "without tracing its forward; the forward still runs once on the capture's "
                    "fake tensors to learn its outputs' shapes, and failed there "
                    f"({type(e).__name__}: {e}). If it calls a compiled extension, give that op "
                    "a fake implementation (torch.library.register_fake)") from e
            outs = out if isinstance(out, (tuple, list)) else (out,)
            if not all(isinstance(o, torch.Tensor) for o in outs):
                return plain_apply(cls, *args, **kwargs)
            name = _OPS[key] = _define(cls, args, len(outs))
        used[f"torch.ops.{_NAMESPACE}.{name}.default"] = sym
        return getattr(getattr(torch.ops, _NAMESPACE), name)(*args)

    torch.autograd.Function.apply = classmethod(apply)
    try:
        yield
    finally:
        torch.autograd.Function.apply = base
