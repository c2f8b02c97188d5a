"""How the C++ core scales with graph size (issue 18 item 7): read + convert + optimize (and write)
per node on generated `.pt2` archives of ~5k to ~200k nodes, with the `pt2onnx` command.

    python bench/node_scaling.py [--runs 3] [--sizes 5000,20000,...] [--profile] [--quick]

Archives (cached in build/bench-node-data, or $NODE_SCALING_DATA; kept for reruns):
  * one block model is exported once with torch.export (static shapes): a transformer-like block
    (layer_norm, linear, view/permute/unbind, matmul, softmax, transpose/reshape, add, gelu, relu,
    mean, pow, rsqrt, mul) looped BLOCK_LOOPS times with shared weights, ~2.5k FX nodes;
  * bigger archives repeat its nodes k times inside the archive's program JSON: copy c renames
    every value (and node) it produces with a suffix, reads the previous copy's output where the
    block read the user input, and the graph output / signature user_output name the last copy's
    output; parameters stay shared and every other zip entry is copied as it is (stored, 64-byte
    aligned like torch's writer). So the archive computes block^k(x): the smallest size (k=2) is
    checked against calling the exported block k times, through torch.export.load and through
    onnxruntime on the converted file;
  * a 1-loop archive (~29 nodes) gives the process's base (code, libraries, the mapped input):
    memory per node is (peak RSS - tiny's peak RSS) / nodes, and least-squares slopes.

Measurement: every archive converted once to warm the page cache, then --runs rounds over all
archives, each `/usr/bin/time -v pt2onnx ARCHIVE -o OUT.onnx -v` (stage timings from -v, peak
RSS from GNU time); medians. Memory by stage: one extra run per archive under gdb with
breakpoints at the entries of parse_program, convert_graph, run_default_passes, write_model and
exit, reading /proc status (VmHWM, VmRSS, RssAnon, RssFile) at each.
--profile: `perf record` of the largest archive (self time by symbol, and by stage through DWARF
call graphs) and heaptrack on the ~20k archive (peak consumers, most allocations).
Writes bench/node_scaling.json and bench/node_scaling.md (text below the notes marker in the .md
is kept across runs)."""

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import struct
import subprocess
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLI = os.environ.get("PT2ONNX_CLI", os.path.join(ROOT, "build", "cpp", "pt2onnx"))
DATA = os.environ.get("NODE_SCALING_DATA", os.path.join(ROOT, "build", "bench-node-data"))
SIZES = [5000, 20000, 50000, 100000, 200000]
BLOCK_LOOPS = 86  # 29 FX nodes per loop: 2494 nodes
INPUT_SHAPE = (2, 8, 32)
STAGES = ["open", "read", "convert", "optimize", "write"]
CORE = ["read", "convert", "optimize"]
NOTES_MARKER = "<!-- notes below are kept by node_scaling.py -->"
# Stage boundaries seen by gdb: the breakpoint hit when the stage in front of it has ended.
BOUNDARIES = [("pt2onnx::schema::parse_program", "open"), ("pt2onnx::convert_graph", "read"),
              ("pt2onnx::run_default_passes", "convert"), ("pt2onnx::write_model", "optimize"),
              ("exit", "write")]


# ---------------------------------------------------------------- archives

def block_model(loops):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        """Pre-norm attention + MLP, then an RMS norm that keeps block^k(x) bounded."""

        def __init__(self, d=32, heads=4):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
            self.g = nn.Parameter(torch.rand(d) + 0.5)

        def forward(self, x):
            b, s, d = x.shape
            h = self.ln1(x)
            q, k, v = self.qkv(h).view(b, s, 3, self.heads, d // self.heads).permute(
                2, 0, 3, 1, 4).unbind(0)
            a = torch.softmax(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, dim=-1) @ v
            x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
            h = self.ln2(x)
            x = x + self.down(F.gelu(self.up(h)) * torch.relu(h.mean(-1, keepdim=True) + 1))
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.g

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            for _ in range(loops):
                x = self.block(x)
            return x

    torch.manual_seed(0)
    return Stack().eval()


def export_block(path, loops):
    import torch

    t0 = time.perf_counter()
    ep = torch.export.export(block_model(loops), (torch.randn(*INPUT_SHAPE),))
    torch.export.save(ep, path)
    return time.perf_counter() - t0


def program_entry(z):
    names = [i.filename for i in z.infolist() if re.search(r"(^|/)models/[^/]+\.json$", i.filename)]
    if len(names) != 1:
        raise SystemExit(f"expected one program JSON in the archive, found {names}")
    return names[0]


def _rename(obj, mapping):
    """Renames, in place, the value names (TensorArgument {"name"}, SymInt {"as_name"}) that
    `mapping` holds, anywhere in a node argument or output."""
    if isinstance(obj, dict):
        for key in ("name", "as_name"):
            if isinstance(obj.get(key), str) and obj[key] in mapping:
                obj[key] = mapping[obj[key]]
        for key, v in obj.items():
            if isinstance(v, (dict, list)):
                _rename(v, mapping)
    elif isinstance(obj, list):
        for v in obj:
            _rename(v, mapping)


