"""The .pt2 path: every archive layout torch.export.load accepts converts to
the same bytes as the Python path; the command's options and exit codes; the
hostile corpus; the C++ embedding example."""

import filecmp
import io
import os
import subprocess
import zipfile

import numpy as np
import onnx
import pytest
import torch
import torch.nn as nn
import conftest
from conftest import assert_matches, cli_path, run_ort
from models import GPT
from pt2_layouts import save_pickled_weights_layout, save_root_files_layout

import pt2onnx

HOSTILE = os.path.join(os.path.dirname(__file__), "..", "data", "hostile")


class Aliased(nn.Module):
    """Weights that share storage: a transposed view of another parameter, a
    strided buffer, a non-persistent buffer and a tensor constant."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(3, 4)
        self.b.weight = nn.Parameter(self.a.weight.t())
        self.register_buffer("strided", torch.arange(12.0).view(3, 4)[:, 1:3])
        self.register_buffer("scratch", torch.full((4,), 0.25), persistent=False)
        self.const = torch.linspace(0, 1, 4)

    def forward(self, x):
        y = self.b(self.a(x)) + self.scratch + self.const
        return y + self.strided.sum() * 0.01


def cli(*args):
    return subprocess.run([cli_path(), *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("make", [Aliased, lambda: GPT(layers=1)], ids=["aliased", "gpt"])
def test_every_layout_gives_the_python_bytes(tmp_path, make):
    torch.manual_seed(0)
    m = make().eval()
    args = (torch.randn(2, 4),) if isinstance(m, Aliased) else (torch.randint(0, 512, (2, 6)),)
    ep = torch.export.export(m, args)
    reference = tmp_path / "python" / "model.onnx"
    reference.parent.mkdir()
    pt2onnx.export(ep, f=str(reference))
    for name, save in [("current", torch.export.save), ("pickled_weights", save_pickled_weights_layout),
                       ("root_files", save_root_files_layout)]:
        d = tmp_path / name
        d.mkdir()
        pt2 = d / "model.pt2"
        save(ep, str(pt2))
        loaded = torch.export.load(str(pt2))  # torch reads what the helper wrote
        torch.testing.assert_close(loaded.module()(*args), ep.module()(*args))
        r = cli(pt2, "-o", d / "model.onnx", "-q")
        assert r.returncode == 0, r.stderr
        assert filecmp.cmp(reference, d / "model.onnx", shallow=False), name
    feeds = {"x": torch.randn(2, 4)} if isinstance(m, Aliased) else {"idx": torch.randint(0, 512, (2, 6))}
    assert_matches(m, str(reference), feeds)


class ConvBN(nn.Module):
    """Convolutions with batch norms to fold: the small first weight (36 KB)
    is folded into new bytes, the larger ones (> 64 KiB) are scaled by the
    writer as it streams them, from the caller's memory (Python) or the
    mapped archive (.pt2)."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(16, 64, 3), nn.BatchNorm2d(64)
        self.c2, self.b2 = nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128)
        self.c3, self.b3 = nn.ConvTranspose2d(128, 64, 3, groups=2), nn.BatchNorm2d(64)
        for bn in (self.b1, self.b2, self.b3):  # statistics that are not the identity
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.data.uniform_(0.5, 2.0)
            bn.bias.data.uniform_(-0.5, 0.5)

    def forward(self, x):
        x = self.b1(self.c1(x)).relu()
        x = self.b2(self.c2(x)).relu()
        return self.b3(self.c3(x))


