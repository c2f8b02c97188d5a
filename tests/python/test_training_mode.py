"""export(training=...) (issue 11 item 4): EVAL / TRAINING / PRESERVE as
torch.onnx's TrainingMode. Dropout in training mode is ONNX Dropout (random:
its statistics are tested), batch norm in training mode normalizes with the
batch statistics and returns the updated running statistics as
'<buffer>_updated' outputs, compared with PyTorch after one forward in train
mode on a copy of the model."""

import copy
import subprocess

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from conftest import cli_path, ort_session
from torch import nn
from torch.export import Dim

import pt2onnx

TRAINING = pt2onnx.TrainingMode.TRAINING
EVAL = pt2onnx.TrainingMode.EVAL
PRESERVE = pt2onnx.TrainingMode.PRESERVE
ATOL = RTOL = 1e-5


def ops(path):
    return [n.op_type for n in onnx.load(path).graph.node]


def run(path, *xs):
    sess = ort_session(path)
    names = [i.name for i in sess.get_inputs()]
    return [o.name for o in sess.get_outputs()], sess.run(
        None, {n: x.numpy() for n, x in zip(names, xs)})


def modes(model):
    return [m.training for m in model.modules()]


# ---- dropout


class DropoutModule(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.drop(x)


class DropoutFunctional(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, training=self.training)


@pytest.mark.parametrize("cls", [DropoutModule, DropoutFunctional])
@pytest.mark.parametrize("p", [0.3, 0.75])
def test_dropout_training_statistics(cls, p, tmp_onnx):
    model = cls(p).eval()
    pt2onnx.export(model, (torch.randn(4, 8),), tmp_onnx, training=TRAINING,
                   dynamic_shapes={"x": {0: Dim("b"), 1: Dim("n")}})
    assert not model.training  # restored
    graph = onnx.load(tmp_onnx).graph
    drops = [n for n in graph.node if n.op_type == "Dropout"]
    assert len(drops) == 1 and len(drops[0].input) == 3  # data, ratio, training_mode
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    assert inits[drops[0].input[2]].item() is True
    assert inits[drops[0].input[1]].item() == pytest.approx(p)
    # A large input other than the export input: the fraction of zeros is
    # binomial, sd = sqrt(p (1 - p) / n) < 0.0009 for n = 2^18; 0.005 is > 5 sd.
    x = torch.rand(64, 4096) + 0.5  # no zeros of its own
    _, (y,) = run(tmp_onnx, x)
    _, (y2,) = run(tmp_onnx, x)
    n = x.numel()
    zeros = (y == 0).mean()
    assert abs(zeros - p) < 0.005, zeros
    kept = y != 0
    np.testing.assert_allclose(y[kept], x.numpy()[kept] / (1 - p), rtol=1e-6)
    assert (kept != (y2 != 0)).sum() > n * p * (1 - p)  # each run draws anew


@pytest.mark.parametrize("cls", [DropoutModule, DropoutFunctional])
def test_dropout_eval_is_identity(cls, tmp_onnx):
    model = cls(0.5).train()
    pt2onnx.export(model, (torch.randn(3, 5),), tmp_onnx, dynamic_shapes={"x": {0: Dim("b")}})
    assert model.training  # restored after the eval capture
    assert "Dropout" not in ops(tmp_onnx)
    x = torch.randn(7, 5)
    _, (y,) = run(tmp_onnx, x)
    np.testing.assert_array_equal(y, x.numpy())


# ---- batch norm


def bn_model(kind):
    torch.manual_seed(0)
    bn = {"1d": nn.BatchNorm1d(6), "1d_seq": nn.BatchNorm1d(6), "2d": nn.BatchNorm2d(6)}[kind]
    with torch.no_grad():  # statistics and affine parameters away from 0 / 1
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    bn.num_batches_tracked.fill_(3)
    return nn.Sequential(bn)


def bn_input(kind, batch):
    shape = {"1d": (batch, 6), "1d_seq": (batch, 6, 5), "2d": (batch, 6, 4, 3)}[kind]
    return torch.randn(*shape) * 2 + 1


def reference_step(model, x):
    """One forward in train mode on a copy: output and the updated buffers."""
    m = copy.deepcopy(model).train()
    with torch.no_grad():
        y = m(x)
    return y, {k: v.numpy() for k, v in m.named_buffers()}


@pytest.mark.parametrize("kind", ["1d", "1d_seq", "2d"])
@pytest.mark.parametrize("opset", [13, 18])
def test_batch_norm_training(kind, opset, tmp_onnx):
    model = bn_model(kind).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    pt2onnx.export(model, (bn_input(kind, 3),), tmp_onnx, training=TRAINING, opset=opset,
                   dynamic_shapes={"input": {0: Dim("batch")}})
    assert not model.training
    for k, v in model.state_dict().items():  # the capture ran no real forward
        assert torch.equal(v, before[k]), k
    for batch in (2, 5):
        x = bn_input(kind, batch)
        names, got = run(tmp_onnx, x)
        assert names[1:] == ["0.running_mean_updated", "0.running_var_updated",
                             "0.num_batches_tracked_updated"]
        y, buffers = reference_step(model, x)
        np.testing.assert_allclose(got[0], y.numpy(), atol=ATOL, rtol=RTOL)
        np.testing.assert_allclose(got[1], buffers["0.running_mean"], atol=ATOL, rtol=RTOL)
        np.testing.assert_allclose(got[2], buffers["0.running_var"], atol=ATOL, rtol=RTOL)
        assert got[3] == buffers["0.num_batches_tracked"] == 4
        # the batch statistics, not the running ones
        with torch.no_grad():
            y_eval = model(x)
        assert np.abs(got[0] - y_eval.numpy()).max() > 0.1


def test_batch_norm_eval(tmp_onnx):
    model = bn_model("2d").train()
    pt2onnx.export(model, (bn_input("2d", 3),), tmp_onnx,
                   dynamic_shapes={"input": {0: Dim("batch")}})
    assert model.training
    names, got = run(tmp_onnx, bn_input("2d", 5))
    assert len(names) == 1 and "BatchNormalization" in ops(tmp_onnx)
    x = bn_input("2d", 5)
    _, (y,) = run(tmp_onnx, x)
    with torch.no_grad():
        np.testing.assert_allclose(y, model.eval()(x).numpy(), atol=ATOL, rtol=RTOL)


# ---- a small conv net with both


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, stride=2), nn.BatchNorm2d(8), nn.ReLU())
        self.drop = nn.Dropout(0.4)

    def forward(self, x):
        return self.drop(self.features(x).flatten(1))


