"""torch.compile(backend="pt2onnx") against eager PyTorch and backend="inductor",
and against the same models run in onnxruntime directly. Writes
bench/compile_backend.{md,json}.

    python bench/compile_backend.py [MODEL ...]     # resnet50 bert_base llama

Models (library definitions, random weights): torchvision's ResNet-50 (batch 1,
224x224), transformers' BERT-base (BertConfig() defaults, batch 1, 128
tokens), a transformers LLaMA (hidden 512, 8 layers, 8 heads / 4 KV heads,
vocab 32000; 64M parameters) with a StaticCache of 256 positions: prefill of
64 tokens, then decode steps of one token.

Every (model, way) runs in a fresh process with fresh inductor caches
(TORCHINDUCTOR_CACHE_DIR in a new temporary directory), torch and
onnxruntime on 2 threads. Modules are imported before timing (onnxruntime
and pt2onnx too; dynamo would import pt2onnx on its first call).
- first call: wall time of the model's first call (prefill for the LLaMA)
  or, for the decode row, of the first decode step (its own graph);
- steady: median of the calls after warm-ups; in the pt2onnx process the
  backend's call and the direct onnxruntime runs below are interleaved
  (one of each in turn), so their ratio is measured side by side; every
  onnxruntime session there (the backend's included, through its
  session_options) has spin-waiting off, so that one pool spinning after
  its run does not take the cores from the next;
- pt2onnx's share of the first call: AOTAutograd (torch's functional ATen
  trace, which inductor runs too), conversion (the graph described as a
  program, the C++ pipeline in memory) and session creation, from
  pt2onnx.dynamo_backend.stats(); "dynamo" is the time from the call to
  the backend's entry (dynamo's bytecode capture and guards);
- a steady call of the backend split: onnxruntime's run (timed around the
  session's run method), the backend's own path around it (the graph call
  less that), and the rest of the call (dynamo's guards, AOTAutograd's
  wrapper, the model's Python outside the graph): medians of the same calls;
- decode with skip_guard_eval_unsafe: the same decode step under
  torch.compiler.set_stance(skip_guard_eval_unsafe=True) (torch's switch for
  steady loops: only the guards that tell compiled graphs apart run),
  interleaved with the plain step, for inductor and pt2onnx;
- onnxruntime direct: the ONNX model the backend made for that graph (its
  bytes and the weights it left in PyTorch's memory), in a new
  InferenceSession fed the same inputs as numpy arrays: what the backend's own per-call path (dynamo's guards,
  AOTAutograd's runtime wrapper, DLPack in and out) adds; for ResNet-50 and
  BERT also the file pt2onnx.export writes for the model (same opset and
  target), run the same way.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
THREADS = 2
MODELS = ["resnet50", "bert_base", "llama"]
WAYS = ["eager", "inductor", "pt2onnx"]
MAX_CACHE = 256
PREFILL = 64


def build(name):
    import torch

    torch.manual_seed(0)
    if name == "resnet50":
        sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
        from opinfo_harness import hide_torchvision_ops

        hide_torchvision_ops()
        import torchvision.models as tvm

        m = tvm.resnet50(weights=None).eval()
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
        return m, lambda i: ((torch.randn(1, 3, 224, 224),), {})
    import pt2onnx.hf

    pt2onnx.hf.prepare()
    if name == "bert_base":
        from transformers import BertConfig, BertModel

        m = BertModel(BertConfig()).eval()

        def inputs(i):
            ids = torch.randint(0, 30522, (1, 128))
            return (), {"input_ids": ids, "attention_mask": torch.ones(1, 128, dtype=torch.long)}

        return m, inputs
    if name == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1408,
                          num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4,
                          max_position_embeddings=1024)
        return LlamaForCausalLM(cfg).eval(), None
    raise KeyError(name)


def child(name, way, out_dir):
    import numpy as np
    import onnxruntime as ort
    import torch

    import pt2onnx
    from pt2onnx import dynamo_backend

    torch.set_num_threads(THREADS)
    model, inputs = build(name)
    last_call = []  # (session, feeds) of the backend's latest onnxruntime run
    backend_run = dynamo_backend._Runner.__call__
    # Per steady call of the backend: time in its graph call (_OrtGraph) and
    # in onnxruntime's run (the session's run_with_* method, timed through a
    # proxy); the rest of a call is dynamo's guards, AOTAutograd's wrapper
    # and the model's Python outside the graph.
    split = {"graph": [], "ort": []}

    class TimedSess:
        def __init__(self, sess):
            self.sess = sess

        def __getattr__(self, name):
            fn = getattr(self.sess, name)

            def timed(*a):
                t = time.perf_counter()
                r = fn(*a)
                split["ort"].append(time.perf_counter() - t)
                return r
            return timed if name.startswith("run_with") else fn

    def recording_run(runner, args, values):
        last_call[:] = [(runner.session, runner.feeds_at, args)]
        if not isinstance(runner.sess, TimedSess):
            runner.sess = TimedSess(runner.sess)
        return backend_run(runner, args, values)

    dynamo_backend._Runner.__call__ = recording_run
    graph_call = dynamo_backend._OrtGraph.__call__

    def timed_graph_call(self, *args):
        t = time.perf_counter()
        r = graph_call(self, *args)
        split["graph"].append(time.perf_counter() - t)
        return r

    dynamo_backend._OrtGraph.__call__ = timed_graph_call

    def per_call(n):
        """Medians over the backend's last n calls (ms): onnxruntime's run,
        the backend's own path around it, and the graph call itself."""
        g, o = split["graph"][-n:], split["ort"][-n:]
        if len(g) < n or len(o) < n:
            return {}
        return {"ort_run_ms": 1e3 * statistics.median(o),
                "backend_own_ms": 1e3 * statistics.median(a - b for a, b in zip(g, o)),
                "graph_call_ms": 1e3 * statistics.median(g)}
    opts = {"session_options": {"intra_op_num_threads": THREADS, "inter_op_num_threads": 1},
            "session_config": {"session.intra_op.allow_spinning": "0"}}
    if way == "eager":
        fn = model
    elif way == "inductor":
        fn = torch.compile(model, backend="inductor")
    else:
        fn = torch.compile(model, backend="pt2onnx", options=opts)
    rep = {"model": name, "way": way}

    def graphs_since(t0):
        return [s for s in dynamo_backend.stats() if s.entered >= t0]

    def breakdown(t0, first_s):
        gs = graphs_since(t0)
        if not gs:
            return {}
        d = {"graphs": len(gs), "nodes": sum(g.nodes for g in gs),
             "dynamo_s": gs[0].entered - t0, "aot_s": sum(g.aot for g in gs),
             "convert_s": sum(g.convert for g in gs), "session_s": sum(g.session for g in gs),
             "cpp_s": sum(sum(g.timings.values()) for g in gs)}
        d["convert_share"] = d["convert_s"] / first_s
        return d

    with torch.inference_mode():
        if name != "llama":
            args, kwargs = inputs(0)
            t0 = time.perf_counter()
            fn(*args, **kwargs)
            rep["first_s"] = time.perf_counter() - t0
            rep.update(breakdown(t0, rep["first_s"]))
            for _ in range(3):
                fn(*args, **kwargs)
            ways = {"steady_ms": lambda: fn(*args, **kwargs)}
            if way == "pt2onnx":
                ref = model(*args, **kwargs)
                got = fn(*args, **kwargs)
                a = ref if isinstance(ref, torch.Tensor) else ref[0]
                b = got if isinstance(got, torch.Tensor) else got[0]
                rep["max_abs_diff"] = float((a - b).abs().max())
                ways["direct_ms"] = _direct(last_call)
                f = os.path.join(out_dir, "export.onnx")
                pt2onnx.export(model, args, f, kwargs=kwargs, target="onnxruntime",
                               opset=pt2onnx.DEFAULT_OPSET)
                ways["export_direct_ms"] = _file_runner(f, list(args) + list(kwargs.values()))
            rep.update(_interleaved(ways, 30))
            if way == "pt2onnx":
                rep.update(per_call(30))
        else:
            from transformers import StaticCache

            cache = StaticCache(config=model.config, max_cache_len=MAX_CACHE)
            ids = torch.randint(0, 32000, (1, PREFILL))
            pos = torch.arange(PREFILL)
            t0 = time.perf_counter()
            logits = fn(input_ids=ids, past_key_values=cache, cache_position=pos).logits
            rep["first_s"] = time.perf_counter() - t0
            rep.update(breakdown(t0, rep["first_s"]))
            nxt = logits[:, -1:].argmax(-1)
            t0 = time.perf_counter()
            fn(input_ids=nxt, past_key_values=cache, cache_position=torch.tensor([PREFILL]))
            rep["decode_first_s"] = time.perf_counter() - t0
            rep["decode"] = breakdown(t0, rep["decode_first_s"])
            step = [PREFILL + 1]

            def decode():
                fn(input_ids=nxt, past_key_values=cache, cache_position=torch.tensor([step[0]]))
                step[0] += 1

            for _ in range(3):
                decode()
            def decode_unguarded():
                # torch's own switch for steady loops: dynamo runs only the
                # guards that tell its compiled graphs apart.
                with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                    decode()

            ways = {"decode_steady_ms": decode}
            if way != "eager":
                ways["decode_unguarded_ms"] = decode_unguarded
            if way == "pt2onnx":
                ways["decode_direct_ms"] = _direct(last_call)
            rep.update(_interleaved(ways, 60))
            if way == "pt2onnx":
                rep["decode_split"] = per_call(120)

            def prefill():
                fn(input_ids=ids, past_key_values=cache, cache_position=pos)

            for _ in range(2):
                cache.reset()
                prefill()
            ways = {"steady_ms": prefill}
            if way == "pt2onnx":
                ways["direct_ms"] = _direct(last_call)
            # A prefill fills positions 0..63 of a fresh cache (reset untimed).
            rep.update(_interleaved(ways, 20, before=cache.reset))
            if way == "pt2onnx":
                rep.update(per_call(20))
            rep["graphs_total"] = len(dynamo_backend.stats()) if way == "pt2onnx" else None
    print(json.dumps(rep))


