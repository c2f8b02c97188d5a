"""The model zoo (tests/models/zoo.py) through pt2onnx and torch.onnx.export(dynamo=True), side
by side in one run, each (model, exporter) in a fresh process.

    python bench/zoo.py [--models a,b] [--out DIR] [--timeout S]  # -> bench/zoo.md, bench/zoo.json
    python bench/zoo.py --one MODEL EXPORTER OUTDIR               # worker: JSON result lines

Per export: wall time of the export call, peak RSS beyond the built model, and the onnxruntime
check of tests/models/zoo_check.py (full onnx.checker, every output against PyTorch on fresh
inputs at the entry's check sizes).

A run over some models (--models) merges their rows into the existing bench/zoo.json and
bench/zoo.md, keeping the other models' rows; each row records its run (command, date,
machine) and the markdown names the run of each row."""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version

HERE = os.path.dirname(os.path.abspath(__file__))
# tests/models' zoo.py, not this file, is the module `zoo`: imported while its directory leads
# sys.path (export_one puts bench/ back in front).
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))
from zoo import ZOO, build  # noqa: E402
from export_one import THREADS, reset_peak, status_kb  # noqa: E402

EXPORTERS = ["pt2onnx", "torch.onnx"]
RESULT = "ZOO-RESULT "  # marks the worker's lines among whatever the exporters print
OUTPUTS = {False: "zoo", True: "zoo_cold"}  # cold -> bench/<name>.md / .json


# Models tried for the zoo that torch.export itself cannot capture (markdown list items).
NOT_CAPTURABLE = [
    "- **transformers Mamba, FalconMamba, RecurrentGemma with a dynamic sequence length**: "
    "`torch._dynamo.exc.UserError: Constraints violated (L['input_ids'].size()[1])! ... You "
    "marked L['input_ids'].size()[1] as dynamic but your code specialized it to be a constant "
    "(8).` Their CPU paths scan the sequence in a Python loop (`for index in range(seq_len)` in "
    "MambaMixer's / FalconMambaMixer's reference scan, `for t in range(hidden_states.shape[1])` "
    "in RecurrentGemma's `_rnn_scan`), which torch.export unrolls. A capture rule alone cannot "
    "fix it: the loop is the model's code, and transformers has no loop-free CPU "
    "implementation to switch to (as rule 3 does for mixture-of-experts); it would take a rule "
    "that swaps the scan for a custom op plus a C++ lowering to an ONNX Scan/Loop. The zoo "
    "has these three with a static sequence length (dynamic batch): hf_mamba, "
    "hf_falcon_mamba, hf_recurrent_gemma.",
    "- **transformers Mamba2 exported at one chunk** (sequence = chunk_size): torch.export "
    "succeeds but guards the sequence with `8 >= input_ids.size()[1] + (8 + -1 * "
    "(input_ids.size()[1] % 8)) % 8` (one chunk), a guard outside the range constraints; "
    "pt2onnx's graph does not check it and onnxruntime fails at 16 tokens with a broadcast "
    "error (Mul / Where, '5 by 8', '2 by 3'). The zoo's hf_mamba2 is exported at two chunks "
    "(16 tokens) and checked at 24 and 32 (lengths divisible by chunk_size, which the "
    "padding computation guards too).",
]

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_line(e):
    """The error's first line, and its root cause's (torch.onnx wraps the real error)."""
    def line(x):
        lines = ANSI.sub("", str(x)).strip().splitlines()
        return f"{type(x).__name__}: {lines[0]}" if lines else type(x).__name__

    root = e
    while root.__cause__ is not None:
        root = root.__cause__
    text = line(e) if root is e else f"{line(e)} ← {line(root)}"
    return text[:1000]