def test_conv_net_training(tmp_onnx):
    torch.manual_seed(0)
    model = ConvNet().eval()
    pt2onnx.export(model, (torch.randn(3, 3, 9, 9),), tmp_onnx, training=TRAINING,
                   dynamic_shapes={"x": {0: Dim("batch")}})
    assert "Dropout" in ops(tmp_onnx)
    for batch in (2, 5):
        x = torch.randn(batch, 3, 9, 9)
        names, got = run(tmp_onnx, x)
        ref = copy.deepcopy(model)
        ref.drop.p = 0.0
        feats, buffers = reference_step(ref, x)
        for k, v in buffers.items():
            np.testing.assert_allclose(got[names.index(k + "_updated")], v, atol=ATOL,
                                       rtol=RTOL, err_msg=k)
        # Dropout over the batch-normalized features: kept values scaled by 1 / (1 - p)
        f = feats.numpy()
        kept = got[0] != 0
        np.testing.assert_allclose(got[0][kept], f[kept] / 0.6, atol=ATOL, rtol=RTOL)
        nonzero = f != 0
        assert 0.2 < 1 - kept[nonzero].mean() < 0.6  # ~0.4 of a few hundred values


# ---- EVAL / TRAINING / PRESERVE


def test_preserve_follows_the_model(tmp_onnx):
    torch.manual_seed(0)
    model = ConvNet().train()
    x = torch.randn(2, 3, 9, 9)
    pt2onnx.export(model, (x,), tmp_onnx, training=PRESERVE)
    assert model.training
    assert "Dropout" in ops(tmp_onnx)
    names, _ = run(tmp_onnx, x)
    assert "features.1.running_mean_updated" in names
    pt2onnx.export(model, (x,), tmp_onnx)  # EVAL, the default
    assert model.training
    assert "Dropout" not in ops(tmp_onnx)
    names, (y,) = run(tmp_onnx, x)
    assert names == ["dropout"]
    x2 = torch.randn(2, 3, 9, 9)
    _, (y,) = run(tmp_onnx, x2)
    with torch.no_grad():
        np.testing.assert_allclose(y, copy.deepcopy(model).eval()(x2).numpy(), atol=1e-4,
                                   rtol=1e-4)
    model.eval()
    pt2onnx.export(model, (x,), tmp_onnx, training=PRESERVE)
    assert "Dropout" not in ops(tmp_onnx) and not model.training


