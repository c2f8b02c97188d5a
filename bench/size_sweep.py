"""Export time and peak RSS against model size, for every way a user can export a
LLaMA-architecture checkpoint, side by side in one run (issue 18, item 9).

    python bench/size_sweep.py [--sizes 44M,0.37B,1.3B,3.4B,6.7B] [--cache cold|warm]
                               [--repeats N] [--data DIR] [--keep-data] [--out PREFIX]
                               [--no-profile] [--busy WHY]
    python bench/size_sweep.py --replot [--out PREFIX]   # .md and .png again from PREFIX.json

Method.

1. Checkpoints. transformers LlamaConfig checkpoints of increasing size, weights in
   bfloat16 safetensors shards (at most 2 GB each) with `dtype: bfloat16` in config.json,
   random N(0, 0.02), written by bench/scale.py's own checkpoint writer (imported, run with
   the dimensions below in a child process whose peak RSS is about one shard), plus a small
   tokenizer (tokenizers' WordLevel model over 1000 words, saved by
   PreTrainedTokenizerFast.save_pretrained: tokenizer.json, tokenizer_config.json), which
   onnxruntime-genai's builder loads with AutoTokenizer and copies into its output:
     44M   hidden 512, 4 layers, 8 heads, 2 kv heads, MLP 1376 (the 44 M-parameter model of
           the issue: bench/latency_fused.py's llama_h512_l4)
     0.37B hidden 1024, 24 layers, 16 heads, MLP 2816
     1.3B  hidden 2048, 24 layers, 16 heads, MLP 5504
     3.4B  hidden 3200, 26 layers, 32 heads, MLP 8640 (OpenLLaMA-3B's dimensions)
     6.7B  Llama-2-7B's dimensions (bench/scale.py's checkpoint; an existing complete one in
           build/bench-scale-data/llama2-7b-bf16 is reused through a directory of symbolic
           links, with the tokenizer added there, and never deleted)
   All with vocabulary 32000 and an untied lm_head. Each checkpoint is written, measured
   and deleted before the next (unless --keep-data).

2. Contenders, each a whole process under GNU time (`/usr/bin/time -v`: peak RSS, CPU
   times; wall time by this script), all writing float32 weights:
     a. `pt2onnx-pretrained CKPT --task text-generation --no-verify --no-cache` (a first
        export, capture included; the program cache's hits are bench/program_cache.py's; the default
        `--weights empty`: model built on fake weights, the bfloat16 safetensors bytes
        converted to float32 while streamed into the output);
     b. the same with `--task text-generation-with-past` (the file the builder's compares
        to: a decoder step with a KV cache);
     c. `--weights memory` (from_pretrained in float32 first), where float32 weights fit;
     d. the `.pt2` path: a Python process loading the model (from_pretrained, float32),
        torch.export.export on pt2onnx-pretrained's example inputs and dynamic shapes
        (batch and sequence Dim.DYNAMIC) and torch.export.save to model.pt2; then the C++
        command `pt2onnx model.pt2 -o model.onnx`; each timed, and their sum; where float32
        weights fit;
     e. torch.onnx.export(dynamo=True) as bench/latency_fused.py's export_torch_onnx_hf
        does it (the function itself, called in a child process), where float32 weights
        fit, with a timeout;
     f. onnxruntime-genai's model builder (`python -m onnxruntime_genai.models.builder -m
        NAME -i CKPT -o OUT -p fp32 -e cpu -c CACHE`, launched as bench/latency_fused.py's
        run_builder does: torchvision's meta registrations stubbed), with a timeout. It loads
        the model with from_pretrained in the checkpoint's dtype (bfloat16) and casts each
        weight to float32 as it writes it: the same output precision as pt2onnx's float32.
   "Fits" means float32 weights at most 45% of RAM (from_pretrained holds all of them and
   capture or serialization adds at least a copy): not 3.4B or 6.7B on a 24 GB machine.
   A run is stopped (and recorded as such) at its timeout, or when the machine's
   MemAvailable falls under 1 GiB (before the kernel's OOM killer would pick a process of
   someone else). Sizes under 0.5 B parameters run --repeats rounds (default 3, the
   contenders interleaved, median reported); larger ones run once.
   Before every timed run the same cache state is set up, untimed, by bench/scale.py's
   set_cache: with --cache cold (default) `sync` and the page cache dropped, so every
   contender reads the checkpoint from disk; --cache warm reads the checkpoint with `cat`
   instead. After each run a `sync` is timed separately ("sync after": writeback the program
   left to the kernel; pt2onnx fsyncs its files, the others do not), the output measured
   and deleted, so the disk never holds more than the checkpoint and one output (the .pt2
   path: the .pt2 and its .onnx).

3. Where the first seconds of pt2onnx-pretrained go (smallest size, unless --no-profile):
   `python -X importtime` of the whole command (import costs, top-level packages and the
   modules most expensive by themselves), a cProfile of the whole command (cumulative
   time of the main steps), and floors measured as whole processes: `python -c pass`,
   `import torch`, torch + transformers' LlamaForCausalLM, pt2onnx.hf.

4. Results: PREFIX.json, PREFIX.md, PREFIX.png (default bench/size_sweep.*): machine,
   versions, commit, date, load average at each run, per-size tables with ratios to the
   builder, failures with their error text.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import scale  # noqa: E402  (bench/scale.py: checkpoint writer, cache set-up, GNU time parsing)

DEFAULT_DATA = os.path.join(scale.DEFAULT_DATA, "size-sweep")
SHARD_BYTES = int(2 * scale.GB)
TASK = "text-generation"
MEM_FRACTION = 0.45  # float32 weights above this share of RAM: no in-memory contender
LOW_MEMORY = 1 << 30  # MemAvailable below this: the run is stopped
SMALL = 0.5e9  # sizes under this many parameters run --repeats rounds

LLAMA = dict(vocab_size=32000, rms_norm_eps=1e-5, tie_word_embeddings=False,
             max_position_embeddings=2048)
SIZES = {
    "44M": dict(LLAMA, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                num_attention_heads=8, num_key_value_heads=2),
    "0.37B": dict(LLAMA, hidden_size=1024, intermediate_size=2816, num_hidden_layers=24,
                  num_attention_heads=16, num_key_value_heads=16),
    "1.3B": dict(LLAMA, hidden_size=2048, intermediate_size=5504, num_hidden_layers=24,
                 num_attention_heads=16, num_key_value_heads=16),
    "3.4B": dict(LLAMA, hidden_size=3200, intermediate_size=8640, num_hidden_layers=26,
                 num_attention_heads=32, num_key_value_heads=32),
    "6.7B": dict(scale.LLAMA2_7B),
}

# key -> label, in run order. pt2_capture and pt2_convert are one contender (the .pt2 path).
CONTENDERS = {
    "pt2onnx": "pt2onnx-pretrained (default: weights read in place)",
    "pt2onnx_past": "pt2onnx-pretrained --task text-generation-with-past",
    "pt2onnx_memory": "pt2onnx-pretrained --weights memory",
    "pt2_capture": ".pt2 step 1: from_pretrained + torch.export + save (Python)",
    "pt2_convert": ".pt2 step 2: pt2onnx model.pt2 (C++)",
    "pt2_total": ".pt2 path: both steps",
    "torch_onnx": "torch.onnx.export(dynamo=True)",
    "builder": "onnxruntime-genai builder (fp32)",
}
TIMEOUTS = {"torch_onnx": 900, "builder": 900, "pt2_capture": 900}
DEFAULT_TIMEOUT = 1800

BUILDER_LAUNCH = (  # bench/latency_fused.py's run_builder: torchvision's compiled ops kept out
    "import runpy, sys, types; sys.modules.setdefault('torchvision._meta_registrations', "
    "types.ModuleType('torchvision._meta_registrations')); sys.argv = ['builder'] + "
    "sys.argv[1:]; runpy.run_module('onnxruntime_genai.models.builder', "
    "run_name='__main__', alter_sys=True)")


# ---- checkpoints (bench/scale.py's writer, with other dimensions) ------------------------

@contextmanager
def dims(size: str):
    """bench/scale.py's checkpoint functions with the dimensions of `size` (they read its
    module-level LLAMA2_7B)."""
    saved = scale.LLAMA2_7B
    scale.LLAMA2_7B = SIZES[size]
    try:
        yield SIZES[size]["num_hidden_layers"]
    finally:
        scale.LLAMA2_7B = saved


def parameters(size: str) -> int:
    with dims(size) as layers:
        return scale.parameter_count(layers)


def checkpoint_complete(path: str, size: str) -> bool:
    with dims(size) as layers:
        return scale.checkpoint_complete(path, layers, SHARD_BYTES)


def write_tokenizer(path: str) -> None:
    """A small tokenizer AutoTokenizer loads (the builder needs one in the checkpoint)."""
    from pt2onnx.hf import prepare

    prepare()
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"w{i}": i for i in range(1000)}
    tok = Tokenizer(models.WordLevel(words, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", bos_token="w1",
                            eos_token="w2").save_pretrained(path)


def has_tokenizer(path: str) -> bool:
    return all(os.path.exists(os.path.join(path, f))
               for f in ("tokenizer.json", "tokenizer_config.json"))


def link_view(src: str, dst: str) -> None:
    """`dst`: a directory of symbolic links to the files of checkpoint `src` (someone
    else's, left untouched), where the tokenizer can be added."""
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for name in os.listdir(src):
        os.symlink(os.path.join(src, name), os.path.join(dst, name))


# ---- child steps ---------------------------------------------------------------------------

def pt2_capture(ck: str, out: str) -> None:
    """The .pt2 path's Python step, as a user writes it: from_pretrained, torch.export,
    torch.export.save. Prints one JSON line with the times of its parts."""
    t0 = time.perf_counter()
    import pt2onnx.hf as hf

    hf.prepare()
    import torch

    t1 = time.perf_counter()
    model = hf.load_pretrained(ck, TASK)
    t2 = time.perf_counter()
    inputs = hf._TaskInputs(model, TASK)
    torch.manual_seed(0)
    example = inputs.make(2, 8, 0)
    ds = {k: {axis: torch.export.Dim.DYNAMIC for axis in v}
          for k, v in inputs.dynamic_shapes(example).items()}
    ep = torch.export.export(model, (), kwargs=example, dynamic_shapes=ds)
    t3 = time.perf_counter()
    torch.export.save(ep, out)
    t4 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "from_pretrained_s": t2 - t1, "export_s": t3 - t2,
                      "save_s": t4 - t3}))