def _names(obj, out):
    if isinstance(obj, dict):
        for key in ("name", "as_name"):
            if isinstance(obj.get(key), str):
                out.add(obj[key])
        for v in obj.values():
            if isinstance(v, (dict, list)):
                _names(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _names(v, out)
    return out


def _aligned_extra(offset, filename, align=64):
    """A padding extra field that puts an entry's data on an `align` boundary (as torch's writer
    does), given the offset of its local header."""
    base = offset + 30 + len(filename.encode()) + 4
    pad = (-base) % align
    return struct.pack("<HH", 0xD935, pad) + b"\0" * pad


def replicate(src, dst, k):
    """Writes `dst`: the archive `src` with its graph's nodes repeated k times in a chain.
    Returns (fx_nodes, program_json_bytes)."""
    with zipfile.ZipFile(src) as z:
        entry = program_entry(z)
        prog = json.loads(z.read(entry))
        gm = prog["graph_module"]
        g, sig = gm["graph"], gm["signature"]
        for key in ("sym_int_values", "sym_bool_values", "sym_float_values", "custom_obj_values"):
            if g.get(key):
                raise SystemExit(f"the block has {key}: export it with static shapes")
        ins = [s["user_input"]["arg"] for s in sig["input_specs"] if "user_input" in s]
        outs = [s["user_output"]["arg"] for s in sig["output_specs"] if "user_output" in s]
        if len(ins) != 1 or len(outs) != 1 or len(sig["output_specs"]) != 1:
            raise SystemExit("the block must have one user input and one output, no mutation")
        x, y = ins[0]["as_tensor"]["name"], outs[0]["as_tensor"]["name"]
        produced = set()
        for n in g["nodes"]:
            _names(n["outputs"], produced)
        node_names = {n["name"] for n in g["nodes"]}
        existing = _names([g["inputs"], [n["inputs"] for n in g["nodes"]]], set(produced))
        existing |= node_names | set(g["tensor_values"])
        base = json.dumps(g["nodes"])
        pieces, last = [], y
        for c in range(k):
            nodes = json.loads(base)
            if c:
                mapping = {n: f"{n}__r{c}" for n in produced | node_names}
                clash = set(mapping.values()) & existing
                if clash:
                    raise SystemExit(f"renamed values clash with existing names: {sorted(clash)[:5]}")
                for n in nodes:
                    n["name"] = mapping[n["name"]]
                    _rename(n["outputs"], mapping)
                    for a in n["inputs"]:  # the argument, not the parameter's own "name"
                        _rename(a["arg"], {**mapping, x: last})
                for n in produced:
                    if n in g["tensor_values"]:
                        g["tensor_values"][mapping[n]] = g["tensor_values"][n]
                last = mapping[y]
            pieces.append(json.dumps(nodes)[1:-1])
        _rename(g["outputs"], {y: last})
        _rename(sig["output_specs"], {y: last})
        count = k * len(g["nodes"])
        g["nodes"] = "@NODES@"
        text = json.dumps(prog)
        head, tail = text.split('"@NODES@"')
        data = (head + "[" + ",".join(pieces) + "]" + tail).encode()
        tmp = dst + ".tmp"
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as out:
            for info in z.infolist():
                zi = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                zi.compress_type = zipfile.ZIP_STORED
                zi.extra = _aligned_extra(out.fp.tell(), info.filename)
                out.writestr(zi, data if info.filename == entry else z.read(info))
        os.replace(tmp, dst)
    return count, len(data)


def build_archives(sizes, log):
    """Exports the block (and the 1-loop tiny block) once, then writes one archive per size.
    Returns the manifest {name: {path, k, nodes, json_bytes}} (cached in DATA/manifest.json)."""
    os.makedirs(DATA, exist_ok=True)
    man_path = os.path.join(DATA, "manifest.json")
    man = json.load(open(man_path)) if os.path.exists(man_path) else {}
    import torch

    key = {"torch": torch.__version__, "loops": BLOCK_LOOPS, "input": list(INPUT_SHAPE)}
    if man.get("key") != key:
        man = {"key": key, "archives": {}}
    base = os.path.join(DATA, "block.pt2")
    tiny_src = os.path.join(DATA, "block_loop1.pt2")
    if "export_s" not in man or not os.path.exists(base):
        log(f"exporting the block ({BLOCK_LOOPS} loops) with torch.export ...")
        man["export_s"] = export_block(base, BLOCK_LOOPS)
        export_block(tiny_src, 1)
    with zipfile.ZipFile(base) as z:
        block_nodes = len(json.loads(z.read(program_entry(z)))["graph_module"]["graph"]["nodes"])
    man["block_nodes"] = block_nodes
    wanted = {"tiny": (tiny_src, 1)}
    for s in sizes:
        wanted[f"n{s}"] = (base, max(1, round(s / block_nodes)))
    for name, (src, k) in wanted.items():
        path = os.path.join(DATA, f"{name}.pt2")
        have = man["archives"].get(name)
        if have and have["k"] == k and os.path.exists(path):
            continue
        t0 = time.perf_counter()
        nodes, nbytes = replicate(src, path, k)
        man["archives"][name] = {"path": path, "k": k, "nodes": nodes, "json_bytes": nbytes,
                                 "file_bytes": os.path.getsize(path)}
        log(f"  {path}: {nodes} nodes (k={k}), {nbytes / 1e6:.1f} MB of JSON, "
            f"{time.perf_counter() - t0:.1f} s")
        json.dump(man, open(man_path, "w"), indent=1)
    json.dump(man, open(man_path, "w"), indent=1)
    return man


# ---------------------------------------------------------------- checks

def verify_numerics(man, name):
    """The replicated archive against the exported block applied k times: through torch's own
    loader, and through onnxruntime on pt2onnx's file."""
    import numpy as np
    import onnxruntime as ort
    import torch

    a = man["archives"][name]
    block = torch.export.load(os.path.join(DATA, "block.pt2")).module()
    torch.manual_seed(1)
    x = torch.randn(*INPUT_SHAPE)
    with torch.no_grad():
        ref = x
        for _ in range(a["k"]):
            ref = block(ref)
        loaded = torch.export.load(a["path"]).module()(x)
    onnx_path = os.path.join(DATA, "out", f"{name}_check.onnx")
    subprocess.run([CLI, a["path"], "-o", onnx_path, "-q"], check=True)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    r = ref.numpy()
    res = {"archive": name, "k": a["k"], "nodes": a["nodes"],
           "torch_load_max_abs": float((loaded - ref).abs().max()),
           "onnxruntime_max_abs": float(np.abs(got - r).max()),
           "ref_max_abs": float(np.abs(r).max()), "tolerance": 1e-4}
    res["ok"] = res["torch_load_max_abs"] == 0.0 and res["onnxruntime_max_abs"] <= 1e-4
    return res


# ---------------------------------------------------------------- measurement

def convert_timed(archive, out):
    """One conversion under GNU time -v: stage seconds, peak RSS (KB), wall, user, sys."""
    cmd = ["/usr/bin/time", "-v", CLI, archive, "-o", out, "-v"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    stages = {m[1]: float(m[2]) / 1e3
              for m in re.finditer(r"^\s+(\w+)\s+([\d.]+) ms$", r.stdout, re.M)}
    wrote = re.search(r"\((opset \d+), (\d+) nodes, (\d+) initializers", r.stdout)

    def tv(label):
        return re.search(rf"{re.escape(label)}: (\S+)", r.stderr).group(1)

    return {"stages": stages, "peak_rss_kb": int(tv("Maximum resident set size (kbytes)")),
            "wall": wall, "user": float(tv("User time (seconds)")),
            "sys": float(tv("System time (seconds)")),
            "onnx_nodes": int(wrote[2]), "initializers": int(wrote[3])}


def memory_by_stage(archive, out):
    """/proc status of the converting process at each stage boundary, via gdb breakpoints."""
    script = ["set pagination off", "set breakpoint pending on", "set confirm off"]
    for i, (sym, stage) in enumerate(BOUNDARIES):
        script += [f"break {sym}", "commands", "silent", f'printf "@@ {stage}\\n"',
                   "info proc status", "continue", "end"]
    script += ["run", "quit"]
    path = os.path.join(DATA, "boundaries.gdb")
    open(path, "w").write("\n".join(script) + "\n")
    r = subprocess.run(["gdb", "-q", "-batch", "-x", path, "--args", CLI, archive, "-o", out, "-q"],
                       capture_output=True, text=True)
    res, cur = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("@@ "):
            cur = line[3:].strip()
            if cur in res:  # a second hit (nested graphs): keep the first
                cur = None
            else:
                res[cur] = {}
        elif cur:
            m = re.match(r"(VmHWM|VmRSS|RssAnon|RssFile):\s+(\d+) kB", line)
            if m:
                res[cur][m[1]] = int(m[2])
    return res


def fit(xs, ys):
    """Least-squares slope and intercept, and R^2."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx
    icpt = my - slope * mx
    ss = sum((y - my) ** 2 for y in ys)
    r2 = 1 - sum((y - icpt - slope * x) ** 2 for x, y in zip(xs, ys)) / ss if ss else 1.0
    return slope, icpt, r2


# ---------------------------------------------------------------- profiles

_STR = "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >"


def short_symbol(sym, width=150):
    """A demangled C++ name, readable: std::string for basic_string, template arguments below
    the first level shown as <…>, then cut to `width`."""
    sym = sym.replace(_STR, "std::string").replace("std::__cxx11::", "std::")
    out, depth = [], 0
    for ch in sym:
        if ch == "<":
            depth += 1
            if depth == 2:
                out.append("<…")
        elif ch == ">":
            depth -= 1
            if depth == 1:
                out.append(">")
                continue
        if depth < 2:
            out.append(ch)
    s = "".join(out)
    return s if len(s) <= width else s[:width - 1] + "…"


def func_name(sym, width=100):
    """A function's name without its parameters, clones and ABI tags."""
    sym = sym.replace("(anonymous namespace)", "{anon}").replace("[abi:cxx11]", "")
    sym = re.sub(r"\s*\[clone [^\]]*\]", "", sym)
    depth = 0
    for i, ch in enumerate(sym):  # the parameter list: the first "(" outside template arguments
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0 and not sym.startswith("operator", max(0, i - 8)):
            sym = sym[:i]
            break
    return short_symbol(sym.strip(), width)


# Functions above the stages (their inclusive time is everything).
_WRAPPERS = {"main", "{anon}::run_convert", "pt2onnx::convert", "pt2onnx::{anon}::convert_opened",
             "pt2onnx::convert_program_from", "__libc_start_call_main", "__libc_start_main_impl",
             "_start"}
_ALLOC = re.compile(r"(operator new|operator delete|__GI___libc_(malloc|free)|_int_malloc|_int_free|"
                    r"malloc_consolidate|unlink_chunk|cfree|malloc$|^_?mi_\w+)")  # glibc, mimalloc


def perf_self(archive, out, top=15):
    """Self time by symbol, sampled without call chains (cheap and precise)."""
    data = os.path.join(DATA, "perf.data")
    res = {"archive": archive}
    subprocess.run(["perf", "record", "-q", "-F", "1999", "-o", data, CLI, archive, "-o", out,
                    "-q"], check=True, capture_output=True)
    rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort",
                          "dso,sym", "--percent-limit", "0.3"], capture_output=True,
                         text=True).stdout
    rows = []
    for line in rep.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)$", line)
        if m:
            rows.append({"self_pct": float(m[1]), "dso": m[2], "sym": m[4].strip()})
    res["self"] = rows[:top]
    samples = re.search(r"# Samples: (\S+)", rep)
    res["samples"] = samples[1] if samples else None
    dso = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort",
                          "dso"], capture_output=True, text=True).stdout
    res["by_dso"] = [{"pct": float(m[1]), "dso": m[2]} for m in
                     re.finditer(r"^\s+([\d.]+)%\s+(\S+)\s*$", dso, re.M)]
    os.remove(data)
    return res


