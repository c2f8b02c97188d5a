"""Helper run in a fresh process by test_large_model.py: builds a model with
more than 2 GB of weights, exports it with pt2onnx, measures the export's
peak memory beyond the model's own weights, runs the result in onnxruntime,
and prints a JSON report on the last line."""

import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort
import torch
import torch.nn as nn

import pt2onnx


def rss_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


class Big(nn.Module):
    def __init__(self, width, layers):
        super().__init__()
        # skip_init: no default initialization pass; weights are filled in main().
        self.layers = nn.ModuleList(
            nn.utils.skip_init(nn.Linear, width, width) for _ in range(layers)
        )

    def forward(self, x):
        for i, l in enumerate(self.layers):
            x = l(x)
            if i + 1 < len(self.layers):
                x = torch.relu(x)
        return x


def main(path, width, layers):
    torch.manual_seed(0)
    m = Big(width, layers)
    bound = 1 / width**0.5
    with torch.no_grad():
        for l in m.layers:
            l.weight.uniform_(-bound, bound)
            l.bias.uniform_(-bound, bound)
    m.eval()
    weight_bytes = sum(p.numel() * p.element_size() for p in m.parameters())
    x = torch.randn(2, width)

    rss_before = rss_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak (VmHWM) to the current RSS
    t0 = time.perf_counter()
    r = pt2onnx.export(m, (x,), path, dynamic_shapes={"x": {0: "batch"}})
    export_s = time.perf_counter() - t0
    peak = rss_kb("VmHWM")

    xi = torch.randn(3, width)
    with torch.no_grad():
        expected = m(xi).numpy()
    del m
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(os.environ.get("PT2ONNX_TEST_THREADS", "2"))  # tests/conftest.py
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x": xi.numpy()})[0]
    report = {
        "weight_bytes": weight_bytes,
        "rss_before_bytes": rss_before * 1024,
        "peak_bytes": peak * 1024,
        "extra_bytes": (peak - rss_before) * 1024,
        "export_seconds": export_s,
        "timings": r.timings,
        "data_paths": r.data_paths,
        "max_abs_diff": float(np.abs(got - expected).max()),
        "allclose": bool(np.allclose(got, expected, atol=1e-4, rtol=1e-4)),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
