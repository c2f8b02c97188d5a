"""The limits torch_releases.py declares, shown on plain torch.export: on the
releases named there it fails (or records a wrong dtype) with no pt2onnx
involved; on the others it works."""

import torch
import torch.nn.functional as F
from torch.export import Dim

from torch_releases import TORCH


class RepeatKv(torch.nn.Module):
    def forward(self, q, k, v):
        def rep(x):
            b, h, s, d = x.shape
            return x[:, :, None].expand(b, h, 2, s, d).reshape(b, h * 2, s, d)

        return F.scaled_dot_product_attention(q, rep(k), rep(v))


def test_expand_reshape_guard():
    L = Dim("L", max=256)
    q, k, v = torch.randn(2, 4, 5, 16), torch.randn(2, 2, 5, 16), torch.randn(2, 2, 5, 16)
    try:
        torch.export.export(RepeatKv(), (q, k, v), dynamic_shapes=({2: L}, {2: L}, {2: L}))
        failed = None
    except torch._dynamo.exc.UserError as e:
        failed = str(e)
    if TORCH < (2, 13):
        assert failed and "min(16*" in failed, failed
    else:
        assert failed is None, failed
    # The workaround the README gives for 2.12: Dim.DYNAMIC exports on every release.
    D = Dim.DYNAMIC
    torch.export.export(RepeatKv(), (q, k, v), dynamic_shapes=({2: D}, {2: D}, {2: D}))


def test_bincount_weights_dtype():
    class M(torch.nn.Module):
        def forward(self, x, w):
            return torch.bincount(x, weights=w)

    ep = torch.export.export(M(), (torch.tensor([1, 4, 4, 0]), torch.rand(4)))
    (node,) = [n for n in ep.graph.nodes if n.target == torch.ops.aten.bincount.default]
    recorded = node.meta["val"].dtype
    eager = M()(torch.tensor([1, 4, 4, 0]), torch.rand(4)).dtype
    assert eager == torch.float32
    assert recorded == (torch.int64 if TORCH < (2, 13) else torch.float32)