def perf_inclusive(archive, out, freq):
    """Inclusive seconds per function (DWARF call graphs: the binary has no frame pointers).
    cpu-clock's event count is in nanoseconds."""
    data = os.path.join(DATA, "perf.data")
    subprocess.run(["perf", "record", "-q", "-F", str(freq), "--call-graph", "dwarf,16384", "-o",
                    data, CLI, archive, "-o", out, "-q"], check=True, capture_output=True)
    rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--children", "--sort", "sym",
                          "-g", "none", "--percent-limit", "0.2"], capture_output=True,
                         text=True).stdout
    os.remove(data)
    if os.path.exists(data + ".old"):
        os.remove(data + ".old")
    total = int(re.search(r"Event count \(approx.\): (\d+)", rep)[1]) / 1e9
    funcs = {}
    for line in rep.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+([\d.]+)%\s+\[(.)\]\s+(.*)$", line)
        if m:
            name = func_name(m[4].strip())
            inc, own = funcs.get(name, (0.0, 0.0))
            funcs[name] = (inc + float(m[1]) / 100 * total, own + float(m[2]) / 100 * total)
    return {"seconds": total, "freq": freq, "functions": funcs}


def instructions(archive, out):
    """Instructions executed per function, inclusive (valgrind callgrind): the work done,
    apart from how fast the memory system serves it."""
    data = os.path.join(DATA, "callgrind.out")
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={data}", CLI, archive,
                    "-o", out, "-q"], check=True, capture_output=True)
    rep = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", data],
                         capture_output=True, text=True).stdout
    os.remove(data)
    funcs, total = {}, None
    for line in rep.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$", line)
        if not m:
            continue
        n, rest = int(m[1].replace(",", "")), m[2]
        if rest.startswith("PROGRAM TOTALS"):
            total = n
            continue
        rest = re.sub(r" \[[^\[\]]*\]$", "", rest)  # the object file
        name = func_name(rest.split(":", 1)[1] if ":" in rest else rest)
        funcs[name] = max(funcs.get(name, 0), n)  # overloads: the larger
    funcs = {k: v for k, v in funcs.items() if v >= 0.002 * total}  # 0.2% and above
    return {"total": total, "functions": funcs}


