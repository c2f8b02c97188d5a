"""export(verify=True): runs the written model in onnxruntime against PyTorch
on the example inputs and, when the model has dynamic dims, on a second set
of inputs whose dynamic dims are one larger. A check of the result, not part
of conversion."""

from __future__ import annotations

import contextlib
import copy
import warnings
from typing import Any

import numpy as np
import torch

from . import _core


class VerificationError(_core.ConversionError):
    """The exported model's outputs differ from PyTorch's beyond tolerance.

    Raised by `export(verify=True)` (and by the checks of `hf.export_pretrained`,
    `diffusers.export_pipeline` and the "pt2onnx_debug" torch.compile backend) when an
    output's shape, dtype or values differ from PyTorch's; the message names the outputs
    and inputs concerned. `export(verify=True)` also raises it when its check cannot run:
    onnxruntime missing or failing, PyTorch failing on the example inputs, or example
    inputs it cannot match to the model's. A subclass of `pt2onnx.ConversionError`.
    """


def _leaves(x) -> list:
    return [v for v in torch.utils._pytree.tree_leaves(x) if v is not None]


def _as_numpy(v) -> np.ndarray:
    if isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy()
    if isinstance(v, bool):
        return np.array(v)
    if isinstance(v, int):
        return np.array(v, dtype=np.int64)
    if isinstance(v, float):
        return np.array(v, dtype=np.float32)
    raise TypeError(f"cannot feed a {type(v).__name__} to onnxruntime")


def _feeds(sess, args, kwargs) -> dict[str, np.ndarray]:
    """The example inputs by ONNX input name: pytree leaves of (args, kwargs)
    in order; scalars that torch.export kept constant are not inputs."""
    names = [i.name for i in sess.get_inputs()]
    leaves = [v for v in _leaves((args, kwargs or {}))
              if isinstance(v, (torch.Tensor, bool, int, float))]
    if len(leaves) != len(names):
        leaves = [v for v in leaves if isinstance(v, torch.Tensor)]
    if len(leaves) != len(names):
        raise VerificationError(f"verify: cannot match the example inputs ({len(leaves)} tensors) "
                                f"to the model's {len(names)} inputs")
    feeds = {n: _as_numpy(v) for n, v in zip(names, leaves)}
    # A float16 model (export(dtype=torch.float16)) takes float16 where
    # PyTorch, run in float32, takes float32.
    for i in sess.get_inputs():
        if i.type == "tensor(float16)" and feeds[i.name].dtype == np.float32:
            feeds[i.name] = feeds[i.name].astype(np.float16)
        elif i.type == "tensor(bfloat16)":
            raise VerificationError("verify: onnxruntime's Python API takes no bfloat16 arrays "
                                    f"(input {i.name!r}); check a bfloat16 model another way")
    return feeds


def _grown(args, kwargs, sess):
    """The example inputs with every dynamic dim (a dim_param of an ONNX
    input) one larger: floats random, ints and bools drawn from the example's
    own values (indices stay in range). None when no dim is dynamic."""
    dims = {}
    leaves = [v for v in _leaves((args, kwargs or {})) if isinstance(v, torch.Tensor)]
    inputs = sess.get_inputs()
    if len(leaves) != len(inputs):
        return None
    for i, t in zip(inputs, leaves):
        for axis, d in enumerate(i.shape):
            if isinstance(d, str) and d:
                dims[(id(t), axis)] = t.shape[axis] + 1
    if not dims:
        return None
    gen = torch.Generator().manual_seed(0)

    def grow(v):
        if not isinstance(v, torch.Tensor) or not any((id(v), a) in dims for a in range(v.dim())):
            return v
        shape = [dims.get((id(v), a), s) for a, s in enumerate(v.shape)]
        if v.is_floating_point():
            return torch.randn(shape, generator=gen, dtype=v.dtype)
        flat = v.reshape(-1)
        if flat.numel() == 0:
            return torch.zeros(shape, dtype=v.dtype)
        pick = torch.randint(0, flat.numel(), shape, generator=gen)
        return flat[pick]

    return torch.utils._pytree.tree_map(grow, (args, kwargs or {}))


