"""Saves the small .pt2 archives of tests/data/compat/<torch version>/ with the
torch release of the interpreter running it (tools/make_compat_archives.py runs it
once per release, each in that release's environment: only torch and numpy are
needed, not pt2onnx).

For each model: <name>.pt2 (torch.export.save; a few also as <name>_core.pt2,
after run_decompositions) and <name>.npz holding, for one or
more cases, inputs of sizes other than the export sizes and the program's outputs
on them: case<k>_in<i>, case<k>_out<j> (user outputs, then the buffers the
program mutates, in the order of its output specs). manifest.json names the torch
release, the schema version read back from each archive and the archive's layout
markers (archive_format, archive_version, .data/version, byteorder).

usage: python tools/compat_archives_gen.py OUT_DIR
"""

import json
import os
import sys
import zipfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.export import Dim


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, groups=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        y = F.max_pool2d(self.conv2(y), 2, ceil_mode=True)
        return self.head(self.pool(y).flatten(1))


class Tagger(nn.Module):
    """Dynamic batch and sequence: token ids in, per-token scores and the
    sequence's mean out."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 12)
        self.pos = nn.Parameter(torch.randn(64, 12) * 0.1)
        self.proj = nn.Linear(12, 6)

    def forward(self, ids, mask):
        s = ids.shape[1]
        h = self.emb(ids) + self.pos[:s]
        h = h * mask.unsqueeze(-1).to(h.dtype)
        scores = self.proj(h)
        mean = h.sum(1) / mask.sum(1, keepdim=True).clamp(min=1).to(h.dtype)
        return scores, mean, s * 2


class Attention(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, elementwise_affine=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(b, s, d)
        return self.ln2(x + self.out(a))


class CondCounter(nn.Module):
    """torch.cond on data, a counter buffer updated in place, a tensor
    constant and a non-persistent buffer (the constants table)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(1))
        self.register_buffer("scale", torch.tensor([0.5, 1.0, 1.5, 2.0]), persistent=False)
        self.offset = torch.tensor([1.0, -1.0, 2.0, -2.0])  # a lifted tensor constant

    def forward(self, x):
        self.count.add_(1)

        def pos(t):
            return self.lin(t).relu() * self.scale

        def neg(t):
            return (t - self.offset).abs() + 1

        y = torch.cond(x.sum() > 0, pos, neg, (x,))
        return y + self.count


class IntBool(nn.Module):
    """Integer and boolean outputs."""

    def forward(self, x):
        idx = x.argmax(-1)
        pos = x > 0
        top = torch.topk(x, 2, dim=-1).indices.to(torch.int32)
        cnt = pos.sum(-1)
        anyneg = (x < -1).any(-1)
        return idx, pos, top, cnt, anyneg, (x * 4).round().to(torch.int16)


def models():
    """name -> (module, export args, dynamic_shapes, [cases of inputs])."""
    g = torch.Generator().manual_seed(1)

    def rn(*s):
        return torch.randn(*s, generator=g)

    b, s = Dim("batch", min=1, max=32), Dim("seq", min=2, max=64)
    ids = lambda n, t: torch.randint(0, 50, (n, t), generator=g)  # noqa: E731

    def mask(n, t):
        m = torch.ones(n, t, dtype=torch.int64)
        m[0, t // 2:] = 0
        return m

    cond_pos = torch.full((3, 4), 0.5) + 0.1 * rn(3, 4)
    cond_neg = -torch.full((5, 4), 0.5) + 0.1 * rn(5, 4)
    return {
        "mlp": (MLP(), (rn(2, 8),), ({0: b},), [(rn(5, 8),), (rn(1, 8),)]),
        "convbn": (ConvBN(), (rn(2, 3, 16, 16),), ({0: b},), [(rn(3, 3, 16, 16),)]),
        "tagger": (Tagger(), (ids(2, 5), mask(2, 5)), ({0: b, 1: s}, {0: b, 1: s}),
                   [(ids(3, 9), mask(3, 9)), (ids(1, 17), mask(1, 17))]),
        "attention": (Attention(), (rn(2, 6, 16),), ({0: b, 1: s},),
                      [(rn(3, 11, 16),), (rn(1, 3, 16),)]),
        "cond": (CondCounter(), (rn(2, 4).abs(),), ({0: b},), [(cond_pos,), (cond_neg,)]),
        "intbool": (IntBool(), (rn(2, 7),), ({0: b},), [(rn(4, 7) * 2,)]),
    }


# Also saved after ep.run_decompositions(), as <name>_core.
DECOMPOSED = ("attention", "cond")


def init_weights(m):
    """Non-trivial batch norm statistics (a fresh BatchNorm2d is the identity)."""
    g = torch.Generator().manual_seed(2)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.2)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.bias.data.copy_(torch.randn(mod.num_features, generator=g) * 0.1)


def flat(out):
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in flat(o)]
    return [out]


def layout(path):
    """The archive's version markers and its program's schema / torch version."""
    info = {}
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        root = names[0].split("/")[0] + "/"
        for key in ("archive_format", "archive_version", ".data/version", "byteorder"):
            if root + key in names:
                info[key] = z.read(root + key).decode().strip()
        model = [n for n in names if n.startswith(root + "models/") and n.endswith(".json")]
        prog = json.loads(z.read(model[0]))
        info["model_json"] = model[0][len(root):]
        info["schema_version"] = "%d.%d" % (prog["schema_version"]["major"],
                                            prog["schema_version"]["minor"])
        info["torch_version"] = prog.get("torch_version")
        info["entries"] = sorted(n[len(root):] for n in names)
    return info


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    from torch._export.serde.schema import SCHEMA_VERSION

    manifest = {"torch_version": torch.__version__,
                "schema_version": "%d.%d" % tuple(SCHEMA_VERSION), "archives": {}}
    programs = []
    for name, (m, args, ds, cases) in models().items():
        m.eval()
        init_weights(m)
        ep = torch.export.export(m, args, dynamic_shapes=ds, strict=False)
        programs.append((name, ep, cases))
        if name in DECOMPOSED:
            # The core ATen form (each release decomposes its own way; the
            # signature then lists buffer mutations).
            programs.append((name + "_core", ep.run_decompositions(), cases))
    for name, ep, cases in programs:
        path = os.path.join(out_dir, name + ".pt2")
        torch.export.save(ep, path)
        mutated = [o.target for o in ep.graph_signature.output_specs
                   if o.kind.name == "BUFFER_MUTATION"]
        arrays = {}
        for k, case in enumerate(cases):
            mod = torch.export.load(path).module()  # fresh buffers for every case
            with torch.no_grad():
                outs = flat(mod(*[c.clone() for c in case]))
            outs += [mod.get_buffer(t).clone() for t in mutated]
            for i, x in enumerate(case):
                arrays[f"case{k}_in{i}"] = x.numpy()
            for j, y in enumerate(outs):
                arrays[f"case{k}_out{j}"] = np.asarray(y.numpy() if torch.is_tensor(y) else y)
        np.savez_compressed(os.path.join(out_dir, name + ".npz"), **arrays)
        info = layout(path)
        info["mutated_buffers"] = mutated
        info["ops"] = sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"})
        manifest["archives"][name] = info
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    print(out_dir, manifest["torch_version"], manifest["schema_version"])


if __name__ == "__main__":
    main()
