"""onnxruntime load cost of pt2onnx's files beside torch.onnx's (issue 11).

For every bench model, exports with pt2onnx.export and torch.onnx.export
(dynamo=True), both at their defaults, then creates an onnxruntime
InferenceSession (default SessionOptions: graph optimizations on, as users
get them) of each file N times, interleaved (ours, theirs, theirs, ours, ...),
each load in a fresh process so that its peak RSS (VmHWM) is its own.
Reports the median session-creation time, the median peak RSS (and its rise
over the process before the load), the median latency of a few runs on new
inputs, the max difference of the two files' outputs, and ours/torch.onnx
ratios; writes bench/load.md (and .json).

    python bench/load.py [--models a,b] [--runs N] [--out DIR] [--md PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODELS = ["llama_h256_l2", "llama_h512_l4", "llama_h1024_l8", "resnet50", "bert_base",
                  "hf_bert_base", "hf_vit_57m"]  # llama_h2048_l12 (2.8 GB): --models
EXPORTERS = ["pt2onnx", "torch_onnx"]


def build(name):
    """(model, example args, new args, dynamic_shapes) with random weights."""
    import torch

    sys.path.insert(0, HERE)
    from bench_models import build as bench_build

    if not name.startswith("hf_"):
        m, args, new, ds, _ = bench_build(name)
        return m, args, new, ds
    from pt2onnx.hf import prepare

    prepare()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers as tr

    torch.manual_seed(0)
    B = torch.export.Dim("batch", min=1, max=64)
    if name == "hf_bert_base":  # BERT-base (110M), random weights
        cfg = tr.BertConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                            intermediate_size=3072)
        m = tr.BertModel(cfg, add_pooling_layer=False).eval()
        S = torch.export.Dim("seq", min=2, max=512)
        args = (torch.randint(0, cfg.vocab_size, (2, 32)), torch.ones(2, 32, dtype=torch.int64))
        mask = torch.ones(3, 40, dtype=torch.int64)
        mask[1, 30:] = 0
        new = (torch.randint(0, cfg.vocab_size, (3, 40)), mask)
        return (m, args, new, {"input_ids": {0: B, 1: S}, "attention_mask": {0: B, 1: S}})
    if name == "hf_vit_57m":  # ViT-base width, 8 layers: 57M parameters
        cfg = tr.ViTConfig(hidden_size=768, num_hidden_layers=8, num_attention_heads=12,
                           intermediate_size=3072, image_size=224, patch_size=16)
        m = tr.ViTModel(cfg, add_pooling_layer=False).eval()
        return (m, (torch.randn(2, 3, 224, 224),), (torch.randn(3, 3, 224, 224),),
                {"pixel_values": {0: B}})
    raise KeyError(name)


class _FirstOutput:
    """Wraps a model so that both exporters see one tensor output."""

    def __new__(cls, m):
        import torch

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, *a):
                y = self.m(*a)
                if not isinstance(y, torch.Tensor):
                    y = y[0]
                return y

        return W().eval()


def export(name, exporter, out):
    """Child: one export, its time; saves the new inputs for the loads."""
    import numpy as np
    import torch

    torch.set_num_threads(2)
    m, args, new, ds = build(name)
    m = _FirstOutput(m)
    ds = (tuple(ds.values()),)  # the wrapper takes *args
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.onnx")
    t0 = time.perf_counter()
    rep = {}
    if exporter == "pt2onnx":
        import pt2onnx

        r = pt2onnx.export(m, args, path, dynamic_shapes=ds)
        rep["write_s"] = r.timings.get("write")
    else:
        torch.onnx.export(m, args, path, dynamic_shapes=ds, dynamo=True, verbose=False)
    rep["export_s"] = time.perf_counter() - t0
    rep["files"] = sorted(os.listdir(out))
    rep["bytes"] = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    np.savez(os.path.join(out, "new_inputs.npz"), *[a.numpy() for a in new])
    with torch.no_grad():
        np.save(os.path.join(out, "expected.npy"), m(*new).numpy())
    print(json.dumps(rep))


def load(path):
    """Child: one session creation (default SessionOptions), its peak RSS,
    then a few runs on the new inputs."""
    import numpy as np
    import onnxruntime as ort

    def kb(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    d = os.path.dirname(path)
    inputs = list(np.load(os.path.join(d, "new_inputs.npz")).values())
    before = kb("VmRSS")
    t0 = time.perf_counter()
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    create = time.perf_counter() - t0
    peak = kb("VmHWM")
    feeds = {i.name: a for i, a in zip(s.get_inputs(), inputs)}
    got = s.run(None, feeds)[0]
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        s.run(None, feeds)
        runs.append(time.perf_counter() - t0)
    diff = float(np.abs(got - np.load(os.path.join(d, "expected.npy"))).max())
    print(json.dumps({"create_s": create, "peak_kb": peak, "before_kb": before,
                      "run_ms": 1000 * statistics.median(runs), "max_abs_diff": diff}))


def child(*args):
    r = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{args}: {r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def ratio(a, b):
    return a / b if b else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(HERE, "out", "load"))
    ap.add_argument("--md", default=os.path.join(HERE, "load.md"))
    a = ap.parse_args()
    results = {}
    for name in a.models.split(","):
        res = {}
        for ex in EXPORTERS:
            res[ex] = {"export": child("--export", name, ex, os.path.join(a.out, name, ex))}
            res[ex]["loads"] = []
        for k in range(a.runs):
            order = EXPORTERS if k % 2 == 0 else EXPORTERS[::-1]
            for ex in order:
                res[ex]["loads"].append(child("--load", os.path.join(a.out, name, ex,
                                                                      "model.onnx")))
        for ex in EXPORTERS:
            L = res[ex]["loads"]
            res[ex]["create_s"] = statistics.median(x["create_s"] for x in L)
            res[ex]["peak_mb"] = statistics.median(x["peak_kb"] for x in L) / 1024
            res[ex]["rise_mb"] = statistics.median(x["peak_kb"] - x["before_kb"] for x in L) / 1024
            res[ex]["run_ms"] = statistics.median(x["run_ms"] for x in L)
            res[ex]["max_abs_diff"] = max(x["max_abs_diff"] for x in L)
        results[name] = res
        o, t = res["pt2onnx"], res["torch_onnx"]
        print(f"{name}: create {o['create_s']:.3f} / {t['create_s']:.3f} s, "
              f"peak {o['peak_mb']:.0f} / {t['peak_mb']:.0f} MB, "
              f"run {o['run_ms']:.1f} / {t['run_ms']:.1f} ms", flush=True)
    with open(os.path.splitext(a.md)[0] + ".json", "w") as f:
        json.dump(results, f, indent=1)
    write_md(results, a)


def write_md(results, a):
    import onnxruntime as ort
    import torch

    lines = [
        "# onnxruntime load: pt2onnx against torch.onnx",
        "",
        f"`python bench/load.py` (`make bench-load`): both exporters at their defaults "
        f"(torch.onnx: dynamo=True); onnxruntime {ort.__version__}, torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs. InferenceSession creation with default SessionOptions "
        f"(graph optimizations on), {a.runs} loads per file, interleaved, each in a fresh "
        "process; medians. Peak = VmHWM of the loading process; rise = peak minus the RSS "
        "just before the session was created (the load's own memory). Run = median of 5 runs "
        "on new inputs after one warm-up; diff = max |output - PyTorch| over the loads.",
        "",
        "| model | create ours (s) | create torch.onnx (s) | ratio | peak ours (MB) | "
        "peak torch.onnx (MB) | ratio | rise ours / torch.onnx (MB) | ratio | "
        "run ours / torch.onnx (ms) | diff ours / torch.onnx | export ours / torch.onnx (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        o, t = r["pt2onnx"], r["torch_onnx"]
        lines.append(
            f"| {name} | {o['create_s']:.3f} | {t['create_s']:.3f} | "
            f"{ratio(o['create_s'], t['create_s']):.2f}x | {o['peak_mb']:.0f} | "
            f"{t['peak_mb']:.0f} | {ratio(o['peak_mb'], t['peak_mb']):.2f}x | "
            f"{o['rise_mb']:.0f} / {t['rise_mb']:.0f} | "
            f"{ratio(o['rise_mb'], t['rise_mb']):.2f}x | "
            f"{o['run_ms']:.1f} / {t['run_ms']:.1f} | "
            f"{o['max_abs_diff']:.1e} / {t['max_abs_diff']:.1e} | "
            f"{o['export']['export_s']:.2f} / {t['export']['export_s']:.2f} |")
    lines.append("")
    with open(a.md, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--export":
        export(*sys.argv[2:5])
    elif len(sys.argv) > 1 and sys.argv[1] == "--load":
        load(sys.argv[2])
    else:
        main()