def torch_onnx(ck: str, out: str) -> None:
    import pt2onnx.hf as hf

    hf.prepare()
    from latency_fused import export_torch_onnx_hf

    export_torch_onnx_hf(ck, TASK, out, (None, None))


# ---- measuring -----------------------------------------------------------------------------

def mem_available() -> int:
    with open("/proc/meminfo") as f:
        return int(re.search(r"MemAvailable:\s*(\d+)", f.read()).group(1)) * 1024


def loadavg() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def kill_children(pgid: int) -> None:
    """SIGKILL the processes of the group this script started (GNU time itself excepted, so
    that it still reports the peak RSS of what it ran)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == pgid:
            continue
        try:
            if os.getpgid(int(pid)) == pgid:
                os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def timed(cmd: list[str], report: str, timeout: float) -> dict:
    """`cmd` as a whole process under GNU time: wall time, peak RSS, CPU times, exit status,
    stdout's tail, the error text; stopped at `timeout` or when memory runs out."""
    t0 = time.perf_counter()
    p = subprocess.Popen([scale.TIME, "-v", "-o", report, *cmd], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    stopped, low = None, mem_available()
    while True:
        try:
            out, err = p.communicate(timeout=0.25)
            break
        except subprocess.TimeoutExpired:
            low = min(low, mem_available())
            if stopped:
                continue
            if time.perf_counter() - t0 > timeout:
                stopped = f"stopped at the {timeout:.0f} s timeout"
            elif low < LOW_MEMORY:
                stopped = (f"stopped: the machine's available memory fell under "
                           f"{LOW_MEMORY >> 20} MB (it would have run out)")
            if stopped:
                kill_children(p.pid)
    wall = time.perf_counter() - t0
    text = open(report).read() if os.path.exists(report) else ""
    if os.path.exists(report):
        os.remove(report)
    rec = {"cmd": " ".join(cmd), "wall_s": wall, **scale.parse_time_v(text),
           "min_mem_available_mb": low / 2**20}
    rec["returncode"] = p.returncode if not stopped else -9
    rec["stdout"] = scale.tail(out)
    if stopped:
        rec["stopped"] = stopped
        rec["error"] = stopped + ("\n" + scale.tail(err, 5) if err.strip() else "")
    elif p.returncode != 0 or rec.get("exit_status") not in (0, None):
        rec["error"] = scale.tail(err) or f"exit status {p.returncode}"
        if "terminated by signal" in text:
            rec["error"] += "\n" + re.search(r"Command terminated by signal \d+", text).group(0)
        rec["returncode"] = p.returncode or 1
    return rec


def stages(stdout: str) -> dict | None:
    """pt2onnx's own report: stage -> seconds."""
    m = re.search(r"^\s*(capture .*total [\d.]+ ms)\s*$", stdout, re.M)
    if not m:
        return None
    return {k: float(v) / 1000 for k, v in re.findall(r"(\w+) ([\d.]+) ms", m.group(1))}


def python_cmd() -> list[str]:
    return [sys.executable]


def cli_pt2onnx() -> str:
    built = os.path.join(ROOT, "build", "cpp", "pt2onnx")
    return built if os.access(built, os.X_OK) else (shutil.which("pt2onnx") or "pt2onnx")


# ---- the sweep -----------------------------------------------------------------------------

class Sweep:
    def __init__(self, args):
        self.args = args
        self.data = os.path.abspath(args.data)
        self.report = os.path.join(self.data, "time-v.txt")
        self.cache = {"mode": args.cache}
        self.ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def fits_memory(self, params: int) -> str | None:
        need = params * 4
        if need > MEM_FRACTION * self.ram:
            return (f"skipped: float32 weights ({need / scale.GB:.1f} GB) above "
                    f"{MEM_FRACTION:.0%} of RAM ({self.ram / scale.GB:.1f} GB): from_pretrained "
                    "holds them all, capture or serialization adds at least a copy")
        return None

    def prepare_checkpoint(self, size: str) -> dict:
        params = parameters(size)
        info = {"size": size, "parameters": params, "dims": SIZES[size], "build": None,
                "owned": True}
        path = os.path.join(self.data, f"llama-{size}-bf16")
        shared = scale.checkpoint_dir(scale.DEFAULT_DATA, scale.LLAMA2_7B["num_hidden_layers"])
        if size == "6.7B" and checkpoint_complete(shared, size):
            link_view(shared, path)  # someone else's: linked, never deleted
            info.update(owned=False, reused=shared)
            print(f"  reusing {shared} (symbolic links in {path})", flush=True)
        elif checkpoint_complete(path, size):
            print(f"  reusing {path}", flush=True)
            info["reused"] = path
        else:
            shutil.rmtree(path, ignore_errors=True)
            shutil.rmtree(path + ".partial", ignore_errors=True)
            if (why := scale.enough_disk(self.data, params * 2)):
                raise RuntimeError(f"cannot write the checkpoint: {why}")
            print(f"  writing {path} ({params * 2 / scale.GB:.2f} GB of random bfloat16) ...",
                  flush=True)
            build = timed([*python_cmd(), os.path.abspath(__file__), "--build", path,
                           "--size", size], self.report, DEFAULT_TIMEOUT)
            if build["returncode"] != 0:
                raise RuntimeError(f"writing the checkpoint failed:\n{build['error']}")
            info["build"] = {k: build[k] for k in ("wall_s", "peak_rss_mb")}
        if not has_tokenizer(path):
            r = timed([*python_cmd(), os.path.abspath(__file__), "--tokenizer", path],
                      self.report, 300)
            if r["returncode"] != 0:
                raise RuntimeError(f"writing the tokenizer failed:\n{r['error']}")
        info["path"] = path
        info["shards"] = scale.shards_of(path)
        info["bytes"] = sum(os.path.getsize(s) for s in info["shards"])
        return info

    def run_one(self, name: str, cmd: list[str], reads: list[str], work: str,
                expect_bytes: int, timeout: float | None = None, exclude: int = 0) -> dict:
        rec = {"contender": name}
        if (why := scale.enough_disk(self.data, expect_bytes)):
            rec.update(returncode=None, error=why)
            return rec
        os.makedirs(work, exist_ok=True)
        rec.update(scale.set_cache(self.cache, reads))
        rec["loadavg_1min"] = loadavg()
        print(f"    {CONTENDERS[name]} ...", end="", flush=True)
        rec.update(timed(cmd, self.report, timeout or TIMEOUTS.get(name, DEFAULT_TIMEOUT)))
        rec["sync_after_s"] = scale.timed_sync()
        rec["bytes_written"] = scale.bytes_under(work) - exclude  # what this run wrote
        if rec["returncode"] == 0:
            print(f" {rec['wall_s']:.2f} s (+ sync {rec['sync_after_s']:.2f}), "
                  f"{rec['peak_rss_mb']:.0f} MB, {rec['bytes_written'] / scale.GB:.2f} GB",
                  flush=True)
        else:
            print(f" FAILED ({rec['wall_s']:.0f} s):\n      "
                  + rec["error"].replace("\n", "\n      "), flush=True)
        return rec

    def contenders(self, ck: dict, work: str) -> list[tuple[str, list[str] | None, str | None]]:
        """(key, command, why skipped) in run order for checkpoint `ck`."""
        path, params = ck["path"], ck["parameters"]
        onnx = os.path.join(work, "model.onnx")
        # --no-cache: first exports (capture included), as the builder's runs are; the
        # program cache's repeated exports are bench/program_cache.py's
        pre = [*scale.pretrained_cmd(), path, "--no-verify", "--no-cache", "-o", onnx]
        mem = self.fits_memory(params)
        me = [*python_cmd(), os.path.abspath(__file__)]
        return [
            ("pt2onnx", [*pre, "--task", TASK], None),
            ("pt2onnx_past", [*pre, "--task", "text-generation-with-past"], None),
            ("pt2onnx_memory", [*pre, "--task", TASK, "--weights", "memory"], mem),
            ("pt2_capture", [*me, "--pt2-capture", path, os.path.join(work, "model.pt2")], mem),
            ("torch_onnx", [*me, "--torch-onnx", path, onnx], mem),
            ("builder", [*python_cmd(), "-c", BUILDER_LAUNCH, "-m", "bench-model", "-i", path,
                         "-o", work, "-p", "fp32", "-e", "cpu", "-c",
                         os.path.join(self.data, "builder-cache")], None),
        ]

    def measure_size(self, size: str) -> dict:
        print(f"{size}:", flush=True)
        ck = self.prepare_checkpoint(size)
        params = ck["parameters"]
        rounds = self.args.repeats if params < SMALL else 1
        work = os.path.join(self.data, "run")
        runs: dict[str, list[dict]] = {k: [] for k in CONTENDERS}
        out_bytes = params * 4 + 64 * 2**20
        for i in range(rounds):
            if rounds > 1:
                print(f"  round {i + 1}/{rounds}", flush=True)
            for key, cmd, skip in self.contenders(ck, work):
                shutil.rmtree(work, ignore_errors=True)
                if skip:
                    if i == 0:
                        for k in ((key,) if key != "pt2_capture" else
                                  ("pt2_capture", "pt2_convert", "pt2_total")):
                            runs[k].append({"contender": k, "returncode": None, "error": skip})
                        print(f"    {CONTENDERS[key]}: {skip}", flush=True)
                    continue
                if key == "pt2_capture":
                    self.pt2_path(ck, cmd, work, out_bytes, runs)
                else:
                    runs[key].append(self.run_one(key, cmd, ck["shards"], work, out_bytes))
                shutil.rmtree(work, ignore_errors=True)
                subprocess.run(["sync"], check=True)
        shutil.rmtree(os.path.join(self.data, "builder-cache"), ignore_errors=True)
        profile = None
        if self.args.profile and size == self.args.sizes[0]:
            profile = self.profile(ck, work)
        if ck["owned"] and not self.args.keep_data:
            shutil.rmtree(ck["path"])
            print(f"  deleted {ck['path']}", flush=True)
        elif not ck["owned"]:
            shutil.rmtree(ck["path"])  # the links only
        ck.pop("shards")
        return {"checkpoint": ck, "rounds": rounds, "runs": runs, "summary": summarize(runs),
                "profile": profile}

    def pt2_path(self, ck, cmd, work, out_bytes, runs) -> None:
        pt2 = os.path.join(work, "model.pt2")
        cap = self.run_one("pt2_capture", cmd, ck["shards"], work, 2 * out_bytes)
        if cap["returncode"] == 0:
            try:
                cap["parts"] = json.loads(cap["stdout"].splitlines()[-1])
            except (ValueError, IndexError):
                pass
            cap["pt2_bytes"] = os.path.getsize(pt2) if os.path.exists(pt2) else None
        runs["pt2_capture"].append(cap)
        if cap["returncode"] != 0:
            runs["pt2_convert"].append({"contender": "pt2_convert", "returncode": None,
                                        "error": "skipped: the .pt2 step failed"})
            runs["pt2_total"].append({"contender": "pt2_total", "returncode": None,
                                      "error": "the .pt2 step failed"})
            return
        before = scale.bytes_under(work)
        conv = self.run_one("pt2_convert", [cli_pt2onnx(), pt2, "-o",
                                            os.path.join(work, "model.onnx")],
                            [pt2], work, out_bytes, exclude=before)
        runs["pt2_convert"].append(conv)
        ok = conv["returncode"] == 0
        runs["pt2_total"].append({
            "contender": "pt2_total", "returncode": 0 if ok else conv["returncode"],
            "wall_s": cap["wall_s"] + conv["wall_s"],
            "sync_after_s": cap["sync_after_s"] + conv["sync_after_s"],
            "peak_rss_mb": max(cap["peak_rss_mb"] or 0, conv.get("peak_rss_mb") or 0),
            "bytes_written": conv["bytes_written"],
            **({} if ok else {"error": "the C++ step failed"})})

    # ---- where the first seconds go ----

    def profile(self, ck: dict, work: str) -> dict:
        print("  profiling pt2onnx-pretrained (importtime, cProfile, floors) ...", flush=True)
        onnx = os.path.join(work, "model.onnx")
        script = scale.pretrained_cmd()
        script = script[-1] if script[0] != sys.executable else None
        args = [ck["path"], "--task", TASK, "--no-verify", "--no-cache", "-o", onnx]
        res: dict = {}
        os.makedirs(work, exist_ok=True)
        env = dict(os.environ)
        if script:
            r = subprocess.run([sys.executable, "-X", "importtime", script, *args],
                               capture_output=True, text=True, env=env)
            res["importtime"] = parse_importtime(r.stderr)
            prof = os.path.join(self.data, "pretrained.prof")
            subprocess.run([sys.executable, "-m", "cProfile", "-o", prof, script, *args],
                           capture_output=True, text=True, check=False)
            res["cprofile"] = summarize_profile(prof)
            os.remove(prof)
        shutil.rmtree(work, ignore_errors=True)
        floors = {
            "python -c pass": "pass",
            "import torch": "import torch",
            "import torch, transformers' LlamaForCausalLM": (
                "import sys, types; sys.modules.setdefault('torchvision._meta_registrations', "
                "types.ModuleType('torchvision._meta_registrations')); import torch; "
                "from transformers import LlamaForCausalLM"),
            "import pt2onnx.hf; prepare()": "import pt2onnx.hf as hf; hf.prepare()",
            "the above + LlamaForCausalLM": ("import pt2onnx.hf as hf; hf.prepare(); "
                                             "from transformers import LlamaForCausalLM"),
            "import onnxruntime_genai.models.builder (torchvision stubbed)": (
                "import sys, types; sys.modules.setdefault('torchvision._meta_registrations', "
                "types.ModuleType('torchvision._meta_registrations')); "
                "import onnxruntime_genai.models.builder"),
        }
        res["floors"] = {}
        for label, code in floors.items():
            walls = []
            for _ in range(3):
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-c", code], check=True,
                               capture_output=True)
                walls.append(time.perf_counter() - t0)
            res["floors"][label] = statistics.median(walls)
        return res


