"""TorchScript models: pt2onnx.export beside torch.onnx's TorchScript exporter
(torch.onnx.export(..., dynamo=False)) on the same ScriptModules, in one run.

The models are tests/models/torchscript_models.py's (torchvision classification
and segmentation scripted, timm scripted, transformers traced with
torchscript=True, ModuleInfo's RNN / LSTM / GRU scripted; random weights).
Each exporter exports the same TorchScript model with the same dynamic_axes;
the file then runs in onnxruntime on inputs of another batch (and image or
sequence size) and is compared with the eager model (atol 1e-4 scaled by the
output's magnitude, rtol 1e-3). Time: the whole export call, wall clock, after
one warm-up export of each exporter. Second table: nn.Modules of torchvision
recorded by tracing, pt2onnx.export(capture="trace") beside the TorchScript
exporter's default (it traces too).

Writes bench/torchscript.md and bench/torchscript.json.
usage: .venv/bin/python bench/torchscript.py [NAME ...] (names: those models again, merged
into the existing results)"""

import json
import os
import platform
import sys
import tempfile
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "models"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from opinfo_harness import hide_torchvision_ops  # noqa: E402

hide_torchvision_ops()
import torchscript_models as tsm  # noqa: E402

import pt2onnx  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE_MODELS = ["tv_resnet50", "tv_mobilenet_v3_small", "tv_efficientnet_b0", "tv_densenet121",
                "tv_vit_b_16", "tv_swin_t"]


def check(path, eager, other):
    import onnxruntime as ort

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    tensors = [a for a in other if isinstance(a, torch.Tensor)]
    feeds = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), tensors)}
    if len(feeds) != len(sess.get_inputs()):
        return False, f"inputs: file has {len(sess.get_inputs())}, model {len(tensors)}"
    got = sess.run(None, feeds)
    with torch.no_grad():
        expected = tsm.outputs(eager(*other))
    if len(got) != len(expected):
        return False, f"{len(got)} outputs, PyTorch {len(expected)}"
    worst = 0.0
    for g, e in zip(got, expected):
        e = e.numpy()
        if g.shape != e.shape:
            return False, f"shape {g.shape} vs {e.shape}"
        scale = max(1.0, float(np.abs(e).max()))
        if not np.allclose(g, e, atol=1e-4 * scale, rtol=1e-3):
            return False, f"max diff {float(np.abs(g - e).max()):.2e}"
        worst = max(worst, float(np.abs(g - e).max()))
    return True, f"max diff {worst:.1e}"


def run(exporter, model, args, axes, path):
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "pt2onnx":
            pt2onnx.export(model, args, path, dynamic_axes=axes)
        elif exporter == "pt2onnx trace":
            pt2onnx.export(model, args, path, dynamic_axes=axes, capture="trace")
        else:
            torch.onnx.export(model, args, path, dynamo=False, dynamic_axes=axes,
                              input_names=list(axes), opset_version=18)
    return time.perf_counter() - t0


def one(exporter, name, make, tmp, trace=False):
    row = {"model": name, "exporter": exporter}
    try:
        eager, ts, args, other, axes = make()
        model = eager if trace else ts
        path = os.path.join(tmp, f"{name}-{exporter.replace(' ', '_')}.onnx")
        row["seconds"] = run(exporter, model, args, axes, path)
        row["ok"], row["detail"] = check(path, eager, other)
    except Exception as e:  # noqa: BLE001 - the table says how it failed
        msg = str(e).strip().splitlines()
        row["ok"], row["detail"] = False, f"{type(e).__name__}: {msg[0][:140] if msg else ''}"
    return row


def main(names):
    torch.set_num_threads(2)
    models = tsm.models()
    names = names or list(models)
    rows, trace_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for ex in ("pt2onnx", "torch.onnx TorchScript"):  # warm-up: first-call costs
            one(ex, "rnn_nn.GRU", models["rnn_nn.GRU"], tmp)
        for name in names:
            for ex in ("pt2onnx", "torch.onnx TorchScript"):
                rows.append(one(ex, name, models[name], tmp))
                print(json.dumps(rows[-1]), flush=True)
        for name in [n for n in TRACE_MODELS if n in names]:
            for ex in ("pt2onnx trace", "torch.onnx TorchScript"):
                trace_rows.append(one(ex, name, models[name], tmp, trace=True))
                print(json.dumps(trace_rows[-1]), flush=True)
    write(rows, trace_rows)


def table(rows, exporters):
    by = {}
    for r in rows:
        by.setdefault(r["model"], {})[r["exporter"]] = r
    lines = ["| model | " + " | ".join(f"{e} s | {e}" for e in exporters) + " |",
             "|---|" + "---:|---|" * len(exporters)]
    for model, d in by.items():
        cells = []
        for e in exporters:
            r = d.get(e, {})
            sec = f"{r['seconds']:.2f}" if "seconds" in r else "-"
            cells.append(f"{sec} | {'ok' if r.get('ok') else 'FAIL'}: {r.get('detail', '')}")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    totals = []
    for e in exporters:
        ok = sum(1 for d in by.values() if d.get(e, {}).get("ok"))
        both = [d for d in by.values() if all(d.get(x, {}).get("ok") for x in exporters)]
        secs = sum(d[e]["seconds"] for d in both)
        totals.append(f"{e}: {ok}/{len(by)} pass, {secs:.1f} s on the {len(both)} both pass")
    return "\n".join(lines), totals


def write(rows, trace_rows):
    path = os.path.join(HERE, "torchscript.json")
    if os.path.exists(path) and len(sys.argv) > 1:  # some models again: merged by name
        old = json.load(open(path))
        again = {r["model"] for r in rows} | {r["model"] for r in trace_rows}
        order = [r["model"] for r in old["rows"]]
        rows = sorted([r for r in old["rows"] if r["model"] not in again] + rows,
                      key=lambda r: order.index(r["model"]) if r["model"] in order else 1e9)
        trace_rows = [r for r in old["trace_rows"] if r["model"] not in again] + trace_rows
    with open(path, "w") as fh:
        json.dump({"rows": rows, "trace_rows": trace_rows}, fh, indent=1)
    main_table, totals = table(rows, ["pt2onnx", "torch.onnx TorchScript"])
    text = [
        "# TorchScript models: pt2onnx beside torch.onnx's TorchScript exporter",
        "",
        "Written by `bench/torchscript.py` (its docstring says how it measures): the same",
        "TorchScript models (tests/models/torchscript_models.py) exported by `pt2onnx.export`",
        "and by `torch.onnx.export(..., dynamo=False)` in one run, with the same dynamic axes,",
        "each file run in onnxruntime on inputs of another batch (and size) and compared with",
        "the eager model. Seconds: the whole export call.",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, 2 threads.",
        "",
        "Pass rates and time: " + "; ".join(totals) + ".",
        "",
        main_table,
    ]
    if trace_rows:
        trace_table, trace_totals = table(trace_rows, ["pt2onnx trace", "torch.onnx TorchScript"])
        text += ["", "## Tracing nn.Modules: `capture=\"trace\"` beside the TorchScript exporter",
                 "", "Both record the eager torchvision model with torch.jit.trace.", "",
                 "Pass rates and time: " + "; ".join(trace_totals) + ".", "", trace_table]
    with open(os.path.join(HERE, "torchscript.md"), "w") as fh:
        fh.write("\n".join(text) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
