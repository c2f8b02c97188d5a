"""The whole command, per checkpoint size: `pt2onnx-pretrained` beside `optimum-cli export
onnx` on the same Hugging Face checkpoint folders.

    python3 bench/pretrained_speed.py --sizes tiny --runs 1   # quick (a few minutes)
    python3 bench/pretrained_speed.py                         # tiny, 110m, 1b (an idle machine)
    python3 bench/pretrained_speed.py --dry-run               # configs and parameter counts only
    python3 bench/pretrained_speed.py --profile               # where the tiny llama's time goes
    python3 bench/pretrained_speed.py --report                # the .md from the .json

Checkpoints (random weights, float32, safetensors; no hub, no network), built and saved with
`save_pretrained` by the optimum environment's transformers 4.57 (tools/optimum_venv.sh, as
bench/hf_optimum.py uses it), so both tools read the same folder, as an optimum user holds it:

  tiny   bert (feature-extraction) and llama (text-generation-with-past) at
         tests/models/hf_tiny.py's tiny configs (about 0.5 MB each);
  110m   bert-base's config (BertModel, 768 x 12 layers, vocab 30522): 109 M parameters,
         feature-extraction, the task optimum users most export BERT for;
  1b     TinyLlama-1.1B's config (LlamaForCausalLM, hidden 2048, 22 layers, 32 heads, 4 KV
         heads, intermediate 5632, vocab 32000, untied head): 1.10 B parameters,
         text-generation-with-past.

They are kept in --data (default /tmp/pt2onnx-pretrained-speed) and reused while their spec
and transformers' version are the same (the 1b one is 4.4 GB).

Contenders, each a fresh process run as a user runs it, wall clock by time.perf_counter
around it, peak RSS by GNU time -v (`/usr/bin/time`; without it os.wait4's rusage of the same
child), with HF_HUB_OFFLINE=1 for all:

  optimum        `<optimum env>/bin/optimum-cli export onnx --model DIR --task TASK OUT`
                 (it validates the files in onnxruntime against PyTorch by default; its
                 verdict is parsed from its log and recorded);
  pt2onnx cold   `.venv/bin/pt2onnx-pretrained DIR --task TASK -o OUT/model.onnx
                 --cache-dir EMPTY` (verifies by default): the program cache cold, a fresh
                 empty folder each run: capture, conversion, verification, entry written;
  pt2onnx none   the same with --no-cache instead of --cache-dir.

Rounds interleave the three (optimum, cold, none), --runs rounds per checkpoint (default 3
for tiny and 110m, 1 for 1b), medians reported. Each output folder is fresh and removed
after its run. The per-stage timings pt2onnx prints (capture, serialize, the C++ core's
stages, total, verify) are parsed from its output; "outside stages" = wall - total -
verify: interpreter start, imports, config and model building, the cache entry.

Targets (the issue's): pt2onnx / optimum wall time <= 0.3 from 110m up, <= 1.0 on tiny;
the report computes them for both pt2onnx rows.

Results: bench/pretrained_speed.json (a rerun of some sizes replaces those sizes only; each
size records when, where and under what load it was measured) and bench/pretrained_speed.md.
"""

from __future__ import annotations

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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import size_sweep  # noqa: E402  (its /proc readers)
RESULTS = os.path.join(HERE, "pretrained_speed.json")
REPORT = os.path.join(HERE, "pretrained_speed.md")
DATA = os.path.join(tempfile.gettempdir(), "pt2onnx-pretrained-speed")
GNU_TIME = "/usr/bin/time"
SPEC_SUFFIX = ".bench-spec.json"

BERT_BASE = dict(model_type="bert", hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072, vocab_size=30522,
                 max_position_embeddings=512, type_vocab_size=2)
TINYLLAMA_1B = dict(model_type="llama", hidden_size=2048, num_hidden_layers=22,
                    num_attention_heads=32, num_key_value_heads=4, intermediate_size=5632,
                    vocab_size=32000, max_position_embeddings=2048, rms_norm_eps=1e-5,
                    rope_theta=10000.0, tie_word_embeddings=False)

# size -> checkpoints: (name, model type, optimum task, config fields; None: hf_tiny's).
SIZES: dict[str, list[tuple[str, str, str, dict | None]]] = {
    "tiny": [("bert-tiny", "bert", "feature-extraction", None),
             ("llama-tiny", "llama", "text-generation-with-past", None)],
    "110m": [("bert-base", "bert", "feature-extraction", BERT_BASE)],
    "1b": [("llama-1.1b", "llama", "text-generation-with-past", TINYLLAMA_1B)],
}
TARGETS = {"tiny": 1.0, "110m": 0.3, "1b": 0.3}
DEFAULT_RUNS = {"tiny": 3, "110m": 3, "1b": 1}
CONTENDERS = {
    "optimum": "optimum-cli export onnx (validates)",
    "pt2onnx_cold": "pt2onnx-pretrained, program cache cold (verifies)",
    "pt2onnx_nocache": "pt2onnx-pretrained --no-cache (verifies)",
}
PT2ONNX_ROWS = ("pt2onnx_cold", "pt2onnx_nocache")


# ---- the optimum environment's side (a child in tools/optimum_venv.sh's python) -------------

def _model_class(task: str):
    import transformers

    return (transformers.AutoModelForCausalLM if task.startswith("text-generation")
            else transformers.AutoModel)


def _config(model_type: str, task: str, fields: dict | None):
    """The checkpoint's config and model class (transformers 4.57)."""
    if fields is None:
        sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
        import hf_tiny

        base = task.replace("-with-past", "")
        cls = hf_tiny.model_class(base, model_type)
        return hf_tiny._config_for(cls, hf_tiny.tiny_config(model_type, base)), cls
    import transformers

    fields = dict(fields)
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    cls = _model_class(task)._model_mapping[type(config)]
    return config, cls


def _count(model_type: str, task: str, fields: dict | None) -> dict:
    """Parameters of the model, built on the meta device (no weight data)."""
    import torch

    config, cls = _config(model_type, task, fields)
    with torch.device("meta"):
        model = cls._from_config(config)
    n = sum(p.numel() for p in model.parameters())
    return {"class": cls.__name__, "parameters": n, "float32_bytes": 4 * n}


def _build(model_type: str, task: str, fields: dict | None, folder: str) -> dict:
    """The checkpoint saved in `folder` (seed 0, float32, safetensors), or the one there."""
    import torch
    import transformers

    spec = {"model_type": model_type, "task": task, "fields": fields,
            "transformers": transformers.__version__}
    stamp = folder + SPEC_SUFFIX  # beside the folder: the checkpoint holds what a user's does
    if os.path.exists(stamp):
        with open(stamp) as f:
            kept = json.load(f)
        if kept.get("spec") == spec:
            return {**kept["info"], "built_now": False}
    shutil.rmtree(folder, ignore_errors=True)
    t0 = time.perf_counter()
    config, cls = _config(model_type, task, fields)
    torch.manual_seed(0)
    model = cls._from_config(config).to(torch.float32).eval()
    os.makedirs(folder)
    model.save_pretrained(folder, safe_serialization=True)
    info = {"class": cls.__name__, "parameters": sum(p.numel() for p in model.parameters()),
            "bytes": _bytes_under(folder), "build_s": round(time.perf_counter() - t0, 2),
            "saved_by": f"transformers {transformers.__version__}",
            "config": {k: v for k, v in config.to_diff_dict().items()
                       if isinstance(v, (int, float, str, bool))}}
    with open(stamp, "w") as f:
        json.dump({"spec": spec, "info": info}, f, indent=1)
    return {**info, "built_now": True}


