"""Runs PyTorch's ModuleInfo samples (torch.testing._internal.common_modules.
module_db: nn module classes with constructor arguments and forward inputs,
the samples torch's own module tests use) through pt2onnx (and optionally
torch.onnx) and judges them in onnxruntime. Shared by test_moduleinfo.py
and tools/coverage.py.

One sample: the module built from the sample's constructor arguments (seeded,
eval mode, in the sample's dtype), exported by pt2onnx.export(module, args,
kwargs=...) (opset 18), run in onnxruntime and compared with eager PyTorch
  1. on the sample's own inputs, and
  2. on inputs of the same shapes with other values: every tensor's elements
     permuted (seeded), which keeps each tensor's value set, so class indices
     stay in range, probabilities stay probabilities, and so on; skipped when
     no tensor changes (all constant) or when eager PyTorch refuses them.
Outputs must match in count, dtype and shape exactly (a (1,) output where
torch gives a 0-d tensor fails) and in value: floats within atol/rtol (1e-4
for float32, 1e-7 for float64, TOL_FOR's stated exceptions), ints and bools
exact, NaN == NaN. Where the permuted inputs make torch.export's own program
differ from eager (a permuted mask that masks a whole row: eager gives NaN,
the program 0), the program is the reference for them, said in `second`.
Samples torch.export cannot capture are skipped and counted, with torch's
error; float64 models onnxruntime has no CPU kernel for (Conv, AvgPool...)
are counted apart, after the onnx checker (full) and their declared output
dtypes and shapes are checked against eager's."""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.utils._pytree as pytree

import opinfo_harness as oh

# torch.export's data-dependent capture failures log a warning per attempt:
# the failure is recorded in the result instead.
logging.getLogger("torch.fx.experimental.symbolic_shapes").setLevel(logging.ERROR)

PASS, CAPTURE, CONVERT, ORT, MISMATCH, NOKERNEL = (
    "pass", "capture", "convert", "ort", "mismatch", "no-ort-kernel")

DTYPES = {"float32": torch.float32, "float64": torch.float64}
TOL = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-7, 1e-7)}
# Stated exceptions (module, dtype) -> (atol, rtol, why).
TOL_FOR = {
    (m, torch.float64): (1e-5, 1e-5, "onnxruntime's CPU RNN / GRU / LSTM kernels are float32-only: "
                                     "src/convert/rnn.cpp computes recurrent layers in float32, "
                                     "cast around them")
    for m in ("nn.RNN", "nn.GRU", "nn.LSTM")
}


def tolerance(module, dtype):
    t = TOL_FOR.get((module, dtype))
    return t[:2] if t else TOL[dtype]
OPSET = 18


@dataclass
class SampleResult:
    outcome: str
    detail: str = ""
    second: str = ""  # "checked", or why the second input set was not compared


def module_db():
    from torch.testing._internal.common_modules import module_db as db

    return db


def module_id(info) -> str:
    return info.name


def samples(info, dtype):
    """All samples of the module for `dtype` (seeded: same tensors every run)."""
    torch.manual_seed(0)
    try:
        return list(info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=False,
                                            training=False))
    except Exception:  # noqa: BLE001 - a ModuleInfo that cannot make samples here
        return []


def supports(info, dtype) -> bool:
    return dtype in info.dtypes


def build(info, sample, dtype):
    torch.manual_seed(0)
    c = sample.constructor_input
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = info.module_cls(*c.args, **c.kwargs)
    m = m.to(dtype) if isinstance(m, torch.nn.Module) else m
    m.eval()
    return m


def _clone(x):
    return pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, x)


def _outputs(out):
    return [v for v in pytree.tree_leaves(out) if isinstance(v, torch.Tensor)]


def perturbed(args, kwargs, seed=1):
    """Same structure and shapes, each tensor's elements permuted. None when
    no tensor changes (all have at most one distinct value)."""
    gen = torch.Generator().manual_seed(seed)
    changed = []

    def perm(v):
        if not isinstance(v, torch.Tensor) or v.numel() < 2:
            return v
        flat = v.reshape(-1)
        for _ in range(4):  # a permutation that moves some value
            out = flat[torch.randperm(flat.numel(), generator=gen)].reshape(v.shape)
            same = torch.equal(out, v) or (v.is_floating_point()
                                           and torch.equal(out.nan_to_num(), v.nan_to_num()))
            if not same:
                changed.append(True)
                return out.contiguous()
        return v.clone()

    new = pytree.tree_map(perm, (args, kwargs))
    return new if changed else None


def _ort_session(model_bytes):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def _feeds(sess, args, kwargs):
    from pt2onnx._verify import _feeds as verify_feeds

    return verify_feeds(sess, args, kwargs)


