"""torch.compile backends on onnxruntime: `torch.compile(model, backend="pt2onnx")`
and `backend="pt2onnx_debug"` (registered through the package's
`torch_dynamo_backends` entry points: no import needed).

Glue only. Dynamo captures a graph; AOTAutograd (torch's, as inductor uses
it) turns it into a functional ATen graph with parameters and buffers as
inputs; this module describes that graph as an ExportedProgram (parameters
and buffers that the graph does not mutate become initializers, so the
optimizer can fold them and onnxruntime can prepack them), hands it to the
same C++ pipeline `pt2onnx.export` uses, in memory, and runs the model with
an onnxruntime InferenceSession, tensors passed both ways through DLPack.

    compiled = torch.compile(model, backend="pt2onnx", dynamic=True,
                             options={"providers": ["CPUExecutionProvider"]})
    with torch.inference_mode():
        y = compiled(x)

`options` (all optional):
- "providers": onnxruntime execution providers (default ["CPUExecutionProvider"]);
- "session_options": a dict of onnxruntime.SessionOptions attributes
  ({"intra_op_num_threads": 4}), or a SessionOptions object (then shared by
  every session, which cannot take the weights left in PyTorch's memory: they
  are copied into each model);
- "session_config": session config entries ({"session.intra_op.allow_spinning": "0"});
- "opset" (default pt2onnx.DEFAULT_OPSET), "target" ("onnxruntime", default for
  "pt2onnx": onnxruntime's fused contrib ops; "standard" for "pt2onnx_debug",
  whose reference evaluator runs ONNX ops only), "optimize" (True),
  "custom_translation_table" / "custom_opsets" (as pt2onnx.export);
- "fallback": None (default: ops without a converter are an error naming them
  all) or "partition" (torch's CapabilityBasedPartitioner splits the graph:
  the unsupported nodes run in PyTorch, the rest in onnxruntime; a warning
  names the ops);
- "save_dir": also writes each graph's model there (graph_<n>.onnx), to inspect;
- "atol", "rtol" (pt2onnx_debug: tolerances of its comparisons, default 1e-4).

Inference only: a call with gradients enabled on inputs or parameters that
require them is refused (compile under torch.no_grad() / inference_mode()),
never run with wrong gradients. Weights are constants of the compiled model,
as with inductor's freezing, but checked: a parameter or buffer written in
place since (its version counter or storage changed, e.g. load_state_dict)
makes the graph convert again with the new values on its next call (a second
change makes it an input of the model from then on). Writes through
`tensor.data` bypass version counters and are not seen.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch.utils.dlpack import from_dlpack as _from_dlpack
from torch.utils.dlpack import to_dlpack as _to_dlpack

from . import _core, _custom
from ._export import DEFAULT_OPSET, TARGETS, _tensor_view
from ._serialize import graph_program_tree

_KNOWN_OPTIONS = {"providers", "session_options", "session_config", "opset", "target", "optimize",
                  "custom_translation_table", "custom_opsets", "fallback", "save_dir", "atol",
                  "rtol"}


@dataclass
class GraphStats:
    """What the backends did for one graph dynamo handed over; `stats()` lists them.

    With `fallback="partition"`, the graph split has a record of its own for each
    partition run in onnxruntime. Times are in seconds.

    Attributes:
        graph: The graph's number, counted from 0 (from the first graph after the last
            `reset_stats()`); save_dir's `graph_<n>.onnx` uses it.
        nodes: The number of FX nodes of the ATen graph.
        aot: Seconds in AOTAutograd: dynamo's graph to a functional ATen graph.
        convert: Seconds converting: the graph described and run through the C++ pipeline
            (read to write, in memory), summed over conversions.
        session: Seconds creating onnxruntime InferenceSessions, summed over conversions.
        conversions: How many times the graph was converted: 1, more when weights changed
            in place.
        onnx_nodes: The number of nodes of the ONNX model (last conversion).
        partitions: fallback="partition": the number of partitions run in onnxruntime.
        fallback_ops: fallback="partition": the ops without a converter, run in PyTorch.
        timings: Seconds per stage of the C++ pipeline, last conversion.
        entered: `time.perf_counter()` when dynamo called the backend.
        session_id: `id()` of the InferenceSession in use.
        providers: The execution providers of that session.
        weights: The number of parameters and buffers written as initializers.
        in_place: The number of outputs written into the input they update (a KV cache).
    """

    graph: int  # number of the graph in this process, from 0
    nodes: int  # FX nodes of the ATen graph
    aot: float = 0.0  # AOTAutograd: dynamo's graph to a functional ATen graph
    convert: float = 0.0  # graph described, C++ pipeline (read .. write), in memory
    session: float = 0.0  # onnxruntime InferenceSession creation
    conversions: int = 0  # 1, more when weights changed in place
    onnx_nodes: int = 0
    partitions: int = 0  # fallback="partition": graphs run in onnxruntime
    fallback_ops: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # the C++ stages, last conversion
    entered: float = 0.0  # time.perf_counter() when dynamo called the backend
    session_id: int = 0  # id() of the InferenceSession in use
    providers: list[str] = field(default_factory=list)  # the session's
    weights: int = 0  # parameters and buffers written as initializers
    in_place: int = 0  # outputs written into the input they update (a KV cache)


_stats: list[GraphStats] = []
_stats_lock = threading.Lock()


def stats() -> list[GraphStats]:
    """Return what the torch.compile backends did for each graph, oldest first.

    The records of every graph the "pt2onnx" and "pt2onnx_debug" backends compiled in this
    process since the last `reset_stats()`. The list is a copy, but its entries are the live
    records: a later conversion of a graph updates its entry.

    Returns:
        list[GraphStats]: One record per graph (and per partition).
    """
    with _stats_lock:
        return list(_stats)


def reset_stats() -> None:
    """Clear the records `stats()` returns; graph numbers start from 0 again."""
    with _stats_lock:
        _stats.clear()


class _Options:
    def __init__(self, options: dict | None, debug: bool):
        options = dict(options or {})
        unknown = sorted(set(options) - _KNOWN_OPTIONS)
        if unknown:
            raise ValueError(f"unknown option(s) {unknown} for backend 'pt2onnx'; known: "
                             f"{sorted(_KNOWN_OPTIONS)}")
        self.providers = list(options.get("providers") or ["CPUExecutionProvider"])
        self.session_options = options.get("session_options")
        self.session_config = dict(options.get("session_config") or {})
        self.opset = int(options.get("opset", DEFAULT_OPSET))
        self.target = options.get("target", "standard" if debug else "onnxruntime")
        if self.target not in TARGETS:
            raise ValueError(f"options['target'] must be one of {TARGETS}, not {self.target!r}")
        if debug and self.target != "standard":
            raise ValueError("backend 'pt2onnx_debug' compares with onnx's reference evaluator, "
                             "which runs standard ONNX only: target must be 'standard'")
        self.optimize = bool(options.get("optimize", True))
        self.fallback = options.get("fallback")
        if self.fallback not in (None, "partition"):
            raise ValueError(f"options['fallback'] must be None or 'partition', "
                             f"not {self.fallback!r}")
        self.custom_opsets = _custom.check_custom_opsets(options.get("custom_opsets"))
        self.custom_functions = _custom.record_table(options.get("custom_translation_table"),
                                                     self.opset, self.custom_opsets)
        self.save_dir = options.get("save_dir")
        self.atol = float(options.get("atol", 1e-4))
        self.rtol = float(options.get("rtol", 1e-4))
        self.debug = debug

    def session_key(self) -> tuple:
        so = self.session_options
        if so is None or isinstance(so, dict):
            so_key = tuple(sorted((so or {}).items()))
        else:
            so_key = ("object", id(so))
        return (tuple(map(str, self.providers)), so_key,
                tuple(sorted(self.session_config.items())))

    def make_session_options(self):
        import onnxruntime as ort

        so = self.session_options
        if so is None or isinstance(so, dict):
            opts = ort.SessionOptions()
            for k, v in (so or {}).items():
                if not hasattr(opts, k):
                    raise ValueError(f"options['session_options']: onnxruntime.SessionOptions "
                                     f"has no attribute {k!r}")
                setattr(opts, k, v)
            for k, v in self.session_config.items():
                opts.add_session_config_entry(str(k), str(v))
            return opts
        if self.session_config:
            raise ValueError("options['session_config'] goes with session_options given as a "
                             "dict; set the entries on your SessionOptions object instead")
        return so

    def fresh_sessions(self) -> bool:
        """Whether each session gets a SessionOptions of its own (one given
        by the user is shared, so weights cannot be registered on it)."""
        return self.session_options is None or isinstance(self.session_options, dict)


def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *,
            options: dict | None = None) -> Callable:
    """The torch.compile backend "pt2onnx": each graph runs in onnxruntime.

    Not called directly: `torch.compile(model, backend="pt2onnx", options={...})` finds it
    through the package's entry point. AOTAutograd turns each graph dynamo captures into a
    functional ATen graph; it is converted by the C++ pipeline `pt2onnx.export` uses, in
    memory, at its first call, and run in an onnxruntime InferenceSession, tensors passed
    both ways through DLPack.

    Inference only: a graph that would need gradients is refused. Parameters and buffers
    the graph does not mutate are constants of the compiled model (initializers), as with
    inductor's freezing, but checked: one written in place since (its version counter or
    storage changed, e.g. by `load_state_dict`) makes the graph convert again with the new
    values on its next call (a second change makes it an input of the model from then
    on). Writes through `tensor.data` bypass version counters and are not seen.

    Args:
        gm: The graph dynamo captured.
        example_inputs: Its example inputs.
        options: The `options` of `torch.compile`, all optional:

            - "providers": onnxruntime execution providers (default
              ["CPUExecutionProvider"]);
            - "session_options": a dict of `onnxruntime.SessionOptions` attributes
              ({"intra_op_num_threads": 4}), or a SessionOptions object (then shared by
              every session, which cannot take the weights left in PyTorch's memory: they
              are copied into each model);
            - "session_config": session config entries
              ({"session.intra_op.allow_spinning": "0"}), with "session_options" given as a
              dict or not at all;
            - "opset" (default `pt2onnx.DEFAULT_OPSET`);
            - "target": "onnxruntime" (default: onnxruntime's fused contrib ops) or
              "standard";
            - "optimize" (default True);
            - "custom_translation_table" / "custom_opsets": as `pt2onnx.export` takes them;
            - "fallback": None (default: ops without a converter are an error naming them
              all) or "partition" (torch's CapabilityBasedPartitioner splits the graph: the
              unsupported nodes run in PyTorch, the rest in onnxruntime; a warning names the
              ops);
            - "save_dir": also write each graph's model there (`graph_<n>.onnx`), to
              inspect;
            - "atol", "rtol": used by "pt2onnx_debug" only.

    Returns:
        Callable: The compiled graph, for dynamo to call.

    Raises:
        ValueError: An unknown option, or an option's value out of range.
        RuntimeError: The graph would need gradients (an input or parameter requires grad
            while grad mode is on): call the compiled model under `torch.no_grad()` or
            `torch.inference_mode()`.
        pt2onnx.ConversionError: At the graph's first call, when it does not convert.

    Runnable examples: [the torch.compile backend](../guides/compile-backend.md).
    """
    return _compile(gm, example_inputs, _Options(options, debug=False))


def debug_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *,
                  options: dict | None = None) -> Callable:
    """The torch.compile backend "pt2onnx_debug": "pt2onnx" checked against PyTorch.

    Each graph runs in onnxruntime and in `onnx.reference.ReferenceEvaluator`, both
    compared with PyTorch eager on every call; the first output that differs is reported
    with the ONNX node that produced it and the FX node it came from
    (`pt2onnx.VerificationError`). Slow: for finding which graph, output and node a
    conversion gets wrong. Used as `torch.compile(model, backend="pt2onnx_debug")`.

    Args:
        gm: The graph dynamo captured.
        example_inputs: Its example inputs.
        options: As for the "pt2onnx" backend (see `backend`), except that "target" must
            be "standard" (the default here: the reference evaluator runs standard ONNX
            only), and "atol" / "rtol" set the comparisons' tolerances (default 1e-4).

    Returns:
        Callable: The compiled graph, for dynamo to call.

    Raises:
        ValueError: An unknown option, an option's value out of range, or a target other
            than "standard".
        RuntimeError: The graph would need gradients.
        pt2onnx.VerificationError: On a call whose outputs differ from PyTorch's.
    """
    return _compile(gm, example_inputs, _Options(options, debug=True))


def _refuse_autograd(example_inputs: Sequence[Any]) -> None:
    if not torch.is_grad_enabled():
        return
    needs = [i for i, x in enumerate(example_inputs)
             if isinstance(x, torch.Tensor) and x.requires_grad]
    if needs:
        raise RuntimeError(
            "backend 'pt2onnx' runs inference only, and this graph would need gradients "
            f"({len(needs)} of its inputs or parameters require grad while grad mode is on); "
            "call the compiled model under torch.no_grad() or torch.inference_mode() (or use "
            "backend='inductor' for training)")


def _compile(gm, example_inputs, opts: _Options) -> Callable:
    from torch._dynamo.backends.common import aot_autograd

    _refuse_autograd(example_inputs)
    t0 = time.perf_counter()

    def fw_compiler(fx_g: torch.fx.GraphModule, fake_inputs):
        from torch._guards import TracingContext

        ctx = TracingContext.try_get()
        meta = ctx.fw_metadata if ctx is not None else None
        static = set(meta.static_input_indices or []) if meta is not None else set()
        mutated = ({i for i, info in enumerate(meta.input_info) if info.mutates_data}
                   if meta is not None else set())
        shape_env = ctx.fake_mode.shape_env if ctx is not None and ctx.fake_mode else None
        with _stats_lock:
            st = GraphStats(graph=len(_stats), nodes=len(fx_g.graph.nodes), entered=t0)
            _stats.append(st)
        st.aot = time.perf_counter() - t0
        constant_ok = [i in static and i not in mutated for i in range(len(fake_inputs))]
        if opts.fallback == "partition":
            return _partitioned(fx_g, constant_ok, shape_env, opts, st)
        return _OrtGraph(fx_g, constant_ok, shape_env, opts, st,
                         _mutated_outside(meta) if meta is not None else [])

    # Inference graphs only (grad is off or nothing requires it): AOTAutograd
    # compiles no backward. Input mutations come back as outputs and its
    # runtime wrapper applies them (a static KV cache's index_copy_).
    return aot_autograd(fw_compiler=fw_compiler)(gm, example_inputs)


def _mutated_outside(meta) -> list[int]:
    """The inputs whose new values the graph returns first, in this order, for
    AOTAutograd's runtime wrapper to copy into them (a KV cache's index_copy_)."""
    from torch._functorch._aot_autograd.schemas import MutationType

    return [i for i, info in enumerate(meta.input_info)
            if info.mutation_type == MutationType.MUTATED_OUT_GRAPH]


# Ops whose result is their first argument with some positions replaced, whose
# ONNX forms (ScatterElements / ScatterND, a Concat of slices, Where) may write
# into that argument's own buffer: every element they read from it is read
# before, or at the position of, the element they write.
_IN_PLACE_OK = {"aten.index_copy.default", "aten.index_put.default", "aten.scatter.src",
                "aten.scatter.value", "aten.slice_scatter.default", "aten.select_scatter.default"}


# --- one graph in onnxruntime ----------------------------------------------------------

# Sessions shared by live compiled graphs with the same model: keyed by the
# graph's code, its input types and shapes, the identity and version of every
# weight baked into it, and the session's options, so a recompiled graph (a
# new shape, changed weights) never finds a session of another model. Weak:
# a session lives as long as a compiled graph uses it.
_sessions: "weakref.WeakValueDictionary[tuple, Any]" = weakref.WeakValueDictionary()
_sessions_lock = threading.Lock()


def _val_key(v) -> Any:
    if isinstance(v, torch.Tensor):
        return ("T", str(v.dtype), tuple(str(d) for d in v.shape))
    return (type(v).__name__, str(v))


class _OrtGraph:
    """A functional ATen graph run in onnxruntime; converted at its first call,
    when the values of its weights are at hand."""

    def __init__(self, fx_g, constant_ok, shape_env, opts: _Options, st: GraphStats,
                 mutated: Sequence[int] = ()):
        self.gm = fx_g
        self.opts = opts
        self.st = st
        self.shape_env = shape_env
        self.placeholders = [n for n in fx_g.graph.nodes if n.op == "placeholder"]
        out_node = next(n for n in fx_g.graph.nodes if n.op == "output")
        out = out_node.args[0]
        self.single = isinstance(out, torch.fx.Node)  # a partition returning one value
        if self.single:  # a program's outputs are a tuple; the caller gets the value
            out_node.args = ((out,),)
            fx_g.recompile()
        outs = [out] if self.single else out
        self.output_vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a
                            for a in outs]
        self.constant_ok = list(constant_ok) + [False] * (len(self.placeholders) - len(constant_ok))
        self.changes = [0] * len(self.placeholders)
        # Outputs written into the buffer of the input they update (output k ->
        # input i): the graph's only use of the input's old value is the op
        # that makes the new one, so onnxruntime can write it in place and the
        # wrapper's copy back is a copy onto itself (skipped).
        self.in_place: dict[int, int] = {}
        for k, i in enumerate(mutated):
            node, ph = outs[k] if k < len(outs) else None, self.placeholders[i]
            if (isinstance(node, torch.fx.Node) and node.op == "call_function"
                    and str(node.target) in _IN_PLACE_OK and node.args and node.args[0] is ph
                    and len(ph.users) == 1 and _same_meta(node, ph)):
                self.in_place[k] = i
        self.session = None
        self.values: dict = {}  # argument index -> (tensor, address, OrtValue): see _ortvalue
        self.lock = threading.Lock()
        _normalize_meta(fx_g)

    # The weights of the current session: (index, tensor, data_ptr, version).
    def _constants_changed(self, args) -> list[int]:
        changed = []
        for i, t, ptr, ver in self.constants:
            a = args[i]
            if a is not t and (not isinstance(a, torch.Tensor) or a.data_ptr() != ptr):
                changed.append(i)
            elif _version(a) != ver:
                changed.append(i)
        return changed

    def _build(self, args) -> None:
        t0 = time.perf_counter()
        consts = [i for i, ok in enumerate(self.constant_ok)
                  if ok and isinstance(args[i], torch.Tensor)]
        program, weights, keep = _program(self.gm, consts, args, self.shape_env)
        self.user = [i for i in range(len(self.placeholders)) if i not in set(consts)]
        input_names = [f"input_{k}" for k in range(len(self.user))]
        output_names = [f"output_{k}" for k in range(len(self.output_vals))]
        # Weights stay in PyTorch's memory, handed to onnxruntime as they are
        # (AddExternalInitializers on the session's own SessionOptions), unless
        # the model must be whole: for the reference evaluator (debug), a file
        # to inspect (save_dir), or a SessionOptions object the user shares.
        by_reference = not (self.opts.debug or self.opts.save_dir) and self.opts.fresh_sessions()
        try:
            r = _core.convert(program, weights, "", self.opts.opset, self.opts.optimize, "never",
                              input_names, output_names, {}, {}, "", self.opts.custom_functions,
                              self.opts.custom_opsets, "preserve", target=self.opts.target,
                              in_memory=True, weights_by_reference=by_reference)
        except _core.ConversionError as e:
            raise _core.ConversionError(
                f"torch.compile(backend='pt2onnx'): graph {self.st.graph} does not convert: {e}"
                + ("" if self.opts.fallback else
                   "\n(options={'fallback': 'partition'} runs the ops without a converter in "
                   "PyTorch)")) from None
        held = _memory_initializers(r["memory_initializers"], keep)
        del keep
        t1 = time.perf_counter()
        model = r["model_bytes"]
        if self.opts.save_dir:
            os.makedirs(self.opts.save_dir, exist_ok=True)
            with open(os.path.join(self.opts.save_dir, f"graph_{self.st.graph}.onnx"), "wb") as fh:
                fh.write(model)
        # Sessions are shared by graphs that convert to the same model (its
        # bytes: the graph, weights by name) with the same weight tensors.
        # Where the weights are inside the model, the graph's code stands for
        # it (hashing the whole model would cost more than generating that).
        key = (model if by_reference else self.gm.code,
               tuple(_val_key(p.meta.get("val")) for p in self.placeholders),
               tuple((i, id(args[i]), args[i].data_ptr(), _version(args[i])) for i in consts),
               self.opts.opset, self.opts.target, self.opts.optimize,
               repr(self.opts.custom_functions), self.opts.session_key())
        with _sessions_lock:
            session = _sessions.get(key)
        if session is None:
            import onnxruntime as ort

            so = self.opts.make_session_options()
            if held:
                so.add_external_initializers(list(held), [v for v, _ in held.values()])
            session = ort.InferenceSession(model, so, providers=self.opts.providers)
            # onnxruntime reads these tensors' memory for the session's life.
            session._pt2onnx_weights = held
            with _sessions_lock:
                _sessions[key] = session
        t2 = time.perf_counter()
        self.session = session
        self.model = model
        in_names = {i.name for i in session.get_inputs()}
        self.feed_names = [(n, i) for n, i in zip(input_names, self.user) if n in in_names]
        self.out_names = output_names
        self.runner = _Runner(session, self.feed_names, output_names, self.output_vals,
                              {} if self.opts.debug else self.in_place)
        self.constants = [(i, args[i], args[i].data_ptr(), _version(args[i])) for i in consts]
        self.st.session_id = id(session)
        self.st.providers = list(session.get_providers())
        self.st.weights = len(consts)
        self.st.in_place = len(self.in_place)
        self.st.convert += t1 - t0
        self.st.session += t2 - t1
        self.st.conversions += 1
        self.st.onnx_nodes = r["nodes"]
        self.st.timings = dict(r["timings"])

    def _ensure(self, args) -> None:
        if self.session is not None:
            changed = self._constants_changed(args)
            if not changed:
                return
            for i in changed:  # a second change: an input from now on
                self.changes[i] += 1
                if self.changes[i] > 1:
                    self.constant_ok[i] = False
        self._build(args)

    def __call__(self, *args):
        if not self.output_vals:
            # Nothing to compute (dynamo broke the graph right at its start: only
            # sizes come in): no file, no session (onnxruntime refuses a graph
            # without outputs).
            return []
        with self.lock:
            self._ensure(args)
            runner = self.runner
        outs = runner(args, self.values)
        if self.opts.debug:
            self._compare_with_eager(args, outs)
        return outs[0] if self.single else outs

    def _compare_with_eager(self, args, outs) -> None:
        """pt2onnx_debug: onnxruntime's and the reference evaluator's outputs
        against the ATen graph run in PyTorch on the same inputs."""
        import numpy as np
        import onnx
        from onnx.reference import ReferenceEvaluator

        from ._verify import VerificationError

        if getattr(self, "_ref_model", None) is not self.model:
            self._ref_model = self.model
            self._proto = onnx.load_from_string(self.model)
            self._ref = ReferenceEvaluator(self._proto)
        eager = self.gm(*args)
        feeds = {name: _numpy(args[i]) for name, i in self.feed_names}
        ref = self._ref.run(None, feeds)
        for k, (o, e, r) in enumerate(zip(outs, eager, ref)):
            e_np, o_np = _numpy(e), _numpy(o)
            r_np = np.asarray(r)
            bad = []
            for who, got in (("onnxruntime", o_np), ("onnx.reference", r_np)):
                problem = _mismatch(got, e_np, self.opts.atol, self.opts.rtol)
                if problem:
                    bad.append(f"{who}: {problem}")
            if bad:
                first = self._first_differing_node(args)
                raise VerificationError(
                    f"torch.compile(backend='pt2onnx_debug'): graph {self.st.graph}, output {k} "
                    f"differs from PyTorch eager ({'; '.join(bad)}; atol {self.opts.atol}, rtol "
                    f"{self.opts.rtol}). It is {self._fx_origin(k)}; in the ONNX model it is "
                    f"{self._onnx_origin(k)}." + (f" {first}" if first else ""))

    def _first_differing_node(self, args) -> str | None:
        """The first FX node, in graph order, whose value in the reference
        evaluator differs from PyTorch's: the ONNX value named as the node
        is the node's result (what the converter wrote for it; values
        fused away by the optimizer have no name and are skipped)."""
        import onnx
        from onnx.reference import ReferenceEvaluator

        values: dict = {}

        class Record(torch.fx.Interpreter):
            def run_node(self, n):
                v = super().run_node(n)
                values[n.name] = v
                return v

        Record(self.gm).run(*args)
        produced = {o: node for node in self._proto.graph.node for o in node.output}
        order = [n for n in self.gm.graph.nodes if n.op == "call_function"
                 and n.name in produced and isinstance(values.get(n.name), torch.Tensor)]
        if not order:
            return None
        probe = onnx.ModelProto()
        probe.CopyFrom(self._proto)
        del probe.graph.output[:]
        probe.graph.output.extend(onnx.ValueInfoProto(name=n.name) for n in order)
        feeds = {name: _numpy(args[i]) for name, i in self.feed_names}
        got = ReferenceEvaluator(probe).run(None, feeds)
        for n, g in zip(order, got):
            problem = _mismatch(_numpy(g), _numpy(values[n.name]), self.opts.atol,
                                self.opts.rtol)
            if problem:
                onnx_node = produced[n.name]
                trace = [ln.strip() for ln in (n.meta.get("stack_trace") or "").splitlines()
                         if ln.strip().startswith("File ")]
                return (f"The first node whose value differs: FX node '{n.name}' ({n.target}"
                        + (f", {trace[-1]}" if trace else "") + f"), written as ONNX node "
                        f"'{onnx_node.name}' ({onnx_node.op_type}): {problem}.")
        return None

    def _fx_origin(self, k: int) -> str:
        node = next(n for n in self.gm.graph.nodes if n.op == "output").args[0][k]
        if not isinstance(node, torch.fx.Node):
            return f"the constant {node!r}"
        text = f"FX node '{node.name}' ({node.op} {node.target})"
        trace = (node.meta.get("stack_trace") or "").strip().splitlines()
        where = [ln.strip() for ln in trace if ln.strip().startswith("File ")]
        return text + (f", {where[-1]}" if where else "")

    def _onnx_origin(self, k: int) -> str:
        name = self.out_names[k]
        for node in self._proto.graph.node:
            if name in node.output:
                return (f"output '{name}' of node '{node.name}' "
                        f"({(node.domain + '::') if node.domain else ''}{node.op_type})")
        return f"output '{name}', produced by no node (an input or initializer)"


def _version(t: torch.Tensor) -> int:
    """t's in-place version; 0 for an inference tensor (made under
    inference_mode: it keeps no version counter, and cannot be changed in
    place outside inference_mode)."""
    return 0 if t.is_inference() else t._version


def _sym_sum_as_adds(graph: torch.fx.Graph) -> None:
    """torch.sym_sum (dynamo's sum of sizes) as a chain of additions, which
    torch's serializer writes (it has no sym_sum) and the C++ core converts."""
    import operator

    def val(x):
        return x.meta.get("val") if isinstance(x, torch.fx.Node) else x

    for n in list(graph.nodes):
        if n.op != "call_function" or n.target is not torch.sym_sum or not n.args[0]:
            continue
        terms = list(n.args[0])
        acc = terms[0]
        with graph.inserting_before(n):
            for t in terms[1:]:
                total = val(acc) + val(t)
                acc = graph.call_function(operator.add, (acc, t))
                acc.meta["val"] = total
        if isinstance(acc, torch.fx.Node):
            n.replace_all_uses_with(acc)
            graph.erase_node(n)


def _normalize_meta(fx_g) -> None:
    """AOTAutograd's nn_module_stack holds classes; torch's serializer wants
    their qualified names (as torch.export records them)."""
    for n in fx_g.graph.nodes:
        stack = n.meta.get("nn_module_stack")
        if stack:
            n.meta["nn_module_stack"] = {
                k: (path, t if isinstance(t, str) else torch.typename(t))
                for k, (path, t) in stack.items()}


def _program(gm, consts, args, shape_env):
    """The graph as the C++ core reads a program (torch's serializer's tree,
    see _serialize.graph_program_tree) and its weights (the C++ core's views,
    and the tensors to keep alive while it reads them): placeholders in
    `consts` are parameters (nn.Parameter) or buffers holding `args`'
    tensors, the others user inputs (tensors, or SymInts: int64 scalars);
    tensors the graph reads as attributes (AOTAutograd's `_tensor_constant`s)
    constants; outputs user outputs. Described as torch.export would (input
    and output specs, module call graph, range constraints) without building
    an ExportedProgram, whose construction (a graph module's code generated,
    torch's verifier run, twice with the serializer's) cost as much as the
    serializer itself. The program gets a copy of the graph (constants lifted
    to placeholders there): `gm` stays as compiled."""
    from torch.export.exported_program import ModuleCallEntry, ModuleCallSignature
    from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec,
                                              OutputKind, OutputSpec, SymBoolArgument,
                                              SymFloatArgument, SymIntArgument, TensorArgument)
    import torch.utils._pytree as pytree

    def argument(name, v):
        if isinstance(v, torch.SymInt) or isinstance(v, int) and not isinstance(v, bool):
            return SymIntArgument(name)
        if isinstance(v, (torch.SymBool, bool)):
            return SymBoolArgument(name)
        if isinstance(v, (torch.SymFloat, float)):
            return SymFloatArgument(name)
        return TensorArgument(name)

    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    _sym_sum_as_adds(graph)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    specs, state, constants = [], {}, {}
    first = next(iter(graph.nodes))
    for n in [n for n in graph.nodes if n.op == "get_attr"]:
        value = gm
        for part in n.target.split("."):
            value = getattr(value, part)
        if not isinstance(value, torch.Tensor):
            continue
        with graph.inserting_before(first):
            ph = graph.placeholder(f"lifted_{n.target.replace('.', '_')}")
        ph.meta = dict(n.meta)
        n.replace_all_uses_with(ph)
        graph.erase_node(n)
        specs.append(InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(ph.name),
                               target=n.target))
        constants[n.target] = value
    const_set = set(consts)
    for i, ph in enumerate(placeholders):
        if i in const_set:
            name = f"w{i}"
            t = args[i]
            if isinstance(t, torch.nn.Parameter):
                specs.append(InputSpec(InputKind.PARAMETER, TensorArgument(ph.name), target=name))
            else:
                specs.append(InputSpec(InputKind.BUFFER, TensorArgument(ph.name), target=name,
                                       persistent=True))
            state[name] = t
        else:
            specs.append(InputSpec(InputKind.USER_INPUT, argument(ph.name, ph.meta.get("val")),
                                   target=None))
    out = next(n for n in graph.nodes if n.op == "output")
    out_specs = [OutputSpec(OutputKind.USER_OUTPUT, argument(o.name, o.meta.get("val")),
                            target=None) for o in out.args[0]]
    n_user = len(placeholders) - len(const_set)
    mcg = [ModuleCallEntry("", ModuleCallSignature(
        inputs=[], outputs=[], in_spec=pytree.tree_flatten(((0,) * n_user, {}))[1],
        out_spec=pytree.tree_flatten(tuple(range(len(out_specs))))[1]))]
    ranges = {}
    if shape_env is not None:
        for ph in placeholders:
            v = ph.meta.get("val")
            dims = v.shape if isinstance(v, torch.Tensor) else [v]
            for d in dims:
                if isinstance(d, torch.SymInt):
                    for sym in d.node.expr.free_symbols:
                        if sym in shape_env.var_to_range:
                            ranges[sym] = shape_env.var_to_range[sym]
    from torch.fx._lazy_graph_module import _LazyGraphModule

    # Lazy: its Python code is generated only if something asks for it.
    module = _LazyGraphModule(gm, graph)
    tree = graph_program_tree(module, ExportGraphSignature(specs, out_specs), mcg, ranges)
    keep: list = []
    weights = [_tensor_view(name, t, keep) for name, t in (*state.items(), *constants.items())]
    return tree, weights, keep