def heap_profile(archive, out, nodes, top=15):
    """heaptrack: allocation calls and bytes live at the heap's peak, by stage, by pass (for
    optimize) and by innermost pt2onnx function. Run on the system-malloc build of the same
    sources: heaptrack sees malloc through LD_PRELOAD, which a linked mimalloc bypasses."""
    base = os.path.join(DATA, "heaptrack")
    for f in os.listdir(DATA):
        if f.startswith("heaptrack."):
            os.remove(os.path.join(DATA, f))
    subprocess.run(["heaptrack", "-o", base, system_malloc_cli(), archive, "-o", out, "-q"],
                   check=True, capture_output=True)
    (f,) = [os.path.join(DATA, f) for f in os.listdir(DATA) if f.startswith("heaptrack.")]
    txt = subprocess.run(["heaptrack_print", "-f", f, "-p", "0", "-a", "0", "-T", "0"],
                         capture_output=True, text=True).stdout
    res = {"archive": archive, "nodes": nodes}
    for label, key in (("peak heap memory consumption", "peak_heap"),
                       ("peak RSS \\(including heaptrack overhead\\)", "peak_rss"),
                       ("calls to allocation functions", "alloc_calls"),
                       ("temporary memory allocations", "temporary")):
        m = re.search(rf"{label}: (\S+)", txt)
        res[key] = m[1] if m else None
    stages = [("Pt2Archive::open", "open"), ("parse_program", "read"),
              ("convert_graph", "convert"), ("run_default_passes", "optimize"),
              ("write_model", "write")]
    for cost in ("allocations", "peak"):
        stacks = os.path.join(DATA, f"heaptrack_{cost}.txt")
        subprocess.run(["heaptrack_print", "-f", f, "-p", "0", "-a", "0", "-T", "0", "-F", stacks,
                        "--flamegraph-cost-type", cost], check=True, capture_output=True)
        by_stage, by_pass, by_leaf = {}, {}, {}
        for line in open(stacks):
            st, _, n = line.rstrip("\n").rpartition(" ")
            n = int(n)
            frames = [x for x in st.split(";") if x]
            stage = "other"
            for key, name in stages:
                if any(key in x for x in frames):
                    stage = name
            by_stage[stage] = by_stage.get(stage, 0) + n
            if stage == "optimize":
                i = max(j for j, x in enumerate(frames) if "run_default_passes" in x)
                passes = [x for x in frames[i + 1:] if x.startswith("pt2onnx::")
                          and "(anonymous namespace)::run_" not in x]
                name = func_name(passes[0], 80) if passes else "?"
                by_pass[name] = by_pass.get(name, 0) + n
            inner = [x for x in frames if x.startswith("pt2onnx::")]
            leaf = stage + ": " + (func_name(inner[-1], 90) if inner else frames[-1][:60])
            by_leaf[leaf] = by_leaf.get(leaf, 0) + n
        os.remove(stacks)

        def topn(d):
            return sorted(d.items(), key=lambda kv: -kv[1])[:top]

        res[cost] = {"by_stage": by_stage, "by_pass": topn(by_pass), "by_leaf": topn(by_leaf)}
    os.remove(f)
    return res


def system_malloc_cli():
    """The command built on the system's malloc (-DPT2ONNX_MIMALLOC=OFF, in build/cpp-sysmalloc),
    for the allocator comparison; built here when missing or older than the sources."""
    build = os.path.join(ROOT, "build", "cpp-sysmalloc")
    subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DPT2ONNX_MIMALLOC=OFF"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", build, "--target", "pt2onnx_cli", "-j",
                    str(os.cpu_count())], check=True, capture_output=True)
    return os.path.join(build, "pt2onnx")