def _differ(got, expected, tol):
    """'' when the outputs `got` (arrays) equal `expected` (tensors) in count,
    dtype, shape and value (tol = (atol, rtol)), else why."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, torch has {len(expected)}"
    atol, rtol = tol
    for i, (g, e) in enumerate(zip(got, expected)):
        why = oh._compare(np.asarray(g), e.detach(), atol, rtol)
        if why:
            return f"output {i}: {why}"
    return ""


def _judge(sess, module, args, kwargs, tol):
    """'' when onnxruntime's outputs equal eager's on (args, kwargs), else why."""
    with torch.no_grad():
        expected = _outputs(module(*_clone(args), **_clone(kwargs)))
    return _differ(sess.run(None, _feeds(sess, args, kwargs)), expected, tol)


def program_differs(module, args, kwargs, on_args, on_kwargs, tol):
    """Why torch.export's own program (captured as pt2onnx captures, on the
    sample's inputs) differs from eager PyTorch on (on_args, on_kwargs);
    '' when they agree. With the program's outputs."""
    from pt2onnx._export import _capture

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = _capture(module, _clone(args), _clone(kwargs), None, None, None, None)[0]
    with torch.no_grad():
        eager = _outputs(module(*_clone(on_args), **_clone(on_kwargs)))
        prog = _outputs(ep.module()(*_clone(on_args), **_clone(on_kwargs)))
    return _differ([oh._to_numpy(p) for p in prog], eager, tol), prog


def declared_outputs_differ(model: bytes, expected) -> str:
    """Where onnxruntime cannot run a model (float64 without a CPU kernel):
    the onnx checker (full, with shape inference) and the outputs' declared
    dtypes and shapes against eager's. '' when all agree."""
    import onnx
    from onnx.helper import tensor_dtype_to_np_dtype

    m = onnx.load_from_string(model)
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception as e:  # noqa: BLE001
        return f"onnx checker: {str(e)[:300]}"
    outs = m.graph.output
    if len(outs) != len(expected):
        return f"{len(outs)} outputs, torch has {len(expected)}"
    for i, (o, e) in enumerate(zip(outs, expected)):
        tt = o.type.tensor_type
        dt = tensor_dtype_to_np_dtype(tt.elem_type)
        want = oh._to_numpy(e)
        if dt != want.dtype:
            return f"output {i}: declared dtype {dt} != torch {want.dtype}"
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        if not tt.HasField("shape") or dims != tuple(want.shape):
            return f"output {i}: declared shape {dims} != torch {tuple(want.shape)}"
    return ""


