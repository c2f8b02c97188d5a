"""Modules as ONNX model-local functions (export_modules_as_functions=...,
inline=...; issue 11 item 3). Every model is checked with onnx's full
checker, run in onnxruntime and compared with PyTorch on batches other than
the export's."""

import collections
import subprocess

import numpy as np
import onnx
import pytest
import torch
from conftest import cli_path, ort_session

import pt2onnx

ATOL = RTOL = 1e-5
MOD = __name__  # the functions' domain: the classes' Python module


class MLPBlock(torch.nn.Module):
    def __init__(self, d=8, h=16):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, h)
        self.fc2 = torch.nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class Head(torch.nn.Module):
    def __init__(self, d=8, n=3):
        super().__init__()
        self.proj = torch.nn.Linear(d, n)

    def forward(self, x):
        return torch.softmax(self.proj(x), dim=-1)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([MLPBlock() for _ in range(3)])
        self.head = Head()

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _net():
    torch.manual_seed(0)
    return Net().eval()


DYN = {"x": {0: torch.export.Dim("batch", min=1, max=64)}}


def _export(model, path, **kw):
    return pt2onnx.export(model, (torch.randn(3, 5, 8),), path, dynamic_shapes=DYN, **kw)


def _check_runs(model, path, batches=(2, 5), make=lambda b: torch.randn(b, 5, 8)):
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    sess = ort_session(path)
    name = sess.get_inputs()[0].name
    for b in batches:
        x = make(b)
        with torch.no_grad():
            want = model(x)
        got = sess.run(None, {name: x.numpy()})[0]
        np.testing.assert_allclose(got, want.numpy(), rtol=RTOL, atol=ATOL)
    return m


def _calls(m):
    return [n for n in m.graph.node if n.domain not in ("", "ai.onnx")]


def _histogram(nodes):
    return collections.Counter((n.domain, n.op_type) for n in nodes)


def test_selected_class_shares_one_function(tmp_path):
    model = _net()
    path = str(tmp_path / "m.onnx")
    _export(model, path, export_modules_as_functions={MLPBlock})
    m = _check_runs(model, path)
    assert [(f.domain, f.name) for f in m.functions] == [(MOD, "MLPBlock")]
    calls = _calls(m)
    assert [(c.domain, c.op_type, c.name) for c in calls] == [
        (MOD, "MLPBlock", f"blocks.{i}") for i in range(3)]
    assert {"domain": MOD, "version": 1} in [
        {"domain": o.domain, "version": o.version} for o in m.opset_import]
    f = m.functions[0]
    # Weights stay initializers of the main graph, passed at each call.
    inits = {i.name for i in m.graph.initializer}
    for i, c in enumerate(calls):
        ws = [v for v in c.input if v in inits]
        assert sorted(ws) == sorted(f"blocks.{i}.{p}" for p in (
            "norm.weight", "norm.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"))
        assert len(c.input) == len(f.input) and len(c.output) == len(f.output) == 1
    # The calls chain: each block reads the previous one's output.
    assert calls[1].input[0] == calls[0].output[0]
    assert calls[2].input[0] == calls[1].output[0]
    # The body holds the block's computation; the head stays in the main graph.
    body_ops = {n.op_type for n in f.node}
    assert "LayerNormalization" in body_ops and "MatMul" in body_ops
    main_ops = {n.op_type for n in m.graph.node if n.domain == ""}
    assert "Softmax" in main_ops and "LayerNormalization" not in main_ops


def test_all_modules_nested_functions(tmp_path):
    model = _net()
    path = str(tmp_path / "m.onnx")
    _export(model, path, export_modules_as_functions=True)
    m = _check_runs(model, path)
    fns = {(f.domain, f.name): f for f in m.functions}
    # Linear is one class but three bodies (8->16, 16->8, 8->3: weight types differ).
    assert set(fns) == {
        (MOD, "MLPBlock"), (MOD, "Head"),
        ("torch.nn.modules.linear", "Linear"), ("torch.nn.modules.linear", "Linear_1"),
        ("torch.nn.modules.linear", "Linear_2"),
        ("torch.nn.modules.normalization", "LayerNorm")}
    # The main graph: three block calls and the head call, nothing else.
    assert [(n.domain, n.op_type) for n in m.graph.node] == [(MOD, "MLPBlock")] * 3 + [
        (MOD, "Head")]
    # MLPBlock's body calls the nested functions.
    inner = [(n.domain, n.op_type) for n in fns[(MOD, "MLPBlock")].node if n.domain]
    assert inner == [("torch.nn.modules.normalization", "LayerNorm"),
                     ("torch.nn.modules.linear", "Linear"),
                     ("torch.nn.modules.linear", "Linear_1")]
    head = [(n.domain, n.op_type) for n in fns[(MOD, "Head")].node if n.domain]
    assert head == [("torch.nn.modules.linear", "Linear_2")]
    # Functions import the domains of the functions they call.
    opsets = {o.domain for o in fns[(MOD, "MLPBlock")].opset_import}
    assert {"", "torch.nn.modules.linear", "torch.nn.modules.normalization"} <= opsets