def _child(mode: str, size: str, data: str) -> None:
    import warnings

    warnings.simplefilter("ignore")
    out = []
    for name, model_type, task, fields in SIZES[size]:
        if mode == "count":
            out.append({"name": name, "task": task, **_count(model_type, task, fields)})
        else:
            folder = os.path.join(data, "checkpoints", name)
            out.append({"name": name, "task": task, "path": folder,
                        **_build(model_type, task, fields, folder)})
    print("RESULT " + json.dumps(out))


# ---- running and measuring -----------------------------------------------------------------

def _bytes_under(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def optimum_env() -> str:
    """tools/optimum_venv.sh's environment (created there the first time)."""
    return subprocess.run([os.path.join(ROOT, "tools", "optimum_venv.sh")], cwd=ROOT, check=True,
                          stdout=subprocess.PIPE, text=True).stdout.strip()


def _in_child(python: str, mode: str, size: str, data: str) -> list[dict]:
    r = subprocess.run([python, os.path.abspath(__file__), "--child", mode, size, data],
                       cwd=ROOT, capture_output=True, text=True, env=_env())
    m = re.search(r"^RESULT (.*)$", r.stdout, re.M)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"{mode} {size}: exit {r.returncode}: {_tail(r.stderr, 20)}")
    return json.loads(m.group(1))


def _env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1"}


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join((text or "").strip().splitlines()[-lines:])


def _parse_time_v(text: str) -> dict:
    def field(label, cast=float):
        m = re.search(rf"^\s*{re.escape(label)}: (.*)$", text, re.M)
        return cast(m.group(1)) if m else None

    rss = field("Maximum resident set size (kbytes)", int)
    return {"peak_rss_mb": round(rss / 1024, 1) if rss is not None else None,
            "user_s": field("User time (seconds)"), "system_s": field("System time (seconds)")}


def timed(cmd: list[str], timeout: float) -> dict:
    """`cmd` as one fresh process: wall seconds (perf_counter around it), peak RSS, CPU
    seconds, exit status, stdout + stderr."""
    rec: dict = {"loadavg_before": size_sweep.loadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "time.txt")
        gnu = os.access(GNU_TIME, os.X_OK)
        full = [GNU_TIME, "-v", "-o", report, *cmd] if gnu else cmd
        out, err = (open(os.path.join(tmp, n), "w+") for n in ("out", "err"))
        t0 = time.perf_counter()
        p = subprocess.Popen(full, cwd=ROOT, env=_env(), stdout=out, stderr=err,
                             start_new_session=True)
        usage = None
        try:
            if gnu:
                p.wait(timeout=timeout)
            else:  # this child's own rusage, as GNU time reports it
                deadline = time.monotonic() + timeout
                while True:
                    pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                    if pid:
                        p.returncode = os.waitstatus_to_exitcode(status)
                        break
                    if time.monotonic() > deadline:
                        raise subprocess.TimeoutExpired(full, timeout)
                    time.sleep(0.01)
            rec["wall_s"] = round(time.perf_counter() - t0, 3)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
            rec["wall_s"] = None
            rec["error"] = f"over the {timeout:.0f} s timeout"
        rec["returncode"] = p.returncode
        out.seek(0), err.seek(0)
        rec["stdout"], rec["stderr"] = out.read(), err.read()
        out.close(), err.close()
        if gnu and os.path.exists(report):
            rec.update(_parse_time_v(open(report).read()))
        elif usage is not None:
            rec.update(peak_rss_mb=round(usage.ru_maxrss / 1024, 1), user_s=usage.ru_utime,
                       system_s=usage.ru_stime)
        rec["rss_by"] = "GNU time -v" if gnu else "os.wait4"
    rec["ok"] = rec["returncode"] == 0 and "error" not in rec
    if not rec["ok"] and "error" not in rec:
        rec["error"] = _first_error(rec["stderr"]) or f"exit status {rec['returncode']}"
    return rec


def _first_error(text: str) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("pt2onnx-pretrained:"):
            return ln[:400]
    for ln in reversed(lines):
        if re.match(r"^\w*(Error|Exception)\b", ln):
            return ln[:400]
    return (lines[-1] if lines else "")[:400]


def pt2onnx_stages(stdout: str) -> dict:
    """What the command prints: its stages (seconds), the program cache's result, the
    sizes verified and the largest difference."""
    res: dict = {}
    m = re.search(r"^\s+((?:[\w ]+ [\d.]+ ms, )*[\w ]+ [\d.]+ ms)\s*$", stdout, re.M)
    if m:
        res["stages"] = {k.strip(): round(float(v) / 1000, 4) for k, v in
                         (part.rsplit(" ", 2)[:2] for part in m.group(1).split(", "))}
    m = re.search(r"program cache: (\w+)", stdout)
    res["program_cache"] = m.group(1) if m else None
    m = re.search(r"verified in onnxruntime at \(([^)]*)\) (\[.*\]): max abs error (\S+)", stdout)
    if m:
        res["verified"] = {"axes": m.group(1), "sizes": m.group(2),
                           "max_abs_error": float(m.group(3))}
    return res


def optimum_validation(text: str, ok: bool) -> str:
    """optimum's verdict: `main_export` validates by default (on CPU in-process) and logs its
    checks at INFO, which optimum-cli does not show; a difference beyond atol or in output
    names is a WARNING ("succeeded with the warning": atol), any other validation error
    raises. So: atol, pass (exit status 0 without that warning), or fail."""
    if "succeeded with the warning" in text:
        return "atol"
    return "pass" if ok else "fail"


def run_contender(name: str, ck: dict, tools: dict, work: str, timeout: float) -> dict:
    out = tempfile.mkdtemp(prefix=f"{name}-", dir=work)
    cache = None
    if name == "optimum":
        cmd = [tools["optimum_cli"], "export", "onnx", "--model", ck["path"], "--task",
               ck["task"], out]
    else:
        cmd = [tools["pt2onnx"], ck["path"], "--task", ck["task"], "-o",
               os.path.join(out, "model.onnx")]
        if name == "pt2onnx_cold":
            cache = tempfile.mkdtemp(prefix="cache-", dir=work)  # 0700: the cache's rule
            cmd += ["--cache-dir", cache]
        else:
            cmd += ["--no-cache"]
    rec = timed(cmd, timeout)
    rec["cmd"] = " ".join(cmd)
    rec["output_bytes"] = _bytes_under(out)
    shutil.rmtree(out, ignore_errors=True)
    if cache:
        rec["cache_entry_bytes"] = _bytes_under(cache)
        shutil.rmtree(cache, ignore_errors=True)
    if name == "optimum":
        log = rec["stdout"] + rec["stderr"]
        rec["validation"] = optimum_validation(log, rec["ok"])
        m = re.search(r"succeeded with the warning: (.*)", log)
        if m:
            rec["validation_warning"] = m.group(1)[:300]
        if "Weight deduplication check in the ONNX export requires accelerate" in log:
            rec["weight_dedup_check"] = "skipped (accelerate not installed)"
    else:
        rec.update(pt2onnx_stages(rec["stdout"]))
        st = rec.get("stages", {})
        if rec["ok"] and "total" in st and rec["wall_s"] is not None:
            rec["outside_stages_s"] = round(rec["wall_s"] - st["total"] - st.get("verify", 0), 3)
    rec["stdout"], rec["stderr"] = _tail(rec["stdout"], 8), _tail(rec["stderr"], 8)
    return rec


