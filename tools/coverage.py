"""Generates docs/coverage.md (and docs/coverage.json): every ATen target
pt2onnx converts with its opset range, and the OpInfo pass rates per
configuration and per op, beside torch.onnx.export(dynamo=True) on the same
samples in the same run (opset 18, float32, torch.export.export's graph).

  python tools/coverage.py [-j 2] [--ops a,b,c] [--no-torch-onnx]
  python tools/coverage.py --targets-only   (the targets table alone, from the current build)

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


def write(results, out_md, out_json):
    import opinfo_harness as h
    import pt2onnx

    expected = h.load_expected()
    summary = {f"{cfg}/{ex}": rates(rows) for (cfg, ex), rows in results.items()}
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with open(out_json, "w") as fh:
        json.dump({"date": date, "summary": summary}, fh, indent=1, sort_keys=True)

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
    a = ap.parse_args()
    if a.targets_only:
        refresh_targets(a.out)
        print("refreshed the targets table of", a.out)
        return
    import opinfo_harness as h

    names = [h.op_id(o) for o in h.op_db()]
    if a.ops:
        want = set(a.ops.split(","))
        names = [n for n in names if n in want]
    results = run_all(names, a.j, not a.no_torch_onnx)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    write(results, a.out, os.path.splitext(a.out)[0] + ".json")
    print("wrote", a.out)


if __name__ == "__main__":
    main()