def _session_options():
    """2 threads; no spin-waiting: the backend's session and the direct ones
    run in turn in one process, and a pool spinning after its run would take
    the cores from the next run's pool."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def _session(path, held=None):
    import onnxruntime as ort

    so = _session_options()
    if held:  # the weights the backend's model leaves in PyTorch's memory
        so.add_external_initializers(list(held), [v for v, _ in held.values()])
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _interleaved(ways: dict, n: int, before=None) -> dict:
    """Median milliseconds of each way, the ways run in turn n times (so that
    machine noise hits them alike), after one untimed round."""
    times = {k: [] for k in ways}
    for r in range(n + 1):
        for k, fn in ways.items():
            if before is not None:
                before()
            t = time.perf_counter()
            fn()
            if r:
                times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) * 1000 for k, v in times.items()}


def _file_runner(path, values):
    s = _session(path)
    feeds = {i.name: v.numpy() for i, v in zip(s.get_inputs(), values)}
    return lambda: s.run(None, feeds)


def _direct(last_call):
    """The model of the backend's latest onnxruntime run, in a new session of
    its own, fed the same values as numpy arrays: a function running it."""
    import numpy as np
    import torch

    session, feeds_at, args = last_call[0]
    feeds = {name: (args[i].numpy().copy() if isinstance(args[i], torch.Tensor) else
                    np.array(args[i], dtype=np.int64)) for name, i in feeds_at}
    s = _session(session._model_bytes, getattr(session, "_pt2onnx_weights", None))
    return lambda: s.run(None, feeds)


def main(models):
    results = []
    for name in models:
        for way in WAYS:
            with tempfile.TemporaryDirectory(prefix="pt2onnx-cb-") as d:
                env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "inductor"),
                           OMP_NUM_THREADS=str(THREADS))
                out = subprocess.run([sys.executable, __file__, "--child", name, way, d],
                                     env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    print(out.stderr[-3000:], file=sys.stderr)
                    results.append({"model": name, "way": way, "error": out.stderr[-500:]})
                    continue
                rep = json.loads(out.stdout.strip().splitlines()[-1])
                print(json.dumps(rep), flush=True)
                results.append(rep)
    with open(os.path.join(HERE, "compile_backend.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    write_md(results)


def write_md(results):
    import torch

    import onnxruntime

    lines = [
        "# torch.compile(backend=\"pt2onnx\") vs eager and inductor",
        "",
        f"`python bench/compile_backend.py` ({platform.machine()}, {os.cpu_count()} cores; "
        f"torch {torch.__version__}, onnxruntime "
        f"{onnxruntime.__version__}, {THREADS} threads, one fresh process per row, fresh inductor "
        "cache; see the script's docstring for what each column is).",
        "",
        "| model | way | first call (s) | steady (ms) | ORT direct, backend's model (ms) | "
        "ORT direct, pt2onnx.export file (ms) | steady / direct | steady / export file |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def f(v, fmt):
        return "" if v is None else fmt.format(v)

    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['way']} | failed: {r['error'][-120:]!r} | | | | | |")
            continue
        rows = [("", r.get("first_s"), r.get("steady_ms"), r.get("direct_ms"),
                 r.get("export_direct_ms"))]
        if r["model"] == "llama":
            rows = [(" prefill 64", r.get("first_s"), r.get("steady_ms"), r.get("direct_ms"),
                     None),
                    (" decode 1", r.get("decode_first_s"), r.get("decode_steady_ms"),
                     r.get("decode_direct_ms"), None)]
            if r.get("decode_unguarded_ms"):
                rows.append((" decode 1, skip_guard_eval_unsafe", None,
                             r["decode_unguarded_ms"], r.get("decode_direct_ms"), None))
        for suffix, first, steady, direct, exp in rows:
            ratio = steady / direct if (direct and steady) else None
            ratio_exp = steady / exp if (exp and steady) else None
            lines.append(f"| {r['model']}{suffix} | {r['way']} | {f(first, '{:.2f}')} | "
                         f"{f(steady, '{:.2f}')} | {f(direct, '{:.2f}')} | {f(exp, '{:.2f}')} | "
                         f"{f(ratio, '{:.2f}x')} | {f(ratio_exp, '{:.2f}x')} |")
    lines += ["", "A steady call of backend=\"pt2onnx\", split (medians, ms): onnxruntime's run; "
              "the backend's own path around it (inputs and outputs through DLPack, IOBinding, "
              "weight checks); the rest of the call outside the backend (dynamo's guards, "
              "AOTAutograd's runtime wrapper, the model's Python outside the graph), which "
              "onnxruntime run directly does not pay:", "",
              "| model | steady | onnxruntime's run | backend's own | outside the backend | "
              "ORT direct |", "|---|---|---|---|---|---|"]
    for r in results:
        if r["way"] != "pt2onnx" or "error" in r:
            continue
        for label, d, steady, direct in (
                (r["model"] + (" prefill 64" if r["model"] == "llama" else ""), r,
                 r.get("steady_ms"), r.get("direct_ms")),
                ("llama decode 1", r.get("decode_split"), r.get("decode_steady_ms"),
                 r.get("decode_direct_ms"))):
            if not d or "ort_run_ms" not in d or steady is None:
                continue
            lines.append(f"| {label} | {steady:.2f} | {d['ort_run_ms']:.2f} | "
                         f"{d['backend_own_ms']:.2f} | {steady - d['graph_call_ms']:.2f} | "
                         f"{f(direct, '{:.2f}')} |")
    lines += ["", "pt2onnx's share of the first call (seconds; convert = graph described + C++ "
              "pipeline in memory, of which C++):", "",
              "| model | graphs | FX nodes | dynamo | AOTAutograd | convert | of which C++ | "
              "session | convert / first call |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r["way"] != "pt2onnx" or "error" in r:
            continue
        for label, d, first in ((r["model"] + (" prefill" if r["model"] == "llama" else ""), r,
                                 r.get("first_s")),
                                ("llama decode", r.get("decode"), r.get("decode_first_s"))):
            if not d or "graphs" not in d:
                continue
            lines.append(f"| {label} | {d['graphs']} | {d['nodes']} | {d['dynamo_s']:.2f} | "
                         f"{d['aot_s']:.2f} | {d['convert_s']:.3f} | {d['cpp_s']:.3f} | "
                         f"{d['session_s']:.2f} | {100 * d['convert_s'] / first:.1f}% |")
    with open(os.path.join(HERE, "compile_backend.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:5])
    else:
        main(sys.argv[1:] or MODELS)
