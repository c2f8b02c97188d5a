"""What onnxruntime loads fast: weights in `<f>.data` by default (torch.onnx's
default and file naming), one file with external_data=False, and Linear
weights stored in the layout MatMul reads (no Transpose of an initializer
left for the runtime to fold at every load). Every model runs in onnxruntime
against PyTorch on inputs other than the export inputs."""

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn as nn
from onnx import numpy_helper

import pt2onnx


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 16, bias=False)

    def forward(self, x):  # x: [batch, seq, 32]: linear becomes MatMul(x, W^T)
        return self.fc2(torch.relu(self.fc1(x)))


DS = {"x": {0: "batch", 1: "seq"}}


def _run(path, x):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x.numpy()})[0]


def _check_runs(path, m):
    x = torch.randn(3, 7, 32)  # not the export input's shape
    with torch.no_grad():
        np.testing.assert_allclose(_run(path, x), m(x).numpy(), rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    return MLP().eval()


def test_default_writes_data_file_named_as_torch_onnx(mlp, tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    r = pt2onnx.export(mlp, (torch.randn(2, 5, 32),), str(ours / "m.onnx"), dynamic_shapes=DS)
    torch.onnx.export(mlp, (torch.randn(2, 5, 32),), str(theirs / "m.onnx"), dynamo=True,
                      dynamic_shapes=DS, verbose=False)
    assert sorted(os.listdir(theirs)) == ["m.onnx", "m.onnx.data"]  # torch.onnx's default
    assert sorted(os.listdir(ours)) == ["m.onnx", "m.onnx.data"]
    assert r.data_paths == [str(ours / "m.onnx.data")]
    mp = onnx.load(str(ours / "m.onnx"), load_external_data=False)
    for t in mp.graph.initializer:
        nbytes = np.prod(t.dims) * 4
        if nbytes >= 1024:  # small tensors stay inline
            kv = {e.key: e.value for e in t.external_data}
            assert t.data_location == onnx.TensorProto.EXTERNAL and kv["location"] == "m.onnx.data"
        else:
            assert t.data_location == onnx.TensorProto.DEFAULT and t.HasField("raw_data")
    _check_runs(str(ours / "m.onnx"), mlp)


def test_external_data_false_writes_one_file(mlp, tmp_path):
    r = pt2onnx.export(mlp, (torch.randn(2, 5, 32),), str(tmp_path / "m.onnx"),
                       dynamic_shapes=DS, external_data=False)
    assert os.listdir(tmp_path) == ["m.onnx"] and r.data_paths == []
    mp = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert all(t.data_location == onnx.TensorProto.DEFAULT for t in mp.graph.initializer)
    _check_runs(str(tmp_path / "m.onnx"), mlp)


@pytest.mark.parametrize("external", [True, False])
def test_linear_weights_stored_transposed(mlp, tmp_path, external):
    path = str(tmp_path / "m.onnx")
    pt2onnx.export(mlp, (torch.randn(2, 5, 32),), path, dynamic_shapes=DS,
                   external_data=external)
    mp = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t) for t in mp.graph.initializer}
    for n in mp.graph.node:
        assert not (n.op_type == "Transpose" and n.input[0] in inits), n
    matmuls = [n for n in mp.graph.node if n.op_type == "MatMul"]
    assert [n.input[1] for n in matmuls] == ["fc1.weight.T", "fc2.weight.T"]
    sd = mlp.state_dict()
    for name in ("fc1.weight", "fc2.weight"):
        assert name not in inits  # written once, in the layout MatMul reads
        np.testing.assert_array_equal(inits[name + ".T"], sd[name].numpy().T)
    _check_runs(path, mlp)


