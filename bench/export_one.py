"""One exporter on one model, in a fresh process (run by bench/run.py).

    python bench/export_one.py MODEL EXPORTER OUTDIR

EXPORTER: pt2onnx | dynamo (torch.onnx.export, dynamo=True, defaults) |
torchscript (torch.onnx.export, dynamo=False) | floor (torch.export.export
alone, and writing the weight bytes to a file). Prints one JSON line: export
time, stage split, peak memory beyond the model's own, output size and node
count, and the comparison with PyTorch (latency: bench/latency.py)."""

import inspect
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import build  # noqa: E402

THREADS = 2
ATOL = RTOL = 1e-3  # fp32, deep models: reported with the max difference


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def files_size(path):
    total = 0
    d = os.path.dirname(path)
    for f in os.listdir(d):
        total += os.path.getsize(os.path.join(d, f))
    return total


def ort_check(path, model, new_args, names):
    import onnx
    import onnxruntime as ort

    mp = onnx.load(path, load_external_data=False)
    nodes = len(mp.graph.node)
    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), new_args)}
    with torch.no_grad():
        expected = model(*new_args).numpy()
    got = sess.run(None, feeds)[0]
    diff = float(np.abs(got - expected).max())
    ok = bool(np.allclose(got, expected, atol=ATOL, rtol=RTOL))
    # Latency is measured later by bench/latency.py, all exporters interleaved.
    return {"nodes": nodes, "max_abs_diff": diff, "matches": ok}


def main(name, exporter, out):
    torch.set_num_threads(THREADS)
    model, args, new_args, ds, da = build(name)
    names = list(inspect.signature(model.forward).parameters)
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.onnx")
    rep = {"model": name, "exporter": exporter, "params": params, "weight_bytes": weight_bytes}
    rss0 = status_kb("VmRSS")
    reset_peak()
    t0 = time.perf_counter()
    if exporter == "floor":
        torch.export.export(model, args, dynamic_shapes=ds)
        rep["capture_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        with open(os.path.join(out, "weights.bin"), "wb") as f:
            for t in model.state_dict().values():
                f.write(memoryview(t.detach().contiguous().numpy()).cast("B"))
        rep["write_s"] = time.perf_counter() - t1
        os.remove(os.path.join(out, "weights.bin"))
        print(json.dumps(rep))
        return
    if exporter == "pt2onnx":
        import pt2onnx

        r = pt2onnx.export(model, args, path, dynamic_shapes=ds)
        rep["stages"] = r.timings
    elif exporter == "dynamo":
        torch.onnx.export(model, args, path, dynamic_shapes=ds, dynamo=True)
    elif exporter == "torchscript":
        torch.onnx.export(model, args, path, dynamo=False, dynamic_axes=da, input_names=names)
    else:
        raise SystemExit(f"unknown exporter {exporter}")
    rep["export_s"] = time.perf_counter() - t0
    rep["peak_extra_bytes"] = (status_kb("VmHWM") - rss0) * 1024
    rep["output_bytes"] = files_size(path)
    rep.update(ort_check(path, model, new_args, names))
    print(json.dumps(rep))


if __name__ == "__main__":
    main(*sys.argv[1:4])
