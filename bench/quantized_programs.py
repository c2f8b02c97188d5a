"""Quantized PyTorch programs through torch.onnx.export(dynamo=True) and pt2onnx.export, side by
side: PT2E static (X86InductorQuantizer) and dynamic (Linear layers), torch.ao's eager QAT with
observers off, torchao's quantize_ configs (int8 / int4 weight-only, int8 dynamic). Each file
runs in onnxruntime (basic graph optimizations: the QDQ graph as written) on the export input;
max |ONNX - PyTorch| of the quantized program. Writes bench/quantized_programs.md / .json.

    python bench/quantized_programs.py
"""
import contextlib
import datetime
import io
import json
import logging
import os
import platform
import warnings

import numpy as np
import onnxruntime as ort
import torch

import pt2onnx

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
HERE = os.path.dirname(os.path.abspath(__file__))


def pt2e(m, x, dynamic=False):
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    q = xiq.X86InductorQuantizer()
    config = xiq.get_default_x86_inductor_quantization_config(is_dynamic=dynamic)
    if dynamic:
        q.set_module_type_qconfig(torch.nn.Linear, config)
    else:
        q.set_global(config)
    p = prepare_pt2e(torch.export.export(m, (x,)).module(), q)
    p(x)
    return convert_pt2e(p)


def programs():
    import torch.ao.quantization as aq
    from torchao.quantization import (Int8DynamicActivationInt8WeightConfig,
                                      Int8WeightOnlyConfig, IntxWeightOnlyConfig, quantize_)
    from torchao.quantization.granularity import PerGroup

    torch.manual_seed(0)

    def net():
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                   torch.nn.Linear(8 * 6 * 6, 10)).eval()

    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(),
                                   torch.nn.Linear(96, 32)).eval()

    cases = {}
    x = torch.randn(1, 3, 8, 8)
    cases["PT2E static (X86InductorQuantizer)"] = (pt2e(net(), x), x)
    x = torch.randn(2, 64)
    cases["PT2E dynamic (Linear layers)"] = (pt2e(mlp(), x, True), x)
    m = torch.nn.Sequential(aq.QuantStub(), torch.nn.Linear(64, 32), aq.DeQuantStub()).train()
    m.qconfig = aq.get_default_qat_qconfig("x86")
    aq.prepare_qat(m, inplace=True)
    m(torch.randn(8, 64))
    m.eval()
    m.apply(aq.disable_observer)
    cases["torch.ao eager QAT, observers off"] = (m, torch.randn(2, 64))
    for name, cfg in [("torchao Int8WeightOnlyConfig", Int8WeightOnlyConfig()),
                      ("torchao IntxWeightOnlyConfig(int4, group 32)",
                       IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32))),
                      ("torchao Int8DynamicActivationInt8WeightConfig",
                       Int8DynamicActivationInt8WeightConfig())]:
        mm = mlp()
        quantize_(mm, cfg)
        cases[name] = (mm, torch.randn(2, 64))
    return cases


def export_and_run(tool, m, x, path):
    """tool's export of m, run in onnxruntime: 'ok, max diff D' or 'FAIL <error's first line>'."""
    with torch.no_grad():
        ref = m(x).numpy()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            if tool == "torch.onnx":
                torch.onnx.export(m, (x,), path, dynamo=True)
            else:
                pt2onnx.export(m, (x,), path, opset=21)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        out = s.run(None, {s.get_inputs()[0].name: x.numpy()})[0]
        return f"ok, max diff {np.abs(out - ref).max():.2g}"
    except Exception as e:  # noqa: BLE001  (a failure is a result here)
        import re

        text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
        # The line that names the cause (torch.onnx's first line is generic).
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        cause = next((ln for ln in lines if re.search(r"No ONNX function found|[Uu]nsupported|not supported", ln)),
                     lines[0] if lines else "")
        return f"FAIL {type(e).__name__}: {cause[:220]}"


def main():
    import tempfile

    path = os.path.join(tempfile.mkdtemp(), "t.onnx")
    results = {}
    for name, (m, x) in programs().items():
        results[name] = {tool: export_and_run(tool, m, x, path)
                         for tool in ("torch.onnx", "pt2onnx")}
        print(name, results[name])
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with open(os.path.join(HERE, "quantized_programs.json"), "w") as fh:
        json.dump({"date": stamp, "torch": torch.__version__, "onnxruntime": ort.__version__,
                   "results": results}, fh, indent=1)
    lines = [f"# Quantized programs: torch.onnx vs pt2onnx ({stamp})", "",
             f"`python bench/quantized_programs.py`; {platform.machine()}, {os.cpu_count()} cores; "
             f"torch {torch.__version__}, onnxruntime "
             f"{ort.__version__}, torchao 0.18.0. torch.onnx.export(dynamo=True) and "
             "pt2onnx.export(opset 21) of the same quantized program; onnxruntime at the basic "
             "optimization level (the QDQ graph as written); max |ONNX output - PyTorch "
             "output| on the export input. torch.onnx's failures: the first line of its error.",
             "", "| program | torch.onnx | pt2onnx |", "|---|---|---|"]
    lines += [f"| {k} | {v['torch.onnx']} | {v['pt2onnx']} |" for k, v in results.items()]
    with open(os.path.join(HERE, "quantized_programs.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