def parse_importtime(text: str) -> dict:
    rows = []
    for line in text.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
        if m:
            rows.append((int(m.group(1)) / 1e6, int(m.group(2)) / 1e6, len(m.group(3)) // 2,
                         m.group(4)))
    top = [r for r in rows if r[2] == 0]
    by_pkg: dict[str, float] = {}
    for self_s, _, _, mod in rows:
        by_pkg[mod.split(".")[0]] = by_pkg.get(mod.split(".")[0], 0.0) + self_s

    def chain(i: int) -> list[str]:
        """Module i and its importers up to the top level (importtime lists a module's
        imports before it, one level deeper)."""
        out, depth = [rows[i][3]], rows[i][2]
        for j in range(i + 1, len(rows)):
            if depth == 0:
                break
            if rows[j][2] == depth - 1:
                out.append(rows[j][3])
                depth -= 1
        return out

    # For each third-party package (not torch / transformers / pt2onnx) costing >= 50 ms:
    # its most expensive entry point and who imported it.
    pulled = []
    for pkg, cost in sorted(by_pkg.items(), key=lambda kv: -kv[1]):
        if pkg in ("torch", "transformers", "pt2onnx") or cost < 0.05:
            continue
        entries = [i for i, r in enumerate(rows) if r[3].split(".")[0] == pkg
                   and (lambda c: len(c) == 1 or c[1].split(".")[0] != pkg)(chain(i))]
        if entries:
            i = max(entries, key=lambda i: rows[i][1])
            c = chain(i)
            pulled.append({"package": pkg, "self_s": cost, "cumulative_s": rows[i][1],
                           "chain": c[:5] + (["…", c[-1]] if len(c) > 6 else c[5:])})
    return {
        "total_s": sum(r[1] for r in top),
        "modules": len(rows),
        "top_level": [{"module": r[3], "cumulative_s": r[1]}
                      for r in sorted(top, key=lambda r: -r[1])[:15]],
        "by_package": [{"package": k, "self_s": v}
                       for k, v in sorted(by_pkg.items(), key=lambda kv: -kv[1])[:15]],
        "top_self": [{"module": r[3], "self_s": r[0]}
                     for r in sorted(rows, key=lambda r: -r[0])[:15]],
        "third_party": pulled,
    }


