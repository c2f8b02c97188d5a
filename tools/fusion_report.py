"""Which fusions fire on which architecture: every model of the zoo
(tests/models/zoo.py) and every decoder of the generation test
(tests/models/test_hf.py, exported with its KV cache through
export_pretrained) exported at opset 18 and 23 on the standard target and
for onnxruntime; writes docs/fusions.md with the node count and the fused
operators of each file.

    python tools/fusion_report.py [--models a,b] [--out docs/fusions.md]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter

import onnx
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))

import pt2onnx  # noqa: E402
from pt2onnx import hf  # noqa: E402

# Operators a fusion writes (aten.layer_norm / aten.gelu / 2-D linear
# converters also emit LayerNormalization / Gelu / Gemm).
FUSED = {"RMSNormalization", "SimplifiedLayerNormalization", "LayerNormalization", "Gelu",
         "Attention", "RotaryEmbedding", "Gemm",
         "com.microsoft::GroupQueryAttention", "com.microsoft::MultiHeadAttention",
         "com.microsoft::SkipLayerNormalization",
         "com.microsoft::SkipSimplifiedLayerNormalization", "com.microsoft::RotaryEmbedding",
         "com.microsoft::FastGelu", "com.microsoft::BiasGelu", "com.microsoft::Gelu",
         "com.microsoft::QuickGelu", "com.microsoft::FusedMatMul",
         "com.microsoft::GroupQueryAttention(rotary inside)",
         "com.microsoft::GroupQueryAttention(packed qkv)"}
CONFIGS = [("opset18", 18, "standard"), ("opset23", 23, "standard"),
           ("ort18", 18, "onnxruntime")]


def histogram(path):
    m = onnx.load(path, load_external_data=False)
    c = Counter()

    def walk(g):
        for n in g.node:
            c[n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"] += 1
            if n.op_type == "GroupQueryAttention":
                # What it absorbed: the rotary (do_rotary), the q / k / v projections packed
                # into one input (key and value empty).
                if any(a.name == "do_rotary" and a.i for a in n.attribute):
                    c["com.microsoft::GroupQueryAttention(rotary inside)"] += 1
                if len(n.input) > 2 and n.input[1] == n.input[2] == "":
                    c["com.microsoft::GroupQueryAttention(packed qkv)"] += 1
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)

    walk(m.graph)
    return c


def export_zoo(name, path, opset, target):
    import zoo_check

    zoo_check.export(name, path, opset=opset, target=target)


def export_decoder(name, path, opset, target, ckpt_dir):
    import test_hf

    ckpt = os.path.join(ckpt_dir, name)
    if not os.path.isdir(ckpt):
        torch.manual_seed(0)
        test_hf.DECODERS[name]().eval().save_pretrained(ckpt)
    hf.export_pretrained(ckpt, "text-generation-with-past", path, opset=opset, target=target,
                         verify=False)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", help="comma-separated names (zoo entries or decoders)")
    p.add_argument("--out", default=os.path.join(HERE, "..", "docs", "fusions.md"))
    a = p.parse_args()
    hf.prepare()
    from zoo import ZOO
    import test_hf

    jobs = [(n, "zoo") for n in ZOO] + [(f"{n} (decoder, KV cache)", n) for n in
                                        sorted(test_hf.DECODERS)]
    if a.models:
        keep = set(a.models.split(","))
        jobs = [(n, k) for n, k in jobs if n in keep or k in keep]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, kind in jobs:
            cells = []
            for cid, opset, target in CONFIGS:
                path = os.path.join(tmp, "m.onnx")
                try:
                    if kind == "zoo":
                        export_zoo(label, path, opset, target)
                    else:
                        export_decoder(kind, path, opset, target, tmp)
                except Exception as e:  # noqa: BLE001 (reported in the table)
                    cells.append(f"export failed: {type(e).__name__}")
                    continue
                h = histogram(path)
                nodes = sum(h.values())
                fused = {k: v for k, v in h.items() if k in FUSED}
                text = ", ".join(f"{k.replace('com.microsoft::', 'ms:')} {v}"
                                 for k, v in sorted(fused.items())) or "none"
                cells.append(f"{nodes} nodes; {text}")
            rows.append((label, cells))
            print(label, cells, flush=True)
    with open(a.out, "w") as f:
        f.write("# Fusions per architecture\n\n"
                "Written by `python tools/fusion_report.py`: each model exported with pt2onnx "
                "(fusions on) at opset 18 and 23 on the standard target and at opset 18 for "
                "onnxruntime (`target=\"onnxruntime\"`). A cell gives the file's node count and "
                "the fused operators whose count differs from the opset-18 standard file "
                "(`ms:` = com.microsoft; `ms:GroupQueryAttention(rotary inside)` / `(packed qkv)`: "
                "how many of them rotate q / k themselves / read one packed q|k|v projection). "
                "Decoders are exported with their KV cache "
                "(`export_pretrained`, text-generation-with-past).\n\n")
        f.write("| model | " + " | ".join(c[0] for c in CONFIGS) + " |\n")
        f.write("|---|" + "---|" * len(CONFIGS) + "\n")
        for label, cells in rows:
            f.write(f"| {label} | " + " | ".join(cells) + " |\n")


if __name__ == "__main__":
    main()