def capture_error(module, args, kwargs) -> str | None:
    """torch.export's own error for this sample, None when it captures."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.export.export(module, _clone(args), kwargs=_clone(kwargs), strict=False)
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e).strip()[:300]}"


def export_pt2onnx(module, args, kwargs, opset):
    import pt2onnx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pt2onnx.export(module, _clone(args), None, kwargs=_clone(kwargs),
                              opset=opset).model_bytes


def export_torch_onnx(module, args, kwargs, opset):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(module, _clone(args), kwargs=_clone(kwargs), dynamo=True,
                                 opset_version=opset, verbose=False)
        buf = io.BytesIO()
        prog.save(buf)
    return buf.getvalue()


def run_sample(info, sample, dtype, opset=OPSET, exporter="pt2onnx") -> SampleResult:
    # Quiet: the modules' own deprecation warnings, and the graphs torch.export
    # writes to stderr when a capture fails (the result records the error).
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        return _run_sample(info, sample, dtype, opset, exporter)


def _run_sample(info, sample, dtype, opset, exporter) -> SampleResult:
    args = tuple(sample.forward_input.args)
    kwargs = dict(sample.forward_input.kwargs)
    tol = tolerance(module_id(info), dtype)
    try:
        module = build(info, sample, dtype)
        with torch.no_grad():
            expected = _outputs(module(*_clone(args), **_clone(kwargs)))
    except Exception as e:  # noqa: BLE001 - eager fails on its own sample: not ours
        return SampleResult(CAPTURE, f"eager: {type(e).__name__}: {str(e)[:200]}")
    if not expected:
        return SampleResult(CAPTURE, "no tensor output")
    try:
        with torch.no_grad():
            if exporter == "pt2onnx":
                model = export_pt2onnx(module, args, kwargs, opset)
            else:
                model = export_torch_onnx(module, args, kwargs, opset)
    except Exception as e:  # noqa: BLE001
        err = capture_error(module, args, kwargs)
        if err is not None:  # torch.export cannot capture it: counted, not ours
            return SampleResult(CAPTURE, err)
        return SampleResult(CONVERT, f"{type(e).__name__}: {str(e)[:600]}")
    try:
        sess = _ort_session(model)
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        if dtype == torch.float64 and ("NOT_IMPLEMENTED" in msg
                                       or "Could not find an implementation" in msg):
            why = declared_outputs_differ(model, expected)
            if why:
                return SampleResult(MISMATCH, f"(no onnxruntime kernel) {why}")
            return SampleResult(NOKERNEL, msg.splitlines()[0][:300])
        return SampleResult(ORT, f"{type(e).__name__}: {msg[:600]}")
    try:
        why = _judge(sess, module, args, kwargs, tol)
    except Exception as e:  # noqa: BLE001
        return SampleResult(ORT, f"{type(e).__name__}: {str(e)[:600]}")
    if why:
        return SampleResult(MISMATCH, why)
    other = perturbed(args, kwargs)
    if other is None:
        return SampleResult(PASS, second="no tensor input with two distinct values")
    try:
        with torch.no_grad():
            module(*_clone(other[0]), **_clone(other[1]))
    except Exception as e:  # noqa: BLE001 - torch refuses the permuted inputs
        return SampleResult(PASS, second=f"eager refuses permuted inputs: {type(e).__name__}")
    try:
        why = _judge(sess, module, other[0], other[1], tol)
    except Exception as e:  # noqa: BLE001
        return SampleResult(ORT, f"permuted inputs: {type(e).__name__}: {str(e)[:600]}")
    if why:
        # Inputs the sample's author did not choose (a permuted mask can mask
        # whole rows): where torch.export's own program already differs from
        # eager there, the program is the reference.
        try:
            prog_why, prog = program_differs(module, args, kwargs, *other, tol)
        except Exception:  # noqa: BLE001
            prog_why = ""
        if not prog_why:
            return SampleResult(MISMATCH, f"permuted inputs: {why}")
        again = _differ(sess.run(None, _feeds(sess, *other)), prog, tol)
        if again:
            return SampleResult(MISMATCH, f"permuted inputs: {again} (against torch.export's "
                                          f"program, which differs from eager: {prog_why})")
        return SampleResult(PASS, second="checked against torch.export's program, which differs "
                                         f"from eager on the permuted inputs ({prog_why})")
    return SampleResult(PASS, second="checked")


def summarize(results):
    """results: {module_id: [SampleResult]} -> counts dict (capturable
    samples, those passing, modules with every capturable sample passing)."""
    total = cap = ok = mods = mods_ok = nokernel = 0
    for rs in results.values():
        c = [r for r in rs if r.outcome not in (CAPTURE, NOKERNEL)]
        total += len(rs)
        nokernel += sum(r.outcome == NOKERNEL for r in rs)
        cap += len(c)
        ok += sum(r.outcome == PASS for r in c)
        if c:
            mods += 1
            mods_ok += all(r.outcome == PASS for r in c)
    return dict(samples=total, capturable=cap, passed=ok, modules=mods, modules_passed=mods_ok,
                no_ort_kernel=nokernel, sample_rate=ok / cap if cap else math.nan,
                module_rate=mods_ok / mods if mods else math.nan)


# ---- expected failures -----------------------------------------------------
# tests/python/moduleinfo_expected.txt, one line per entry:
#   module | dtypes | samples | reason
# module: ModuleInfo name (nn.Transformer); dtypes: "*" or a comma list;
# samples: "*" or a comma list of sample indices / ranges (0-based, in
# module_inputs_func's order: 3,7,10-12). "#" starts a comment.
EXPECTED = os.path.join(os.path.dirname(__file__), "moduleinfo_expected.txt")


@dataclass
class Expected:
    module: str
    dtypes: set | None
    samples: set | None
    reason: str
    where: str
    hits: list = field(default_factory=list)

    def matches(self, module, dtype, index):
        return (self.module == module and (self.dtypes is None or dtype in self.dtypes)
                and (self.samples is None or index in self.samples))


def load_expected(path=EXPECTED):
    entries = []
    if not os.path.exists(path):
        return entries
    with open(path) as fh:
        for i, line in enumerate(fh, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = [p.strip() for p in line.split("|")]
            if len(parts) != 4 or not parts[3]:
                raise ValueError(f"{path}:{i}: want 'module | dtypes | samples | reason'")
            entries.append(Expected(parts[0], oh._parse_set(parts[1]),
                                    oh._parse_set(parts[2], int), parts[3],
                                    f"moduleinfo_expected.txt:{i}"))
    return entries


def expected_failure(entries, module, dtype, index):
    for e in entries:
        if e.matches(module, dtype, index):
            return e
    return None