# ONNX TensorProto data types -> torch dtypes (initializers left in memory).
_TORCH_DTYPES = {1: torch.float32, 2: torch.uint8, 3: torch.int8, 4: torch.uint16, 5: torch.int16,
                 6: torch.int32, 7: torch.int64, 9: torch.bool, 10: torch.float16,
                 11: torch.float64, 12: torch.uint32, 13: torch.uint64, 16: torch.bfloat16}


def _memory_initializers(refs, keep) -> dict:
    """name -> (OrtValue, tensor) for the initializers the C++ core handed
    over in memory: a view of the kept weight whose storage holds its bytes,
    or the buffer the conversion made (folded, transposed, fused weights);
    passed to onnxruntime through DLPack (no copy)."""
    import bisect

    from onnxruntime import OrtValue
    from onnxruntime.capi import _pybind_state as C

    if not refs:
        return {}
    whole = {t.data_ptr(): t for t in keep if t.is_contiguous()}
    storages = sorted(((t.untyped_storage().data_ptr(), t.untyped_storage()) for t in keep),
                      key=lambda e: e[0])
    bases = [b for b, _ in storages]
    held = {}
    for name, addr, onnx_type, dims, nbytes, buffer in refs:
        dtype = _TORCH_DTYPES.get(onnx_type)
        view = whole.get(addr) if buffer is None else None
        if view is not None and view.dtype == dtype and list(view.shape) == list(dims):
            pass  # the weight itself, as it is
        elif dtype is not None and buffer is not None:
            view = torch.from_numpy(buffer).view(dtype).view(list(dims))
        else:
            k = bisect.bisect_right(bases, addr) - 1
            owner = storages[k][1] if k >= 0 else None
            if (dtype is None or owner is None or addr + nbytes > bases[k] + owner.nbytes()
                    or (addr - bases[k]) % dtype.itemsize):
                raise _core.ConversionError(
                    f"internal: initializer {name!r} (ONNX type {onnx_type}) is not a view of a "
                    "weight the backend passed")
            view = torch.empty(0, dtype=dtype).set_(owner, (addr - bases[k]) // dtype.itemsize,
                                                    list(dims))
        held[name] = (OrtValue(C.OrtValue.from_dlpack(_to_dlpack(view))), view)
    return held