def summarize_profile(path: str) -> dict:
    import pstats

    st = pstats.Stats(path)
    total = st.total_tt
    rows = []
    for (file, line, fn), (_, _, _, ct, _) in st.stats.items():
        rows.append((ct, f"{os.path.relpath(file, ROOT) if file.startswith(ROOT) else file}"
                         f":{line}({fn})"))
    rows.sort(reverse=True)

    def cum(pred):
        vals = [ct for ct, name in rows if pred(name)]
        return max(vals) if vals else None

    steps = {
        "whole profile": total,
        "imports (importlib _find_and_load, all)": cum(lambda n: n.endswith("(_find_and_load)")),
        "pt2onnx.hf.main": cum(lambda n: n.endswith("(main)") and "pt2onnx/hf.py" in n),
        "hf._config (incl. prepare: transformers)": cum(lambda n: n.endswith("(_config)")
                                                        and "pt2onnx/hf.py" in n),
        "hf.empty_pretrained (config + model on fake weights)": cum(
            lambda n: n.endswith("(empty_pretrained)")),
        "pt2onnx export()": cum(lambda n: n.endswith("(export)") and "_export.py" in n),
        "torch.export.export": cum(lambda n: n.endswith("(export)")
                                   and "torch/export/__init__.py" in n),
    }
    keep = [{"function": name, "cumulative_s": ct} for ct, name in rows
            if "{built-in" not in name and "<frozen" not in name and "~" not in name][:30]
    return {"steps": steps, "top_cumulative": keep}


