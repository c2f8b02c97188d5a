"""Generates docs/coverage.md (and docs/coverage.json): every ATen target
pt2onnx converts with its opset range, and the OpInfo pass rates per
configuration and per op, beside torch.onnx.export(dynamo=True) on the same
samples in the same run (opset 18, float32, torch.export.export's graph).

  python tools/coverage.py [-j 2] [--ops a,b,c] [--no-torch-onnx]
  python tools/coverage.py --targets-only   (the targets table alone, from the current build)
  python tools/coverage.py --moduleinfo-only [-j 2]   (the ModuleInfo section alone)

The ModuleInfo section: PyTorch's ModuleInfo samples (module_db, every nn
module class and sample, float32, eval mode; tests/python/moduleinfo_harness.py)
through pt2onnx and torch.onnx.export(dynamo=True), judged the same way.

`make coverage` runs it (long: tens of minutes on 2 cores)."""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import platform
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from opinfo_run import _work  # noqa: E402
import moduleinfo_run  # noqa: E402

# (config name, dtype, opset, form, exporter)
RUNS = [
    ("o18-float32-train", "float32", 18, "train", "pt2onnx"),
    ("o18-float32-train", "float32", 18, "train", "torch.onnx"),
    ("o18-float32-core", "float32", 18, "core", "pt2onnx"),
    ("o18-float32-inplace", "float32", 18, "inplace", "pt2onnx"),
    ("o13-float32-train", "float32", 13, "train", "pt2onnx"),
    ("o17-float32-train", "float32", 17, "train", "pt2onnx"),
    ("o21-float32-train", "float32", 21, "train", "pt2onnx"),
    ("o23-float32-train", "float32", 23, "train", "pt2onnx"),
    ("o18-int32-train", "int32", 18, "train", "pt2onnx"),
    ("o18-int64-train", "int64", 18, "train", "pt2onnx"),
    ("o18-bool-train", "bool", 18, "train", "pt2onnx"),
    ("o18-float16-train", "float16", 18, "train", "pt2onnx"),
    ("o18-bfloat16-train", "bfloat16", 18, "train", "pt2onnx"),
]


def rates(rows):
    cap = ok = ops = ops_ok = 0
    for r in rows:
        c = [s for s in r["samples"] if s["outcome"] != "capture"]
        cap += len(c)
        ok += sum(s["outcome"] == "pass" for s in c)
        if c:
            ops += 1
            ops_ok += all(s["outcome"] == "pass" for s in c)
    return dict(capturable=cap, passed=ok, ops=ops, ops_passed=ops_ok,
                sample_rate=ok / cap if cap else 0.0, op_rate=ops_ok / ops if ops else 0.0)


def run_all(names, j, with_torch_onnx):
    results = {}
    ctx = mp.get_context("forkserver")
    with ctx.Pool(j, maxtasksperchild=40) as pool:
        for cfg, dtype, opset, form, exporter in RUNS:
            if exporter == "torch.onnx" and not with_torch_onnx:
                continue
            t0 = time.time()
            jobs = [(n, dtype, opset, exporter, form == "core", form == "inplace") for n in names]
            rows = [r for r in pool.imap_unordered(_work, jobs) if r is not None]
            rows.sort(key=lambda r: r["op"])
            results[(cfg, exporter)] = rows
            rt = rates(rows)
            print(f"{cfg:22s} {exporter:10s} samples {rt['passed']}/{rt['capturable']} "
                  f"ops {rt['ops_passed']}/{rt['ops']}  ({time.time() - t0:.0f} s)", flush=True)
    return results


def op_reason(sample_rows, expected, op, dtype, opset, form):
    import opinfo_harness as h

    e = h.expected_failure(expected, op, dtype, opset, form)
    if e:
        return e.reason
    fails = [s for s in sample_rows if s["outcome"] not in ("pass", "capture")]
    if not fails:
        return ""
    f = fails[0]
    if f["missing"]:
        return "missing: " + ", ".join(t.replace("torch.ops.aten.", "") for t in f["missing"])
    return f"{f['outcome']}: {f['detail'].splitlines()[0][:120]}"