def malloc_variants(archives, out, runs=2):
    """Stage times of the command as built (mimalloc linked, CMakeLists.txt) beside the same
    command on glibc's malloc, and glibc's malloc with its memory on transparent huge pages
    (fewer TLB misses), alternated: how much of the per-node cost is the allocator?"""
    sys_cli = system_malloc_cli()
    variants = {"mimalloc (as built)": (CLI, None), "glibc": (sys_cli, None),
                "glibc hugetlb=1": (sys_cli, "glibc.malloc.hugetlb=1")}
    res = {}
    for name, path in archives:
        res[name] = {v: [] for v in variants}
        for _ in range(runs):
            for v, (cli, tun) in variants.items():
                env = dict(os.environ)
                env.pop("GLIBC_TUNABLES", None)
                if tun:
                    env["GLIBC_TUNABLES"] = tun
                r = subprocess.run([cli, path, "-o", out, "-v"], capture_output=True, text=True,
                                   env=env, check=True)
                res[name][v].append({m[1]: float(m[2]) / 1e3 for m in re.finditer(
                    r"^\s+(\w+)\s+([\d.]+) ms$", r.stdout, re.M)})
        res[name] = {v: {s: statistics.median(x.get(s, 0) for x in rs) for s in STAGES}
                     for v, rs in res[name].items()}
    return res


# ---------------------------------------------------------------- report

def machine():
    cpu = re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M)
    mem = re.search(r"MemTotal:\s+(\d+)", open("/proc/meminfo").read())
    return {"host": platform.node(), "nproc": os.cpu_count(),
            "cpu": cpu[1] if cpu else platform.processor(), "mem_gb": int(mem[1]) / 1e6,
            "kernel": platform.release(), "python": platform.python_version(),
            "load_before": open("/proc/loadavg").read().split()[:3]}


def summarize(res):
    man = res["manifest"]["archives"]
    names = [n for n in res["order"] if n != "tiny"]
    tiny = res["median"]["tiny"]
    tiny_mem = res["memory"].get("tiny", {})
    rows = {}
    for n in names:
        N = man[n]["nodes"]
        med = res["median"][n]
        row = {"nodes": N, "k": man[n]["k"], "onnx_nodes": med["onnx_nodes"],
               "us": {s: 1e6 * med["stages"].get(s, 0.0) / N for s in STAGES}}
        row["us"]["core"] = sum(row["us"][s] for s in CORE)
        row["peak_rss_mb"] = med["peak_rss_kb"] / 1024
        row["kb_total"] = (med["peak_rss_kb"] - tiny["peak_rss_kb"]) / N
        mem, kb = res["memory"].get(n, {}), {}
        for s in STAGES:
            if s in mem and s in tiny_mem:
                for key, field in (("", "VmHWM"), ("_live", "VmRSS"), ("_anon", "RssAnon"),
                                   ("_file", "RssFile")):
                    kb[s + key] = (mem[s][field] - tiny_mem[s][field]) / N
        row["kb"] = kb
        row["json_bytes_per_node"] = man[n]["json_bytes"] / N
        rows[n] = row
    xs = [rows[n]["nodes"] for n in names]
    fits = {}
    if len(names) >= 2:
        for s in STAGES + ["core"]:
            fits["s_" + s] = fit(xs, [rows[n]["us"][s] * rows[n]["nodes"] / 1e6 for n in names])
        fits["kb_peak"] = fit(xs, [res["median"][n]["peak_rss_kb"] for n in names])
        for s in STAGES:
            if all(s in rows[n]["kb"] for n in names):
                fits["kb_" + s] = fit(xs, [res["memory"][n][s]["VmHWM"] for n in names])
                fits["kb_live_" + s] = fit(xs, [res["memory"][n][s]["VmRSS"] for n in names])
    return rows, fits