def warm_up(exporter, out):
    """Exports a two-layer model first (warm runs): the one-time work of a process's first
    export (importing torch._dynamo, ~1.6 s here; torch.onnx also imports onnxscript) is then
    out of the timed call, which measures the model's own export. Returns its seconds."""
    import torch

    import pt2onnx

    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    path = os.path.join(out, f"warmup-{os.getpid()}.{exporter}.onnx")
    ds = {"input": {0: "batch"}}
    t0 = time.perf_counter()
    if exporter == "pt2onnx":
        pt2onnx.export(m, (torch.randn(2, 4),), path, dynamic_shapes=ds)
    else:
        torch.onnx.export(m, (torch.randn(2, 4),), path, dynamic_shapes=ds, dynamo=True)
    elapsed = time.perf_counter() - t0
    for f in (path, path + ".data"):
        if os.path.exists(f):
            os.unlink(f)
    return elapsed


def emit(rep):
    print(RESULT + json.dumps(rep), flush=True)


def one(name, exporter, out, warm):
    """Worker: export `name` with `exporter` (after a warm-up export when `warm`), then
    compare it in onnxruntime."""
    import torch

    import pt2onnx  # imported before the clock: only the export call is timed
    import zoo_check

    torch.set_num_threads(THREADS)
    model, make, dyn = build(name)
    kwargs = make(*ZOO[name].export_size)
    path = os.path.abspath(os.path.join(out, f"{name}.{exporter}.onnx"))
    rep = {"model": name, "exporter": exporter}
    if warm:
        rep["warmup_s"] = warm_up(exporter, out)
    rss0 = status_kb("VmRSS")
    try:
        reset_peak()
        rep["hwm_reset"] = True
    except OSError:
        rep["hwm_reset"] = False
    t0 = time.perf_counter()
    try:
        if exporter == "pt2onnx":
            r = pt2onnx.export(model, (), path, kwargs=kwargs, dynamic_shapes=dyn)
            rep["timings"] = r.timings
        else:
            torch.onnx.export(model, (), path, kwargs=kwargs, dynamic_shapes=dyn, dynamo=True)
    except Exception as e:
        emit({**rep, "status": "export-failed", "error": first_line(e)})
        return
    rep["export_s"] = time.perf_counter() - t0
    rep["peak_mb"] = (status_kb("VmHWM") - rss0) * 1024 / 1e6
    # Printed before the check too, so that a check that crashes the worker keeps the export.
    emit(rep)
    # compare() checks the proto loaded without its external data, which onnx then looks for
    # beside the working directory: torch.onnx writes its weights to path + ".data" by default.
    os.chdir(out)
    try:
        rep.update(status="ok", max_err=max(zoo_check.compare(name, path)))
    except AssertionError as e:
        # numpy's assert_allclose: outputs differ; compare's own asserts: input / output counts
        # or shapes differ.
        m = re.search(r"Max absolute difference[^:]*:\s*(\S+)", str(e))
        if m:
            rep.update(status="mismatch", max_abs_diff=float(m.group(1)))
        else:
            rep.update(status="check-failed", error=first_line(e))
    except Exception as e:
        rep.update(status="check-failed", error=first_line(e))
    emit(rep)


def settle(out, keep):
    """Between workers: drop the outputs (unless kept) and flush dirty pages, so that no export
    is throttled writing back another's file (torch.onnx does not fsync; pt2onnx does, and
    would otherwise wait behind the previous worker's unwritten data)."""
    if not keep:
        for f in os.listdir(out):
            os.unlink(os.path.join(out, f))
    os.sync()


def run_worker(name, exporter, out, timeout, warm):
    cmd = [sys.executable, os.path.abspath(__file__), "--one", name, exporter, out]
    if not warm:
        cmd.append("--cold")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        stdout = p.stdout
        stderr = [ln for ln in p.stderr.splitlines() if ln.strip()]
        failure = None if p.returncode == 0 else (stderr[-1] if stderr else f"exit {p.returncode}")
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        failure = f"timed out after {timeout} s"
    lines = [ln[len(RESULT):] for ln in stdout.splitlines() if ln.startswith(RESULT)]
    rep = json.loads(lines[-1]) if lines else {"model": name, "exporter": exporter}
    if "status" not in rep:
        # The worker died: before its export line, or else during the check.
        rep["status"] = "check-failed" if "export_s" in rep else "export-failed"
        rep["error"] = (failure or "no result")[:1000]
    rep["family"] = ZOO[name].family
    return rep