def test_inline_gives_the_plain_export(tmp_path):
    model = _net()
    plain, inl = str(tmp_path / "plain.onnx"), str(tmp_path / "inl.onnx")
    _export(model, plain)
    for sel in ({MLPBlock}, True):
        _export(model, inl, export_modules_as_functions=sel, inline=True)
        m = _check_runs(model, inl)
        p = onnx.load(plain)
        assert len(m.functions) == 0 and not _calls(m)
        assert _histogram(m.graph.node) == _histogram(p.graph.node)
        assert {i.name for i in m.graph.initializer} == {i.name for i in p.graph.initializer}
        assert {o.domain for o in m.opset_import} == {o.domain for o in p.opset_import}


@pytest.mark.parametrize("strict", [False, True])
def test_one_instance_called_twice_and_attribute_difference(tmp_path, strict):
    class Scale(torch.nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k = k

        def forward(self, x):
            return torch.relu(x) * self.k

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = Scale(2.0)
            self.b = Scale(3.0)
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            x = self.a(self.a(x))  # one instance, two calls (keys a and a@1)
            return self.b(self.lin(x))

    torch.manual_seed(0)
    model = M().eval()
    path = str(tmp_path / "m.onnx")
    _export(model, path, export_modules_as_functions={Scale}, strict=strict)
    m = _check_runs(model, path)
    # Scale(2.0) and Scale(3.0) differ in a constant of the body: two functions.
    assert sorted(f.name for f in m.functions) == ["Scale", "Scale_1"]
    calls = _calls(m)
    assert [(c.op_type, c.name) for c in calls] == [
        ("Scale", "a"), ("Scale", "a@1"), ("Scale_1", "b")]


def test_transformers_decoder_layers(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64)
    llama = LlamaForCausalLM(cfg).eval()

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    model = Logits(llama).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(model, (torch.randint(0, 128, (3, 8)),),
                             dynamic_shapes={"input_ids": {0: batch}})
    ids = lambda b: torch.randint(0, 128, (b, 8))  # noqa: E731
    path, plain, inl = (str(tmp_path / n) for n in ("llama.onnx", "plain.onnx", "inl.onnx"))
    pt2onnx.export(ep, (), path, export_modules_as_functions={LlamaDecoderLayer})
    m = _check_runs(model, path, make=ids)
    dom = LlamaDecoderLayer.__module__
    # One function for the three layers: every layer unsqueezes the rotary
    # cos / sin alike, which CSE (run after the calls became functions) must
    # not merge across layers.
    assert [(f.domain, f.name) for f in m.functions] == [(dom, "LlamaDecoderLayer")]
    calls = _calls(m)
    assert [c.name for c in calls] == [f"m.model.layers.{i}" for i in range(3)]
    inits = {i.name for i in m.graph.initializer}
    for i, c in enumerate(calls):
        assert f"m.model.layers.{i}.self_attn.q_proj.weight" in c.input
        assert all(v in inits for v in c.input if ".layers." in v)
    # The attention and MLP math lives in the function, not in the main graph.
    body = _histogram(m.functions[0].node)
    assert body[("", "Softmax")] == 1
    assert ("", "Softmax") not in _histogram(m.graph.node)
    # Inlined (then CSE'd across the former calls): the plain export's graph.
    pt2onnx.export(ep, (), plain)
    pt2onnx.export(ep, (), inl, export_modules_as_functions=True, inline=True)
    mi = _check_runs(model, inl, make=ids)
    assert not mi.functions
    assert _histogram(mi.graph.node) == _histogram(onnx.load(plain).graph.node)
    # Every module: nested functions down to Linear; the graph is one call
    # (and the Shape of the dynamic batch torch.export takes outside modules).
    pt2onnx.export(ep, (), path, export_modules_as_functions=True)
    ma = _check_runs(model, path, make=ids)
    assert [(n.domain, n.op_type) for n in _calls(ma)] == [
        ("transformers.models.llama.modeling_llama", "LlamaForCausalLM")]
    assert len(ma.graph.node) <= 2
    names = {f.name for f in ma.functions}
    assert {"LlamaModel", "LlamaDecoderLayer", "LlamaAttention", "LlamaMLP", "LlamaRMSNorm",
            "Linear"} <= names


def test_class_never_called_gives_no_functions(tmp_path):
    model = _net()
    plain, path = str(tmp_path / "plain.onnx"), str(tmp_path / "m.onnx")
    _export(model, plain)
    with pytest.warns(UserWarning, match="no call of torch.nn.modules.conv.Conv2d in the model"):
        _export(model, path, export_modules_as_functions={torch.nn.Conv2d})
    m = _check_runs(model, path)
    assert len(m.functions) == 0 and not _calls(m)
    assert _histogram(m.graph.node) == _histogram(onnx.load(plain).graph.node)


@pytest.mark.parametrize("arg,text", [
    ({"MLPBlock"}, "must hold nn.Module classes"),
    ({MLPBlock()}, "must hold nn.Module classes"),
    ({int}, "must hold nn.Module classes"),
    (MLPBlock, "must be True, False or a set of nn.Module classes"),
    ("all", "must be True, False or a set of nn.Module classes"),
])
def test_bad_argument(tmp_path, arg, text):
    path = tmp_path / "m.onnx"
    with pytest.raises(TypeError, match=text):
        _export(_net(), str(path), export_modules_as_functions=arg)
    assert not path.exists()


def test_bad_inline_argument(tmp_path):
    with pytest.raises(TypeError, match="inline must be True or False"):
        _export(_net(), str(tmp_path / "m.onnx"), inline="yes")


def test_cli(tmp_path):
    model = _net()
    pt2 = str(tmp_path / "m.pt2")
    ep = torch.export.export(model, (torch.randn(3, 5, 8),), dynamic_shapes=DYN)
    torch.export.save(ep, pt2)
    cli = cli_path()
    out = str(tmp_path / "m.onnx")
    r = subprocess.run([cli, pt2, "-o", out, "--modules-as-functions", "MLPBlock,Head", "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = _check_runs(model, out)
    assert sorted(f.name for f in m.functions) == ["Head", "MLPBlock"]
    r = subprocess.run([cli, pt2, "-o", out, "--modules-as-functions", "all", "--inline", "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = _check_runs(model, out)
    assert len(m.functions) == 0
    r = subprocess.run([cli, pt2, "-o", out, "--modules-as-functions", "Conv2d"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "matched no module call" in r.stderr
    r = subprocess.run([cli, pt2, "-o", out, "--modules-as-functions"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "needs a value" in r.stderr


class CondBlock(torch.nn.Module):
    """A block whose body holds an If (torch.cond): its branches read the
    block's input and weight from the enclosing scope."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        return torch.cond(y.sum() > 0, lambda a: torch.relu(a) + x, lambda a: a * 2.0 - x, (y,))


def test_control_flow_inside_a_function(tmp_path):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = CondBlock(), CondBlock()

        def forward(self, x):
            return self.b(self.a(x))

    torch.manual_seed(0)
    model = M().eval()

    def make(b):  # block a takes its then branch at batch 2, its else branch at 5
        z = torch.randn(b, 5, 8)
        want = 1.0 if b == 2 else -1.0
        with torch.no_grad():
            z = z * 100 * want * torch.sign((z @ model.a.lin.weight.T).sum())
            assert (model.a.lin(z).sum() > 0) == (want > 0)
        return z

    path, inl = str(tmp_path / "m.onnx"), str(tmp_path / "inl.onnx")
    _export(model, path, export_modules_as_functions={CondBlock})
    m = _check_runs(model, path, make=make)
    assert [f.name for f in m.functions] == ["CondBlock"]
    assert [n.op_type for n in m.functions[0].node].count("If") == 1
    assert [c.op_type for c in _calls(m)] == ["CondBlock"] * 2
    _export(model, inl, export_modules_as_functions={CondBlock}, inline=True)
    mi = _check_runs(model, inl, make=make)
    assert not mi.functions and [n.op_type for n in mi.graph.node].count("If") == 2