def write_report(res, path_md, path_json, cmdline):
    rows, fits = summarize(res)
    res["rows"], res["fits"] = rows, fits
    # Paths in the results relative to the checkout: no folder of the machine that ran it.
    text = json.dumps(res, indent=1).replace(json.dumps(ROOT + os.sep)[1:-1], "")
    with open(path_json, "w") as f:
        f.write(text)
    names = list(rows)
    first, last = names[0], names[-1]
    m = res["machine"]
    man = res["manifest"]
    notes = ""
    if os.path.exists(path_md):
        old = open(path_md).read()
        if NOTES_MARKER in old:
            notes = old.split(NOTES_MARKER, 1)[1]
    tiny = res["median"]["tiny"]
    L = ["# C++ core: cost per node against graph size (issue 18 item 7)", ""]
    if res.get("busy"):
        L += ["**Measured on a busy machine** (other benchmarks/tests were running): the "
              "timings are upper bounds.", ""]
    L += [f"Measured {res['date']} on {m['host']} ({m['nproc']} cores, {m['cpu']}, "
          f"{m['mem_gb']:.0f} GB, Linux {m['kernel']}; load average before the run "
          f"{' '.join(m['load_before'])}), by `{cmdline}` (`make bench-nodes`); the command "
          f"`{os.path.relpath(res['cli'], ROOT)}` (Release) built {res['cli_mtime']}, tree at "
          f"{res['commit']}.", "",
          "**Archives.** One block model exported once with torch.export (static shapes, "
          f"input {list(INPUT_SHAPE)}): a pre-norm attention + MLP block (layer_norm, linear, "
          "view/permute/unbind, matmul, softmax, transpose/reshape, add, mul, gelu, relu, mean, "
          f"pow, rsqrt) looped {BLOCK_LOOPS} times with shared weights = "
          f"{man['block_nodes']} FX nodes ({man['export_s']:.1f} s to export and save). The "
          "archives repeat these nodes k times in the program JSON, chained (copy c reads copy "
          "c-1's output; values renamed, parameters shared, other zip entries copied as they "
          "are), so an archive computes block^k(x). `nodes` = FX nodes in the archive. The JSON "
          "keeps torch's node metadata (stack traces, module stacks) as torch.export.save wrote "
          "it. A 1-loop archive (`tiny`, "
          f"{man['archives']['tiny']['nodes']} nodes) is the base: peak RSS "
          f"{tiny['peak_rss_kb'] / 1024:.1f} MB, stages "
          + ", ".join(f"{s} {1e3 * tiny['stages'].get(s, 0):.2f} ms" for s in STAGES) + ".",
          "",
          f"**Method.** Each archive converted once to warm the page cache, then {res['runs']} "
          "rounds over all archives of `/usr/bin/time -v build/cpp/pt2onnx ARCHIVE -o OUT.onnx "
          "-v` (stage timings printed by -v; peak RSS from GNU time); medians. µs/node = stage "
          "time / nodes. KB/node = (peak RSS − tiny's peak RSS) / nodes. Memory by stage: one "
          "more run per archive under gdb with breakpoints at the entries of parse_program (open "
          "done), convert_graph (read done), run_default_passes (convert done), write_model "
          "(optimize done) and exit (write done), reading /proc/PID/status at each; minus "
          "tiny's value at the same point, per node. Peak RSS is cumulative (VmHWM): the "
          "program JSON, the parsed program and the graph all stay alive until the write ends.",
          ""]
    v = res.get("verify")
    if v:
        L += [f"**Check.** `{v['archive']}` ({v['nodes']} nodes, k={v['k']}) against the exported "
              f"block called {v['k']} times on a random input: torch.export.load of the archive "
              f"max |diff| {v['torch_load_max_abs']:.1e}; onnxruntime on pt2onnx's file max "
              f"|diff| {v['onnxruntime_max_abs']:.1e} (outputs up to {v['ref_max_abs']:.1f}; "
              f"tolerance {v['tolerance']:g}): {'ok' if v['ok'] else 'FAILED'}. Every archive "
              "converted with exit code 0.", ""]
    f = fits
    L += ["## Time per node (µs; median stage time / nodes)", "",
          "| archive | nodes | ONNX nodes | open | read | convert | optimize | **read+convert+"
          "optimize** | write | wall (s) | peak RSS (MB) |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in names:
        r = rows[n]
        u = r["us"]
        L.append(f"| {n} | {r['nodes']} | {r['onnx_nodes']} | {u['open']:.3f} | {u['read']:.2f} "
                 f"| {u['convert']:.2f} | {u['optimize']:.2f} | **{u['core']:.2f}** | "
                 f"{u['write']:.2f} | {res['median'][n]['wall']:.2f} | {r['peak_rss_mb']:.1f} |")
    if f:
        L += ["| slope of a least-squares line (µs/node) | | | "
              + " | ".join(f"{1e6 * f['s_' + s][0]:.3f}" if s == "open" else
                           f"{1e6 * f['s_' + s][0]:.2f}" for s in ["open", "read", "convert",
                                                                    "optimize"])
              + f" | **{1e6 * f['s_core'][0]:.2f}** | {1e6 * f['s_write'][0]:.2f} | | |",
              "| R² of that line | | | "
              + " | ".join(f"{f['s_' + s][2]:.4f}" for s in ["open", "read", "convert",
                                                             "optimize"])
              + f" | {f['s_core'][2]:.4f} | {f['s_write'][2]:.4f} | | |"]
    L += [""]

    def kb(r, key):
        return f"{r['kb'][key]:.2f}" if key in r["kb"] else "-"

    L += ["## Peak memory per node (KB; minus tiny's, / nodes)", "",
          "| archive | nodes | program JSON (bytes/node) | peak through read | through convert | "
          "through optimize | through write (gdb) | whole run (GNU time) |",
          "|---|---|---|---|---|---|---|---|"]
    for n in names:
        r = rows[n]
        L.append(f"| {n} | {r['nodes']} | {r['json_bytes_per_node']:.0f} | {kb(r, 'read')} | "
                 f"{kb(r, 'convert')} | {kb(r, 'optimize')} | {kb(r, 'write')} | "
                 f"{r['kb_total']:.2f} |")
    if f:
        L += ["| slope of a least-squares line (KB/node) | | | "
              + " | ".join(f"{f['kb_' + s][0]:.2f}" if "kb_" + s in f else "-"
                           for s in ["read", "convert", "optimize", "write"])
              + f" | {f['kb_peak'][0]:.2f} |"]
    L += ["", "Memory held when each stage ends (VmRSS, KB/node: total = heap (RssAnon) + mapped "
          "file pages (RssFile, the archive's program JSON)); the read stage's transient = peak "
          "through read − held after read:", "",
          "| archive | after read | heap | file | read transient | after convert | heap | "
          "after optimize | heap | file |", "|---|---|---|---|---|---|---|---|---|---|"]
    for n in names:
        r = rows[n]
        tr = (f"{r['kb']['read'] - r['kb']['read_live']:.2f}" if "read" in r["kb"] else "-")
        L.append(f"| {n} | {kb(r, 'read_live')} | {kb(r, 'read_anon')} | {kb(r, 'read_file')} | "
                 f"{tr} | {kb(r, 'convert_live')} | {kb(r, 'convert_anon')} | "
                 f"{kb(r, 'optimize_live')} | {kb(r, 'optimize_anon')} | "
                 f"{kb(r, 'optimize_file')} |")
    rc, rl = rows[first], rows[last]
    core_ok = all(r["us"]["core"] <= 5 for r in rows.values())
    mem_ok = all(r["kb"].get("optimize", 1e9) <= 1 for r in rows.values())
    L += ["", "## Linearity and targets", "",
          f"Per-node cost at {rl['nodes']} nodes / at {rc['nodes']} nodes: "
          + ", ".join(f"{s} {rl['us'][s] / rc['us'][s]:.2f}x" for s in CORE + ["write"]
                      if rc["us"][s] > 0)
          + f", read+convert+optimize **{rl['us']['core'] / rc['us']['core']:.2f}x**; peak "
          f"memory per node {rl['kb_total'] / rc['kb_total']:.2f}x (whole run).", "",
          "Targets (issue 18 item 7): read+convert+optimize ≤ 5 µs/node: "
          f"**{'met' if core_ok else 'not met'}** (" + ", ".join(
              f"{r['us']['core']:.1f}" for r in rows.values()) + " µs/node); ≤ 1 KB of peak "
          f"memory per node through optimize: **{'met' if mem_ok else 'not met'}** (" + ", ".join(
              f"{r['kb'].get('optimize', float('nan')):.2f}" for r in rows.values())
          + " KB/node).", ""]
    mv = res.get("malloc")
    if mv:
        L += ["Allocator check: the command as built (mimalloc linked, CMakeLists.txt) beside "
              "the same sources built with `-DPT2ONNX_MIMALLOC=OFF` (glibc's malloc), and that "
              "build with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (malloc's memory on transparent "
              "huge pages: fewer TLB misses), medians of "
              f"{res.get('malloc_runs', 2)} alternated runs, µs/node:", "",
              "| archive | malloc | read | convert | optimize | read+convert+optimize | write |",
              "|---|---|---|---|---|---|---|"]
        for n, vs in mv.items():
            N = man["archives"][n]["nodes"]
            for vname, st in vs.items():
                u = {s: 1e6 * st[s] / N for s in STAGES}
                L.append(f"| {n} | {vname} | {u['read']:.2f} | {u['convert']:.2f} | "
                         f"{u['optimize']:.2f} | {sum(u[s] for s in CORE):.2f} | "
                         f"{u['write']:.2f} |")
        L += [""]
    p = res.get("perf")
    if p:
        L += [f"## Profile: `perf record` of {os.path.basename(p['archive'])}", "",
              f"Self time, top 15 ({p['samples']} samples at 1999 Hz, `perf report --no-children "
              "--sort dso,sym`; symbols shortened: std::string for basic_string, inner template "
              "arguments as <…>):", "", "| # | self % | object | symbol |", "|---|---|---|---|"]
        for i, r in enumerate(p["self"], 1):
            L.append(f"| {i} | {r['self_pct']:.2f} | {r['dso']} | `{short_symbol(r['sym'])}` |")
        L += ["", "By object: " + ", ".join(f"{d['dso']} {d['pct']:.1f}%" for d in p["by_dso"]
                                           if d["pct"] >= 0.5) + ".", ""]
    pi = res.get("perf_inclusive")
    if pi:
        (sn, sp), (bn, bp) = list(pi.items())[:2]
        ns, nb = man["archives"][sn]["nodes"], man["archives"][bn]["nodes"]

        def per_node(prof, name, n, idx=0):
            return 1e6 * prof["functions"].get(name, (0.0, 0.0))[idx] / n

        names_ = [k for k in bp["functions"] if k not in _WRAPPERS and (
            k.startswith("pt2onnx::") or _ALLOC.match(k))]
        names_.sort(key=lambda k: -bp["functions"][k][0])
        L += [f"Inclusive time by function, {sn} beside {bn} (`perf record --call-graph dwarf` "
              f"at {sp['freq']} and {bp['freq']} Hz, `perf report --children`; cpu-clock time "
              "of the samples in which the function is on the stack; µs/node; functions and "
              "the allocator over 0.2%; a ratio above 1 grows faster than the node count):", "",
              f"| function | {sn} µs/node | {bn} µs/node | ratio | {bn} self µs/node |",
              "|---|---|---|---|---|"]
        for k in names_[:32]:
            a, b = per_node(sp, k, ns), per_node(bp, k, nb)
            L.append(f"| `{k}` | {a:.2f} | {b:.2f} | {b / a if a else float('inf'):.2f} | "
                     f"{per_node(bp, k, nb, 1):.2f} |")
        L += [""]
    ins = res.get("instructions")
    if ins and len(ins) == 2:
        (sn, sp), (bn, bp) = ins.items()
        ns, nb = man["archives"][sn]["nodes"], man["archives"][bn]["nodes"]
        keys = [k for k in bp["functions"] if k not in _WRAPPERS and "below main" not in k and (
            k.startswith("pt2onnx::") or _ALLOC.match(k))]
        keys.sort(key=lambda k: -bp["functions"][k])
        stage_fn = {"read": "pt2onnx::schema::parse_program", "convert": "pt2onnx::convert_graph",
                    "optimize": "pt2onnx::run_default_passes", "write": "pt2onnx::write_model"}
        L += [f"Instructions executed per node (valgrind callgrind, inclusive), {sn} beside {bn}: "
              "the work itself, whatever the memory system does with it; whole program "
              f"{sp['total'] / ns:,.0f} and {bp['total'] / nb:,.0f} per node. By stage: "
              + ", ".join(f"{s} {sp['functions'].get(f, 0) / ns:,.0f} → "
                          f"{bp['functions'].get(f, 0) / nb:,.0f}" for s, f in stage_fn.items())
              + ".", "",
              f"| function | {sn} instructions/node | {bn} instructions/node | ratio |",
              "|---|---|---|---|"]
        for k in keys[:25]:
            a, b = sp["functions"].get(k, 0) / ns, bp["functions"][k] / nb
            L.append(f"| `{k}` | {a:,.0f} | {b:,.0f} | {b / a if a else float('inf'):.2f} |")
        L += [""]
    h = res.get("heap")
    if h:
        N = h["nodes"]
        L += [f"## Allocations: heaptrack on {os.path.basename(h['archive'])} ({N} nodes)", "",
              "(the system-malloc build of the same sources: heaptrack cannot see a linked "
              "mimalloc)", "",
              f"{h['alloc_calls']} calls to allocation functions "
              f"({int(h['alloc_calls']) / N:.0f} per node), {h['temporary']} temporary; peak heap "
              f"{h['peak_heap']} (heap bytes requested, touched or not), peak RSS under heaptrack "
              f"{h['peak_rss']}.", "",
              "Allocation calls per node by stage: " + ", ".join(
                  f"{s} {c / N:.1f}" for s, c in sorted(h["allocations"]["by_stage"].items(),
                                                        key=lambda kv: -kv[1])) + ".", "",
              "Heap bytes live at the heap's peak, by stage: " + ", ".join(
                  f"{s} {c / 1e6:.1f} MB" for s, c in sorted(h["peak"]["by_stage"].items(),
                                                            key=lambda kv: -kv[1]) if c) + ".",
              "", "| allocation calls / node | optimize pass |", "|---|---|"]
        L += [f"| {c / N:.2f} | `{name}` |" for name, c in h["allocations"]["by_pass"]
              if c / N >= 0.01]
        L += ["", "| allocation calls / node | stage: innermost pt2onnx function |", "|---|---|"]
        L += [f"| {c / N:.2f} | `{name}` |" for name, c in h["allocations"]["by_leaf"]]
        L += ["", "| heap at peak (MB) | stage: innermost pt2onnx function |", "|---|---|"]
        L += [f"| {c / 1e6:.1f} | `{name}` |" for name, c in h["peak"]["by_leaf"][:10]
              if c >= 5e4]
        L += [""]
    L += [NOTES_MARKER]
    open(path_md, "w").write("\n".join(L) + (notes if notes else "\n"))


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", action="store_true",
                    help="perf (largest archive), heaptrack (~20k) and the malloc check too")
    ap.add_argument("--quick", action="store_true", help="5k and 20k, one run "
                    "(writes to the data folder, not bench/)")
    ap.add_argument("--busy", action="store_true", help="mark the results as measured on a "
                    "busy machine")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json "
                    "of the last run (no measurement)")
    ap.add_argument("--out", help="folder for node_scaling.md/.json (default bench/; with "
                    "--quick the data folder)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.quick:
        sizes, args.runs = sizes[:2], 1

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    if args.report_only:
        dest = args.out or (DATA if args.quick else HERE)
        path_json = os.path.join(dest, "node_scaling.json")
        res = json.load(open(path_json))
        write_report(res, os.path.join(dest, "node_scaling.md"), path_json, res["cmdline"])
        return
    if not os.access(CLI, os.X_OK):
        raise SystemExit(f"no pt2onnx command at {CLI}: `make cpp` first")
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": machine(), "cli": CLI, "runs": args.runs, "busy": args.busy,
           "cli_mtime": datetime.datetime.fromtimestamp(
               os.path.getmtime(CLI), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    res["commit"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                   capture_output=True, text=True).stdout.strip()
    man = build_archives(sizes, log)
    res["manifest"] = man
    order = ["tiny"] + [f"n{s}" for s in sizes]
    res["order"] = order
    outdir = os.path.join(DATA, "out")
    os.makedirs(outdir, exist_ok=True)

    def out(n):
        return os.path.join(outdir, f"{n}.onnx")

    if not args.no_verify:
        log("checking numerics of the smallest archive ...")
        res["verify"] = verify_numerics(man, order[1])
        log(f"  {res['verify']}")
        if not res["verify"]["ok"]:
            raise SystemExit("the smallest archive does not compute block^k(x)")
    log("warm-up conversions ...")
    for n in order:
        convert_timed(man["archives"][n]["path"], out(n))
    runs = {n: [] for n in order}
    for i in range(args.runs):
        for n in order:
            r = convert_timed(man["archives"][n]["path"], out(n))
            runs[n].append(r)
            log(f"  round {i + 1} {n}: " + " ".join(
                f"{s} {1e3 * r['stages'].get(s, 0):.1f}" for s in STAGES)
                + f" ms, peak {r['peak_rss_kb'] / 1024:.1f} MB")
    res["runs_raw"] = runs
    res["median"] = {n: {"stages": {s: statistics.median(r["stages"].get(s, 0) for r in rs)
                                    for s in STAGES},
                         "peak_rss_kb": statistics.median(r["peak_rss_kb"] for r in rs),
                         "wall": statistics.median(r["wall"] for r in rs),
                         "onnx_nodes": rs[0]["onnx_nodes"],
                         "initializers": rs[0]["initializers"]} for n, rs in runs.items()}
    log("memory by stage (gdb) ...")
    res["memory"] = {n: memory_by_stage(man["archives"][n]["path"], out(n)) for n in order}
    if args.profile:
        small, big = order[1], order[-1]
        log(f"malloc check on {small}, {big} ...")
        res["malloc_runs"] = 2
        res["malloc"] = malloc_variants(
            [(n, man["archives"][n]["path"]) for n in (small, big)], out("malloc"), 2)
        log(f"perf on {big} ...")
        res["perf"] = perf_self(man["archives"][big]["path"], out(big))
        log(f"perf with call graphs on {small}, {big} ...")
        res["perf_inclusive"] = {
            n: perf_inclusive(man["archives"][n]["path"], out(n), freq)
            for n, freq in ((small, 4999), (big, 499))}
        mid = min(order[1:], key=lambda n: abs(man["archives"][n]["nodes"] - 20000))
        log(f"callgrind on {small}, {mid} ...")
        res["instructions"] = {n: instructions(man["archives"][n]["path"], out(n))
                               for n in dict.fromkeys((small, mid))}
        log(f"heaptrack on {mid} ...")
        res["heap"] = heap_profile(man["archives"][mid]["path"], out(mid),
                                   man["archives"][mid]["nodes"])
    dest = args.out or (DATA if args.quick else HERE)
    os.makedirs(dest, exist_ok=True)
    cmdline = "python bench/node_scaling.py " + " ".join(sys.argv[1:])
    res["cmdline"] = cmdline.strip()
    write_report(res, os.path.join(dest, "node_scaling.md"),
                 os.path.join(dest, "node_scaling.json"), cmdline.strip())
    log(f"wrote {os.path.join(dest, 'node_scaling.md')}")


if __name__ == "__main__":
    main()