class TiedAndPermuted(nn.Module):
    """A tied embedding / output weight (read untransposed by Gather, so its
    Transpose stays and the weight is written once) and a 3-D weight permuted
    (2, 0, 1) before a batched MatMul."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.w3 = nn.Parameter(torch.randn(32, 4, 8))  # used as [8, 32, 4]

    def forward(self, idx, x):
        h = self.emb(idx)  # [b, s, 32]
        logits = h @ self.emb.weight.t()  # [b, s, 50]
        y = torch.matmul(x, self.w3.permute(2, 0, 1))  # [8, s, 32] @ [8, 32, 4]
        return logits, y


def test_tied_weight_kept_and_permuted_weight_folded(tmp_path):
    torch.manual_seed(0)
    m = TiedAndPermuted().eval()
    path = str(tmp_path / "m.onnx")
    args = (torch.randint(0, 50, (2, 5)), torch.randn(8, 5, 32))
    pt2onnx.export(m, args, path, dynamic_shapes={"idx": {0: "b", 1: "s"}, "x": {1: "s"}})
    mp = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t) for t in mp.graph.initializer}
    assert sorted(inits) == ["emb.weight", "w3.perm_2_0_1"]
    np.testing.assert_array_equal(inits["w3.perm_2_0_1"],
                                  m.w3.detach().numpy().transpose(2, 0, 1))
    assert [n.input[0] for n in mp.graph.node if n.op_type == "Transpose"] == ["emb.weight"]
    idx, x = torch.randint(0, 50, (3, 9)), torch.randn(8, 9, 32)
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = s.run(None, {s.get_inputs()[0].name: idx.numpy(), s.get_inputs()[1].name: x.numpy()})
    with torch.no_grad():
        want = m(idx, x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)


class ConvBnStack(nn.Module):
    """torchvision-like: Conv+BN+ReLU, a depthwise (grouped) Conv+BN, a Conv
    with bias +BN, and a ConvTranspose+BN; eval mode."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU())
        self.dw = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False),
                                nn.BatchNorm2d(8, eps=1e-3), nn.ReLU6())
        self.pw = nn.Sequential(nn.Conv2d(8, 16, 1), nn.BatchNorm2d(16))
        self.up = nn.Sequential(nn.ConvTranspose2d(16, 6, 2, 2, groups=2), nn.BatchNorm2d(6))

    def forward(self, x):
        return self.up(torch.relu(self.pw(self.dw(self.stem(x)))))


def _randomize_bn(m):
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.3, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.5, 0.5)
    return m


def test_conv_batchnorm_folded(tmp_path):
    # Inference BatchNormalization after a Conv is folded into the Conv's
    # weight and bias (as torch.onnx does): onnxruntime would otherwise fuse
    # them at every load, copying each conv weight.
    torch.manual_seed(0)
    m = _randomize_bn(ConvBnStack()).eval()
    path = str(tmp_path / "m.onnx")
    ds = {"x": {0: "batch", 2: "h", 3: "w"}}
    pt2onnx.export(m, (torch.randn(2, 3, 32, 32),), path, dynamic_shapes=ds)
    mp = onnx.load(path, load_external_data=False)
    ops = [n.op_type for n in mp.graph.node]
    assert "BatchNormalization" not in ops
    assert ops.count("Conv") == 3 and ops.count("ConvTranspose") == 1
    names = {t.name for t in mp.graph.initializer}
    # Folded tensors under derived names; the state_dict's own names are gone
    # (their values would no longer be the state_dict's).
    assert "stem.0.weight.bn_folded" in names and "pw.0.bias.bn_folded" in names
    assert "stem.1.bias.bn_folded" in names  # the stem conv had no bias
    assert not names & {"stem.0.weight", "pw.0.weight", "pw.0.bias", "stem.1.running_mean"}
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for shape in [(3, 3, 40, 24), (1, 3, 17, 29)]:  # new batch and spatial sizes
        x = torch.randn(*shape)
        with torch.no_grad():
            want = m(x).numpy()
        got = s.run(None, {s.get_inputs()[0].name: x.numpy()})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


class ConvBnShared(nn.Module):
    """The conv output is read twice: the BatchNormalization must stay."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y) + y


def test_conv_batchnorm_not_folded_when_conv_output_shared(tmp_path):
    torch.manual_seed(0)
    m = _randomize_bn(ConvBnShared()).eval()
    path = str(tmp_path / "m.onnx")
    pt2onnx.export(m, (torch.randn(2, 3, 8, 8),), path, dynamic_shapes={"x": {0: "batch"}})
    mp = onnx.load(path, load_external_data=False)
    assert [n.op_type for n in mp.graph.node].count("BatchNormalization") == 1
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = torch.randn(3, 3, 8, 8)
    with torch.no_grad():
        want = m(x).numpy()
    got = s.run(None, {s.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
