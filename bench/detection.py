"""torchvision detection models: pt2onnx.export beside torch.onnx.export
(dynamo=True, and dynamo=False, the TorchScript exporter) in the same run.

Each model is built with weights=None (small images: min_size = max_size =
320; SSDlite is 320 by construction), exported from one [3, 240, 320] image
with dynamic height / width, and run in onnxruntime on two images of other
sizes; the table gives export time, success, whether the number of
detections matched PyTorch's on both images, and the largest difference in
boxes and scores. Run it in the torch 2.14.1 environment (torchvision's
compiled ops): $(tools/torch_venv.sh 2.14.1)/bin/python bench/detection.py
Writes bench/detection.md and bench/detection.json.

--capture adds, per model, torch.export's capture alone (pt2onnx's capture rules installed) with
dynamic height / width and with static shapes: where pt2onnx's export time goes, and the floor
a capture with torch.export has (static shapes: no symbolic reasoning at all).
"""

import json
import os
import re
import sys
import tempfile
import time
import traceback

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "models"))

MODELS = ["fasterrcnn_mobilenet_v3_large_fpn", "retinanet_resnet50_fpn",
          "ssdlite320_mobilenet_v3_large", "maskrcnn_resnet50_fpn", "keypointrcnn_resnet50_fpn"]
EXPORTERS = ["pt2onnx", "torch.onnx dynamo=True", "torch.onnx dynamo=False"]


# The tests' re-initialisation (random weights on a trained network's scale).
from test_detection import _reinit as reinit  # noqa: E402


# The score thresholds and weights of tests/models/test_detection.py.
SETUP = {
    "fasterrcnn_mobilenet_v3_large_fpn": (dict(box_score_thresh=0.0), (1.0, 0.01)),
    "retinanet_resnet50_fpn": (dict(score_thresh=0.02), None),
    "ssdlite320_mobilenet_v3_large": (dict(score_thresh=0.5), (2.0, 0.1)),
    "maskrcnn_resnet50_fpn": (dict(), None),
    "keypointrcnn_resnet50_fpn": (dict(), None),
}


def build(name):
    from torchvision.models import detection

    torch.manual_seed(0)
    extra, init = SETUP[name]
    kw = dict(weights=None, weights_backbone=None, **extra)
    if not name.startswith("ssdlite"):
        kw.update(min_size=320, max_size=320)
    m = getattr(detection, name)(**kw).eval()
    return reinit(m, *init) if init else m


def export(exporter, m, img, path):
    from torch.export import Dim

    if exporter == "pt2onnx":
        import pt2onnx

        dyn = ([{1: Dim("height", min=32, max=2048), 2: Dim("width", min=32, max=2048)}],)
        pt2onnx.export(m, ([img],), path, dynamic_shapes=dyn)
    elif exporter == "torch.onnx dynamo=True":
        dyn = ([{1: Dim("height", min=32, max=2048), 2: Dim("width", min=32, max=2048)}],)
        torch.onnx.export(m, ([img],), path, dynamo=True, dynamic_shapes=dyn)
    else:
        torch.onnx.export(m, ([img],), path, dynamo=False, opset_version=17,
                          input_names=["image"], dynamic_axes={"image": [1, 2]})


def capture_times(m, img):
    """torch.export alone, rules installed: (dynamic s, static s), best of two each."""
    from torch.export import Dim

    from pt2onnx._capture_rules import capture_rules

    dyn = ([{1: Dim("height", min=32, max=2048), 2: Dim("width", min=32, max=2048)}],)
    best = {}
    for label, ds in [("dynamic", dyn), ("static", None)] * 2:
        t = time.perf_counter()
        with capture_rules(m):
            torch.export.export(m, ([img],), dynamic_shapes=ds, strict=False)
        best[label] = min(best.get(label, 1e9), time.perf_counter() - t)
    return round(best["dynamic"], 2), round(best["static"], 2)


def compare(path, m, images):
    import onnxruntime as ort

    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    counts_ok, box_err, score_err = True, 0.0, 0.0
    for img in images:
        with torch.no_grad():
            ref = m([img])[0]
        outs = s.run(None, {s.get_inputs()[0].name: img.numpy()})
        keys = list(ref)
        if len(outs) != len(keys):
            return False, float("nan"), float("nan")
        for k, o in zip(keys, outs):
            r = ref[k].numpy()
            if o.shape != r.shape:
                counts_ok = False
                continue
            if r.size == 0:
                continue
            d = float(np.max(np.abs(o.astype(np.float64) - r.astype(np.float64))))
            if k == "boxes":
                box_err = max(box_err, d)
            elif k == "scores":
                score_err = max(score_err, d)
    return counts_ok, box_err, score_err


