"""Runs PyTorch's OpInfo samples through pt2onnx (and optionally torch.onnx)
and judges them in onnxruntime. Shared by the pytest module (test_opinfo.py)
and the coverage-page generator (tools/coverage.py).

One sample: the op applied to the sample's tensors, captured with
torch.export.export (non-strict), exported, run in onnxruntime on the same
inputs and compared with eager PyTorch: floats within atol/rtol (1e-4 for
float32, 1e-2 for float16/bfloat16 compared against float32 eager), ints and
bools exact, NaN == NaN, shapes and dtypes equal."""

from __future__ import annotations

import io
import math
import os
import sys
import types
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.utils._pytree as pytree

MAX_SAMPLES = int(os.environ.get("PT2ONNX_OPINFO_SAMPLES", "3"))

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}

# Outcomes. "capture" = torch.export cannot capture the sample (skipped and
# counted, not a failure of ours); everything else but "pass" is a failure.
PASS, CAPTURE, UNSUPPORTED, CONVERT, ORT, MISMATCH, CHECK = (
    "pass", "capture", "unsupported", "convert", "ort", "mismatch", "check")


@dataclass
class SampleResult:
    outcome: str
    detail: str = ""
    missing: list[str] = field(default_factory=list)


def op_db():
    from torch.testing._internal.common_methods_invocations import op_db as db

    _cheap_test_fn_lookup()
    return db


def _cheap_test_fn_lookup():
    """torch's sample iterators ask extract_test_fn() for the unittest.TestCase
    test running them (for sample-specific skips), which calls inspect.stack():
    every frame of pytest's deep stack with its source lines read, ~25 ms a
    call, twice per op: half of the OpInfo suite's time (measured with
    cProfile on 60 tests: 6.7 of 13 s). The same question answered by walking
    the frames without their source: the test method of the first
    unittest.TestCase `self` on the stack whose id names it, else None (always
    None here: these tests are pytest functions)."""
    import unittest

    import torch.testing._internal.common_utils as cu
    import torch.testing._internal.opinfo.core as core

    def extract_test_fn():
        frame = sys._getframe(1)
        while frame is not None:
            owner = frame.f_locals.get("self")
            if isinstance(owner, unittest.TestCase):
                *_, cls_name, test_name = owner.id().rsplit(".", 2)
                if cls_name == type(owner).__name__ and test_name.startswith("test"):
                    return getattr(owner, test_name).__func__
            frame = frame.f_back
        return None

    cu.extract_test_fn = core.extract_test_fn = extract_test_fn


def decompose(ep):
    """ep.run_decompositions(), as a user calls it, with torch's collection of the
    CompositeImplicitAutograd ops it may preserve answered from a cache.

    torch collects that set twice per call (exported_program.py and decomp_utils.py) and
    caches only aten's part: every other namespace (~26) materializes the C++ dispatcher's CIA
    list again, 115 ms of a ~330 ms call on a small program (cProfile, torch 2.13.0), the same
    for every program; 1,863 OpInfo samples are decomposed per run. The set changes only when an
    op is registered, so the cache is keyed on the op namespaces and the C++ dispatcher's CIA
    registrations (0.3 ms to list); PT2ONNX_TEST_CIA_CACHE=check recomputes it every call and
    fails on any difference. Where torch no longer has these names, plain run_decompositions."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with _cia_ops_cached():
            return ep.run_decompositions()


_CIA_CACHE: dict = {}


def _cia_ops_cached():
    import contextlib

    import torch._export.utils as eu
    import torch.export.decomp_utils as du
    import torch.export.exported_program as xp

    original = getattr(eu, "_collect_all_valid_cia_ops", None)
    if original is None or not all(getattr(m, "_collect_all_valid_cia_ops", None) is original
                                   for m in (du, xp)):
        return contextlib.nullcontext()
    check = os.environ.get("PT2ONNX_TEST_CIA_CACHE") == "check"

    def cached():
        key = (tuple(torch.ops._dir), tuple(sorted(
            torch._C._dispatch_get_registrations_for_dispatch_key("CompositeImplicitAutograd"))))
        ops = _CIA_CACHE.get(key)
        if ops is None or check:
            fresh = frozenset(original())
            assert ops is None or ops == fresh, ("cached CIA ops differ", ops ^ fresh)
            ops = _CIA_CACHE[key] = fresh
        return set(ops)

    @contextlib.contextmanager
    def patched():
        du._collect_all_valid_cia_ops = xp._collect_all_valid_cia_ops = cached
        try:
            yield
        finally:
            du._collect_all_valid_cia_ops = xp._collect_all_valid_cia_ops = original

    return patched()


def op_id(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _leaves(obj):
    return pytree.tree_flatten(obj)


class OpModule(torch.nn.Module):
    """forward(*tensors) -> fn(input, *args, **kwargs) with the sample's
    tensors as the module's inputs and everything else closed over."""

    def __init__(self, fn, sample_tree, spec, tensor_pos):
        super().__init__()
        self.fn = fn
        self.leaves = sample_tree
        self.spec = spec
        self.tensor_pos = tensor_pos

    def forward(self, *tensors):
        leaves = list(self.leaves)
        for pos, t in zip(self.tensor_pos, tensors):
            leaves[pos] = t
        inp, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.fn(inp, *args, **kwargs)


