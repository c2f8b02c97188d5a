"""Runs PyTorch's ModuleInfo samples (module_db) through an exporter and
returns one row per module class: outcome per sample. Used by
tools/coverage.py (its ModuleInfo section).
  python tools/moduleinfo_run.py [--exporter pt2onnx|torch.onnx] [--dtype float32]
      [--modules nn.Linear,...] [-j 2] -o out.jsonl"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))

_DB = None


def work(job):
    import torch

    import opinfo_harness

    opinfo_harness.hide_torchvision_ops()
    import moduleinfo_harness as h

    torch.set_num_threads(1)
    name, dtype_name, exporter = job
    global _DB
    if _DB is None:
        _DB = {h.module_id(m): m for m in h.module_db()}
    info = _DB[name]
    dtype = h.DTYPES[dtype_name]
    if not h.supports(info, dtype):
        return None
    t0 = time.time()
    res = []
    for s in h.samples(info, dtype):
        r = h.run_sample(info, s, dtype, exporter=exporter)
        res.append({"outcome": r.outcome, "detail": r.detail, "second": r.second})
    return {"module": name, "dtype": dtype_name, "exporter": exporter, "samples": res,
            "seconds": round(time.time() - t0, 3)}


def run(names, dtype, exporter, j, pool=None):
    jobs = [(n, dtype, exporter) for n in names]
    if pool is not None:
        rows = [r for r in pool.imap_unordered(work, jobs) if r is not None]
    else:
        with mp.get_context("forkserver").Pool(j, maxtasksperchild=20) as p:
            rows = [r for r in p.imap_unordered(work, jobs) if r is not None]
    rows.sort(key=lambda r: r["module"])
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exporter", default="pt2onnx")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--modules", default="")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("-o", default="-")
    a = ap.parse_args()
    import moduleinfo_harness as h

    names = [h.module_id(m) for m in h.module_db()]
    if a.modules:
        names = [n for n in names if n in set(a.modules.split(","))]
    out = sys.stdout if a.o == "-" else open(a.o, "w")
    for r in run(names, a.dtype, a.exporter, a.j):
        out.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