def main():
    g = torch.Generator().manual_seed(9)
    export_img = torch.rand(3, 240, 320, generator=g)
    images = [torch.rand(3, 200, 280, generator=g), torch.rand(3, 300, 256, generator=g)]
    # bench/detection.py [--exporters A,B] [--merge] [model ...]: --merge keeps
    # the rows of detection.json that this run does not redo.
    argv = sys.argv[1:]
    exporters, merge = EXPORTERS, "--merge" in argv
    if "--exporters" in argv:
        exporters = argv[argv.index("--exporters") + 1].split(",")
        del argv[argv.index("--exporters"):argv.index("--exporters") + 2]
    capture = "--capture" in argv
    argv = [a for a in argv if a not in ("--merge", "--capture")]
    here = os.path.dirname(os.path.abspath(__file__))
    rows, captures = [], {}
    if merge and os.path.exists(os.path.join(here, "detection.json")):
        with open(os.path.join(here, "detection.json")) as f:
            saved = json.load(f)
        rows, captures = saved["rows"], saved.get("capture", {})
    only = argv or MODELS
    for name in only:
        m = build(name)
        for exporter in exporters:
            rows = [r for r in rows if (r["model"], r["exporter"]) != (name, exporter)]
            row = dict(model=name, exporter=exporter)
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "m.onnx")
                t = time.perf_counter()
                try:
                    export(exporter, m, export_img, path)
                    row["export_s"] = round(time.perf_counter() - t, 2)
                    row["exported"] = True
                except Exception as e:  # noqa: BLE001 - recorded, the run goes on
                    row["export_s"] = round(time.perf_counter() - t, 2)
                    row["exported"] = False
                    row["error"] = (type(e).__name__ + ": " + str(e).strip().splitlines()[0])[:300]
                if row["exported"]:
                    try:
                        ok, be, se = compare(path, m, images)
                        row.update(counts_match=ok, max_box_err=be, max_score_err=se)
                    except Exception as e:  # noqa: BLE001
                        row["run_error"] = (type(e).__name__ + ": " + str(e).strip().splitlines()[0])[:300]
            print(row, flush=True)
            rows.append(row)
        if capture:
            # Each exporter again, in the reverse order: the first export of a model pays its
            # first-call costs (and the exporter run second profits from the first's).
            for row in reversed(rows[-len(exporters):]):
                if row.get("exported"):
                    with tempfile.TemporaryDirectory() as d:
                        t = time.perf_counter()
                        export(row["exporter"], m, export_img, os.path.join(d, "m.onnx"))
                        row["again_s"] = round(time.perf_counter() - t, 2)
            captures[name] = dict(zip(("dynamic_s", "static_s"), capture_times(m, export_img)))
            print(name, "torch.export alone:", captures[name], flush=True)
    order = {(m, e): i for i, (m, e) in enumerate((m, e) for m in MODELS for e in EXPORTERS)}
    rows.sort(key=lambda r: order.get((r["model"], r["exporter"]), 99))
    meta = dict(torch=torch.__version__, torchvision=__import__("torchvision").__version__,
                onnxruntime=__import__("onnxruntime").__version__, cpus=os.cpu_count())
    with open(os.path.join(here, "detection.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows, capture=captures), f, indent=1)
    lines = [
        "# torchvision detection models: pt2onnx beside torch.onnx",
        "",
        f"`bench/detection.py`: torch {meta['torch']}, torchvision {meta['torchvision']}, "
        f"onnxruntime {meta['onnxruntime']}, CPU ({meta['cpus']} cores, shared). weights=None, "
        "exported from one [3, 240, 320] image with dynamic height / width, compared with PyTorch "
        "in onnxruntime on [3, 200, 280] and [3, 300, 256] images (counts: every output's shape "
        "equal on both; errors: max |ONNX - PyTorch|).",
        "",
        "| model | exporter | export s | exported | counts match | max box err | max score err | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        err = re.sub(r"\x1b\[[0-9;]*m", "", r.get("error") or r.get("run_error") or "")
        err = err.replace("|", "\\|").replace("\n", " ")[:160]
        fmt = (lambda v: f"{v:.2e}" if isinstance(v, float) else "")
        lines.append(f"| {r['model']} | {r['exporter']} | {r['export_s']} | {r['exported']} | "
                     f"{r.get('counts_match', '')} | {fmt(r.get('max_box_err'))} | "
                     f"{fmt(r.get('max_score_err'))} | {err} |")
    if captures:
        seconds = {(r["model"], r["exporter"]): f"{r['export_s']} / {r.get('again_s', '')}"
                   for r in rows}
        lines += [
            "",
            "torch.export alone (`--capture`, pt2onnx's capture rules installed, best of two, "
            "after the exports above): with the dynamic height / width of the exports, and with "
            "static shapes, beside the two whole exports (first: the table above; again: each "
            "exporter once more, in the reverse order, after the first exports).",
            "",
            "| model | torch.export dynamic s | torch.export static s | pt2onnx export s "
            "(first / again) | torch.onnx dynamo=False export s (first / again) |",
            "|---|---|---|---|---|",
        ]
        for name in MODELS:
            if name in captures:
                c = captures[name]
                lines.append(f"| {name} | {c['dynamic_s']} | {c['static_s']} | "
                             f"{seconds.get((name, 'pt2onnx'), '')} | "
                             f"{seconds.get((name, 'torch.onnx dynamo=False'), '')} |")
    # Notes written by hand below the marker are kept.
    md = os.path.join(here, "detection.md")
    marker = "<!-- notes: kept by bench/detection.py -->"
    notes = ""
    if os.path.exists(md):
        with open(md) as f:
            old = f.read()
        if marker in old:
            notes = old[old.index(marker):]
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n" + ("\n" + notes if notes else ""))


if __name__ == "__main__":
    main()