@pytest.mark.parametrize("dtype", [None, "float16"])
def test_folded_batch_norms_give_the_python_bytes(tmp_path, dtype):
    torch.manual_seed(0)
    m = ConvBN().eval()
    ep = torch.export.export(m, (torch.randn(1, 16, 12, 12),))
    reference = tmp_path / "python" / "model.onnx"
    reference.parent.mkdir()
    kw = {"dtype": torch.float16} if dtype else {}
    pt2onnx.export(ep, f=str(reference), external_data=True, **kw)
    pt2 = tmp_path / "model.pt2"
    torch.export.save(ep, str(pt2))
    (tmp_path / "cli").mkdir()
    r = cli(pt2, "-o", tmp_path / "cli" / "model.onnx", "-q", "--external-data", "always",
            *(["--dtype", dtype] if dtype else []))
    assert r.returncode == 0, r.stderr
    for f in ("model.onnx", "model.onnx.data"):
        assert filecmp.cmp(reference.parent / f, tmp_path / "cli" / f, shallow=False), f
    mp = onnx.load(str(reference), load_external_data=False)
    assert not [n for n in mp.graph.node if n.op_type == "BatchNormalization"]
    assert {"c1.weight.bn_folded", "c2.weight.bn_folded", "c3.weight.bn_folded"} <= {
        t.name for t in mp.graph.initializer}
    x = torch.randn(1, 16, 12, 12)  # not the export input
    if dtype:
        sess, (got,) = run_ort(str(reference), {"x": x.half().numpy()})
        np.testing.assert_allclose(got.astype(np.float32), m(x).detach().numpy(), atol=5e-2,
                                   rtol=2e-2)
    else:
        assert_matches(m, str(reference), {"x": x})


def test_conversion_is_deterministic(tmp_path):
    pt2 = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(GPT(layers=1).eval(), (torch.randint(0, 512, (1, 4)),)), pt2)
    for k in range(2):  # same file name, so the same external data location
        (tmp_path / str(k)).mkdir()
        assert cli(pt2, "-o", tmp_path / str(k) / "m.onnx", "-q").returncode == 0
    for f in ("m.onnx", "m.onnx.data"):
        assert filecmp.cmp(tmp_path / "0" / f, tmp_path / "1" / f, shallow=False)


def test_empty_storage_file_is_a_fake_tensor_of_zeros(tmp_path):
    torch.manual_seed(0)
    m = nn.Linear(4, 3).eval()
    buf = io.BytesIO()
    torch.export.save(torch.export.export(m, (torch.randn(2, 4),)), buf)
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    bias_file = [n for n in src.namelist() if n.endswith("data/weights/weight_1")][0]
    pt2 = tmp_path / "fake.pt2"
    with zipfile.ZipFile(pt2, "w", zipfile.ZIP_STORED) as z:
        for n in src.namelist():
            z.writestr(n, b"" if n == bias_file else src.read(n))
    assert cli(pt2, "-o", tmp_path / "fake.onnx", "-q").returncode == 0
    mp = onnx.load(tmp_path / "fake.onnx")
    bias = [t for t in mp.graph.initializer if t.name == "bias"][0]
    assert onnx.numpy_helper.to_array(bias).tolist() == [0.0, 0.0, 0.0]


def test_command_options(tmp_path):
    torch.manual_seed(0)
    m = GPT(layers=1).eval()
    ds = {"idx": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=128)}}
    pt2 = tmp_path / "gpt.pt2"
    torch.export.save(torch.export.export(m, (torch.randint(0, 512, (2, 6)),), dynamic_shapes=ds), pt2)
    out = tmp_path / "out" / "gpt.onnx"
    out.parent.mkdir()
    r = cli(pt2, "-o", out, "--opset", 21, "--input-names", "tokens", "--output-names", "logits",
            "--dim-name", "idx:0=batch", "--dim-name", "idx:1=seq", "--external-data", "always",
            "--verbose")
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "open" in r.stdout and "write" in r.stdout
    assert os.path.exists(str(out) + ".data")
    mp = onnx.load(str(out), load_external_data=False)
    assert mp.opset_import[0].version == 21
    assert [i.name for i in mp.graph.input] == ["tokens"]
    assert [o.name for o in mp.graph.output] == ["logits"]
    dims = [d.dim_param for d in mp.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "seq"]
    _, got = run_ort(str(out), {"tokens": torch.randint(0, 512, (3, 5)).numpy()})
    assert got[0].shape == (3, 5, 512)
    q = cli(pt2, "-o", tmp_path / "q.onnx", "--quiet", "--no-optimize")
    assert q.returncode == 0 and q.stdout == "" and q.stderr == ""
    default = cli(pt2)  # output beside the input, named after it
    assert default.returncode == 0 and os.path.exists(tmp_path / "gpt.onnx")
    n_opt = len(onnx.load(tmp_path / "gpt.onnx").graph.node)
    assert len(onnx.load(tmp_path / "q.onnx").graph.node) > n_opt


