"""Exporting a Llama-2-7B-sized checkpoint on a small machine, side by side
with `cp` of its shards (issue 18, items 3 and 9).

    python bench/scale.py [--layers N] [--keep-data] [--data DIR] [--shard-gb 2]
                          [--cache cold|warm] [--repeats N] [--out PREFIX]

Method.

1. The checkpoint. A transformers LlamaConfig with Llama-2-7B's dimensions
   (hidden 4096, intermediate 11008, 32 layers, 32 heads, 32 kv heads, vocab
   32000, 4096 positions, untied lm_head: 6.74 B parameters), `dtype`
   bfloat16 in config.json, weights in bfloat16 safetensors shards of at most
   --shard-gb GB ("model-0000i-of-0000n.safetensors", names exactly the
   model's state_dict keys, as save_pretrained writes them) plus
   model.safetensors.index.json: 13.5 GB. The model is never built with data:
   the names and shapes come from a LlamaForCausalLM built on the meta
   device, each tensor is filled with N(0, 0.02) random bfloat16 (norm
   weights: ones) and the shards are written one at a time with
   safetensors.torch.save_file, in a child process whose peak RSS is about one
   shard. The directory is written under a temporary name and renamed when
   complete; an existing complete one (same config and shard size, every
   shard of the size recorded) is reused, the data being random. --layers N cuts the config to
   N decoder layers (--layers 2: 1.3 GB, a quick check of the whole
   benchmark). The checkpoint is deleted at the end unless --keep-data.

2. The contenders, each a whole process under GNU time (`/usr/bin/time -v`:
   peak RSS, user/system time; wall time by this script), one after the
   other in this order, in one run:
     a. `cp` of the shards (the *.safetensors files only) to a directory on
        the same file system;
     b. `pt2onnx-pretrained CKPT --task text-generation --no-verify --no-cache
        --dtype bfloat16 -o OUT/model.onnx`: a first export (capture
        included; the program cache's hits are bench/program_cache.py's),
        weights copied from the shards as they are (bfloat16 stays bfloat16);
     c. the same with --dtype float16 (bfloat16 converted while streamed);
        then, in a separate process, the output is loaded in onnxruntime
        (graph_optimization_level ORT_DISABLE_ALL, so that onnxruntime does
        not fold the float16->float32 casts it inserts on CPU into float32
        copies of every weight) and run once on input_ids (1, 8) with an
        attention_mask: session-creation time, peak RSS after the load and
        after the forward, output shape, whether the logits are finite.
   Each output is measured (bytes of every file written) and deleted before
   the next contender runs, so the disk never holds more than the checkpoint
   and one output. Before every timed run (and the onnxruntime load) the
   same cache state is set up, untimed: `sync`, then with --cache cold (the
   default) the page cache is dropped (`echo 3 > /proc/sys/vm/drop_caches`,
   root only; the pages of the checkpoint still resident afterwards are
   counted with `fincore` and reported), so every contender reads the
   checkpoint from disk; where dropping is refused the run falls back to
   --cache warm (the shards read once with `cat` before every contender) and
   says so. Timed runs end when the program exits, with writeback possibly
   still pending, as for `cp`; the `sync` after each run is timed separately
   and reported beside it (the part of the write the kernel had not
   finished: `cp` leaves it to the kernel, pt2onnx fsyncs its files before
   it exits), with the ratios to `cp` of both wall and wall + sync.
   A run that fails is recorded with its error text; the benchmark goes on.
   --repeats N runs all contenders N times, alternating (cp, b, c, cp, ...),
   since this VM's disk speed drifts between minutes; each row of the table
   is the contender's run of median wall time, with every round's time listed.

3. Results: PREFIX.json and PREFIX.md (default bench/scale.* for the full
   32-layer model; for a cut, bench/out/scale_<N>layers.*, which git
   ignores, so that a quick check is never taken for the measurement), with
   the machine (cores, CPU, RAM, disk, `df`), versions, the commit (and
   whether the tree had uncommitted changes under python/ src/ include/) and
   the date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_DATA = os.environ.get("BENCH_SCALE_DATA", os.path.join(ROOT, "build", "bench-scale-data"))
TIME = "/usr/bin/time"
GB = 1e9
MARGIN = 2 * GB  # disk left free beyond what a step writes

# Llama-2-7B (meta-llama/Llama-2-7b-hf's config.json).
LLAMA2_7B = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                 max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False)


# ---- the checkpoint ------------------------------------------------------------------------

def parameter_count(layers: int) -> int:
    """Parameters of the config cut to `layers` (checked against the meta
    model when the checkpoint is built)."""
    c = LLAMA2_7B
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
    layer = 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h
    return 2 * v * h + layers * layer + h


def checkpoint_dir(data: str, layers: int) -> str:
    cut = "" if layers == LLAMA2_7B["num_hidden_layers"] else f"-{layers}layers"
    return os.path.join(data, f"llama2-7b{cut}-bf16")


MARKER = "bench-scale.json"  # written last: the shards and their sizes


def checkpoint_complete(path: str, layers: int, shard_bytes: int) -> bool:
    try:
        with open(os.path.join(path, MARKER)) as f:
            marker = json.load(f)
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return False
    if config.get("num_hidden_layers") != layers or any(
            config.get(k) != v for k, v in LLAMA2_7B.items() if k != "num_hidden_layers"):
        return False
    if marker.get("shard_bytes") != shard_bytes:
        return False
    return all(os.path.exists(os.path.join(path, name))
               and os.path.getsize(os.path.join(path, name)) == size
               for name, size in marker["shards"].items())


def shards_of(path: str) -> list[str]:
    with open(os.path.join(path, "model.safetensors.index.json")) as f:
        index = json.load(f)
    return [os.path.join(path, name) for name in sorted(set(index["weight_map"].values()))]


def build_checkpoint(path: str, layers: int, shard_bytes: int) -> None:
    """Writes the checkpoint directory (run in a child process: its peak
    RSS is one shard plus torch and transformers)."""
    try:
        from pt2onnx.hf import prepare

        prepare()
    except Exception:  # pt2onnx mid-edit: what prepare() does for this script
        import types

        sys.modules.setdefault("torchvision._meta_registrations",
                               types.ModuleType("torchvision._meta_registrations"))
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**LLAMA2_7B, "num_hidden_layers": layers}, dtype=torch.bfloat16,
                         architectures=["LlamaForCausalLM"])
    with torch.device("meta"):  # names and shapes only: no data
        model = LlamaForCausalLM(config)
    specs = [(name, tuple(t.shape)) for name, t in model.state_dict().items()]
    del model
    total = sum(torch.Size(s).numel() for _, s in specs)
    assert total == parameter_count(layers), (total, parameter_count(layers))

    plan: list[list[tuple[str, tuple]]] = [[]]  # greedy, in state_dict order
    size = 0
    for name, shape in specs:
        nbytes = torch.Size(shape).numel() * 2
        if plan[-1] and size + nbytes > shard_bytes:
            plan.append([])
            size = 0
        plan[-1].append((name, shape))
        size += nbytes

    tmp = path + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    config.save_pretrained(tmp)
    gen = torch.Generator().manual_seed(0)
    weight_map, sizes = {}, {}
    t0 = time.perf_counter()
    for i, shard in enumerate(plan):
        fname = f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors"
        tensors = {}
        for name, shape in shard:
            t = torch.empty(shape, dtype=torch.bfloat16)
            if name.endswith("norm.weight"):
                t.fill_(1.0)
            else:
                t.normal_(0.0, 0.02, generator=gen)  # in place: no float32 temporary
            tensors[name] = t
            weight_map[name] = fname
        save_file(tensors, os.path.join(tmp, fname), metadata={"format": "pt"})
        del tensors
        sizes[fname] = os.path.getsize(os.path.join(tmp, fname))
        print(f"  {fname}: {sizes[fname] / GB:.2f} GB ({time.perf_counter() - t0:.0f} s)",
              flush=True)
    with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total * 2}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(tmp, MARKER), "w") as f:
        json.dump({"parameters": total, "shard_bytes": shard_bytes, "shards": sizes}, f,
                  indent=2)
    os.rename(tmp, path)


# ---- measuring -----------------------------------------------------------------------------

def resident_bytes(files: list[str]) -> int | None:
    """Bytes of `files` in the page cache (util-linux fincore), None if
    unknown."""
    if not shutil.which("fincore"):
        return None
    r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *files],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return sum(int(x) for x in r.stdout.split())


def set_cache(state: dict, shards: list[str]) -> dict:
    """The same page-cache state before every contender: `sync`, then drop
    the cache (cold) or read the shards (warm). Returns what was done."""
    subprocess.run(["sync"], check=True)
    if state["mode"] == "cold":
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        except OSError as e:
            state["mode"] = "warm"
            state["note"] = f"dropping the page cache was refused ({e}): fell back to warm"
            print(f"  {state['note']}", flush=True)
    if state["mode"] == "warm":
        subprocess.run(["cat", *shards], stdout=subprocess.DEVNULL, check=True)
    return {"cache": state["mode"], "checkpoint_resident_bytes": resident_bytes(shards)}


def parse_time_v(text: str) -> dict:
    """The fields of GNU time -v's report used here."""
    def field(label, cast=float):
        m = re.search(rf"^\s*{re.escape(label)}: (.*)$", text, re.M)
        return cast(m.group(1)) if m else None

    rss = field("Maximum resident set size (kbytes)", int)
    return {"peak_rss_mb": rss / 1024 if rss is not None else None,
            "user_s": field("User time (seconds)"),
            "system_s": field("System time (seconds)"),
            "exit_status": field("Exit status", int)}


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def timed(cmd: list[str], report: str) -> dict:
    """Runs `cmd` as a whole process under GNU time; its wall time, peak
    RSS, CPU times, exit status, stdout and (on failure) the error text."""
    t0 = time.perf_counter()
    r = subprocess.run([TIME, "-v", "-o", report, *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    with open(report) as f:
        rec = {"cmd": " ".join(cmd), "wall_s": wall, **parse_time_v(f.read())}
    os.remove(report)
    rec["returncode"] = r.returncode
    rec["stdout"] = tail(r.stdout)
    if r.returncode != 0:
        rec["error"] = tail(r.stderr) or f"exit status {r.returncode}"
    return rec


def timed_sync() -> float:
    t0 = time.perf_counter()
    subprocess.run(["sync"], check=True)
    return time.perf_counter() - t0


def bytes_under(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def ort_check(onnx_path: str) -> None:
    """Child process: loads `onnx_path` in onnxruntime without graph
    optimizations, runs one forward on input_ids (1, 8); prints one JSON
    line."""
    import resource

    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    t0 = time.perf_counter()
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    load = time.perf_counter() - t0
    rss_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        dtype = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}.get(i.type)
        if dtype is None or i.name not in ("input_ids", "attention_mask", "position_ids"):
            raise SystemExit(f"unexpected model input {i.name}: {i.type} {i.shape}")
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, 1000, (1, 8)).astype(dtype)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones((1, 8), dtype)
        else:
            feeds[i.name] = np.arange(8, dtype=dtype)[None]
    t0 = time.perf_counter()
    out = sess.run(None, feeds)
    forward = time.perf_counter() - t0
    logits = out[0]
    print(json.dumps({"load_s": load, "peak_rss_after_load_mb": rss_load, "forward_s": forward,
                      "inputs": sorted(feeds), "output_shape": list(logits.shape),
                      "output_dtype": str(logits.dtype),
                      "finite": bool(np.isfinite(logits.astype(np.float32)).all())}))


def enough_disk(path: str, need: int) -> str | None:
    free = shutil.disk_usage(path).free
    if free < need + MARGIN:
        return (f"skipped: {free / GB:.1f} GB free on {path}, this step writes "
                f"{need / GB:.1f} GB (+{MARGIN / GB:.0f} GB margin)")
    return None


def pretrained_cmd() -> list[str]:
    """The installed pt2onnx-pretrained entry point itself (not a pyenv
    shim, whose start-up would be timed too); `python -m pt2onnx.hf` if
    there is none."""
    beside = os.path.join(os.path.dirname(sys.executable), "pt2onnx-pretrained")
    if os.access(beside, os.X_OK):
        return [beside]
    found = shutil.which("pt2onnx-pretrained")
    return [found] if found else [sys.executable, "-m", "pt2onnx.hf"]


# ---- the report ----------------------------------------------------------------------------

def machine(data: str) -> dict:
    mem = open("/proc/meminfo").read()
    cpu = re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M)
    df = subprocess.run(["df", "-h", data], capture_output=True, text=True).stdout.strip()
    versions = {}
    for pkg in ("torch", "transformers", "safetensors", "onnxruntime", "pt2onnx"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    git = lambda *a: subprocess.run(["git", "-C", ROOT, *a], capture_output=True,
                                    text=True).stdout.strip()
    return {"host": platform.node(), "nproc": os.cpu_count(),
            "cpu": cpu.group(1) if cpu else platform.processor(),
            "ram_gib": int(re.search(r"MemTotal:\s*(\d+)", mem).group(1)) / 2**20,
            "kernel": platform.release(), "python": platform.python_version(),
            "versions": versions, "df": df,
            "commit": git("rev-parse", "--short", "HEAD"),
            "uncommitted_changes": bool(git("status", "--porcelain", "--", "python", "src",
                                            "include"))}


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def measured_line(res) -> str:
    """The report's "Measured <when> on <machine> ..., by `<command>`." line
    (bench/size_sweep.py's report uses it too)."""
    m = res["machine"]
    return (f"Measured {res['date']} on {m['host']} ({m['nproc']} cores, {m['cpu']}, "
            f"{m['ram_gib']:.1f} GiB RAM, Linux {m['kernel']}; Python {m['python']}, "
            + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
            + f"), pt2onnx at {m['commit']}"
            + (" with uncommitted changes" if m["uncommitted_changes"] else "")
            + f", by `{res['command']}`.")


def write_report(res: dict, prefix: str) -> None:
    with open(prefix + ".json", "w") as f:
        json.dump(res, f, indent=2)
    m, ck = res["machine"], res["checkpoint"]
    cp = res["runs"][0]
    cp_wall = cp["wall_s"] if cp.get("returncode") == 0 else None
    cp_total = cp_wall + cp["sync_after_s"] if cp_wall else None
    cut = ck["layers"] != LLAMA2_7B["num_hidden_layers"]
    lines = [
        "# Exporting a Llama-2-7B-sized checkpoint against `cp`" +
        (f" ({ck['layers']}-layer cut: a check of the benchmark, not the measurement)"
         if cut else ""),
        "",
        measured_line(res),
        "",
        f"Checkpoint: LlamaConfig with Llama-2-7B's dimensions, {ck['layers']} layers, "
        f"{ck['parameters'] / 1e9:.2f} B parameters in bfloat16, {ck['shards']} safetensors "
        f"shard(s), {ck['bytes'] / GB:.2f} GB, random weights"
        + (f" (generated in {ck['build']['wall_s']:.0f} s, peak RSS "
           f"{fmt(ck['build']['peak_rss_mb'], '.0f')} MB)" if ck.get("build") else
           " (reused from an earlier run)") + ".",
        "",
        f"Cache: {res['cache']['how']}",
        "",
        (f"Rounds: {res['repeats']}, alternating (cp, bfloat16, float16, cp, ...); each row is "
         "the contender's run of median wall time, every round's wall time below the table."
         if res.get("repeats", 1) > 1 else "Rounds: 1."),
        "",
        "| contender | wall (s) | sync after (s) | user + sys (s) | peak RSS (MB) | "
        "bytes written | wall / cp | wall + sync / cp's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["runs"]:
        ok = r.get("returncode") == 0
        cpu = (r["user_s"] or 0) + (r["system_s"] or 0) if r.get("user_s") is not None else None
        lines.append(
            f"| {r['name']} | {fmt(r.get('wall_s'), '.2f')} | {fmt(r.get('sync_after_s'), '.2f')}"
            f" | {fmt(cpu, '.2f')} | {fmt(r.get('peak_rss_mb'), '.0f')} | "
            f"{r['bytes_written']:,} | " if ok else
            f"| {r['name']} | {'skipped' if r.get('returncode') is None else 'failed'} "
            "| | | | | | |")
        if ok:
            lines[-1] += (f"{r['wall_s'] / cp_wall:.2f}x | "
                          f"{(r['wall_s'] + r['sync_after_s']) / cp_total:.2f}x |"
                          if cp_wall else "— | — |")
    if res.get("repeats", 1) > 1:
        lines += ["", "Wall time of every round (s):", ""]
        lines += [f"- {r['name']}: " + ", ".join(fmt(w, ".2f") for w in r.get("walls_s", []))
                  for r in res["runs"]]
    lines += ["", "Goal (issue 18): the bfloat16 export within 1.5x of `cp` of the shards, peak "
              "RSS under 1 GB" + (" (judged on the full 32-layer model only)." if cut else ".")]
    ort = res.get("onnxruntime")
    if ort:
        lines += ["", "onnxruntime on the float16 file (a separate process, "
                  "ORT_DISABLE_ALL, cache as above):", ""]
        if "error" in ort:
            lines += ["```", ort["error"], "```"]
        else:
            f16 = next((r for r in res["runs"] if r["name"].endswith("float16")
                        and "bfloat16" not in r["name"] and r.get("returncode") == 0), None)
            lines += [f"- session creation {ort['load_s']:.2f} s, peak RSS after the load "
                      f"{ort['peak_rss_after_load_mb']:.0f} MB, after one forward "
                      f"{fmt(ort.get('peak_rss_mb'), '.0f')} MB (whole process "
                      f"{fmt(ort.get('wall_s'), '.1f')} s)",
                      *([f"- peak RSS after the load far below the file's "
                         f"{f16['bytes_written'] / GB:.2f} GB: onnxruntime maps the data file, "
                         "the forward pages the weights in"]
                        if f16 and ort["peak_rss_after_load_mb"] * 2**20
                        < 0.5 * f16["bytes_written"] else []),
                      f"- forward on {', '.join(ort['inputs'])} (1, 8): "
                      f"{ort['forward_s']:.2f} s, output {ort['output_shape']} "
                      f"{ort['output_dtype']}, finite: {ort['finite']}"]
    for r in res["runs"]:
        if r["name"].startswith("pt2onnx") and r.get("returncode") == 0 and r.get("stdout"):
            lines += ["", f"{r['name']}: its own report (stage split)", "", "```", r["stdout"],
                      "```"]
    failures = [r for r in res["runs"] if r.get("returncode") != 0]
    for r in failures:
        what = "skipped" if r.get("returncode") is None else "failed"
        lines += ["", f"{r['name']} {what}:", "", "```", r.get("error", "?"), "```"]
    lines += ["", "Method: each contender a whole process under GNU time (wall time by the "
              "driver, peak RSS = the process's max RSS), run one after the other in the "
              "order of the table, same page-cache state before each (see Cache), every "
              "output deleted before the next run; \"sync after\" is a `sync` run after "
              "the program, outside its wall time, timed on its own (writeback still pending when the program exited: `cp` "
              "leaves its data to the kernel, a program that fsyncs its files before exiting, "
              "as pt2onnx does, shows ~0 there; the last column compares the time until the "
              "data are on disk). "
              "`cp` copies the shards only. See the docstring of bench/scale.py.",
              "", "Disk:", "", "```", m["df"], "```", ""]
    with open(prefix + ".md", "w") as f:
        f.write("\n".join(lines))


# ---- main ----------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=LLAMA2_7B["num_hidden_layers"],
                    help="decoder layers (default 32: the 7B model; 2: a quick check)")
    ap.add_argument("--data", default=DEFAULT_DATA,
                    help=f"where the checkpoint and outputs go (default {DEFAULT_DATA})")
    ap.add_argument("--keep-data", action="store_true", help="keep the checkpoint afterwards")
    ap.add_argument("--shard-gb", type=float, default=2.0, help="shard size (default 2 GB)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds of all contenders, alternating; the table shows each one's "
                         "median-wall run and lists every round's wall time (default 1)")
    ap.add_argument("--cache", choices=("cold", "warm"), default="cold",
                    help="cold (default): page cache dropped before every run; warm: the "
                         "shards read before every run")
    ap.add_argument("--out", help="results PREFIX (.json, .md); default bench/scale for 32 "
                                  "layers, bench/out/scale_<N>layers otherwise")
    ap.add_argument("--build", help=argparse.SUPPRESS)
    ap.add_argument("--ort-check", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        build_checkpoint(args.build, args.layers, int(args.shard_gb * GB))
        return 0
    if args.ort_check:
        ort_check(args.ort_check)
        return 0
    if not os.access(TIME, os.X_OK):
        raise SystemExit(f"{TIME} not found: apt-get install time (make deps installs it)")
    full = args.layers == LLAMA2_7B["num_hidden_layers"]
    prefix = args.out or (os.path.join(HERE, "scale") if full else
                          os.path.join(HERE, "out", f"scale_{args.layers}layers"))
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    os.makedirs(args.data, exist_ok=True)
    ckpt = checkpoint_dir(args.data, args.layers)
    work = os.path.join(args.data, "run")  # outputs; emptied before and after
    shutil.rmtree(work, ignore_errors=True)
    report = os.path.join(args.data, "time-v.txt")
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "command": "python bench/scale.py " + " ".join(sys.argv[1:]),
           "machine": machine(args.data)}
    expected = parameter_count(args.layers) * 2

    # 1. The checkpoint.
    build = None
    if checkpoint_complete(ckpt, args.layers, int(args.shard_gb * GB)):
        print(f"reusing {ckpt}", flush=True)
    else:
        shutil.rmtree(ckpt, ignore_errors=True)
        shutil.rmtree(ckpt + ".partial", ignore_errors=True)
        if (why := enough_disk(args.data, expected)):
            raise SystemExit(f"cannot write the checkpoint: {why}")
        print(f"writing {ckpt} ({expected / GB:.1f} GB of random bfloat16) ...", flush=True)
        build = timed([sys.executable, os.path.abspath(__file__), "--build", ckpt,
                       "--layers", str(args.layers), "--shard-gb", str(args.shard_gb)], report)
        if build["returncode"] != 0:
            raise SystemExit(f"writing the checkpoint failed:\n{build['error']}")
    shards = shards_of(ckpt)
    ck_bytes = sum(os.path.getsize(s) for s in shards)
    res["checkpoint"] = {"path": ckpt, "layers": args.layers,
                         "parameters": parameter_count(args.layers), "shards": len(shards),
                         "bytes": ck_bytes, "build": build}

    # 2. The contenders, in order, the same cache state before each.
    cache = {"mode": args.cache}
    onnx = os.path.join(work, "model.onnx")
    # --no-cache: a first export (capture included), what this page measures; with the
    # program cache, every round after the first would be a cache hit (bench/program_cache.py)
    export = [*pretrained_cmd(), ckpt, "--task", "text-generation", "--no-verify", "--no-cache",
              "-o", onnx]
    contenders = [("`cp` (shards)", ["cp", *shards, work]),
                  ("pt2onnx-pretrained --dtype bfloat16", [*export, "--dtype", "bfloat16"]),
                  ("pt2onnx-pretrained --dtype float16", [*export, "--dtype", "float16"])]
    rounds = []
    for r in range(args.repeats):
        rounds.append(run_round(args, contenders, cache, work, report, ck_bytes, shards, onnx, res,
                                last=r == args.repeats - 1))
    # Per contender, the run of median wall time (its own stage split and
    # RSS), with every round's wall time beside it.
    res["runs"] = []
    for i, (name, _) in enumerate(contenders):
        recs = [rd[i] for rd in rounds if rd[i].get("returncode") == 0]
        if not recs:
            res["runs"].append(rounds[-1][i])
            continue
        recs.sort(key=lambda x: x["wall_s"])
        rep = dict(recs[(len(recs) - 1) // 2])
        rep["walls_s"] = [rd[i].get("wall_s") for rd in rounds]
        rep["wall_plus_sync_s"] = sorted(x["wall_s"] + x["sync_after_s"] for x in recs)[
            (len(recs) - 1) // 2]
        res["runs"].append(rep)
    res["repeats"] = args.repeats
    finish(args, res, prefix, cache)
    return 0


def run_round(args, contenders, cache, work, report, ck_bytes, shards, onnx, res, last):
    """One run of every contender in order (the onnxruntime check after the
    float16 export of the last round); their records."""
    out = []
    for name, cmd in contenders:
        rec = {"name": name}
        out.append(rec)
        if (why := enough_disk(args.data, ck_bytes)):
            rec.update(returncode=None, error=why)
            print(f"{name}: {why}", flush=True)
            continue
        os.makedirs(work)
        rec.update(set_cache(cache, shards))
        print(f"{name} ...", flush=True)
        rec.update(timed(cmd, report))
        rec["sync_after_s"] = timed_sync()
        rec["bytes_written"] = bytes_under(work)
        if rec["returncode"] == 0:
            print(f"  {rec['wall_s']:.2f} s (+ sync {rec['sync_after_s']:.2f} s), "
                  f"peak RSS {rec['peak_rss_mb']:.0f} MB, {rec['bytes_written'] / GB:.2f} GB "
                  "written", flush=True)
        else:
            print(f"  failed:\n{rec['error']}", flush=True)
        if last and "float16" in name and "bfloat16" not in name and rec["returncode"] == 0:
            print("onnxruntime load + forward of the float16 file ...", flush=True)
            ort = {"cache": set_cache(cache, [onnx, *(os.path.join(work, f)
                                                     for f in os.listdir(work) if f != "model.onnx")])}
            run = timed([sys.executable, os.path.abspath(__file__), "--ort-check", onnx], report)
            ort.update(wall_s=run["wall_s"], peak_rss_mb=run["peak_rss_mb"])
            if run["returncode"] == 0:
                ort.update(json.loads(run["stdout"].splitlines()[-1]))
                print(f"  load {ort['load_s']:.2f} s, peak RSS {ort['peak_rss_mb']:.0f} MB, "
                      f"output {ort['output_shape']}, finite {ort['finite']}", flush=True)
            else:
                ort["error"] = run["error"]
                print(f"  failed:\n{run['error']}", flush=True)
            res["onnxruntime"] = ort
        shutil.rmtree(work)
        subprocess.run(["sync"], check=True)
    return out


def finish(args, res, prefix, cache):
    """The cache note, the checkpoint's removal (unless kept), the report."""
    ckpt = res["checkpoint"]["path"]
    res["cache"] = {"mode": cache["mode"], "how": (
        "page cache dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`) before every run: "
        "the checkpoint read from disk by each contender"
        if cache["mode"] == "cold" else
        (cache.get("note", "") + "; " if cache.get("note") else "")
        + "`sync`, then the shards read with `cat` before every run: the checkpoint in the "
          "page cache for each contender")
        + "; checkpoint bytes still resident after the set-up (fincore): "
        + ", ".join(fmt(r.get("checkpoint_resident_bytes"), ",") for r in res["runs"]
                    if "cache" in r)}

    # 3. Results.
    if not args.keep_data:
        shutil.rmtree(ckpt)
        print(f"deleted {ckpt} (--keep-data keeps it)", flush=True)
    write_report(res, prefix)
    print(f"wrote {prefix}.json, {prefix}.md", flush=True)


if __name__ == "__main__":
    sys.exit(main())
