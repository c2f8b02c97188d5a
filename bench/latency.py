"""onnxruntime latency of several exports of one model, measured in one
process with the runs interleaved (round-robin), so that machine noise hits
every exporter alike. Run by bench/run.py:

    python bench/latency.py MODEL NAME=PATH [NAME=PATH ...]

Prints one JSON line: NAME -> median milliseconds (and run count)."""

import json
import os
import statistics
import sys
import time

import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import build  # noqa: E402

THREADS = 2


def main(model, specs):
    _, _, new_args, _, _ = build(model)
    sessions, feeds = {}, {}
    for spec in specs:
        name, path = spec.split("=", 1)
        so = ort.SessionOptions()
        so.intra_op_num_threads = THREADS
        so.inter_op_num_threads = 1
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        sessions[name] = s
        feeds[name] = {i.name: a.numpy() for i, a in zip(s.get_inputs(), new_args)}
    for name, s in sessions.items():
        for _ in range(3):
            s.run(None, feeds[name])
    times = {n: [] for n in sessions}
    names = list(sessions)
    deadline = time.perf_counter() + 40
    rounds = 0
    while rounds < 5 or (rounds < 40 and time.perf_counter() < deadline):
        order = names if rounds % 2 == 0 else names[::-1]
        for n in order:
            t0 = time.perf_counter()
            sessions[n].run(None, feeds[n])
            times[n].append(time.perf_counter() - t0)
        rounds += 1
    print(json.dumps({n: {"latency_ms": 1000 * statistics.median(v), "latency_runs": len(v)}
                      for n, v in times.items()}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