def _median(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 3) if xs else None


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["ok"]]
    s = {"runs": len(runs), "succeeded": len(ok), "wall_s": [r["wall_s"] for r in runs],
         "median_s": _median([r["wall_s"] for r in ok]),
         "peak_rss_mb": _median([r.get("peak_rss_mb") for r in ok]),
         "user_s": _median([r.get("user_s") for r in ok]),
         "system_s": _median([r.get("system_s") for r in ok]),
         "output_bytes": _median([r["output_bytes"] for r in ok]),
         "errors": sorted({r["error"] for r in runs if not r["ok"]})}
    stages = [r["stages"] for r in ok if "stages" in r]
    if stages:
        keys = list(dict.fromkeys(k for st in stages for k in st))
        s["median_stages_s"] = {k: _median([st.get(k) for st in stages]) for k in keys}
        s["median_outside_stages_s"] = _median([r.get("outside_stages_s") for r in ok])
    for key in ("validation", "program_cache", "weight_dedup_check"):
        vals = sorted({str(r.get(key)) for r in ok})
        if vals and vals != ["None"]:
            s[key] = vals
    if any("verified" in r for r in ok):
        s["verified"] = next(r["verified"] for r in ok if "verified" in r)
    return s


# ---- the machine -----------------------------------------------------------------------------