def test_mixed_submodule_modes_are_restored(tmp_onnx):
    model = ConvNet().train()
    model.features[1].eval()  # a frozen batch norm
    saved = modes(model)
    for mode in (EVAL, TRAINING, PRESERVE):
        pt2onnx.export(model, (torch.randn(2, 3, 9, 9),), tmp_onnx, training=mode)
        assert modes(model) == saved, mode
    # PRESERVE kept the frozen one in eval: only the other batch norm updates
    names, _ = run(tmp_onnx, torch.randn(2, 3, 9, 9))
    assert "features.4.running_mean_updated" in names
    assert "features.1.running_mean_updated" not in names


def test_mode_restored_when_capture_fails(tmp_onnx):
    class Bad(nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent branch: torch.export refuses
                return x
            return -x

    model = Bad().train()
    with pytest.raises(Exception):
        pt2onnx.export(model, (torch.randn(2),), tmp_onnx, training=EVAL)
    assert model.training


def test_torch_onnx_training_mode_accepted(tmp_onnx):
    model = DropoutModule(0.5).eval()
    pt2onnx.export(model, (torch.randn(3, 4),), tmp_onnx,
                   training=torch.onnx.TrainingMode.TRAINING)
    assert "Dropout" in ops(tmp_onnx)
    with pytest.raises(TypeError, match="training must be a pt2onnx.TrainingMode"):
        pt2onnx.export(model, (torch.randn(3, 4),), tmp_onnx, training=True)


def test_verify(tmp_onnx):
    model = bn_model("2d").train()
    r = pt2onnx.export(model, (bn_input("2d", 3),), tmp_onnx, verify=True)  # EVAL
    assert r.checks["verify"] and model.training
    with pytest.raises(ValueError, match="training-mode export"):
        pt2onnx.export(model, (bn_input("2d", 3),), tmp_onnx, verify=True, training=TRAINING)


# ---- programs captured already: ExportedProgram, run_decompositions(), .pt2


def test_exported_program(tmp_onnx):
    model = bn_model("1d").train()
    x = bn_input("1d", 4)
    ep = torch.export.export(model, (x,))
    pt2onnx.export(ep, (), tmp_onnx)  # converted as captured (train form), no state outputs
    names, (y,) = run(tmp_onnx, x)
    ref_y, buffers = reference_step(model, x)
    assert len(names) == 1
    np.testing.assert_allclose(y, ref_y.numpy(), atol=ATOL, rtol=RTOL)
    pt2onnx.export(ep, (), tmp_onnx, training=TRAINING)
    names, got = run(tmp_onnx, x)
    assert names[1:] == ["0.running_mean_updated", "0.running_var_updated",
                         "0.num_batches_tracked_updated"]
    np.testing.assert_allclose(got[2], buffers["0.running_var"], atol=ATOL, rtol=RTOL)


def test_run_decompositions_program(tmp_onnx):
    """Core ATen: _native_batch_norm_legit_functional and native_dropout, the
    updates named in the signature (outputs in every mode)."""
    model = nn.Sequential(bn_model("2d")[0], nn.Dropout(0.5)).train()
    x = bn_input("2d", 4)
    ep = torch.export.export(model, (x,)).run_decompositions()
    pt2onnx.export(ep, (), tmp_onnx, training=TRAINING)
    assert "Dropout" in ops(tmp_onnx)
    names, got = run(tmp_onnx, x)
    ref = copy.deepcopy(model)
    ref[1].p = 0.0
    y, buffers = reference_step(ref, x)
    for k in ("0.running_mean", "0.running_var", "0.num_batches_tracked"):
        np.testing.assert_allclose(got[names.index(k + "_updated")], buffers[k], atol=ATOL,
                                   rtol=RTOL)
    kept = got[0] != 0
    np.testing.assert_allclose(got[0][kept], y.numpy()[kept] * 2, atol=ATOL, rtol=RTOL)


def test_cli_training_option(tmp_path):
    model = bn_model("2d").train()
    x = bn_input("2d", 4)
    pt2 = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(pt2))
    cli = cli_path()
    outs = {}
    for mode in (None, "eval", "training", "preserve"):
        out = tmp_path / f"{mode}.onnx"
        extra = ["--training", mode] if mode else []
        r = subprocess.run([cli, str(pt2), "-o", str(out), *extra], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
        outs[mode] = run(str(out), x)
    ref_y, buffers = reference_step(model, x)
    for mode, (names, got) in outs.items():
        np.testing.assert_allclose(got[0], ref_y.numpy(), atol=ATOL, rtol=RTOL)  # as captured
        assert len(names) == (4 if mode == "training" else 1), mode
    np.testing.assert_allclose(outs["training"][1][1], buffers["0.running_mean"], atol=ATOL,
                               rtol=RTOL)
    r = subprocess.run([cli, str(pt2), "--training", "train"], capture_output=True, text=True)
    assert r.returncode == 2 and "--training must be eval, training or preserve" in r.stderr