def build_module(fn, sample):
    leaves, spec = _leaves((sample.input, tuple(sample.args), dict(sample.kwargs)))
    pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    tensors = tuple(leaves[i] for i in pos)
    return OpModule(fn, leaves, spec, pos), tensors


def samples(op, dtype, limit=MAX_SAMPLES):
    """The first `limit` samples (seeded: same tensors every run)."""
    torch.manual_seed(0)
    out = []
    try:
        it = op.sample_inputs("cpu", dtype, requires_grad=False)
        for s in it:
            out.append(s)
            if len(out) >= limit:
                break
    except Exception:  # noqa: BLE001 - an OpInfo that cannot make samples here
        pass
    return out


def _clone_tree(xs):
    return tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in xs)


def _flat_outputs(out):
    leaves, _ = pytree.tree_flatten(out)
    return leaves


def _to_numpy(t: torch.Tensor):
    if t.is_complex():
        return torch.view_as_real(t.resolve_conj()).numpy()
    if t.dtype == torch.bfloat16:
        return t.float().numpy()
    return t.detach().numpy()


def _compare(got, exp: torch.Tensor, atol, rtol) -> str:
    exp_np = _to_numpy(exp)
    if exp.dtype == torch.bfloat16:
        got = np.asarray(got).astype(np.float32)
    if tuple(got.shape) != tuple(exp_np.shape):
        return f"shape {tuple(got.shape)} != torch {tuple(exp_np.shape)}"
    if exp.dtype == torch.bool or not (exp.is_floating_point() or exp.is_complex()):
        if got.dtype != exp_np.dtype:
            return f"dtype {got.dtype} != torch {exp_np.dtype}"
        if not np.array_equal(got, exp_np):
            bad = int((got != exp_np).sum())
            return f"{bad} of {exp_np.size} elements differ"
        return ""
    if got.dtype != exp_np.dtype and exp.dtype != torch.bfloat16:
        return f"dtype {got.dtype} != torch {exp_np.dtype}"
    g = got.astype(np.float64)
    e = exp_np.astype(np.float64)
    nan_ok = np.isnan(g) == np.isnan(e)
    if not nan_ok.all():
        return "NaN positions differ"
    with np.errstate(invalid="ignore"):
        ok = np.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
    if not ok.all():
        diff = np.nanmax(np.where(ok, 0, np.abs(g - e)))
        return f"max abs diff {diff:.3g} (atol {atol}, rtol {rtol})"
    return ""


def tolerance(dtype):
    if dtype in (torch.float16, torch.bfloat16):
        return 1e-2, 1e-2
    return 1e-4, 1e-4