class _Runner:
    """One graph's onnxruntime run, the per-call path kept short (a decode
    step is a few ms): tensors in and out through DLPack capsules (no copies
    on CPU; the capsule calls cost a fifth of the `__dlpack__` protocol's),
    Python scalars as 0-d tensors, each output converted as its kind says.
    With outputs written in place (`in_place`: output k -> argument i) the
    run goes through an IOBinding kept per thread, on which an input or
    in-place output is bound again only when its tensor or address changed
    (a KV cache is bound once)."""

    def __init__(self, session, feeds_at, out_names, output_vals, in_place: dict):
        from onnxruntime.capi import _pybind_state as C

        self.session = session  # the InferenceSession: it keeps its weights alive
        self.sess = session._sess
        self.feeds_at = feeds_at
        self.out_names = out_names
        self.in_place = in_place
        self.outputs = [_output_converter(v) for v in output_vals]
        self.cpu = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
        self.C = C
        self.local = threading.local()
        self.allocated = [(k, n) for k, n in enumerate(out_names) if k not in in_place]
        self.in_place_outs = [(k, (n, in_place[k])) for k, n in enumerate(out_names)
                              if k in in_place]

    def __call__(self, args, values: dict):
        if self.in_place:
            return self._bound(args, values)
        got = self.sess.run_with_ort_values(_feeds(self.feeds_at, args, values), self.out_names,
                                            None)
        return [convert(o) for convert, o in zip(self.outputs, got)]

    def _bound(self, args, values: dict):
        b = getattr(self.local, "binding", None)
        if b is None:
            b = self.local.binding = (self.C.SessionIOBinding(self.sess), {})
            # get_outputs() lists outputs in the order they were first bound;
            # binding a name again keeps its place.
            for name in self.out_names:
                b[0].bind_output(name, self.cpu)
        io, bound = b
        # An argument bound before as this tensor at this address is bound
        # still: onnxruntime reads its memory at the run.
        for name, i in self.feeds_at:
            a = args[i]
            last = bound.get(name)
            if last is not None and last[0] is a and last[1] == a.data_ptr():
                continue
            if isinstance(a, torch.Tensor) and a.is_contiguous():
                v = self.C.OrtValue.from_dlpack(_to_dlpack(a.detach()))
                bound[name] = (a, a.data_ptr(), v)
            else:  # a copy, or a scalar's tensor: new memory at each call
                v = _feeds([(name, i)], args)[name]
                bound[name] = (None, 0, v)
            io.bind_ortvalue_input(name, v)
        for k, name in self.allocated:  # allocated by onnxruntime at each run
            io.bind_output(name, self.cpu)
        written = []
        for k, (name, i) in self.in_place_outs:
            a = args[i]
            last = bound.get(k)
            if last is not None and last[0] is a and last[1] == a.data_ptr():
                written.append(k)
            elif a.is_contiguous():
                v = self.C.OrtValue.from_dlpack(_to_dlpack(a.detach()))
                bound[k] = (a, a.data_ptr(), v)
                io.bind_ortvalue_output(name, v)
                written.append(k)
            else:
                bound.pop(k, None)
                io.bind_output(name, self.cpu)
        self.sess.run_with_iobinding(io, None)
        got = io.get_outputs()
        outs = [None] * len(got)
        for k, _ in self.allocated:
            outs[k] = self.outputs[k](got[k])
        for k, (_, i) in self.in_place_outs:
            outs[k] = args[i] if k in written else self.outputs[k](got[k])
        return outs