TARGETS_HEADING = "## Converted ATen targets and their opsets\n"
MODULEINFO_HEADING = "## ModuleInfo (whole nn modules)\n"
MODULEINFO_EXPORTERS = ("pt2onnx", "torch.onnx")


def module_rates(rows):
    cap = ok = mods = mods_ok = 0
    for r in rows:
        c = [s for s in r["samples"] if s["outcome"] not in ("capture", "no-ort-kernel")]
        cap += len(c)
        ok += sum(s["outcome"] == "pass" for s in c)
        if c:
            mods += 1
            mods_ok += all(s["outcome"] == "pass" for s in c)
    return dict(samples=sum(len(r["samples"]) for r in rows), capturable=cap, passed=ok,
                modules=mods, modules_passed=mods_ok, sample_rate=ok / cap if cap else 0.0,
                module_rate=mods_ok / mods if mods else 0.0)


def run_moduleinfo(j, with_torch_onnx=True):
    import moduleinfo_harness as mh

    names = [mh.module_id(m) for m in mh.module_db()]
    out = {}
    for ex in MODULEINFO_EXPORTERS:
        if ex == "torch.onnx" and not with_torch_onnx:
            continue
        t0 = time.time()
        out[ex] = moduleinfo_run.run(names, "float32", ex, j)
        r = module_rates(out[ex])
        print(f"ModuleInfo float32 {ex:10s} samples {r['passed']}/{r['capturable']} modules "
              f"{r['modules_passed']}/{r['modules']}  ({time.time() - t0:.0f} s)", flush=True)
    return out


def _first_failure(samples):
    for i, s in enumerate(samples):
        if s["outcome"] not in ("pass", "capture", "no-ort-kernel"):
            return f"sample {i}: {s['outcome']}: {s['detail'].splitlines()[0][:140]}"
    return ""


def moduleinfo_section(mres, date):
    """The ModuleInfo section's lines (rates, then per module class)."""
    import moduleinfo_harness as mh

    expected = mh.load_expected()
    L = [MODULEINFO_HEADING]
    L.append(f"Run {date} (`tools/coverage.py`; `--moduleinfo-only` reruns this section alone). "
             "Judge: PyTorch's ModuleInfo database "
             "(`torch.testing._internal.common_modules.module_db`: every nn module class and "
             "every sample of its `module_inputs_func`, the samples torch's own module tests use), "
             "float32, eval mode, the module built from the sample's constructor arguments, "
             "exported with the sample's forward args/kwargs at opset 18, run in onnxruntime and "
             "compared with eager PyTorch (atol/rtol 1e-4, outputs' count, dtypes and shapes "
             "exact) on the sample's inputs and again on the same-shape inputs with each "
             "tensor's elements permuted. Samples torch.export cannot capture are not counted. "
             "torch.onnx is `torch.onnx.export(module, args, kwargs=..., dynamo=True)` on the "
             "same samples in the same run. `make test` runs the pt2onnx half "
             "(tests/python/test_moduleinfo.py, expected failures in "
             "tests/python/moduleinfo_expected.txt).\n")
    L.append("| exporter | samples passed | sample rate | module classes passing all samples "
             "| class rate | not capturable |")
    L.append("|---|---|---|---|---|---|")
    for ex, rows in mres.items():
        r = module_rates(rows)
        L.append(f"| {ex} | {r['passed']}/{r['capturable']} | {r['sample_rate']:.1%} | "
                 f"{r['modules_passed']}/{r['modules']} | {r['module_rate']:.1%} | "
                 f"{r['samples'] - r['capturable']} |")
    base = {r["module"]: r for r in mres.get("pt2onnx", [])}
    other = {r["module"]: r for r in mres.get("torch.onnx", [])}

    def frac(row):
        if row is None:
            return "-"
        c = [s for s in row["samples"] if s["outcome"] not in ("capture", "no-ort-kernel")]
        if not c:
            return "not capturable"
        return f"{sum(s['outcome'] == 'pass' for s in c)}/{len(c)}"

    L.append("\n| module class | pt2onnx | torch.onnx | why pt2onnx fails | why torch.onnx fails |")
    L.append("|---|---|---|---|---|")
    for name in sorted(base):
        row = base[name]
        why = _first_failure(row["samples"])
        if why:
            reasons = sorted({e.reason for i, s in enumerate(row["samples"])
                              if s["outcome"] not in ("pass", "capture")
                              for e in [mh.expected_failure(expected, name, "float32", i)] if e})
            if reasons:
                why = "expected: " + "; ".join(reasons)
        cap = [s for s in row["samples"] if s["outcome"] == "capture"]
        if cap and not why:
            why = f"({len(cap)} not capturable: {cap[0]['detail'].splitlines()[0][:100]})"
        o = other.get(name)
        owhy = _first_failure(o["samples"]) if o else ""
        L.append(f"| `{name}` | {frac(row)} | {frac(o)} | {why.replace('|', '/')} | "
                 f"{owhy.replace('|', '/')} |")
    L.append("")
    return L