def _dtype_differs(got: np.dtype, want: np.dtype, tensor: bool) -> str:
    """Why an output's dtype is wrong, '' when it is right: equal for tensor
    outputs, except float16 where PyTorch computed float32 (a model exported
    with dtype=torch.float16, verified against the float32 module); of the same
    kind (float / int / bool) for Python numbers, whose width torch does not
    fix."""
    if got == want:
        return ""
    if got.kind == want.kind and (not tensor or {got, want} == {np.dtype(np.float16),
                                                                np.dtype(np.float32)}):
        return ""
    return f"dtype {got}, PyTorch {want}"


class _TorchRefused(Exception):
    """PyTorch itself rejects the inputs (sizes outside a model constraint)."""


def _reference(model, args, kwargs):
    try:
        with torch.no_grad():
            return model(*args, **(kwargs or {}))
    except Exception as e:
        raise _TorchRefused(f"{type(e).__name__}: {e}") from e


@contextlib.contextmanager
def _onnx_topk_ties():
    """torch.topk (function and method) choosing among equal values as ONNX's TopK does: the
    lower index first. torch leaves that choice unspecified (on CPU it depends on the size and
    on k), so a model whose top-k meets exact ties (a router initialised to zeros, scores
    after a ReLU) may pick other indices in PyTorch than in any ONNX runtime, both correct.
    Yields a list whose first item counts the calls."""
    calls = [0]
    fn, method = torch.topk, torch.Tensor.topk

    def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's names
        calls[0] += 1
        values, indices = torch.sort(input, dim=dim, descending=largest, stable=True)
        return torch.return_types.topk((values.narrow(dim, 0, k), indices.narrow(dim, 0, k)))

    torch.topk, torch.Tensor.topk = topk, topk
    try:
        yield calls
    finally:
        torch.topk, torch.Tensor.topk = fn, method


def compare_or_raise(sess, module, kwargs, atol, rtol, *, refused: str, differs: str,
                     scaled: bool = False) -> float:
    """One input set of a multi-size check (`_compare` with keyword inputs): the largest
    difference; VerificationError "<refused>: <why>" when PyTorch refuses the inputs,
    "<differs>: <outputs>" when the file differs."""
    try:
        run = _compare(sess, module, (), kwargs, atol, rtol, scaled=scaled)
    except _TorchRefused as e:
        raise VerificationError(f"{refused}: {e}") from e
    if "failures" in run:
        raise VerificationError(f"{differs}: " + "; ".join(run["failures"]))
    return max(run["max_abs_diff"].values(), default=0.0)


