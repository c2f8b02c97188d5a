"""What the structural check costs (issue 34): the `check` stage (naming the
nodes, then checking ONNX's rules on the finished graph) against the C++
core's other stages (read, convert, optimize, write), on node_scaling.py's
transformer-like block looped 86 to 3,440 times (~2.5k to ~100k FX nodes), one
capture each, converted in memory and to a file, median of --runs.

    python bench/check_cost.py [--runs 5] [--loops 86,860,3440]

Writes bench/check_cost.md and bench/check_cost.json."""

import argparse
import datetime
import json
import os
import platform
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import pt2onnx  # noqa: E402
from node_scaling import INPUT_SHAPE, block_model  # noqa: E402

STAGES = ["read", "convert", "optimize", "check", "write"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--loops", default="86,860,3440")
    ap.add_argument("--out", default=os.path.join("build", "check_cost"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for loops in [int(x) for x in a.loops.split(",")]:
        ep = torch.export.export(block_model(loops), (torch.randn(*INPUT_SHAPE),))
        path = os.path.join(a.out, f"block{loops}.onnx")
        runs = []
        for _ in range(a.runs):
            r = pt2onnx.export(ep, None, path)
            runs.append(r)
        med = {s: statistics.median(r.timings[s] for r in runs) for s in STAGES}
        core = sum(med[s] for s in STAGES)
        rows.append({"loops": loops, "nodes": runs[0].nodes, "median_s": med,
                     "check_share_of_core": med["check"] / core,
                     "check_us_per_node": 1e6 * med["check"] / max(runs[0].nodes, 1)})
        print(rows[-1], flush=True)
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
           "torch": torch.__version__, "runs": a.runs, "rows": rows}
    with open(os.path.join(HERE, "check_cost.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    lines = [
        "# The structural check's cost",
        "",
        f"`python bench/check_cost.py --runs {a.runs}`, {res['date']}, {res['machine']}, torch "
        f"{res['torch']}. One capture of node_scaling.py's block per size, converted "
        f"{a.runs} times with pt2onnx.export to a file; medians of the stage timings "
        "(ExportResult.timings). `check` = name_nodes + check_structure on the finished graph.",
        "",
        "| loops | ONNX nodes | read s | convert s | optimize s | check s | write s | check / core "
        "| check us / node |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        m = r["median_s"]
        lines.append(f"| {r['loops']} | {r['nodes']} | {m['read']:.4f} | {m['convert']:.4f} | "
                     f"{m['optimize']:.4f} | {m['check']:.4f} | {m['write']:.4f} | "
                     f"{100 * r['check_share_of_core']:.1f}% | {r['check_us_per_node']:.2f} |")
    with open(os.path.join(HERE, "check_cost.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