def test_exit_codes(tmp_path):
    assert cli("--opset").returncode == 2
    assert cli(tmp_path / "x.pt2", "--opset", "abc").returncode == 2
    assert cli(tmp_path / "x.pt2", "--opset", 10).returncode == 2
    assert cli(tmp_path / "x.pt2", "--bogus").returncode == 2
    assert cli(tmp_path / "x.pt2", "--dim-name", "nonsense").returncode == 2
    missing = cli(tmp_path / "missing.pt2", "-o", tmp_path / "m.onnx")
    assert missing.returncode == 1 and "cannot open" in missing.stderr

    class Unsupported(nn.Module):
        def forward(self, x):
            return torch.linalg.matrix_exp(x)  # not converted (data-dependent Pade degree)

    pt2 = tmp_path / "u.pt2"
    torch.export.save(torch.export.export(Unsupported(), (torch.randn(3, 3),)), pt2)
    r = cli(pt2, "-o", tmp_path / "u.onnx")
    assert r.returncode == 1 and "torch.ops.aten.linalg_matrix_exp.default (1 node)" in r.stderr
    assert not os.path.exists(tmp_path / "u.onnx")


def test_inspect(tmp_path):
    m = GPT(layers=1).eval()
    ds = {"idx": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=128)}}
    pt2 = tmp_path / "gpt.pt2"
    torch.export.save(torch.export.export(m, (torch.randint(0, 512, (2, 6)),), dynamic_shapes=ds), pt2)
    r = cli("inspect", pt2)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "schema version: 8." in out and f"torch version:  {torch.__version__}" in out
    assert "idx" in out and "int64[s" in out  # symbolic shapes
    assert "torch.ops.aten.scaled_dot_product_attention.default" in out
    assert "all operators convert at opset 18" in out
    n_bytes = sum(p.numel() * 4 for p in m.parameters())
    assert f"{n_bytes / 1000:.1f} KB" in out

    class Unsupported(nn.Module):
        def forward(self, x):
            return torch.linalg.matrix_exp(x)  # not converted (data-dependent Pade degree)

    pt2u = tmp_path / "u.pt2"
    torch.export.save(torch.export.export(Unsupported(), (torch.randn(3, 3),)), pt2u)
    r = cli("inspect", pt2u)
    assert r.returncode == 0 and "not supported at opset 18:\n  torch.ops.aten.linalg_matrix_exp.default" in r.stdout


def hostile_cases():
    with open(os.path.join(HOSTILE, "expected.tsv")) as f:
        return [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]


@pytest.mark.parametrize("name,expected", hostile_cases())
def test_hostile_archive(tmp_path, name, expected):
    out = tmp_path / "out.onnx"
    r = cli(os.path.join(HOSTILE, name), "-o", out)
    assert r.returncode == 1, r.stdout + r.stderr
    assert expected in r.stderr
    assert "pt2onnx: error:" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_cpp_example_program(tmp_path):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)

    w = Wrap().eval()
    pt2 = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(w, (torch.randn(3, 4),),
                                          dynamic_shapes={"x": {0: torch.export.Dim("b")}}), pt2)
    example = os.path.join(conftest.CPP_BUILD, "pt2onnx_example")
    r = subprocess.run([example, str(pt2), str(tmp_path / "m.onnx")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "in-memory conversion identical" in r.stdout
    mp = onnx.load(tmp_path / "m.onnx")
    assert mp.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert_matches(w, str(tmp_path / "m.onnx"), {"x": torch.randn(5, 4)})