def machine():
    with open("/proc/meminfo") as f:
        mem_kb = int(next(ln.split()[1] for ln in f if ln.startswith("MemTotal:")))
    cpu = platform.machine()
    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    pkgs = ["torch", "transformers", "timm", "torchvision", "onnxruntime", "onnx", "onnxscript"]
    return (f"{len(os.sched_getaffinity(0))} cores ({cpu}), {mem_kb / 2**20:.0f} GiB RAM; "
            f"Python {platform.python_version()}, "
            + ", ".join(f"{p} {version(p)}" for p in pkgs))


def earlier_rows(json_path, md_path):
    """The rows of bench/zoo.json (or zoo_cold.json), each with its run: rows written before
    runs were recorded per row get the run that zoo.md's header names."""
    if not os.path.exists(json_path):
        return []
    with open(json_path) as f:
        rows = json.load(f)
    if all("run" in r for r in rows):
        return rows
    run = {"command": "python bench/zoo.py", "started": "unknown", "machine": "unknown",
           "wall_min": 0.0}
    if os.path.exists(md_path):
        with open(md_path) as f:
            text = f.read()
        m = re.search(r"Written by `([^`]*)` on (\S+ \S+) UTC in ([0-9.]+) min\. "
                      r"Machine: (.*)\.\n", text)
        if m:
            run = {"command": m.group(1), "started": m.group(2), "machine": m.group(4),
                   "wall_min": float(m.group(3))}
    return [r if "run" in r else dict(r, run=run) for r in rows]


def cell_s(r):
    return f"{r['export_s']:.2f}" if "export_s" in r else "-"


def cell_warmup(r):
    return f"{r['warmup_s']:.2f}" if "warmup_s" in r else "-"


def cell_mb(r):
    return f"{r['peak_mb']:.0f}" if "peak_mb" in r else "-"


def cell_match(r):
    if r["status"] == "ok":
        return f"ok ({r['max_err']:.1e})"
    if r["status"] == "mismatch":
        return f"**MISMATCH** (max abs diff {r['max_abs_diff']:.2e})"
    what = "export failed" if r["status"] == "export-failed" else "check failed"
    err = r["error"]
    if len(err) > 200:  # onnxruntime's first lines run long: keep the kind and the specifics
        err = err[:120] + " … " + err[-80:]
    return f"**{what}**: {err}".replace("|", "/")


def run_label(run):
    return f"`{run['command']}` on {run['started']} UTC ({run['wall_min']:.1f} min)"