def machine() -> dict:
    mem = open("/proc/meminfo").read()
    cpu = re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M)
    return {"host": platform.node(), "cpu": cpu.group(1) if cpu else platform.processor(),
            "cores": os.cpu_count(),
            "mem_gb": round(int(re.search(r"MemTotal:\s*(\d+)", mem).group(1)) / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version()}


def busy_processes() -> list[str]:
    """Other processes using CPU at the moment (ps's %CPU over their lifetime, >= 10%),
    this script's own excepted."""
    try:
        ps = subprocess.run(["ps", "-eo", "pid,ppid,pcpu,etime,args", "--sort=-pcpu"],
                            capture_output=True, text=True).stdout.splitlines()[1:]
    except OSError:
        return []
    out = []
    for line in ps:
        pid, ppid, pcpu, etime, args = line.split(None, 4)
        if int(pid) == os.getpid() or int(ppid) == os.getpid() or float(pcpu) < 10:
            continue
        out.append(f"{float(pcpu):.0f}% {etime} {args[:110]}")
    return out[:8]


def versions(optimum_python: str, pt2onnx_python: str) -> dict:
    code = ("import importlib.metadata as md, json, sys\nout = {}\n"
            "for p in sys.argv[1:]:\n    try:\n        out[p] = md.version(p)\n"
            "    except Exception:\n        pass\nprint(json.dumps(out))")

    def of(python, pkgs):
        r = subprocess.run([python, "-c", code, *pkgs], capture_output=True, text=True)
        return json.loads(r.stdout) if r.returncode == 0 else {"error": _tail(r.stderr, 2)}

    common = ("torch", "transformers", "onnxruntime", "onnx")
    return {"optimum_env": of(optimum_python, ("optimum-onnx", "optimum", *common)),
            "pt2onnx_env": of(pt2onnx_python, ("pt2onnx", "torchao", *common))}


def commit() -> str:
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout
    head = git("rev-parse", "--short", "HEAD").strip()
    dirty = git("status", "--porcelain", "--", "python", "src", "include").strip()
    return head + (" + uncommitted changes to python/src/include" if dirty else "")


# ---- the benchmark ---------------------------------------------------------------------------

def tools_paths(a) -> dict:
    opt = optimum_env()
    return {"optimum_env": opt, "optimum_python": os.path.join(opt, "bin", "python"),
            "optimum_cli": os.path.join(opt, "bin", "optimum-cli"),
            "pt2onnx": a.pt2onnx,
            "pt2onnx_python": os.path.join(os.path.dirname(a.pt2onnx), "python")}


def measure_size(size: str, runs: int, tools: dict, a) -> dict:
    print(f"[{size}] building / reusing the checkpoints (transformers 4.57) ...", flush=True)
    cks = _in_child(tools["optimum_python"], "build", size, a.data)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    res = {"measured": {"date": started, "commit": commit(), "machine": machine(),
                        "loadavg_at_start": size_sweep.loadavg(), "busy_at_start": busy_processes(),
                        "note": a.note, "runs": runs,
                        **versions(tools["optimum_python"], tools["pt2onnx_python"])},
           "checkpoints": []}
    work = os.path.join(a.data, "work")
    os.makedirs(work, exist_ok=True)
    need = max(ck["bytes"] for ck in cks) * 4  # optimum holds the model, its trace, the file
    if size_sweep.mem_available() < need:
        print(f"[{size}] warning: {size_sweep.mem_available() / 1e9:.1f} GB of memory available, the "
              f"exports may need about {need / 1e9:.1f} GB", flush=True)
    for ck in cks:
        print(f"[{size}] {ck['name']}: {ck['class']}, {ck['parameters'] / 1e6:.2f} M parameters,"
              f" {ck['bytes'] / 1e6:.1f} MB, task {ck['task']}"
              f"{' (built now)' if ck['built_now'] else ' (reused)'}", flush=True)
        per: dict[str, list[dict]] = {c: [] for c in CONTENDERS}
        for i in range(runs):
            for c in CONTENDERS:
                rec = run_contender(c, ck, tools, work, a.timeout)
                per[c].append(rec)
                extra = (f" validation {rec.get('validation')}" if c == "optimum" else
                         f" cache {rec.get('program_cache')}, stages "
                         + ", ".join(f"{k} {v:.2f}" for k, v in rec.get("stages", {}).items()))
                print(f"  run {i + 1}/{runs} {c:16} "
                      + (f"{rec['wall_s']:8.2f} s" if rec["wall_s"] is not None else "   --   ")
                      + f" rss {rec.get('peak_rss_mb')} MB load {rec['loadavg_before']:.2f}"
                      + (extra if rec["ok"] else f" FAILED: {rec['error'][:200]}"), flush=True)
        row = {k: ck[k] for k in ("name", "task", "class", "parameters", "bytes", "saved_by",
                                  "config") if k in ck}
        row["contenders"] = {c: {"summary": summarize(per[c]), "runs": per[c]}
                             for c in CONTENDERS}
        res["checkpoints"].append(row)
    res["measured"]["loadavg_at_end"] = size_sweep.loadavg()
    return res


def save(results: dict) -> None:
    data = json.load(open(RESULTS)) if os.path.exists(RESULTS) else {}
    sizes = data.get("sizes", {})
    sizes.update(results)
    data["sizes"] = {k: sizes[k] for k in sorted(sizes, key=list(SIZES).index)}
    data["targets"] = TARGETS
    with open(RESULTS, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def dry_run(sizes: list[str], tools: dict) -> None:
    for size in sizes:
        for r in _in_child(tools["optimum_python"], "count", size, DATA):
            print(f"{size:5} {r['name']:11} {r['class']:18} {r['task']:26} "
                  f"{r['parameters']:>14,} parameters ({r['parameters'] / 1e9:.3f} B), "
                  f"{r['float32_bytes'] / 1e9:.2f} GB float32", flush=True)


# ---- the profile of the tiny llama (--profile) -------------------------------------------------

def _importtime(text: str) -> dict:
    """python -X importtime's report: total, self time by package, and for the packages of
    interest the cumulative time of their outermost imports (those not inside an import of
    the same package) and the chain that first brought each in."""
    rows = []
    for line in text.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
        if m:
            rows.append((int(m.group(1)) / 1e6, int(m.group(2)) / 1e6, len(m.group(3)) // 2,
                         m.group(4)))
    parent: list[int | None] = [None] * len(rows)
    stack: list[int] = []
    for i in range(len(rows) - 1, -1, -1):  # reversed, a parent comes before its imports
        while stack and rows[stack[-1]][2] >= rows[i][2]:
            stack.pop()
        parent[i] = stack[-1] if stack else None
        stack.append(i)

    def pkg(i):
        return rows[i][3].split(".")[0]

    def chain(i):
        out = []
        while i is not None:
            out.append(rows[i][3])
            i = parent[i]
        return out

    by_pkg: dict[str, float] = {}
    for i, r in enumerate(rows):
        by_pkg[pkg(i)] = by_pkg.get(pkg(i), 0.0) + r[0]
    outer: dict[str, dict] = {}
    for i in range(len(rows)):
        j, inside = parent[i], False
        while j is not None:
            if pkg(j) == pkg(i):
                inside = True
                break
            j = parent[j]
        if inside:
            continue
        e = outer.setdefault(pkg(i), {"cumulative_s": 0.0, "imports": 0})
        e["cumulative_s"] += rows[i][1]
        e["imports"] += 1
        e.setdefault("entries", []).append(i)
    interest = ("torch", "transformers", "torchao", "onnxruntime", "onnx", "sympy", "scipy",
                "numpy", "torchvision", "safetensors", "huggingface_hub", "pt2onnx")
    entry_of = {}
    for p in interest:
        if p in outer:
            e = outer[p]
            big = max(e["entries"], key=lambda i: rows[i][1])
            entry_of[p] = {"cumulative_s": round(e["cumulative_s"], 3), "imports": e["imports"],
                           "largest": rows[big][3], "largest_s": round(rows[big][1], 3),
                           "chain": chain(big)[:8]}
    modules = {}
    for name in ("torch", "transformers", "torch._dynamo", "torchvision", "torchao", "sympy",
                 "scipy", "transformers.generation.continuous_batching", "onnxruntime",
                 "safetensors"):
        hits = [i for i, r in enumerate(rows) if r[3] == name]
        if hits:
            i = max(hits, key=lambda i: rows[i][1])
            modules[name] = {"cumulative_s": round(rows[i][1], 3), "chain": chain(i)[:12]}
    top = sorted((i for i, r in enumerate(rows) if r[2] == 0), key=lambda i: -rows[i][1])[:12]
    return {"total_s": round(sum(r[1] for r in rows if r[2] == 0), 3), "modules": len(rows),
            "top_level": [{"module": rows[i][3], "cumulative_s": round(rows[i][1], 3)}
                          for i in top],
            "module_chains": modules,
            "self_by_package_s": {k: round(v, 3) for k, v in
                                  sorted(by_pkg.items(), key=lambda kv: -kv[1])[:14]},
            "entry_of": entry_of}


# (label, file suffix, function name): cumulative seconds from the cProfile of the command.
_PROFILE_STEPS = [
    ("imports, all (importlib _find_and_load)", "<frozen importlib._bootstrap>",
     "_find_and_load"),
    ("hf.export_pretrained", "pt2onnx/hf.py", "export_pretrained"),
    ("  hf.empty_pretrained (config + model without weights)", "pt2onnx/hf.py",
     "empty_pretrained"),
    ("  hf._export_pretrained_to (inputs, capture, convert, write)", "pt2onnx/hf.py",
     "_export_pretrained_to"),
    ("    pt2onnx export()", "pt2onnx/_export.py", "export"),
    ("      torch.export.export (capture)", "torch/export/__init__.py", "export"),
    ("  hf.verify_into (verification)", "pt2onnx/hf.py", "verify_into"),
    ("    hf.load_pretrained (from_pretrained, with weights)", "pt2onnx/hf.py",
     "load_pretrained"),
    ("    hf._verify (onnxruntime session + comparisons)", "pt2onnx/hf.py", "_verify"),
    ("      onnxruntime InferenceSession", "onnxruntime_inference_collection.py", "__init__"),
    ("      _verify.compare_or_raise", "pt2onnx/_verify.py", "compare_or_raise"),
    ("  hf._TaskInputs.make (example/verify inputs)", "pt2onnx/hf.py", "make"),
    ("  hf._past (prefill runs that make the caches)", "pt2onnx/hf.py", "_past"),
    ("torch.manual_seed", "torch/random.py", "manual_seed"),
]


def _cprofile(path: str) -> dict:
    import pstats

    st = pstats.Stats(path)
    steps = {}
    for label, suffix, fn in _PROFILE_STEPS:
        hits = [(v[3], v[1]) for (file, _, name), v in st.stats.items()
                if name == fn and file.endswith(suffix)]
        if hits:
            ct, calls = max(hits)
            steps[label] = {"cumulative_s": round(ct, 3), "calls": calls}
    forwards = {}
    for (file, line, name), v in st.stats.items():  # eager runs of the model
        if name == "forward" and re.search(r"modeling_llama\.py$", file):
            cls = _class_at(file, line)
            if cls in ("LlamaForCausalLM", "LlamaModel"):
                callers = {f"{os.path.basename(cf)}:{cn}": c[1]
                           for (cf, _, cn), c in v[4].items()}
                forwards[cls] = {"calls": v[1], "cumulative_s": round(v[3], 3),
                                 "callers": callers}
    top = sorted(((v[3], f"{_short(file)}:{line}({name})") for (file, line, name), v
                  in st.stats.items() if "{built-in" not in name and "<frozen" not in file
                  and file != "~"), reverse=True)[:25]
    return {"total_s": round(st.total_tt, 3), "steps": steps, "forward": forwards,
            "top_cumulative": [{"function": n, "cumulative_s": round(c, 3)} for c, n in top]}


def _class_at(file: str, line: int) -> str | None:
    try:
        src = open(file).read().splitlines()[:line]
    except OSError:
        return None
    for text in reversed(src):
        m = re.match(r"class (\w+)", text)
        if m:
            return m.group(1)
    return None


def _short(file: str) -> str:
    for mark in ("site-packages/", "python/"):
        if mark in file:
            return file.split(mark, 1)[1]
    return file


# What the phases driver times: (module, attribute path, label). Inclusive wall seconds and
# calls each; the imports done inside each (outermost _find_and_load) are charged to the
# innermost phase running; the top model's eager forward calls are counted per phase.
_PHASES = [
    ("pt2onnx._pretrained_command", "main", "command main()"),
    ("pt2onnx.hf", "export_pretrained", "hf.export_pretrained"),
    ("pt2onnx.hf", "prepare", "hf.prepare (pytree registrations, transformers cache classes)"),
    ("pt2onnx.hf", "_config", "hf._config (config.json checks, AutoConfig)"),
    ("pt2onnx.hf", "empty_pretrained", "hf.empty_pretrained (model built without weights)"),
    ("pt2onnx.hf", "checkpoint_weights", "hf.checkpoint_weights (weight source)"),
    ("pt2onnx.hf", "_export_pretrained_to", "hf._export_pretrained_to (export)"),
    ("pt2onnx.hf", "_TaskInputs.make", "hf._TaskInputs.make (inputs)"),
    ("pt2onnx.hf", "_past", "hf._past (a prefill run making a cache)"),
    ("pt2onnx.hf", "export", "pt2onnx export()"),
    ("torch.export", "export", "torch.export.export (capture)"),
    ("pt2onnx.hf", "verify_into", "hf.verify_into (verification)"),
    ("pt2onnx.hf", "load_pretrained", "hf.load_pretrained (from_pretrained, weights)"),
    ("pt2onnx.hf", "_verify", "hf._verify (session + comparisons)"),
    ("onnxruntime", "InferenceSession.__init__", "onnxruntime InferenceSession()"),
    ("pt2onnx._verify", "compare_or_raise", "compare_or_raise (one size: eager + onnxruntime)"),
    ("onnxruntime", "InferenceSession.run", "onnxruntime run"),
    ("pt2onnx.hf", "_store_programs", "hf._store_programs (program cache entry)"),
]


def _phases_child(out_json: str, argv: list[str]) -> None:
    """Runs the command's main(argv) in this process with _PHASES timed (see there)."""
    import functools
    import importlib

    t_start = time.perf_counter()
    fi = sys.modules["_frozen_importlib"]
    st = {"stack": ["(top level)"], "depth": 0, "imports": {}, "incl": {}, "excl": {},
          "calls": {}, "forward": {}, "child": [0.0]}
    orig_find = fi._find_and_load

    def find_and_load(name, import_):
        if st["depth"]:
            return orig_find(name, import_)
        st["depth"] += 1
        t = time.perf_counter()
        try:
            return orig_find(name, import_)
        finally:
            st["depth"] -= 1
            ph = st["stack"][-1]
            st["imports"][ph] = st["imports"].get(ph, 0.0) + time.perf_counter() - t

    fi._find_and_load = find_and_load
    import gc

    gc_t = {"s": 0.0, "n": 0, "gen2": 0}

    def on_gc(phase, info):  # the cyclic collector's own time, during the run
        if phase == "start":
            gc_t["t"] = time.perf_counter()
        else:
            gc_t["s"] += time.perf_counter() - gc_t["t"]
            gc_t["n"] += 1
            gc_t["gen2"] += info["generation"] == 2

    gc.callbacks.append(on_gc)

    def timed_fn(fn, label):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            st["stack"].append(label)
            st["child"].append(0.0)
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                dt = time.perf_counter() - t
                st["stack"].pop()
                inner = st["child"].pop()
                st["child"][-1] += dt
                st["incl"][label] = st["incl"].get(label, 0.0) + dt
                st["excl"][label] = st["excl"].get(label, 0.0) + dt - inner
                st["calls"][label] = st["calls"].get(label, 0) + 1
                st.setdefault("times", {}).setdefault(label, []).append(round(dt, 4))
        return wrapper

    t = time.perf_counter()
    cmd = importlib.import_module("pt2onnx._pretrained_command")
    import_cmd = time.perf_counter() - t
    t = time.perf_counter()
    importlib.import_module("pt2onnx.hf")  # the command imports it in main(); here before
    import_hf = time.perf_counter() - t
    import onnxruntime  # noqa: F401 - to wrap it (0.2 s; the command imports it to verify)

    import_ort = time.perf_counter() - t - import_hf
    for mod, path, label in _PHASES:
        obj = sys.modules[mod]
        *owners, attr = path.split(".")
        for o in owners:
            obj = getattr(obj, o)
        setattr(obj, attr, timed_fn(getattr(obj, attr), label))
    hf = sys.modules["pt2onnx.hf"]
    seen: set = set()

    def count_forward(model):
        cls = type(model)
        if cls in seen:
            return
        seen.add(cls)
        fwd = cls.forward

        @functools.wraps(fwd)
        def forward(*a, **k):
            ph = next((p for p in reversed(st["stack"]) if p.startswith(
                ("torch.export", "hf._past", "compare_or_raise"))), st["stack"][-1])
            key = f"{cls.__name__}.forward in {ph}"
            st["forward"][key] = st["forward"].get(key, 0) + 1
            return fwd(*a, **k)
        cls.forward = forward

    for name in ("empty_pretrained", "load_pretrained"):
        fn = getattr(hf, name)

        def hooked(*a, _fn=fn, **k):
            r = _fn(*a, **k)
            count_forward(r[0] if isinstance(r, tuple) else r)
            return r
        setattr(hf, name, hooked)
    t_main = time.perf_counter()
    rc = cmd.main(argv)
    t_end = time.perf_counter()
    res = {"rc": rc, "since_start_s": round(t_end - t_start, 3),
           "import pt2onnx._pretrained_command": round(import_cmd, 3),
           "import pt2onnx.hf (torch, pt2onnx)": round(import_hf, 3),
           "import onnxruntime": round(import_ort, 3),
           "main_s": round(t_end - t_main, 3),
           "phases": {label: {"inclusive_s": round(st["incl"].get(label, 0.0), 3),
                              "exclusive_s": round(st["excl"].get(label, 0.0), 3),
                              "imports_in_exclusive_s": round(st["imports"].get(label, 0.0), 3),
                              "calls": st["calls"].get(label, 0),
                              "each_s": st.get("times", {}).get(label, [])[:12]}
                      for _, _, label in _PHASES},
           "imports_outside_phases_s": round(st["imports"].get("(top level)", 0.0), 3),
           "forward_calls": st["forward"], "modules_loaded": len(sys.modules),
           "gc_during_run": {"seconds": round(gc_t["s"], 3), "collections": gc_t["n"],
                             "full_collections": gc_t["gen2"],
                             "objects_tracked_at_end": len(gc.get_objects())}}
    with open(out_json, "w") as f:
        json.dump(res, f, indent=1)


def profile(tools: dict, a) -> dict:
    """Where the tiny llama's `pt2onnx-pretrained --no-cache` goes: its stages (plain run),
    python -X importtime, cProfile, and the floors of interpreter start and imports."""
    cks = [c for c in _in_child(tools["optimum_python"], "build", "tiny", a.data)
           if c["name"] == "llama-tiny"]
    ck = cks[0]
    py = tools["pt2onnx_python"]
    work = tempfile.mkdtemp(prefix="profile-", dir=a.data)
    onnx = os.path.join(work, "model.onnx")
    args = [ck["path"], "--task", ck["task"], "-o", onnx, "--no-cache"]
    res: dict = {"checkpoint": {k: ck[k] for k in ("name", "class", "parameters", "bytes")},
                 "command": f"{py} -m pt2onnx._pretrained_command " + " ".join(args),
                 "date": datetime.datetime.now(datetime.timezone.utc)
                 .strftime("%Y-%m-%d %H:%M UTC"), "commit": commit(),
                 "loadavg_at_start": size_sweep.loadavg(), "busy_at_start": busy_processes(),
                 "note": a.note}
    print("[profile] plain run ...", flush=True)
    plain = timed([py, "-m", "pt2onnx._pretrained_command", *args], a.timeout)
    res["plain"] = {"wall_s": plain["wall_s"], "peak_rss_mb": plain.get("peak_rss_mb"),
                    "ok": plain["ok"], **pt2onnx_stages(plain["stdout"])}
    print("[profile] phases ...", flush=True)
    phases_json = os.path.join(work, "phases.json")
    ph = timed([py, os.path.abspath(__file__), "--phases-child", phases_json, *args], a.timeout)
    if os.path.exists(phases_json):
        res["phases"] = json.load(open(phases_json))
        res["phases"]["wall_s"] = ph["wall_s"]
        res["phases"]["stages"] = pt2onnx_stages(ph["stdout"]).get("stages")
    else:
        res["phases"] = {"error": ph.get("error") or _tail(ph["stderr"])}
    print("[profile] python -X importtime ...", flush=True)
    r = subprocess.run([py, "-X", "importtime", "-m", "pt2onnx._pretrained_command", *args],
                       cwd=ROOT, env=_env(), capture_output=True, text=True)
    res["importtime"] = _importtime(r.stderr)
    print("[profile] cProfile ...", flush=True)
    prof = os.path.join(work, "command.prof")
    t0 = time.perf_counter()
    r = subprocess.run([py, "-m", "cProfile", "-o", prof, "-m", "pt2onnx._pretrained_command",
                        *args], cwd=ROOT, env=_env(), capture_output=True, text=True)
    res["cprofile_wall_s"] = round(time.perf_counter() - t0, 3)
    res["cprofile_stages"] = pt2onnx_stages(r.stdout)
    res["cprofile"] = _cprofile(prof) if os.path.exists(prof) else {"error": _tail(r.stderr)}
    print("[profile] floors ...", flush=True)
    floors = {
        "python -c pass": "pass",
        "import torch": "import torch",
        "import torchao": "import torchao",
        "import transformers (lazy module only)": "import transformers",
        "import torch; from transformers import LlamaForCausalLM":
            "import torch; from transformers import LlamaForCausalLM",
        "import onnxruntime": "import onnxruntime",
        "import pt2onnx._pretrained_command (the command's own start)":
            "import pt2onnx._pretrained_command",
        "import pt2onnx.hf; hf.prepare()": "import pt2onnx.hf as hf; hf.prepare()",
    }
    imports = ("import pt2onnx.hf as hf, torch.export._trace, onnxruntime; hf.prepare(); "
               "from transformers import LlamaForCausalLM")
    floors["the command's imports, then a normal exit"] = imports
    floors["the same imports, then os._exit (no interpreter teardown)"] = (
        imports + "; import os; os._exit(0)")
    res["floors_s"] = {}
    for label, code in floors.items():
        walls = []
        for _ in range(a.floor_runs):
            t0 = time.perf_counter()
            subprocess.run([py, "-c", code], cwd=ROOT, env=_env(), capture_output=True)
            walls.append(time.perf_counter() - t0)
        res["floors_s"][label] = round(statistics.median(walls), 3)
    res["loadavg_at_end"] = size_sweep.loadavg()
    shutil.rmtree(work, ignore_errors=True)
    return res


# ---- the report ------------------------------------------------------------------------------

def _f(x, spec=".2f", none="-"):
    return none if x is None else format(x, spec)


def _ratio(p: dict, o: dict):
    a, b = p["summary"]["median_s"], o["summary"]["median_s"]
    return round(a / b, 3) if a is not None and b else None


def verdicts(data: dict) -> list[str]:
    """The issue's targets against what was measured, computed."""
    lines = []
    for size, target in TARGETS.items():
        s = data["sizes"].get(size)
        scope = "on tiny" if size == "tiny" else "from 110M up"
        if not s:
            lines.append(f"- **{size}** (target pt2onnx / optimum <= {target} {scope}): "
                         f"not measured.")
            continue
        for ck in s["checkpoints"]:
            c = ck["contenders"]
            parts = []
            for row in PT2ONNX_ROWS:
                r = _ratio(c[row], c["optimum"])
                label = "cold cache" if row == "pt2onnx_cold" else "--no-cache"
                parts.append(f"{label} {_f(r, '.2f')}: "
                             + ("no result" if r is None else
                                "**met**" if r <= target else "**not met**"))
            lines.append(f"- **{size} / {ck['name']}** (target <= {target} {scope}): "
                         + "; ".join(parts) + ".")
    return lines


def _busy(m: dict) -> bool:
    # Other processes using CPU at the start. Not the load average: a size measured after
    # another starts with the load of this benchmark's own runs just before.
    return bool(m.get("busy_at_start"))


def report() -> None:
    data = json.load(open(RESULTS))
    lines = ["# pt2onnx-pretrained beside optimum-cli: the whole command per checkpoint size "
             "(bench/pretrained_speed.py)", ""]
    busy = [k for k, s in data["sizes"].items() if _busy(s["measured"])]
    if busy:
        lines += [f"**Measured on a busy machine ({', '.join(busy)}): the load and the other "
                  "processes are listed under each size. These timings are not an idle "
                  "machine's; rerun `python3 bench/pretrained_speed.py` on an idle one.**", ""]
    lines += ["## Targets (the issue's: pt2onnx / optimum wall time <= 0.3 from 110M up, "
              "<= 1.0 on tiny)", "", *verdicts(data), "",
              "Ratio = median wall time of the whole pt2onnx command / median wall time of "
              "the whole optimum-cli command, same checkpoint folder, same machine, same "
              "session. Both check the exported file in onnxruntime against PyTorch, each "
              "its own way (optimum: one input set at its default shapes, per output its "
              "atol; pt2onnx: the sizes listed below).", ""]
    for size, s in data["sizes"].items():
        m = s["measured"]
        mc, oe, pe = m["machine"], m["optimum_env"], m["pt2onnx_env"]
        lines += [f"## {size}", "",
                  f"Measured {m['date']} on {mc['host']} ({mc['cpu']}, {mc['cores']} cores, "
                  f"{mc['mem_gb']} GB RAM, Linux {mc['kernel']}), pt2onnx at {m['commit']}, "
                  f"{m['runs']} round(s), medians. optimum env: optimum-onnx "
                  f"{oe.get('optimum-onnx')}, optimum {oe.get('optimum')}, transformers "
                  f"{oe.get('transformers')}, torch {oe.get('torch')}, onnxruntime "
                  f"{oe.get('onnxruntime')}. pt2onnx env: pt2onnx {pe.get('pt2onnx')}, "
                  f"transformers {pe.get('transformers')}, torch {pe.get('torch')}, torchao "
                  f"{pe.get('torchao')}, onnxruntime {pe.get('onnxruntime')}.", "",
                  f"Load average (1 min) {m['loadavg_at_start']:.2f} at the start, "
                  f"{m.get('loadavg_at_end', 0):.2f} at the end"
                  + (f"; other processes using CPU at the start: "
                     + "; ".join(f"`{p}`" for p in m["busy_at_start"])
                     if m.get("busy_at_start") else "; no other process using CPU at the start")
                  + (f". Note: {m['note']}" if m.get("note") else "") + ".", "",
                  "| checkpoint | parameters | task | optimum s | pt2onnx cold s | ratio | "
                  "pt2onnx --no-cache s | ratio | peak RSS MB optimum / cold / no-cache | "
                  "optimum validation | pt2onnx verified (max abs error) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for ck in s["checkpoints"]:
            c = ck["contenders"]
            o, pc, pn = (c[k]["summary"] for k in ("optimum", *PT2ONNX_ROWS))
            ver = pc.get("verified") or pn.get("verified")
            lines.append(
                f"| {ck['name']} ({ck['class']}) | {ck['parameters'] / 1e6:,.1f} M | "
                f"{ck['task']} | {_f(o['median_s'])} | {_f(pc['median_s'])} | "
                f"{_f(_ratio(c['pt2onnx_cold'], c['optimum']))} | {_f(pn['median_s'])} | "
                f"{_f(_ratio(c['pt2onnx_nocache'], c['optimum']))} | "
                f"{_f(o['peak_rss_mb'], '.0f')} / {_f(pc['peak_rss_mb'], '.0f')} / "
                f"{_f(pn['peak_rss_mb'], '.0f')} | {', '.join(o.get('validation', ['-']))} | "
                + (f"{ver['sizes']} ({ver['max_abs_error']:.1e})" if ver else "-") + " |")
        lines += ["", "pt2onnx's own stages (median seconds of the runs; `outside stages` = "
                  "wall - total - verify: interpreter start, imports, config and model "
                  "building, the cache entry):", ""]
        keys = []
        for ck in s["checkpoints"]:
            for row in PT2ONNX_ROWS:
                keys += list(ck["contenders"][row]["summary"].get("median_stages_s", {}))
        keys = list(dict.fromkeys(keys))
        lines += ["| checkpoint | pt2onnx | wall | " + " | ".join(keys) + " | outside stages |",
                  "|---|---|---|" + "---|" * len(keys) + "---|"]
        for ck in s["checkpoints"]:
            for row in PT2ONNX_ROWS:
                sm = ck["contenders"][row]["summary"]
                st = sm.get("median_stages_s", {})
                lines.append(f"| {ck['name']} | {'cold cache' if row == 'pt2onnx_cold' else '--no-cache'}"
                             f" | {_f(sm['median_s'])} | "
                             + " | ".join(_f(st.get(k), '.3f') for k in keys)
                             + f" | {_f(sm.get('median_outside_stages_s'))} |")
        lines += ["", "Every run (wall seconds, in order; CPU = user + system seconds, median):",
                  ""]
        for ck in s["checkpoints"]:
            for name, label in CONTENDERS.items():
                sm = ck["contenders"][name]["summary"]
                cpu = (sm["user_s"] or 0) + (sm["system_s"] or 0) if sm["user_s"] else None
                lines.append(f"- {ck['name']}, {label}: "
                             + ", ".join(_f(w) for w in sm["wall_s"])
                             + f" (CPU {_f(cpu)} s, output {(sm['output_bytes'] or 0) / 1e6:.1f} MB"
                             + (f", cache {'/'.join(sm['program_cache'])}"
                                if sm.get("program_cache") else "") + ")"
                             + (f"; errors: {'; '.join(e[:200] for e in sm['errors'])}"
                                if sm["errors"] else ""))
        lines.append("")
    if "profile" in data:
        lines += profile_section(data["profile"])
    lines += method_section(data)
    with open(REPORT, "w") as f:
        f.write("\n".join(lines) + "\n")


def method_section(data: dict) -> list[str]:
    rss_by = sorted({r.get("rss_by", "?") for s in data["sizes"].values()
                     for ck in s["checkpoints"] for c in ck["contenders"].values()
                     for r in c["runs"]})
    dedup = any("weight_dedup_check" in ck["contenders"]["optimum"]["summary"]
                for s in data["sizes"].values() for ck in s["checkpoints"])
    cks = [f"{size} / {ck['name']}: {ck['class']}, {ck['parameters']:,} parameters, "
           f"{ck['bytes'] / 1e6:,.1f} MB of checkpoint files, task {ck['task']}, saved by "
           f"{ck.get('saved_by', '?')}" for size, s in data["sizes"].items()
           for ck in s["checkpoints"]]
    return [
        "## Method", "",
        "`python3 bench/pretrained_speed.py [--sizes tiny 110m 1b] [--runs N]` "
        "(`--dry-run`: the configs' parameter counts only; `--profile`: the section above; "
        "`--report`: this file from bench/pretrained_speed.json).", "",
        "- Checkpoints: random weights (seed 0), float32, safetensors, built from configs and "
        "saved with `save_pretrained` by the optimum environment's transformers "
        "(tools/optimum_venv.sh), so both tools read the same folder, as an optimum user holds "
        "it; no hub, no network (HF_HUB_OFFLINE=1 for every command). tiny: "
        "tests/models/hf_tiny.py's configs; 110m: bert-base's (BertModel); 1b: "
        "TinyLlama-1.1B's (LlamaForCausalLM, hidden 2048, 22 layers, 32 heads, 4 KV heads, "
        "intermediate 5632, vocab 32000). Measured here:", "",
        *[f"  - {c}" for c in cks], "",
        "- optimum: `optimum-cli export onnx --model DIR --task TASK OUT`, its defaults: "
        "it validates the files in onnxruntime against PyTorch (main_export's do_validation, "
        "in-process on CPU), logging the checks at INFO, which the command does not show; a "
        "difference beyond atol is a WARNING (`atol` above), other validation errors raise; "
        "exit status 0 without that warning counts as `pass`."
        + (" Its weight deduplication check was skipped (it needs accelerate, which the "
           "optimum environment does not install): a user with accelerate pays it too."
           if dedup else ""),
        "- pt2onnx: `.venv/bin/pt2onnx-pretrained DIR --task TASK -o OUT/model.onnx`, its "
        "defaults (verification in onnxruntime against PyTorch included), once with "
        "`--cache-dir` a fresh empty folder each run (the program cache cold: what a first "
        "export does, the cache entry written), once with `--no-cache`. Its stages are "
        "parsed from what it prints.",
        "- Each command a fresh process, as a user runs it; wall time = time.perf_counter "
        f"around it; peak RSS and CPU seconds by {' / '.join(rss_by)} of that process. "
        "Rounds interleave optimum, cold, --no-cache; each output folder is fresh and removed "
        "after its run; the checkpoint files are in the page cache (just built or read by "
        "the previous run). Medians of the rounds.", ""]


def breakdown(ph: dict) -> list[tuple[str, float]]:
    """Non-overlapping seconds of the phases driver's run (they add up to its wall time)."""
    P = ph["phases"]

    def ex(label, imports=False):
        e = next(v for k, v in P.items() if k.startswith(label))
        return e["exclusive_s"] - (0 if imports else e["imports_in_exclusive_s"])

    def calls(label):
        return next(v for k, v in P.items() if k.startswith(label))["calls"]

    imports = ph["imports_outside_phases_s"] + sum(v["imports_in_exclusive_s"]
                                                   for v in P.values())
    fwd = ph.get("forward_calls", {})
    past_eager = sum(n for k, n in fwd.items() if "hf._past" in k)
    rows = [
        ("interpreter start and exit (wall - the driver's own time)",
         ph["wall_s"] - ph["since_start_s"]),
        ("imports, all of them (outermost _find_and_load, wherever they happen)", imports),
        (f"hf.prepare + hf._config x{calls('hf._config')} (config.json, AutoConfig), "
         "without imports", ex("hf.prepare") + ex("hf._config")),
        ("hf.empty_pretrained: the model built without weights, without imports",
         ex("hf.empty_pretrained") + ex("hf.checkpoint_weights")),
        (f"hf._past: {calls('hf._past')} prefill runs making example caches "
         f"({past_eager} through the model's forward), without imports", ex("hf._past")),
        ("capture: torch.export.export, without imports", ex("torch.export.export")),
        ("pt2onnx export() after the capture (serialize, convert, write), without imports",
         ex("pt2onnx export()")),
        ("verification: hf.load_pretrained (from_pretrained with weights)",
         ex("hf.load_pretrained")),
        ("verification: onnxruntime InferenceSession()", ex("onnxruntime InferenceSession")),
        (f"verification: {calls('compare_or_raise')} comparisons (eager forward + "
         "onnxruntime run)", ex("compare_or_raise") + ex("onnxruntime run")),
        ("program cache entry (hf._store_programs)", ex("hf._store_programs")),
    ]
    rest = ph["since_start_s"] - sum(v for _, v in rows[1:])
    rows.append(("the rest (argparse, inputs, glue, printing)", rest))
    return [(k, round(v, 3)) for k, v in rows]


def profile_section(p: dict) -> list[str]:
    ck, plain = p["checkpoint"], p["plain"]
    lines = ["## Profile: where the tiny llama's pt2onnx command goes (`--profile`)", "",
             f"{ck['name']} ({ck['class']}, {ck['parameters']:,} parameters, "
             f"{ck['bytes'] / 1e6:.1f} MB): `python -m pt2onnx._pretrained_command CKPT --task "
             f"text-generation-with-past -o OUT/model.onnx --no-cache` with .venv's python; "
             f"{p['date']}, pt2onnx at {p['commit']}, load average "
             f"{p['loadavg_at_start']:.2f} at the start, {p.get('loadavg_at_end', 0):.2f} at "
             "the end" + (" (busy: " + "; ".join(f"`{x}`" for x in p["busy_at_start"]) + ")"
                          if p.get("busy_at_start") else "")
             + (f". Note: {p['note']}" if p.get("note") else "") + ".", "",
             f"Plain run: {_f(plain['wall_s'])} s wall, peak RSS "
             f"{_f(plain.get('peak_rss_mb'), '.0f')} MB; the stages it prints: "
             + ", ".join(f"{k} {v:.3f}" for k, v in plain.get("stages", {}).items())
             + (f"; verified at {plain['verified']['sizes']}" if plain.get("verified") else "")
             + ".", ""]
    ph = p.get("phases", {})
    if "phases" in ph:
        lines += [f"Breakdown of one more run, the command's main() in a driver that times its "
                  f"functions and charges every import to the function running it "
                  f"(`--phases-child`; {ph['wall_s']:.2f} s wall, stages printed: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in (ph.get("stages") or {}).items())
                  + "):", "", "| where | s | share |", "|---|---|---|"]
        for k, v in breakdown(ph):
            lines.append(f"| {k} | {v:.2f} | {100 * v / ph['wall_s']:.0f}% |")
        lines += ["", "Imports charged to each function (s): "
                  + ", ".join(f"{k.split(' (')[0]} {v['imports_in_exclusive_s']:.2f}"
                              for k, v in ph["phases"].items()
                              if v["imports_in_exclusive_s"] >= 0.01)
                  + f", top level (pt2onnx.hf's import: torch, ...) "
                  f"{ph['imports_outside_phases_s']:.2f}. Calls and seconds each: "
                  + "; ".join(f"{k.split(' (')[0]} " + ", ".join(f"{t:.3f}" for t in v["each_s"])
                              for k, v in ph["phases"].items()
                              if v["calls"] > 1 and v["each_s"])
                  + ". The model's forward ran: "
                  + ", ".join(f"{n}x {k}" for k, n in ph.get("forward_calls", {}).items())
                  + f". {ph['modules_loaded']} modules loaded; the cyclic garbage collector "
                  f"ran {ph['gc_during_run']['collections']} times during main() "
                  f"({ph['gc_during_run']['full_collections']} full), "
                  f"{ph['gc_during_run']['seconds']:.2f} s in all; "
                  f"{ph['gc_during_run']['objects_tracked_at_end']:,} objects tracked at the "
                  "end.", ""]
    it = p["importtime"]
    lines += [f"`python -X importtime` (another run): {it['total_s']:.2f} s in imports, "
              f"{it['modules']} modules. Self time by package (s): "
              + ", ".join(f"{k} {v:.2f}" for k, v in it["self_by_package_s"].items()) + ".",
              "", "The costliest imports started from running code (cumulative s): "
              + ", ".join(f"`{e['module']}` {e['cumulative_s']:.2f}" for e in it["top_level"])
              + ".", "", "What brings these in (the costliest import of each, cumulative s, "
              "and its importers up to running code):", ""]
    lines += [f"- `{m}` {e['cumulative_s']:.2f}: " + " <- ".join(f"`{c}`" for c in e["chain"][1:])
              for m, e in it.get("module_chains", {}).items()]
    cp = p["cprofile"]
    lines += ["", f"cProfile (another run, {p['cprofile_wall_s']:.2f} s wall under it; its "
              "overhead inflates Python-heavy parts), cumulative s (calls):", ""]
    lines += [f"- {k.strip()}: {v['cumulative_s']:.2f} ({v['calls']})"
              for k, v in cp.get("steps", {}).items()]
    lines += ["", "Floors (a fresh `.venv/bin/python -c ...`, median s):", ""]
    lines += [f"- `{k}`: {v:.2f}" for k, v in p["floors_s"].items()]
    fl = p["floors_s"]
    a = fl.get("the command's imports, then a normal exit")
    b = fl.get("the same imports, then os._exit (no interpreter teardown)")
    if a is not None and b is not None:
        lines += ["", f"Interpreter teardown after these imports (normal exit - os._exit): "
                  f"{a - b:.2f} s."]
    lines.append("")
    return lines


# ---- main ----------------------------------------------------------------------------------

def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--phases-child":
        _phases_child(sys.argv[2], sys.argv[3:])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(*sys.argv[2:5])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    ap.add_argument("--runs", type=int, default=None,
                    help="rounds per checkpoint (default: 3 for tiny and 110m, 1 for 1b)")
    ap.add_argument("--report", action="store_true", help="only rewrite the .md from the .json")
    ap.add_argument("--dry-run", action="store_true",
                    help="build the configs and print the parameter counts (no weights saved, "
                         "nothing exported)")
    ap.add_argument("--profile", action="store_true",
                    help="profile the tiny llama's pt2onnx command (importtime, cProfile) into "
                         "the .json / .md")
    ap.add_argument("--floor-runs", type=int, default=3, help="runs of each import floor")
    ap.add_argument("--data", default=DATA, help=f"checkpoints and scratch (default {DATA})")
    ap.add_argument("--pt2onnx", default=os.path.join(ROOT, ".venv", "bin", "pt2onnx-pretrained"),
                    help="the pt2onnx-pretrained command (default .venv's)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per command")
    ap.add_argument("--note", default="", help="recorded with the results: what else ran")
    a = ap.parse_args()
    if a.report:
        report()
        return 0
    tools = tools_paths(a)
    if a.dry_run:
        dry_run(a.sizes, tools)
        return 0
    os.makedirs(a.data, exist_ok=True)
    if a.profile:
        p = profile(tools, a)
        data = json.load(open(RESULTS)) if os.path.exists(RESULTS) else {"sizes": {}}
        data["profile"] = p
        with open(RESULTS, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        report()
        print(f"wrote {RESULTS} (profile) and {REPORT}")
        return 0
    for size in a.sizes:
        runs = a.runs or DEFAULT_RUNS[size]
        save({size: measure_size(size, runs, tools, a)})
        report()
    print(f"wrote {RESULTS} and {REPORT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