def _ortvalue(a: torch.Tensor, i: int, values: dict | None):
    """The OrtValue of tensor argument i: through a DLPack capsule, which
    keeps the tensor alive; remembered in `values` while argument i is that
    tensor at that address (a KV cache passed on every call)."""
    from onnxruntime.capi import _pybind_state as C

    if values is not None:
        hit = values.get(i)
        if hit is not None and hit[0] is a and hit[1] == a.data_ptr():
            return hit[2]
    v = C.OrtValue.from_dlpack(_to_dlpack(a.detach()))
    if values is not None:
        values[i] = (a, a.data_ptr(), v)
    return v


def _feeds(feeds_at, args, values=None) -> dict:
    from onnxruntime.capi import _pybind_state as C

    feeds = {}
    for name, i in feeds_at:
        a = args[i]
        if not isinstance(a, torch.Tensor):  # a SymInt's value (or a float / bool)
            a = torch.tensor(a, dtype=torch.bool if isinstance(a, bool) else
                             torch.float32 if isinstance(a, float) else torch.int64)
            feeds[name] = C.OrtValue.from_dlpack(_to_dlpack(a))
        elif not a.is_contiguous():
            feeds[name] = C.OrtValue.from_dlpack(_to_dlpack(a.detach().contiguous()))
        else:
            feeds[name] = _ortvalue(a, i, values)
    return feeds


