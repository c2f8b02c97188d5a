"""Runs the OpInfo samples of (a filter of) op_db through an exporter and
writes one JSON line per op: outcome per sample, missing targets.

  python tools/opinfo_run.py --opset 18 --dtype float32 [--decomposed] [--inplace]
      [--exporter pt2onnx|torch.onnx] [--ops abs,add,...] [-j 2] -o out.jsonl

Used to drive work (which targets are missing) and by tools/coverage.py."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))


_DB = None


def _work(job):
    import torch

    import opinfo_harness as h

    torch.set_num_threads(1)
    name, dtype_name, opset, exporter, decomposed, inplace = job
    global _DB
    if _DB is None:
        _DB = {h.op_id(o): o for o in h.op_db()}
    op = _DB[name]
    dtype = h.DTYPES[dtype_name]
    t0 = time.time()
    if inplace and op.inplace_variant is None:
        return None
    if not h.op_supports(op, dtype):
        return None
    res = []
    for s in h.samples(op, dtype):
        r = h.run_sample(op, s, dtype, opset, exporter=exporter, decomposed=decomposed,
                         inplace=inplace)
        res.append({"outcome": r.outcome, "detail": r.detail, "missing": r.missing})
    return {"op": name, "dtype": dtype_name, "opset": opset, "exporter": exporter,
            "decomposed": decomposed, "inplace": inplace, "samples": res,
            "seconds": round(time.time() - t0, 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--opset", type=int, default=18)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--exporter", default="pt2onnx")
    ap.add_argument("--decomposed", action="store_true")
    ap.add_argument("--inplace", action="store_true")
    ap.add_argument("--ops", default="")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("-o", default="-")
    a = ap.parse_args()
    import opinfo_harness as h

    names = [h.op_id(o) for o in h.op_db()]
    if a.ops:
        want = set(a.ops.split(","))
        names = [n for n in names if n in want or n.split(".")[0] in want]
    jobs = [(n, a.dtype, a.opset, a.exporter, a.decomposed, a.inplace) for n in names]
    out = sys.stdout if a.o == "-" else open(a.o, "w")
    ctx = mp.get_context("forkserver")
    with ctx.Pool(a.j, maxtasksperchild=50) as pool:
        for r in pool.imap_unordered(_work, jobs):
            if r is not None:
                out.write(json.dumps(r) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