def refresh_moduleinfo(out_md, out_json, j, with_torch_onnx=True):
    """Reruns only the ModuleInfo section of an existing coverage.md (and its
    numbers in coverage.json)."""
    mres = run_moduleinfo(j, with_torch_onnx)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with open(out_md) as fh:
        text = fh.read()
    if MODULEINFO_HEADING in text:
        head, rest = text.split(MODULEINFO_HEADING, 1)
        tail = TARGETS_HEADING + rest.split(TARGETS_HEADING, 1)[1]
    else:
        head, rest = text.split(TARGETS_HEADING, 1)
        tail = TARGETS_HEADING + rest
    with open(out_md, "w") as fh:
        fh.write(head + "\n".join(moduleinfo_section(mres, date)) + "\n" + tail)
    data = {}
    if os.path.exists(out_json):
        with open(out_json) as fh:
            data = json.load(fh)
    data["moduleinfo"] = {f"float32/{ex}": module_rates(rows) for ex, rows in mres.items()}
    data["moduleinfo_date"] = date
    with open(out_json, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)


def targets_table(refreshed=None):
    """The table of every target pt2onnx converts, from the current build."""
    import pt2onnx

    L = [TARGETS_HEADING]
    if refreshed:
        L.append(f"(This table refreshed on {refreshed} with `tools/coverage.py --targets-only`; "
                 "the pass rates above are from the run dated at the top.)\n")
    L.append("In-place overloads (`relu_`, `add_`, `index_put_`, ...) convert through their "
             "functional form and are not listed separately.\n")
    ranges = {}
    for opset in range(pt2onnx.MIN_OPSET, pt2onnx.MAX_OPSET + 1):
        for t in pt2onnx.supported_targets(opset):
            ranges.setdefault(t, []).append(opset)
    L.append("| target | opsets |")
    L.append("|---|---|")
    for t in sorted(ranges):
        o = ranges[t]
        L.append(f"| `{t.replace('torch.ops.', '')}` | {o[0]}–{o[-1]} |")
    return L


def refresh_targets(out_md):
    """Replaces only the targets table of an existing coverage.md (no OpInfo
    run: seconds instead of tens of minutes)."""
    with open(out_md) as fh:
        head = fh.read().split(TARGETS_HEADING)[0]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with open(out_md, "w") as fh:
        fh.write(head + "\n".join(targets_table(refreshed=date)) + "\n")