def _holds_objects(value) -> bool:
    """Whether a structure of inputs holds anything but tensors, numbers and containers."""
    if isinstance(value, (list, tuple)):
        return any(_holds_objects(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_objects(v) for v in value.values())
    return not isinstance(value, (torch.Tensor, int, float, bool, str, type(None)))


def _compare(sess, model, args, kwargs, atol, rtol, scaled: bool = False) -> dict[str, Any]:
    """One input set: onnxruntime against PyTorch. When they differ and the model's top-k met
    ties, PyTorch is run again choosing among equal values as ONNX does; a match then passes,
    with `topk_ties` in the run and a warning saying so. scaled: each output's atol times its
    largest magnitude where that is above 1 (float32 rounding grows with the values: a
    segmentation map of logits near 1000 is off by 1e-3 in PyTorch itself against float64)."""
    feeds = _feeds(sess, args, kwargs)
    # A cache object is updated in place by the run (a DynamicCache grows): the tie check's
    # second run needs the inputs as they were.
    pristine = copy.deepcopy((args, kwargs)) if _holds_objects((args, kwargs)) else None
    if pristine is not None:
        # The feeds share the tensors' memory, and a cache's states may be updated in place
        # (transformers' Mamba copies the new conv and recurrent states into them).
        feeds = {n: v.copy() for n, v in feeds.items()}
    out = _reference(model, args, kwargs)
    try:
        got = sess.run(None, feeds)
    except Exception as e:
        raise VerificationError(f"verify: onnxruntime failed on inputs "
                                f"{ {n: list(v.shape) for n, v in feeds.items()} }: {e}") from e
    run = _differences(sess, feeds, got, out, atol, rtol, scaled)
    if "failures" not in run:
        return run
    with _onnx_topk_ties() as calls:
        tied = _reference(model, *(pristine or (args, kwargs)))
    if not calls[0]:
        return run
    again = _differences(sess, feeds, got, tied, atol, rtol, scaled)
    if "failures" in again:
        return run
    again["topk_ties"] = ("PyTorch's top-k chose other indices among equal values "
                          f"({'; '.join(run['failures'])}); with ONNX's rule (the lower index "
                          "first) the outputs match")
    warnings.warn(f"verify: at inputs {run['inputs']}, {again['topk_ties']}", stacklevel=3)
    return again


def _differences(sess, feeds, got, out, atol, rtol, scaled=False) -> dict[str, Any]:
    leaves = [v for v in _leaves(out) if isinstance(v, (torch.Tensor, int, float))]
    expected = [_as_numpy(v) for v in leaves]
    from_tensor = [isinstance(v, torch.Tensor) for v in leaves]
    names = [o.name for o in sess.get_outputs()]
    if len(got) != len(expected):
        raise VerificationError(f"verify: the model has {len(got)} outputs, PyTorch gives "
                                f"{len(expected)}")
    diffs, bad = {}, []
    for name, g, e, tensor in zip(names, got, expected, from_tensor):
        # Exact shapes: numpy's comparisons broadcast, so a (1,) output where
        # PyTorch gives a 0-d tensor would otherwise pass.
        if g.shape != e.shape:
            bad.append(f"{name}: shape {g.shape}, PyTorch {e.shape}")
            continue
        why = _dtype_differs(g.dtype, e.dtype, tensor)
        if why:
            bad.append(f"{name}: {why}")
            continue
        d = np.abs(g.astype(np.float64) - e.astype(np.float64)) if g.size else np.zeros(1)
        finite = np.isfinite(d)
        diffs[name] = float(np.max(d[finite])) if finite.any() else 0.0
        tol = atol
        if scaled and e.size and np.issubdtype(e.dtype, np.floating):
            finite_e = np.abs(e[np.isfinite(e)])
            tol = atol * max(1.0, float(finite_e.max()) if finite_e.size else 1.0)
        if not np.allclose(g, e, atol=tol, rtol=rtol, equal_nan=True):
            bad.append(f"{name}: max abs difference {diffs[name]:.3g}")
    run = {"inputs": {n: list(v.shape) for n, v in feeds.items()}, "max_abs_diff": diffs}
    if bad:
        run["failures"] = bad
    return run


def session(path_or_bytes):
    """The onnxruntime session a check runs the file in: CPU, the default graph optimizations,
    weights not prepacked. Prepacking copies every MatMul weight into the kernels' blocked
    layout when the session is made, for speed over many runs; a check runs a few: without it
    a 1.1B-parameter decoder's session took 0.1 s where it took 4.9 s (bench/
    pretrained_speed.md). The same kernels compute the same products."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_prepacking", "1")
    return ort.InferenceSession(path_or_bytes, options, providers=["CPUExecutionProvider"])


def verify(path_or_bytes, model, args, kwargs, atol: float, rtol: float) -> list[dict[str, Any]]:
    """One entry per input set: input shapes, max abs difference per output.
    Raises VerificationError naming the outputs beyond tolerance."""
    try:
        import onnxruntime  # noqa: F401 - session() makes the session; a missing one said here
    except ImportError:
        raise VerificationError("verify=True needs onnxruntime (pip install onnxruntime)") from None
    if isinstance(model, torch.export.ExportedProgram):
        model = model.module()
    sess = session(path_or_bytes)
    try:
        runs = [_compare(sess, model, args, kwargs, atol, rtol)]
    except _TorchRefused as e:
        raise VerificationError(f"verify: PyTorch fails on the example inputs: {e}") from e
    grown = _grown(args, kwargs, sess)
    if grown is not None:
        try:
            runs.append(_compare(sess, model, *grown, atol, rtol))
        except _TorchRefused as e:  # sizes outside a constraint of the model
            runs.append({"skipped": f"dynamic dims one larger: {e}"[:300]})
    failed = [f for r in runs for f in r.get("failures", [])]
    if failed:
        where = path_or_bytes if isinstance(path_or_bytes, str) else "the model"
        raise VerificationError(
            f"verify: {where} differs from PyTorch beyond atol={atol}, rtol={rtol} (the file is "
            "kept for inspection): " + "; ".join(failed))
    return runs