def median_ok(recs: list[dict], field: str) -> float | None:
    vals = [r[field] for r in recs if r.get("returncode") == 0 and r.get(field) is not None]
    return statistics.median(vals) if vals else None


def summarize(runs: dict[str, list[dict]]) -> dict:
    out = {}
    for key, recs in runs.items():
        if not recs:
            continue
        ok = [r for r in recs if r.get("returncode") == 0]
        s = {"runs": len(recs), "ok": len(ok)}
        for f in ("wall_s", "sync_after_s", "peak_rss_mb", "bytes_written"):
            s[f] = median_ok(recs, f)
        if ok:
            s["walls"] = [r["wall_s"] for r in ok]
            st = [stages(r.get("stdout", "")) for r in ok]
            st = [x for x in st if x]
            if st:
                s["stages"] = {k: statistics.median(x[k] for x in st) for k in st[0]}
        else:
            s["error"] = recs[0].get("error")
            s["status"] = "skipped" if recs[0].get("returncode") is None else "failed"
        out[key] = s
    b = out.get("builder", {}).get("wall_s")
    bt = (b + out["builder"]["sync_after_s"]) if b is not None else None
    for s in out.values():
        if s.get("wall_s") is not None and b:
            s["vs_builder"] = s["wall_s"] / b
            s["vs_builder_with_sync"] = (s["wall_s"] + (s["sync_after_s"] or 0)) / bt
    return out