def _same_meta(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    return (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor)
            and va.dtype == vb.dtype and va.shape == vb.shape)


def _output_converter(v):
    """OrtValue -> what the graph returns where its output's value is `v`:
    a tensor (of v's dtype: bool comes through DLPack as uint8), or a Python
    scalar for a SymInt / SymFloat / SymBool output."""
    if isinstance(v, (torch.SymBool, bool)):
        return lambda o: bool(_from_dlpack(o.to_dlpack()).item())
    if isinstance(v, (torch.SymInt, int)):
        return lambda o: int(_from_dlpack(o.to_dlpack()).item())
    if isinstance(v, (torch.SymFloat, float)):
        return lambda o: float(_from_dlpack(o.to_dlpack()).item())
    if not isinstance(v, torch.Tensor):
        return lambda o: _from_dlpack(o.to_dlpack())
    dtype = v.dtype

    def tensor(o):
        t = _from_dlpack(o.to_dlpack())
        return t if t.dtype == dtype else t.to(dtype)

    return tensor


def _numpy(v):
    import numpy as np

    if isinstance(v, torch.Tensor):
        v = v.detach()
        if v.dtype == torch.bfloat16:
            v = v.float()
        return v.numpy()
    return np.asarray(v)


def _mismatch(got, want, atol: float, rtol: float) -> str | None:
    import numpy as np

    if got.shape != want.shape:
        return f"shape {list(got.shape)} instead of {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} instead of {want.dtype}"
    if got.size == 0:
        return None
    if got.dtype == np.bool_ or np.issubdtype(got.dtype, np.integer):
        diff = int(np.count_nonzero(got != want))
        return f"{diff} of {got.size} values differ" if diff else None
    g, w = got.astype(np.float64), want.astype(np.float64)
    same_nan = np.isnan(g) == np.isnan(w)
    close = np.isclose(g, w, atol=atol, rtol=rtol, equal_nan=True)
    if same_nan.all() and close.all():
        return None
    err = np.abs(g - w)
    err = np.where(np.isnan(err), np.inf, err)
    at = np.unravel_index(int(np.argmax(np.where(close, -1, err))), g.shape)
    return (f"max abs diff {float(np.max(np.where(close, 0, err))):.3g} at "
            f"{list(map(int, at))} ({g[at]:.6g} vs {w[at]:.6g})")


