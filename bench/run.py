"""Benchmark harness: pt2onnx against torch.onnx.export, side by side in one
run, each exporter in a fresh process per model (bench/export_one.py).

    python bench/run.py            # full series -> bench/results.md + PNG plots
    python bench/run.py --quick    # a few small models (a minute or two), to bench/out/quick/

Per model and exporter: export wall time (pt2onnx: stage split), peak RSS
beyond the model's own memory, output size and node count, onnxruntime
latency (bench/latency.py: all exporters interleaved in one process) and whether the
outputs match PyTorch on inputs other than the export inputs. Floors in the
same run: torch.export.export alone, and writing the weight bytes to a file.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_models import ALL, LLAMA_SERIES  # noqa: E402

EXPORTERS = ["pt2onnx", "dynamo", "torchscript"]
LABELS = {"pt2onnx": "pt2onnx", "dynamo": "torch.onnx dynamo=True",
          "torchscript": "torch.onnx dynamo=False"}
QUICK = ["llama_h256_l2", "llama_h512_l4"]


def run_child(model, exporter, out_dir, timeout):
    cmd = [sys.executable, os.path.join(HERE, "export_one.py"), model, exporter,
           os.path.join(out_dir, "work", model, exporter)]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": model, "exporter": exporter, "error": f"timed out after {timeout} s"}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        err = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        return {"model": model, "exporter": exporter,
                "error": (err[-1] if err else f"exit {r.returncode}")[:300],
                "wall_s": time.perf_counter() - t0}
    return json.loads(lines[-1])


def measure_latency(model, out_dir, results):
    """All successful exports of `model`, timed interleaved in one process."""
    ok = [r for r in results if r["model"] == model and r["exporter"] in EXPORTERS
          and "error" not in r]
    specs = [f"{r['exporter']}={os.path.join(out_dir, 'work', model, r['exporter'], 'model.onnx')}"
             for r in ok]
    if specs:
        p = subprocess.run([sys.executable, os.path.join(HERE, "latency.py"), model, *specs],
                           capture_output=True, text=True)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        lat = json.loads(lines[-1]) if lines else {}
        for r in ok:
            r.update(lat.get(r["exporter"], {"latency_error": p.stderr.strip()[-300:]}))
    subprocess.run(["rm", "-rf", os.path.join(out_dir, "work", model)])


def experimental_experiment_status():
    try:
        import experimental_experiment  # noqa: F401
        return None
    except ImportError:
        return ("experimental-experiment skipped: `pip download experimental-experiment` finds no "
                "distribution in this machine's package index, so it cannot be installed here")


def fmt(x, spec=".2f", unit=""):
    return "-" if x is None else f"{x:{spec}}{unit}"


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import onnxruntime
    import torch

    try:
        import onnxscript
        oscript = onnxscript.__version__
    except ImportError:
        oscript = "not installed"
    return (f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, Linux {platform.release()}; "
            f"Python {platform.python_version()}, torch {torch.__version__}, onnxruntime "
            f"{onnxruntime.__version__}, onnxscript {oscript}")


def plot(results, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    for key, ylabel, fname, scale in [
        ("export_s", "export time (s)", "export_time.png", 1.0),
        ("peak_extra_bytes", "peak memory beyond the model (GB)", "peak_memory.png", 1e-9),
    ]:
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for e in EXPORTERS:
            pts = sorted((r["params"], r[key] * scale) for r in results
                         if r["exporter"] == e and r["model"] in LLAMA_SERIES and key in r)
            if pts:
                ax.plot([p for p, _ in pts], [v for _, v in pts], "o-", label=LABELS[e])
        if key == "export_s":
            pts = sorted((r["params"], r["capture_s"] + r["write_s"]) for r in results
                         if r["exporter"] == "floor" and r["model"] in LLAMA_SERIES)
            ax.plot([p for p, _ in pts], [v for _, v in pts], "k--", label="floor: capture + write")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("parameters (LLaMA-style series)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, fname), dpi=110)
        plt.close(fig)
        files.append(fname)
    return files


def report(results, out_dir, models, notes, started):
    by = {(r["model"], r["exporter"]): r for r in results}
    lines = ["# pt2onnx against torch.onnx.export", "",
             f"Written by `python bench/run.py{' --quick' if out_dir != HERE else ''}` on "
             f"{started:%Y-%m-%d %H:%M} UTC. Machine: {machine()}.", "",
             "Each exporter runs in a fresh process per model. Export time is wall time of the "
             "export call (capture included); peak memory is the process's peak RSS during the "
             "export minus its RSS before (model and inputs already built). Latency: onnxruntime "
             "CPU, 2 intra-op threads, all exporters' models of one model loaded in one process "
             "and run round-robin (3 warm-up runs each, then up to 40 rounds or 40 s), median. "
             "`match`: outputs "
             "within atol = rtol = 1e-3 of PyTorch on inputs other than the export inputs "
             "(max |diff| given).", ""]
    lines += notes + [""]
    lines += ["## Export", "",
              "| model | params | exporter | export (s) | peak extra (MB) | output (MB) | nodes |"
              " ORT latency (ms) | match (max diff) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for m in models:
        fl = by.get((m, "floor"), {})
        for e in EXPORTERS:
            r = by.get((m, e))
            if not r:
                continue
            if "error" in r:
                lines.append(f"| {m} | {fl.get('params', 0) / 1e6:.1f} M | {LABELS[e]} | "
                             f"failed: {r['error'].replace('|', '/')} | | | | | |")
                continue
            lines.append(
                f"| {m} | {r['params'] / 1e6:.1f} M | {LABELS[e]} | {r['export_s']:.2f} | "
                f"{r['peak_extra_bytes'] / 1e6:.0f} | {r['output_bytes'] / 1e6:.1f} | {r['nodes']} | "
                f"{fmt(r.get('latency_ms'))} | {'yes' if r['matches'] else 'NO'} "
                f"({r['max_abs_diff']:.1e}) |")
    lines += ["", "## pt2onnx stages and floors", "",
              "| model | weights (MB) | capture | serialize | read | convert | optimize | write |"
              " after capture / torch.export.export | floor: export + write weights (s) |"
              " total / floor |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in models:
        r, fl = by.get((m, "pt2onnx")), by.get((m, "floor"))
        if not r or "error" in r or not fl or "error" in fl:
            continue
        st = r["stages"]
        after = st["total"] - st["capture"]
        floor = fl["capture_s"] + fl["write_s"]
        lines.append(
            f"| {m} | {r['weight_bytes'] / 1e6:.0f} | {st['capture']:.3f} | {st['serialize']:.3f} | "
            f"{st['read']:.3f} | {st['convert']:.3f} | {st['optimize']:.3f} | {st['write']:.3f} | "
            f"{100 * after / fl['capture_s']:.1f}% | {fl['capture_s']:.2f} + {fl['write_s']:.2f} | "
            f"{r['export_s'] / floor:.2f} |")
    lines += ["", "## Targets", ""]
    lines += targets(by, models)
    return lines


def targets(by, models):
    out = []
    llama = [m for m in models if m in LLAMA_SERIES]
    speed = []
    for m in llama:
        p, d = by.get((m, "pt2onnx")), by.get((m, "dynamo"))
        if p and d and "error" not in p and "error" not in d:
            speed.append((m, d["export_s"] / p["export_s"]))
    if speed:
        growing = all(b >= a for (_, a), (_, b) in zip(speed, speed[1:]))
        ok = all(s >= 5 for _, s in speed)
        out.append(f"- pt2onnx at least 5x faster than dynamo=True on the LLaMA series, gap "
                   f"growing: **{'met' if ok and growing else 'missed'}** — speedups "
                   + ", ".join(f"{m} {s:.1f}x" for m, s in speed)
                   + f" ({'growing' if growing else 'not monotonic'}).")
    shares, ratios, mems, lats = [], [], [], []
    for m in models:
        p, fl, d = by.get((m, "pt2onnx")), by.get((m, "floor")), by.get((m, "dynamo"))
        if not p or "error" in p or not fl or "error" in fl:
            continue
        st = p["stages"]
        shares.append((m, 100 * (st["total"] - st["capture"]) / fl["capture_s"]))
        ratios.append((m, p["export_s"] / (fl["capture_s"] + fl["write_s"])))
        mems.append((m, 100 * p["peak_extra_bytes"] / p["weight_bytes"]))
        if d and "latency_ms" in d and "latency_ms" in p:
            lats.append((m, p["latency_ms"] / d["latency_ms"]))
    if shares:
        out.append(f"- stages after capture under 10% of torch.export.export's time on every model: "
                   f"**{'met' if all(s < 10 for _, s in shares) else 'missed'}** — "
                   + ", ".join(f"{m} {s:.1f}%" for m, s in shares) + ".")
        out.append(f"- total within 1.3x of the (capture + write) floor: "
                   f"**{'met' if all(r <= 1.3 for _, r in ratios) else 'missed'}** — "
                   + ", ".join(f"{m} {r:.2f}x" for m, r in ratios) + ".")
        out.append(f"- peak memory beyond the model's weights under 10% of the weight bytes: "
                   f"**{'met' if all(x < 10 for _, x in mems) else 'missed'}** — "
                   + ", ".join(f"{m} {x:.1f}%" for m, x in mems) + ".")
    if lats:
        out.append(f"- onnxruntime latency no worse than dynamo=True's models: "
                   f"**{'met' if all(x <= 1.05 for _, x in lats) else 'missed'}** (5% noise "
                   f"allowance) — pt2onnx/dynamo latency "
                   + ", ".join(f"{m} {x:.2f}" for m, x in lats) + ".")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--exporters", nargs="*", default=EXPORTERS)
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite results.md and plots from the saved results.json")
    args = ap.parse_args()
    started = datetime.datetime.utcnow()
    models = args.models or (QUICK if args.quick else ALL)
    out_dir = os.path.join(HERE, "out", "quick") if args.quick else HERE
    os.makedirs(out_dir, exist_ok=True)
    notes = []
    ee = experimental_experiment_status()
    if ee:
        print(ee, flush=True)
        notes.append(f"- {ee}.")
    results = []
    saved = os.path.join(out_dir, "results.json")
    if args.report_only:
        with open(saved) as f:
            results = json.load(f)
        started = datetime.datetime.utcfromtimestamp(os.path.getmtime(saved))
        models = [m for m in models if any(r["model"] == m for r in results)]
    for m in [] if args.report_only else models:
        for e in ["floor", *args.exporters]:
            print(f"{m:18s} {e:12s} ...", end=" ", flush=True)
            r = run_child(m, e, out_dir, args.timeout)
            results.append(r)
            print(r.get("error") or f"{r.get('export_s', r.get('capture_s', 0)):.2f} s", flush=True)
            with open(os.path.join(out_dir, "results.json"), "w") as f:
                json.dump(results, f, indent=1)
        print(f"{m:18s} latency      ...", end=" ", flush=True)
        measure_latency(m, out_dir, results)
        print(", ".join(f"{r['exporter']} {r['latency_ms']:.2f} ms" for r in results
                        if r["model"] == m and "latency_ms" in r), flush=True)
        with open(os.path.join(out_dir, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
    lines = report(results, out_dir, models, notes, started)
    pngs = plot(results, out_dir)
    lines += ["", "## Plots (LLaMA series, log scales)", ""] + [f"![{p}]({p})" for p in pngs]
    costs = os.path.join(HERE, "stage_costs.md")
    if out_dir == HERE and os.path.exists(costs):
        with open(costs) as f:
            lines += ["", f.read().strip()]
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    failed_ours = [r for r in results if r["exporter"] in ("pt2onnx", "floor") and "error" in r]
    return 1 if failed_ours else 0


if __name__ == "__main__":
    sys.exit(main())