def _ort_session(model_bytes):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def _reference_random_ops():
    """onnx.reference (1.23) fails on rank-0 RandomUniformLike/RandomNormalLike
    (numpy hands back a float) and has no Multinomial: the three, with the
    operators' documented shapes and dtypes, for the reference runs below."""
    from onnx.helper import tensor_dtype_to_np_dtype
    from onnx.reference.op_run import OpRun

    rng = np.random.default_rng()

    class RandomUniformLike(OpRun):
        def _run(self, x, dtype=None, high=None, low=None, seed=None):
            dt = tensor_dtype_to_np_dtype(dtype) if dtype is not None else x.dtype
            return (np.asarray(rng.uniform(low, high, x.shape)).astype(dt),)

    class RandomNormalLike(OpRun):
        def _run(self, x, dtype=None, mean=None, scale=None, seed=None):
            dt = tensor_dtype_to_np_dtype(dtype) if dtype is not None else x.dtype
            return (np.asarray(rng.normal(mean, scale, x.shape)).astype(dt),)

    class Multinomial(OpRun):
        def _run(self, x, dtype=None, sample_size=None, seed=None):
            p = np.exp(x - x.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            out = np.stack([rng.choice(p.shape[1], size=sample_size, p=row) for row in p])
            return (out.astype(tensor_dtype_to_np_dtype(dtype if dtype is not None else 6)),)

    return [RandomUniformLike, RandomNormalLike, Multinomial]


class _ReferenceSession:
    """onnx's own reference runtime behind the two calls the harness makes of
    an onnxruntime session. Used only where onnxruntime has no kernel for an
    ONNX random-number op at the model's opset (RandomUniformLike-22 and its
    siblings are missing from its CPU provider): the model then still runs
    in a real ONNX runtime and is judged as every other sample (values where
    the draw does not decide them, else shapes and dtypes)."""

    class _Input:
        def __init__(self, name):
            self.name = name

    def __init__(self, model_bytes):
        from onnx.reference import ReferenceEvaluator

        self._ev = ReferenceEvaluator(model_bytes, new_ops=_reference_random_ops())

    def get_inputs(self):
        return [self._Input(n) for n in self._ev.input_names]

    def run(self, names, feeds):
        return self._ev.run(names, feeds)


_RANDOM_ONNX_OPS = ("RandomUniformLike", "RandomNormalLike", "RandomUniform", "RandomNormal",
                    "Bernoulli", "Multinomial")


def _no_random_kernel(msg: str) -> bool:
    return "NOT_IMPLEMENTED" in msg and any(f"for {o}(" in msg for o in _RANDOM_ONNX_OPS)


def _feeds(sess, ep, tensors, dtype):
    """ORT feeds by graph input name; low-precision inputs are fed in their
    own dtype (the model is typed so)."""
    names = [s.arg.name for s in ep.graph_signature.input_specs
             if s.kind == torch.export.graph_signature.InputKind.USER_INPUT]
    by_name = dict(zip(names, tensors))
    feeds = {}
    for i in sess.get_inputs():
        t = by_name.get(i.name)
        if t is None:
            raise KeyError(f"graph input {i.name!r} is not a user input")
        if t.dtype == torch.bfloat16:
            feeds[i.name] = t.float().numpy()  # through the test-side Cast
        else:
            feeds[i.name] = _to_numpy(t)
    return feeds


def capture(op, sample, inplace=False):
    fn = op.inplace_variant if inplace else op.op
    mod, tensors = build_module(fn, sample)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(mod, _clone_tree(tensors), strict=False)
    return mod, tensors, ep


def eager(mod, tensors, dtype):
    """Expected outputs, and the inputs as the op left them (in-place ops
    mutate them): float16/bfloat16 samples are computed in float32 (the
    reference onnxruntime's low-precision result is judged against)."""
    ins = _clone_tree(tensors)
    if dtype in (torch.float16, torch.bfloat16):
        ins = tuple(x.float() if isinstance(x, torch.Tensor) and x.dtype == dtype else x
                    for x in ins)
        out = _flat_outputs(mod(*ins))

        def low(xs):
            return [x.to(dtype) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x
                    for x in xs]

        return low(out), low(ins)
    out = _flat_outputs(mod(*ins))
    return out, list(ins)


def mutated_inputs(ep, after):
    """The values pt2onnx appends after the user outputs: the user inputs the
    program's signature lists as mutated (USER_INPUT_MUTATION, named by
    run_decompositions()), in signature order, as eager left them."""
    sig = ep.graph_signature
    kinds = torch.export.graph_signature
    names = [s.arg.name for s in sig.input_specs if s.kind == kinds.InputKind.USER_INPUT]
    out = []
    for spec in sig.output_specs:
        if spec.kind == kinds.OutputKind.USER_INPUT_MUTATION:
            out.append(after[names.index(spec.target)])
        elif spec.kind == kinds.OutputKind.BUFFER_MUTATION:
            raise ValueError("OpModule has no buffers")
    return out


def export_pt2onnx(ep, opset, decomposed):
    import pt2onnx

    if decomposed:
        ep = decompose(ep)
    return ep, pt2onnx.export(ep, (), None, opset=opset).model_bytes


def export_torch_onnx(ep, opset):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        buf = io.BytesIO()
        import contextlib

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            prog = torch.onnx.export(ep, (), dynamo=True, opset_version=opset, verbose=False)
        prog.save(buf) if hasattr(prog, "save") else None
    return ep, buf.getvalue()


# Ops whose values are not determined by their inputs (uninitialized memory,
# random numbers): only output shapes and dtypes are compared.
NONDETERMINISTIC = {
    "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted",
    "bernoulli", "normal", "normal.in_place", "normal.number_mean", "uniform", "cauchy",
    "exponential", "geometric", "log_normal", "multinomial", "rand_like", "randn_like",
    "randint_like", "randint", "randn", "rand", "nn.functional.dropout", "nn.functional.dropout2d",
    "nn.functional.dropout3d", "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout.with_train",
    "nn.functional.feature_alpha_dropout.without_train", "nn.functional.rrelu",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
    "torch._refs.nn.functional.dropout",
}


# Dropout-family ops carry the nondeterministic_seeded tag even when their
# `train` argument (args[2]) is False, where they are the identity.
_DROPOUTS = {"dropout", "native_dropout", "feature_dropout", "alpha_dropout",
             "feature_alpha_dropout"}


def draws_random(ep) -> bool:
    """True when the captured graph samples random numbers (dropout in
    training, bernoulli, rand...): eager's values are one draw, onnxruntime's
    another, so only shapes and dtypes can be compared. Judged from the ops'
    own nondeterministic_seeded tag, so a sample of any op qualifies alone."""
    for n in ep.graph.nodes:
        t = n.target
        if n.op != "call_function" or not isinstance(t, torch._ops.OpOverload):
            continue
        if torch.Tag.nondeterministic_seeded not in t.tags:
            continue
        base = t._schema.name.split("::")[-1]
        if base in _DROPOUTS:
            train = n.args[2] if len(n.args) > 2 else n.kwargs.get("train", True)
            p = n.args[1] if len(n.args) > 1 else n.kwargs.get("p", 0.5)
            if train is False or p == 0:
                continue
        return True
    return False


def eager_varies(ep, tensors) -> bool:
    """Whether the captured graph's outputs change with torch's random seed
    (eight fixed seeds, so the verdict is the same every run). Run as the
    captured graph, not the OpInfo callable: OpInfo wraps random ops in
    wrapper_set_seed, which reseeds on every call. A graph that draws random
    numbers its result does not depend on (svd_lowrank's reconstruction) still
    has its values compared."""
    module = ep.module()
    outs = []
    state = torch.random.get_rng_state()
    try:
        for seed in range(1, 9):
            torch.manual_seed(seed)
            outs.append(_flat_outputs(module(*_clone_tree(tensors))))
    finally:
        torch.random.set_rng_state(state)

    def same(a, b):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point() or a.is_complex():
            return torch.allclose(a.to(torch.complex128) if a.is_complex() else a.double(),
                                  b.to(torch.complex128) if b.is_complex() else b.double(),
                                  rtol=1e-5, atol=1e-6, equal_nan=True)
        return torch.equal(a, b)

    return any(not same(a, b) for other in outs[1:] for a, b in zip(outs[0], other))


def _readable_outputs(model: bytes) -> bytes:
    """onnxruntime's Python API cannot pass bfloat16 arrays in or out: such
    inputs are fed as float32 through a Cast to bfloat16 (exact: every
    bfloat16 is a float32) and such outputs get a Cast to float32. Test-side
    only; the exported model is checked as written."""
    import onnx

    m = onnx.load_from_string(model)
    changed = False
    bf16 = onnx.TensorProto.BFLOAT16
    for o in m.graph.output:
        if o.type.tensor_type.elem_type == bf16:
            inner = o.name + "__bf16"
            for n in m.graph.node:
                n.output[:] = [inner if x == o.name else x for x in n.output]
                n.input[:] = [inner if x == o.name else x for x in n.input]
            m.graph.node.append(onnx.helper.make_node("Cast", [inner], [o.name],
                                                      to=onnx.TensorProto.FLOAT))
            o.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
            changed = True
    for i in m.graph.input:
        if i.type.tensor_type.elem_type == bf16:
            inner = i.name + "__bf16"
            for n in m.graph.node:
                n.input[:] = [inner if x == i.name else x for x in n.input]
            for o in m.graph.output:
                if o.name == i.name:  # an input returned as is
                    raise ValueError("bfloat16 input returned as an output")
            m.graph.node.insert(0, onnx.helper.make_node("Cast", [i.name], [inner], to=bf16))
            i.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
            changed = True
    return m.SerializeToString() if changed else model


def prepare(op, sample, dtype, inplace=False):
    """What a sample's runs at every opset share: its capture, eager's outputs (and inputs as
    the op left them) and whether its values can be compared; a SampleResult when it cannot
    be captured."""
    try:
        mod, tensors, ep = capture(op, sample, inplace)
        expected, after = eager(mod, tensors, dtype)
    except Exception as e:  # noqa: BLE001 - not capturable: counted, not ours
        return SampleResult(CAPTURE, f"{type(e).__name__}: {str(e)[:200]}")
    if not expected or any(not isinstance(o, torch.Tensor) for o in expected):
        return SampleResult(CAPTURE, "no tensor output")
    values = op_id(op) not in NONDETERMINISTIC and not (draws_random(ep)
                                                        and eager_varies(ep, tensors))
    return ep, tensors, expected, after, values


def run_sample(op, sample, dtype, opset, *, exporter="pt2onnx", decomposed=False, inplace=False,
               check_bf16=True, prepared=None) -> SampleResult:
    """One sample through capture, conversion at `opset` and onnxruntime, judged against eager.
    `prepared`: prepare()'s result for this sample, when it was made already (the same capture
    converted at another opset)."""
    prepared = prepare(op, sample, dtype, inplace) if prepared is None else prepared
    if isinstance(prepared, SampleResult):
        return prepared
    ep, tensors, expected, after, values = prepared
    if decomposed:
        try:
            ep = decompose(ep)
        except Exception as e:  # noqa: BLE001 - torch cannot decompose it: not ours
            return SampleResult(CAPTURE, f"run_decompositions: {type(e).__name__}: {str(e)[:200]}")
    try:
        if exporter == "pt2onnx":
            ep, model = export_pt2onnx(ep, opset, False)
        else:
            ep, model = export_torch_onnx(ep, opset)
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        if "not supported at opset" in msg:
            missing = [ln.strip().split(" ")[0] for ln in msg.splitlines()[1:]
                       if ln.startswith("  torch.") or ln.startswith("  <")]
            return SampleResult(UNSUPPORTED, msg.splitlines()[0], missing)
        return SampleResult(CONVERT, f"{type(e).__name__}: {msg[:600]}")
    if dtype == torch.bfloat16 and check_bf16:
        import onnx

        try:
            m = onnx.load_from_string(model)
            onnx.checker.check_model(m, full_check=True)
        except Exception as e:  # noqa: BLE001
            return SampleResult(CHECK, f"onnx checker: {str(e)[:400]}")
    try:
        sess = _ort_session(_readable_outputs(model))
        got = sess.run(None, _feeds(sess, ep, tensors, dtype))
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        if dtype == torch.bfloat16 and ("NOT_IMPLEMENTED" in msg or "Could not find an implementation" in msg):
            return SampleResult(PASS, "bfloat16: typed correctly (checker); no onnxruntime CPU kernel")
        if not _no_random_kernel(msg):
            return SampleResult(ORT, f"{type(e).__name__}: {msg[:600]}")
        try:  # onnx's reference runtime runs it, judged as below
            sess = _ReferenceSession(_readable_outputs(model))
            got = sess.run(None, _feeds(sess, ep, tensors, dtype))
        except Exception as e2:  # noqa: BLE001
            return SampleResult(ORT, f"{type(e).__name__}: {msg[:300]}; onnx.reference: "
                                     f"{type(e2).__name__}: {str(e2)[:300]}")
    expected = expected + mutated_inputs(ep, after)
    if len(got) != len(expected):
        return SampleResult(MISMATCH, f"{len(got)} outputs, torch has {len(expected)}")
    atol, rtol = tolerance(dtype)
    for i, (g, e) in enumerate(zip(got, expected)):
        g = np.asarray(g)
        if not values:
            want = _to_numpy(e)
            if g.shape != want.shape or g.dtype != want.dtype:
                return SampleResult(MISMATCH, f"output {i}: {g.dtype}{g.shape} != torch "
                                              f"{want.dtype}{want.shape}")
            continue
        why = _compare(g, e, atol, rtol)
        if why:
            return SampleResult(MISMATCH, f"output {i}: {why}")
    return SampleResult(PASS)


def op_supports(op, dtype) -> bool:
    try:
        return op.supports_dtype(dtype, "cpu")
    except Exception:  # noqa: BLE001
        return dtype in op.dtypes


def hide_torchvision_ops():
    """torchvision's PyPI wheel is built against CUDA torch: where its compiled
    operators do not load (the pinned CPU torch), keep it from registering their
    fake implementations so that model definitions import. Where they load (torch
    2.14.1's CUDA build, `make test-torch`), leave them: the detection tests need them."""
    from pt2onnx.hf import _torchvision_ops_unloadable

    if _torchvision_ops_unloadable():
        sys.modules.setdefault("torchvision._meta_registrations",
                               types.ModuleType("torchvision._meta_registrations"))


def summarize(results):
    """results: {op_id: [SampleResult]} -> counts dict."""
    samples_total = captured = passed = 0
    ops_total = ops_passed = 0
    for rs in results.values():
        cap = [r for r in rs if r.outcome != CAPTURE]
        samples_total += len(rs)
        captured += len(cap)
        passed += sum(r.outcome == PASS for r in cap)
        if cap:
            ops_total += 1
            ops_passed += all(r.outcome == PASS for r in cap)
    return dict(samples=samples_total, capturable=captured, passed=passed,
                ops=ops_total, ops_passed=ops_passed,
                sample_rate=passed / captured if captured else math.nan,
                op_rate=ops_passed / ops_total if ops_total else math.nan)


# ---- expected failures -----------------------------------------------------
# tests/python/opinfo_expected/*.txt, one line per entry:
#   op_id | dtypes | opsets | forms | reason
# dtypes: "*" or a comma list (float32,int64); opsets: "*", "13-16", "13,17";
# forms: "*" or a comma list of train (torch.export.export's graph), core
# (run_decompositions()), inplace (op.inplace_variant). "#" starts a comment.
EXPECTED_DIR = os.path.join(os.path.dirname(__file__), "opinfo_expected")
FORMS = ("train", "core", "inplace")


@dataclass
class Expected:
    op: str
    dtypes: set | None
    opsets: set | None
    forms: set | None
    reason: str
    where: str

    def matches(self, op, dtype, opset, form):
        return (self.op == op and (self.dtypes is None or dtype in self.dtypes)
                and (self.opsets is None or opset in self.opsets)
                and (self.forms is None or form in self.forms))


def _parse_set(text, conv=str):
    text = text.strip()
    if text == "*":
        return None
    out = set()
    for part in text.split(","):
        part = part.strip()
        if conv is int and "-" in part:
            lo, hi = part.split("-")
            out.update(range(int(lo), int(hi) + 1))
        else:
            out.add(conv(part))
    return out


def load_expected(directory=EXPECTED_DIR):
    entries = []
    if not os.path.isdir(directory):
        return entries
    for fn in sorted(os.listdir(directory)):
        if not fn.endswith(".txt"):
            continue
        with open(os.path.join(directory, fn)) as fh:
            for i, line in enumerate(fh, 1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                parts = [p.strip() for p in line.split("|")]
                if len(parts) != 5 or not parts[4]:
                    raise ValueError(f"{fn}:{i}: want 'op | dtypes | opsets | forms | reason'")
                forms = _parse_set(parts[3])
                if forms and not forms <= set(FORMS):
                    raise ValueError(f"{fn}:{i}: unknown form in {parts[3]!r}")
                entries.append(Expected(parts[0], _parse_set(parts[1]), _parse_set(parts[2], int),
                                        forms, parts[4], f"{fn}:{i}"))
    return entries


def expected_failure(entries, op, dtype, opset, form):
    for e in entries:
        if e.matches(op, dtype, opset, form):
            return e
    return None