def write(results, out_md, out_json, mres=None):
    import opinfo_harness as h
    import pt2onnx

    expected = h.load_expected()
    summary = {f"{cfg}/{ex}": rates(rows) for (cfg, ex), rows in results.items()}
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    data = {"date": date, "summary": summary}
    if mres:
        data["moduleinfo"] = {f"float32/{ex}": module_rates(rows) for ex, rows in mres.items()}
        data["moduleinfo_date"] = date
    with open(out_json, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)

    L = []
    L.append("# Operator coverage\n")
    L.append(f"Generated by `make coverage` (`tools/coverage.py`) on {date}, "
             f"{platform.machine()}, torch {__import__('torch').__version__}, "
             f"onnxruntime {__import__('onnxruntime').__version__}. "
             "Judge: PyTorch's OpInfo samples (first "
             f"{h.MAX_SAMPLES} per op), captured with `torch.export.export`, exported, run in "
             "onnxruntime and compared with eager PyTorch (float32 atol/rtol 1e-4, float16/bfloat16 "
             "1e-2 against float32 eager, ints and bools exact; uninitialized outputs, and outputs "
             "of graphs that draw random numbers and change with torch's seed: shape and dtype "
             "only; where onnxruntime has no kernel for an opset-22+ random op, onnx.reference "
             "runs the model). Samples torch.export cannot capture are not counted. "
             "torch.onnx is `torch.onnx.export(ep, dynamo=True)` on the same samples in the same "
             "run. The source of truth for targets is `pt2onnx.supported_targets(opset)`.\n")
    L.append("## Pass rates\n")
    L.append("| configuration | exporter | samples passed | sample rate | ops passing all samples | op rate |")
    L.append("|---|---|---|---|---|---|")
    for (cfg, ex), rows in results.items():
        r = rates(rows)
        L.append(f"| {cfg} | {ex} | {r['passed']}/{r['capturable']} | {r['sample_rate']:.1%} | "
                 f"{r['ops_passed']}/{r['ops']} | {r['op_rate']:.1%} |")
    L.append("\nForms: `train` = the graph `torch.export.export` returns (training IR, in-place "
             "ops kept); `core` = its `run_decompositions()` (core ATen) form; `inplace` = the "
             "op's in-place variant (`op.inplace_variant`).\n")

    base = {r["op"]: r for r in results.get(("o18-float32-train", "pt2onnx"), [])}
    tonnx = {r["op"]: r for r in results.get(("o18-float32-train", "torch.onnx"), [])}
    L.append("## Per op (opset 18, float32, training IR)\n")
    L.append("| OpInfo op | pt2onnx | torch.onnx | why pt2onnx fails |")
    L.append("|---|---|---|---|")

    def frac(row):
        if row is None:
            return "-"
        c = [s for s in row["samples"] if s["outcome"] != "capture"]
        if not c:
            return "not capturable"
        return f"{sum(s['outcome'] == 'pass' for s in c)}/{len(c)}"

    for op in sorted(base):
        row = base[op]
        L.append(f"| `{op}` | {frac(row)} | {frac(tonnx.get(op))} | "
                 f"{op_reason(row['samples'], expected, op, 'float32', 18, 'train')} |")

    L.append("\n## Failures in the other configurations\n")
    for (cfg, ex), rows in results.items():
        if ex != "pt2onnx" or cfg == "o18-float32-train":
            continue
        dtype, opset, form = cfg.split("-")[1], int(cfg.split("-")[0][1:]), cfg.split("-")[2]
        bad = [(r["op"], op_reason(r["samples"], expected, r["op"], dtype, opset, form))
               for r in rows
               if any(s["outcome"] not in ("pass", "capture") for s in r["samples"])]
        L.append(f"<details><summary>{cfg}: {len(bad)} ops failing</summary>\n")
        for op, why in bad:
            L.append(f"- `{op}`: {why}")
        L.append("\n</details>\n")

    if mres:
        L += moduleinfo_section(mres, date)
    L += targets_table()
    with open(out_md, "w") as fh:
        fh.write("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--ops", default="")
    ap.add_argument("--no-torch-onnx", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "coverage.md"))
    ap.add_argument("--targets-only", action="store_true",
                    help="refresh only the targets table of an existing coverage.md")
    ap.add_argument("--moduleinfo-only", action="store_true",
                    help="rerun only the ModuleInfo section of an existing coverage.md")
    ap.add_argument("--no-moduleinfo", action="store_true")
    a = ap.parse_args()
    if a.targets_only:
        refresh_targets(a.out)
        print("refreshed the targets table of", a.out)
        return
    if a.moduleinfo_only:
        refresh_moduleinfo(a.out, os.path.splitext(a.out)[0] + ".json", a.j,
                           not a.no_torch_onnx)
        print("refreshed the ModuleInfo section of", a.out)
        return
    import opinfo_harness as h

    names = [h.op_id(o) for o in h.op_db()]
    if a.ops:
        want = set(a.ops.split(","))
        names = [n for n in names if n in want]
    results = run_all(names, a.j, not a.no_torch_onnx)
    mres = None if a.no_moduleinfo or a.ops else run_moduleinfo(a.j, not a.no_torch_onnx)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    write(results, a.out, os.path.splitext(a.out)[0] + ".json", mres)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
