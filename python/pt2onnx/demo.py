"""`python -m pt2onnx.demo`: exports a bundled model (a small vision
transformer with random weights), runs it in onnxruntime beside PyTorch on
new inputs, and prints the per-stage timings and the largest difference."""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import pt2onnx


class EncoderBlock(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    """Patch-embedding convolution, transformer encoder blocks, mean pooling."""

    def __init__(self, image=64, patch=8, d=128, heads=4, depth=4, classes=100):
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, stride=patch)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2, d) * 0.02)
        self.blocks = nn.ModuleList(EncoderBlock(d, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch(images).flatten(2).transpose(1, 2) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x).mean(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-o", "--output", help="where to write the model (default: a temp dir)")
    ap.add_argument("--opset", type=int, default=pt2onnx.DEFAULT_OPSET)
    args = ap.parse_args(argv)
    import numpy as np
    import onnxruntime as ort

    torch.manual_seed(0)
    model = TinyViT().eval()
    example = torch.randn(2, 3, 64, 64)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.output or os.path.join(tmp, "tiny_vit.onnx")
        result = pt2onnx.export(model, (example,), path, opset=args.opset,
                                dynamic_shapes={"images": {0: "batch"}})
        print(result)
        t0 = time.perf_counter()
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        load_s = time.perf_counter() - t0
        worst = 0.0
        for batch in (1, 3, 8):  # inputs other than the export inputs
            x = torch.randn(batch, 3, 64, 64)
            with torch.no_grad():
                expected = model(x).numpy()
            got = sess.run(None, {"images": x.numpy()})[0]
            diff = float(np.abs(got - expected).max())
            worst = max(worst, diff)
            print(f"  batch {batch}: max |onnxruntime - torch| = {diff:.2e}")
    print(f"onnxruntime session load {load_s * 1000:.1f} ms")
    ok = worst <= 1e-4
    print(f"largest difference {worst:.2e} ({'OK' if ok else 'MISMATCH'}, tolerance 1e-4)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