def report(results, models, cold):
    """The markdown of `results` (rows of one or more runs, each row's run in its "run" key),
    one table row per model of `models`."""
    by = {(r["model"], r["exporter"]): r for r in results}
    runs = []  # in order of first appearance
    for m in models:
        run = by[(m, "pt2onnx")]["run"]
        if run not in runs:
            runs.append(run)
    run_ids = {json.dumps(r, sort_keys=True): chr(ord("A") + i) for i, r in enumerate(runs)}

    def run_id(m):
        return run_ids[json.dumps(by[(m, "pt2onnx")]["run"], sort_keys=True)]

    if len(runs) == 1:
        written = [f"Written by {run_label(runs[0])}. Machine: {runs[0]['machine']}.", ""]
    else:
        written = ["Rows from several runs of this script (the `run` column), each merged into "
                   "the existing table (a run with `--models` replaces those models' rows and "
                   "keeps the others):", ""]
        written += [f"- run {run_ids[json.dumps(r, sort_keys=True)]}: {run_label(r)}, "
                    f"{sum(run_id(m) == run_ids[json.dumps(r, sort_keys=True)] for m in models)} "
                    f"models. Machine: {r['machine']}." for r in runs]
        written += ["", "Times compare within a row (both exporters ran in the same run); across "
                    "runs the machine's other load may differ.", ""]
    resets = {r.get("hwm_reset") for r in results if "peak_mb" in r}
    peak_how = ("VmHWM, reset just before the call by writing 5 to /proc/self/clear_refs"
                if resets == {True} else
                "VmHWM, which could not be reset here (/proc/self/clear_refs) in some or all "
                "workers, so it may hold the model build's own peak")
    lines = [
        "# Model zoo: pt2onnx against torch.onnx.export(dynamo=True)"
        + (", cold (each process's first export)" if cold else ""), "",
        *written,
        "Every model of `tests/models/zoo.py` (real definitions, small configs, random weights) "
        "exported at its export size with dynamic batch (and sequence) dims, by "
        "`pt2onnx.export(model, (), path, kwargs=..., dynamic_shapes=...)` and by "
        "`torch.onnx.export(model, (), path, kwargs=..., dynamic_shapes=..., dynamo=True)` with "
        "its defaults otherwise. Each (model, exporter) ran in a fresh process, all in the same "
        "run, the exporter going first alternating from model to model; torch on "
        f"{THREADS} threads. Before each worker the previous outputs are deleted and dirty "
        "pages flushed (`sync`), so that no export is throttled writing back another's file.", "",
        "- **time**: wall time of the export call alone (model and inputs built, pt2onnx "
        "imported). " + (
            "It is the process's first export, so one-time work inside the call counts (about "
            "1.6 s of importing torch._dynamo for both; torch.onnx also imports onnxscript). "
            "bench/zoo.md has the same zoo timed after a warm-up export."
            if cold else
            "Each worker first exports a two-layer model with the same exporter (its time is "
            "the `first call` column): the one-time work of a process's first export (importing "
            "torch._dynamo, about 1.6 s here; onnxscript for torch.onnx) is out of the timed "
            "call, which measures the model's own export. bench/zoo_cold.md has the cold "
            "times (no warm-up)."),
        f"- **peak**: the worker's peak RSS during the export ({peak_how}) minus its RSS "
        "(VmRSS) before the call.",
        "- **ORT match**: `zoo_check.compare` (what `tests/models/test_zoo.py` runs): full "
        "onnx.checker, then onnxruntime (CPU, 2 intra-op threads) against PyTorch on fresh "
        "inputs at the entry's check sizes, inputs fed positionally in pytree-leaf order, "
        "atol = rtol = 1e-4 with atol scaled by the output's magnitude when above 1. "
        "ok (e): e is the max error, relative to the output's scale when above 1; MISMATCH: "
        "numpy's max abs difference at the first size that failed; check failed: the checker, "
        "onnxruntime or an input / output count or shape failed; export failed: the first "
        "line of the exporter's error.", "",
        "| model | family | run | pt2onnx (s) | torch.onnx (s) | pt2onnx / torch.onnx | "
        "pt2onnx peak (MB) | torch.onnx peak (MB) | pt2onnx ORT match | torch.onnx ORT match |"
        + ("" if cold else " first call (s): pt2onnx / torch.onnx |"),
        "|---|---|---|--:|--:|--:|--:|--:|---|---|" + ("" if cold else "--:|"),
    ]
    both = []
    for m in models:
        p, t = by[(m, "pt2onnx")], by[(m, "torch.onnx")]
        ratio = "-"
        if "export_s" in p and "export_s" in t:
            both.append((m, p["export_s"], t["export_s"]))
            ratio = f"{p['export_s'] / t['export_s']:.2f}"
        first = "" if cold else f" {cell_warmup(p)} / {cell_warmup(t)} |"
        lines.append(f"| {m} | {ZOO[m].family} | {run_id(m)} | {cell_s(p)} | {cell_s(t)} | "
                     f"{ratio} | {cell_mb(p)} | {cell_mb(t)} | {cell_match(p)} | "
                     f"{cell_match(t)} |{first}")
    lines += ["", "## Summary", ""]
    for e in EXPORTERS:
        rs = [by[(m, e)] for m in models]
        count = {s: sum(r["status"] == s for r in rs)
                 for s in ("ok", "mismatch", "check-failed", "export-failed")}
        lines.append(f"- {e}: exported and matching {count['ok']} / {len(rs)} (mismatch "
                     f"{count['mismatch']}, check failed {count['check-failed']}, export failed "
                     f"{count['export-failed']}).")
    if both:
        ratios = [(pt / tt, m) for m, pt, tt in both]
        worst = max(ratios)
        lines.append(f"- time pt2onnx / torch.onnx over the {len(both)} models both export: "
                     f"median {statistics.median(r for r, _ in ratios):.2f}, max "
                     f"{worst[0]:.2f} ({worst[1]}).")
        lines.append(f"- total export time over those models: pt2onnx "
                     f"{sum(pt for _, pt, _ in both):.1f} s, torch.onnx "
                     f"{sum(tt for _, _, tt in both):.1f} s.")
    if not cold:
        lines += ["", "## Not in the zoo: models torch.export cannot capture", "",
                  "Tried for the zoo and left out, since neither exporter gets past "
                  "torch.export (torch 2.13); the exact error, and whether a capture rule "
                  "(python/pt2onnx/_capture_rules.py) could fix it without changing the "
                  "model's code:", "", *NOT_CAPTURABLE]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--one", nargs=3, metavar=("MODEL", "EXPORTER", "OUTDIR"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--models", help="comma-separated subset of the zoo (default: all)")
    ap.add_argument("--out", help="keep the .onnx files in this directory (default: a temporary "
                    "directory, deleted afterwards)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per worker (default 600)")
    ap.add_argument("--cold", action="store_true",
                    help="time each process's first export (no warm-up export; writes "
                    "bench/zoo_cold.md / .json)")
    args = ap.parse_args()
    if args.one:
        one(*args.one, warm=not args.cold)
        return 0
    models = args.models.split(",") if args.models else list(ZOO)
    unknown = [m for m in models if m not in ZOO]
    if unknown:
        ap.error(f"not in the zoo: {', '.join(unknown)}")
    out = os.path.abspath(args.out or tempfile.mkdtemp(prefix="zoo-"))
    os.makedirs(out, exist_ok=True)
    command = " ".join(["python bench/zoo.py", *sys.argv[1:]])
    started = datetime.datetime.now(datetime.timezone.utc)
    run = {"command": command, "started": f"{started:%Y-%m-%d %H:%M}", "machine": machine(),
           "wall_min": 0.0}
    json_path = os.path.join(HERE, OUTPUTS[args.cold] + ".json")
    md_path = os.path.join(HERE, OUTPUTS[args.cold] + ".md")
    # The other models' rows of earlier runs are kept (with --models: those models are rerun).
    kept = [r for r in earlier_rows(json_path, md_path)
            if r["model"] not in models and r["model"] in ZOO]
    t0 = time.perf_counter()
    results = []
    try:
        for i, m in enumerate(models):
            for e in EXPORTERS if i % 2 == 0 else EXPORTERS[::-1]:
                print(f"{m:24s} {e:10s} ...", end=" ", flush=True)
                settle(out, keep=bool(args.out))
                r = run_worker(m, e, out, args.timeout, not args.cold)
                r["run"] = run
                results.append(r)
                print(f"{cell_s(r)} s, {cell_match(r)}", flush=True)
                run["wall_min"] = (time.perf_counter() - t0) / 60
                # Written after every export, so that an interrupted run keeps what it did.
                lines = write(kept + results, json_path, md_path, args.cold)
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    run["wall_min"] = (time.perf_counter() - t0) / 60
    lines = write(kept + results, json_path, md_path, args.cold)
    print("\n".join(lines))
    return 0


def write(results, json_path, md_path, cold):
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    done = {r["model"] for r in results if r["exporter"] == "pt2onnx"} & {
        r["model"] for r in results if r["exporter"] == "torch.onnx"}
    lines = report(results, [m for m in ZOO if m in done], cold)
    with open(md_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return lines


if __name__ == "__main__":
    sys.exit(main())