# ---- the report ----------------------------------------------------------------------------

def fmt(x, spec="", none="—"):
    return none if x is None else format(x, spec)


def write_report(res: dict, prefix: str) -> None:
    with open(prefix + ".json", "w") as f:
        json.dump(res, f, indent=2)
    plot(res, prefix + ".png")
    m = res["machine"]
    loads = [r["loadavg_1min"] for s in res["sizes"] for recs in s["runs"].values()
             for r in recs if "loadavg_1min" in r]
    lines = [
        "# Export time and peak RSS against model size (issue 18, item 9)",
        "",
        scale.measured_line(res),
        "",
    ]
    if res.get("busy"):
        lines += [f"**Measured on a busy machine** ({res['busy']}): the numbers are noisy, "
                  "the ratios indicative only.", ""]
    lines += [
        f"Machine load (1-min load average at the start of each run): "
        f"{fmt(min(loads) if loads else None, '.2f')} to "
        f"{fmt(max(loads) if loads else None, '.2f')}. Cache: {res['cache']}.",
        "",
        "Each contender is a whole process (interpreter start and imports included) under GNU "
        "time, wall time by the driver; every output is float32; the checkpoints are "
        "bfloat16 safetensors (random weights). \"sync after\" is the writeback the program "
        "left to the kernel, timed after it exited (pt2onnx fsyncs its files: ~0). "
        "Sizes under 0.5 B parameters: median of the rounds shown. See the docstring of "
        "bench/size_sweep.py for the method.",
        "",
        "## pt2onnx-pretrained (default) against the builder",
        "",
        "| size | parameters | pt2onnx-pretrained (s) | with-past (s) | builder (s) | "
        "pt2onnx / builder | with-past / builder | target (≤ 1.00x) | peak RSS pt2onnx / "
        "builder (MB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in res["sizes"]:
        sm, ck = s["summary"], s["checkpoint"]
        a, p, b = (sm.get(k, {}).get("wall_s") for k in ("pt2onnx", "pt2onnx_past", "builder"))
        ra, rb = (sm.get(k, {}).get("peak_rss_mb") for k in ("pt2onnx", "builder"))
        lines.append(
            f"| {ck['size']} | {ck['parameters'] / 1e9:.3f} B | {fmt(a, '.2f')} | "
            f"{fmt(p, '.2f')} | {fmt(b, '.2f', sm.get('builder', {}).get('status', '—'))} | "
            f"{fmt(a / b if a and b else None, '.2f')}x | "
            f"{fmt(p / b if p and b else None, '.2f')}x | "
            + ("met" if a and b and a <= b else "not met" if a and b else "—")
            + f" | {fmt(ra, '.0f')} / {fmt(rb, '.0f')} |")
    if res.get("findings"):
        lines += ["", "## Findings", ""] + [f"- {x}" for x in res["findings"]]
    for s in res["sizes"]:
        ck, sm = s["checkpoint"], s["summary"]
        lines += [
            "",
            f"## {ck['size']}: {ck['parameters'] / 1e9:.3f} B parameters",
            "",
            f"LlamaConfig hidden {ck['dims']['hidden_size']}, "
            f"{ck['dims']['num_hidden_layers']} layers, {ck['dims']['num_attention_heads']} "
            f"heads ({ck['dims']['num_key_value_heads']} kv), MLP "
            f"{ck['dims']['intermediate_size']}, vocab {ck['dims']['vocab_size']}; "
            f"{ck['bytes'] / scale.GB:.2f} GB of bfloat16 safetensors"
            + (f" (reused: {ck['reused']})" if ck.get("reused") else
               f" (written in {ck['build']['wall_s']:.0f} s)" if ck.get("build") else "")
            + (f"; {s['rounds']} rounds, medians" if s["rounds"] > 1 else "; one run") + ".",
            "",
            "| contender | wall (s) | sync after (s) | peak RSS (MB) | output bytes | "
            "wall / builder | wall + sync / builder's |",
            "|---|---|---|---|---|---|---|",
        ]
        skipped: dict[str, list[str]] = {}  # reason -> contenders
        for key, label in CONTENDERS.items():
            x = sm.get(key)
            if x is None:
                continue
            if x.get("wall_s") is None:
                if x.get("status") == "skipped" and key in ("pt2_capture", "pt2_convert"):
                    continue  # one row for the .pt2 path
                lines.append(f"| {label} | {x.get('status', 'failed')} | | | | | |")
                if x.get("status") == "skipped":
                    reason = (x.get("error") or "").removeprefix("skipped: ")
                    skipped.setdefault(reason, []).append(label)
                continue
            lines.append(
                f"| {label} | {x['wall_s']:.2f} | {fmt(x['sync_after_s'], '.2f')} | "
                f"{fmt(x['peak_rss_mb'], '.0f')} | {fmt(x['bytes_written'], ',')} | "
                f"{fmt(x.get('vs_builder'), '.2f')}x | {fmt(x.get('vs_builder_with_sync'), '.2f')}x |")
        extra = []
        for key in ("pt2onnx", "pt2onnx_past", "pt2onnx_memory"):
            st = sm.get(key, {}).get("stages")
            if st:
                inside = st.get("total")
                wall = sm[key]["wall_s"]
                extra.append(f"- {CONTENDERS[key]}: its own stage split (median): "
                             + ", ".join(f"{k} {v:.2f} s" for k, v in st.items())
                             + (f"; outside export() (interpreter, imports, config, model "
                                f"build): {wall - inside:.2f} s" if inside else ""))
        caps = [r for r in s["runs"].get("pt2_capture", []) if r.get("parts")]
        if caps:
            p = caps[0]["parts"]
            extra.append("- .pt2 step 1 parts (first run): "
                         + ", ".join(f"{k[:-2]} {v:.2f} s" for k, v in p.items())
                         + f"; .pt2 file {fmt(caps[0].get('pt2_bytes'), ',')} bytes")
        for reason, labels in skipped.items():
            extra.append(f"- skipped ({reason}): " + "; ".join(labels))
        for key, label in CONTENDERS.items():
            x = sm.get(key)
            if x and x.get("status") == "skipped":
                continue
            if x and x.get("error"):
                extra.append(f"- {label} {x.get('status', 'failed')}: "
                             + x["error"].strip().splitlines()[0][:300]
                             + ("" if len(x["error"].strip().splitlines()) < 2 else
                                f" … (last line: {x['error'].strip().splitlines()[-1][:300]})"))
            elif x and x["ok"] < x["runs"]:
                extra.append(f"- {label}: {x['runs'] - x['ok']} of {x['runs']} runs failed")
        if extra:
            lines += [""] + extra
    prof = next((s["profile"] for s in res["sizes"] if s.get("profile")), None)
    if prof:
        lines += profile_section(prof, res)
    lines += ["", "## Notes", ""] + [f"- {n}" for n in res.get("notes", [])]
    lines += ["", "Disk:", "", "```", m["df"], "```", ""]
    with open(prefix + ".md", "w") as f:
        f.write("\n".join(lines))


def profile_section(prof: dict, res: dict) -> list[str]:
    size = res["sizes"][0]["checkpoint"]["size"]
    lines = ["", f"## Where pt2onnx-pretrained's time goes ({size}, one process each)", ""]
    fl = prof.get("floors", {})
    if fl:
        lines += ["Floors (whole processes, median of 3, warm cache):", "",
                  "| process | wall (s) |", "|---|---|"]
        lines += [f"| `{k}` | {v:.2f} |" for k, v in fl.items()]
    it = prof.get("importtime")
    if it:
        lines += ["", f"`python -X importtime` of the whole command: {it['modules']} modules "
                      f"imported, {it['total_s']:.2f} s in imports (importtime's own overhead "
                      "included).", "",
                  "Top-level imports by cumulative time (what each import statement paid):",
                  "", "| module | cumulative (s) |", "|---|---|"]
        lines += [f"| {r['module']} | {r['cumulative_s']:.3f} |" for r in it["top_level"][:12]]
        lines += ["", "Import time by package (the modules' own time, summed):", "",
                  "| package | self (s) |", "|---|---|"]
        lines += [f"| {r['package']} | {r['self_s']:.3f} |" for r in it["by_package"][:12]]
        if it.get("third_party"):
            lines += ["", "Other packages imported on the way, who imports them (import chain, "
                          "importer last):", "", "| package | self, summed (s) | entry "
                          "cumulative (s) | chain |", "|---|---|---|---|"]
            lines += [f"| {r['package']} | {r['self_s']:.3f} | {r['cumulative_s']:.3f} | "
                      + " ← ".join(r["chain"]) + " |" for r in it["third_party"]]
        lines += ["", "Single modules most expensive by themselves:", "",
                  "| module | self (s) |", "|---|---|"]
        lines += [f"| {r['module']} | {r['self_s']:.3f} |" for r in it["top_self"][:10]]
    cp = prof.get("cprofile")
    if cp:
        lines += ["", "cProfile of the whole command (cumulative; profiling overhead "
                      "inflates Python-heavy parts):", "", "| step | cumulative (s) |",
                  "|---|---|"]
        lines += [f"| {k} | {fmt(v, '.2f')} |" for k, v in cp["steps"].items()]
        lines += ["", "<details><summary>top 30 functions by cumulative time</summary>", "",
                  "| function | cumulative (s) |", "|---|---|"]
        lines += [f"| `{r['function']}` | {r['cumulative_s']:.2f} |"
                  for r in cp["top_cumulative"]]
        lines += ["", "</details>"]
    return lines


def plot(res: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    keys = ["pt2onnx", "pt2onnx_past", "pt2onnx_memory", "pt2_total", "pt2_convert",
            "torch_onnx", "builder"]
    styles = {"pt2onnx": "o-", "pt2onnx_past": "o--", "pt2onnx_memory": "s-",
              "pt2_total": "^-", "pt2_convert": "^:", "torch_onnx": "D-", "builder": "v-"}
    for ax, field, ylabel in ((axes[0], "wall_s", "whole-process wall time (s)"),
                              (axes[1], "peak_rss_mb", "peak RSS (MB)")):
        for key in keys:
            pts = [(s["checkpoint"]["parameters"], s["summary"][key][field])
                   for s in res["sizes"]
                   if s["summary"].get(key, {}).get(field) is not None]
            if pts:
                ax.plot(*zip(*pts), styles[key], label=CONTENDERS[key])
            # Stopped runs (timeout / memory): a cross at the time they were stopped.
            fails = [(s["checkpoint"]["parameters"], r[field]) for s in res["sizes"]
                     for r in s["runs"].get(key, []) if r.get("stopped") and r.get(field)]
            if fails:
                ax.plot(*zip(*fails), "x", color="red", markersize=10)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("parameters")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title("export time vs model size (red x: stopped)")
    axes[1].set_title("peak RSS vs model size")
    axes[1].legend(fontsize=8, loc="upper left")
    fig.suptitle("LLaMA checkpoints (bfloat16 safetensors) -> float32 ONNX"
                 + (" — busy machine" if res.get("busy") else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- main ----------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(SIZES),
                    help=f"comma-separated, of {', '.join(SIZES)} (default: all)")
    ap.add_argument("--data", default=DEFAULT_DATA, help=f"default {DEFAULT_DATA}")
    ap.add_argument("--keep-data", action="store_true", help="keep the checkpoints written")
    ap.add_argument("--cache", choices=("cold", "warm"), default="cold")
    ap.add_argument("--repeats", type=int, default=3,
                    help="rounds for sizes under 0.5 B parameters (default 3)")
    ap.add_argument("--out", default=os.path.join(HERE, "size_sweep"),
                    help="results PREFIX (.json, .md, .png); default bench/size_sweep")
    ap.add_argument("--no-profile", dest="profile", action="store_false",
                    help="skip the import-time / cProfile study")
    ap.add_argument("--busy", help="mark the results as measured on a busy machine (why)")
    ap.add_argument("--replot", action="store_true", help="rewrite .md/.png from PREFIX.json")
    ap.add_argument("--build", help=argparse.SUPPRESS)
    ap.add_argument("--size", help=argparse.SUPPRESS)
    ap.add_argument("--tokenizer", help=argparse.SUPPRESS)
    ap.add_argument("--pt2-capture", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--torch-onnx", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        with dims(args.size) as layers:
            scale.build_checkpoint(args.build, layers, SHARD_BYTES)
        write_tokenizer(args.build)
        return 0
    if args.tokenizer:
        write_tokenizer(args.tokenizer)
        return 0
    if args.pt2_capture:
        pt2_capture(*args.pt2_capture)
        return 0
    if args.torch_onnx:
        torch_onnx(*args.torch_onnx)
        return 0
    if args.replot:
        with open(args.out + ".json") as f:
            write_report(json.load(f), args.out)
        return 0
    args.sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    if unknown := [s for s in args.sizes if s not in SIZES]:
        raise SystemExit(f"unknown sizes {unknown}; choose from {list(SIZES)}")
    if not os.access(scale.TIME, os.X_OK):
        raise SystemExit(f"{scale.TIME} not found: apt-get install time")
    os.makedirs(args.data, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    sweep = Sweep(args)
    machine = scale.machine(args.data)
    for pkg in ("onnxruntime-genai", "onnxscript", "tokenizers", "matplotlib"):
        try:
            machine["versions"][pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "command": "python bench/size_sweep.py " + " ".join(sys.argv[1:]),
           "machine": machine, "busy": args.busy, "sizes": [],
           "tools": {"pt2onnx-pretrained": " ".join(scale.pretrained_cmd()),
                     "pt2onnx": cli_pt2onnx(), "python": sys.executable}}
    notes = [
        "44M is the issue's 44 M-parameter model (hidden 512, 4 layers, 2 kv heads: "
        "bench/latency_fused.py's llama_h512_l4); 8 layers of that width would be 55 M.",
        "pt2onnx-pretrained --task text-generation writes a model without KV cache; the "
        "builder always writes a decoder step with a KV cache (GroupQueryAttention), so the "
        "with-past row is the like-for-like file.",
        "The builder loads the checkpoint with from_pretrained in its dtype (bfloat16) and "
        "casts each weight to float32 as it writes it: float32 output like pt2onnx's default.",
    ]
    for size in args.sizes:
        try:
            res["sizes"].append(sweep.measure_size(size))
        except RuntimeError as e:
            notes.append(f"{size}: not measured: {e}")
            print(f"  {size}: {e}", flush=True)
        shutil.rmtree(os.path.join(sweep.data, "run"), ignore_errors=True)
        # Partial results after each size.
        res["cache"] = (
            "page cache dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`) before every run: "
            "the checkpoint read from disk by each contender" if sweep.cache["mode"] == "cold"
            else (sweep.cache.get("note", "") + "; " if sweep.cache.get("note") else "")
            + "`sync`, then the checkpoint read with `cat` before every run (warm page cache)")
        res["notes"] = notes
        if res["sizes"]:
            write_report(res, args.out)
    print(f"wrote {args.out}.json, .md, .png", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