# --- fallback="partition" --------------------------------------------------------------

def _node_targets(target) -> set[str]:
    """The names the C++ core's unsupported-op list may give `target`."""
    names = set()
    if isinstance(target, torch._ops.OpOverload):
        names.add(f"torch.ops.{target}")
    elif isinstance(target, torch._ops.HigherOrderOperator):
        names.add(f"torch.ops.higher_order.{target.name()}")
    mod, name = getattr(target, "__module__", None), getattr(target, "__name__", None)
    if mod and name:
        names.add(f"{mod}.{name}")
    return names


class _OrtModule(torch.nn.Module):
    """A partition run in onnxruntime, as a submodule of the split graph."""

    def __init__(self, graph: _OrtGraph):
        super().__init__()
        self.graph = graph

    def forward(self, *args):
        return self.graph(*args)


def _partitioned(fx_g, constant_ok, shape_env, opts: _Options, st: GraphStats):
    """The graph split by torch's CapabilityBasedPartitioner: nodes no
    converter handles run in PyTorch, each maximal convertible part in
    onnxruntime. Unsupported = the C++ core's own list for this graph."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    _normalize_meta(fx_g)
    placeholders = [n for n in fx_g.graph.nodes if n.op == "placeholder"]
    program, _, _ = _program(fx_g, [], [], shape_env)
    unsupported = {op["target"]: op for op in _core.unsupported_ops(
        program, opts.opset, opts.custom_functions)}
    if not unsupported:
        return _OrtGraph(fx_g, constant_ok, shape_env, opts, st)
    st.fallback_ops = sorted(unsupported)
    warnings.warn(
        "torch.compile(backend='pt2onnx', fallback='partition'): no converter for "
        + "; ".join(f"{t} ({op['count']} node{'s' if op['count'] > 1 else ''}, first at "
                    f"{op['where']})" for t, op in sorted(unsupported.items()))
        + ": these run in PyTorch, the rest of the graph in onnxruntime", stacklevel=2)

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            return (node.op == "call_function"
                    and not _node_targets(node.target) & set(unsupported))

    split = CapabilityBasedPartitioner(fx_g, Support(), allows_single_node_partition=True)
    fused = split.partition_and_fuse()
    index = {p: i for i, p in enumerate(placeholders)}
    for node in list(fused.graph.nodes):
        if node.op != "call_module":
            continue
        sub = fused.get_submodule(node.target)
        sub_phs = [n for n in sub.graph.nodes if n.op == "placeholder"]
        ok = []
        for ph, arg in zip(sub_phs, node.args):
            if isinstance(arg, torch.fx.Node):
                ph.meta.update({k: v for k, v in arg.meta.items() if k in ("val", "tensor_meta")})
            j = index.get(arg) if isinstance(arg, torch.fx.Node) else None
            ok.append(j is not None and constant_ok[j])
        with _stats_lock:
            part = GraphStats(graph=len(_stats), nodes=len(sub.graph.nodes))
            _stats.append(part)
        fused.add_submodule(node.target, _OrtModule(_OrtGraph(sub, ok, shape_env, opts, part)))
        st.partitions += 1
    fused.recompile()
    return fused
