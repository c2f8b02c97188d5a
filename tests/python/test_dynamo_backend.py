"""torch.compile backends "pt2onnx" and "pt2onnx_debug" (python/pt2onnx/dynamo_backend.py):
registration through entry points, dynamic shapes and recompiles, weights as
constants that follow in-place changes, session sharing that never crosses
models, the inference-only refusal, unsupported ops (error and partition),
the debug backend finding a wrong converter, and a transformers LLaMA
decoding with a static KV cache written in place. Every result is compared
with eager PyTorch on inputs other than the ones the graph was compiled for."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

import pt2onnx
from pt2onnx import dynamo_backend

ATOL = RTOL = 1e-5


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean((2, 3))).softmax(-1)


def _convnet():
    torch.manual_seed(0)
    m = ConvNet().eval()
    m.bn.running_mean.uniform_(-0.5, 0.5)
    m.bn.running_var.uniform_(0.5, 1.5)
    return m


def _new_graphs(before):
    return dynamo_backend.stats()[before:]


def test_backends_are_registered_through_entry_points():
    """No import of pt2onnx: dynamo finds both names in the package's metadata."""
    code = (
        "import sys, torch\n"
        "assert 'pt2onnx' not in sys.modules\n"
        "names = torch._dynamo.list_backends(exclude_tags=())\n"
        "assert 'pt2onnx' in names and 'pt2onnx_debug' in names, names\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()).eval()\n"
        "x = torch.randn(2, 4)\n"
        "with torch.no_grad():\n"
        "    y = torch.compile(m, backend='pt2onnx')(x)\n"
        "    torch.testing.assert_close(y, m(x))\n"
        "assert 'pt2onnx.dynamo_backend' in sys.modules\n"
        "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=os.path.dirname(__file__))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok")


def test_dynamic_graph_matches_eager_at_several_shapes():
    m = _convnet()
    before = len(dynamo_backend.stats())
    c = torch.compile(m, backend="pt2onnx", dynamic=True)
    with torch.inference_mode():
        # No size 1 and no equal sizes: dynamo specializes those (duck sizing).
        for shape in [(2, 3, 16, 12), (3, 3, 9, 13), (5, 3, 20, 8)]:
            x = torch.randn(shape)
            torch.testing.assert_close(c(x), m(x), atol=ATOL, rtol=RTOL)
    graphs = _new_graphs(before)
    assert len(graphs) == 1 and graphs[0].conversions == 1  # one dynamic graph for all
    assert graphs[0].weights >= 6  # conv, bn and fc tensors are initializers
    assert graphs[0].providers == ["CPUExecutionProvider"]


def test_recompiles_on_a_new_shape_and_never_reuses_a_session():
    m = _convnet()
    before = len(dynamo_backend.stats())
    c = torch.compile(m, backend="pt2onnx", dynamic=False)
    a, b = torch.randn(2, 3, 16, 16), torch.randn(3, 3, 12, 12)
    with torch.no_grad():
        for x in (a, b, a, b):
            torch.testing.assert_close(c(x), m(x), atol=ATOL, rtol=RTOL)
    graphs = _new_graphs(before)
    assert len(graphs) == 2  # a static graph per shape
    assert graphs[0].session_id != graphs[1].session_id


def test_identical_graphs_share_a_session_and_changed_weights_do_not():
    m = _convnet()
    x = torch.randn(2, 3, 8, 8)
    before = len(dynamo_backend.stats())
    with torch.no_grad():
        # Two compiles of one model (another backend object: dynamo compiles
        # again) while the first graph lives: the same model, one session.
        torch.compile(m, backend="pt2onnx", options={"save_dir": None})(x)
        c2 = torch.compile(m, backend="pt2onnx")
        torch.testing.assert_close(c2(x), m(x), atol=ATOL, rtol=RTOL)
        graphs = _new_graphs(before)
        assert len(graphs) == 2 and graphs[0].session_id == graphs[1].session_id
        m.fc.bias.add_(1.0)  # the same graph with other weights: not that session
        torch.testing.assert_close(c2(x), m(x), atol=ATOL, rtol=RTOL)
        assert graphs[1].conversions == 2 and graphs[1].session_id != graphs[0].session_id


def test_weights_changed_in_place_are_seen():
    m = _convnet()
    x = torch.randn(2, 3, 8, 8)
    before = len(dynamo_backend.stats())
    c = torch.compile(m, backend="pt2onnx")
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), atol=ATOL, rtol=RTOL)
        m.fc.weight.mul_(3.0)  # version counter moves: converted again with the new values
        torch.testing.assert_close(c(x), m(x), atol=ATOL, rtol=RTOL)
        g = _new_graphs(before)[0]
        assert g.conversions == 2
        weights = g.weights
        m.load_state_dict({k: v * 0.5 if v.is_floating_point() else v
                           for k, v in m.state_dict().items()})
        # fc.weight's second change: an input of the model from now on.
        torch.testing.assert_close(c(x), m(x), atol=ATOL, rtol=RTOL)
        assert g.conversions == 3 and g.weights == weights - 1
        m.fc.weight.add_(1.0)  # an input now: no conversion, new values used
        torch.testing.assert_close(c(x), m(x), atol=ATOL, rtol=RTOL)
        assert g.conversions == 3


def test_gradients_are_refused_not_computed_wrong():
    m = torch.nn.Linear(4, 2)
    c = torch.compile(m, backend="pt2onnx")
    with pytest.raises(Exception, match="inference only.*torch.no_grad"):
        c(torch.randn(3, 4))
    with torch.no_grad():
        x = torch.randn(3, 4)
        torch.testing.assert_close(c(x), m(x), atol=ATOL, rtol=RTOL)


def test_scalar_and_view_outputs():
    class M(torch.nn.Module):
        def forward(self, x):
            return x.shape[0] * 2, x.t(), x[1:], (x * 2).sum(0)

    m = M()
    c = torch.compile(m, backend="pt2onnx", dynamic=True)
    with torch.inference_mode():
        for n in (3, 6):
            x = torch.randn(n, 4)
            got, want = c(x), m(x)
            assert got[0] == want[0] and isinstance(got[0], int)
            for g, w in zip(got[1:], want[1:]):
                assert g.shape == w.shape and g.stride() == w.stride()
                torch.testing.assert_close(g, w, atol=ATOL, rtol=RTOL)


def test_options_reach_onnxruntime_and_unknown_ones_are_refused(tmp_path):
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()).eval()
    x = torch.randn(2, 4)
    before = len(dynamo_backend.stats())
    opts = {"providers": ["CPUExecutionProvider"], "save_dir": str(tmp_path),
            "session_options": {"intra_op_num_threads": 1}, "opset": 20, "target": "standard"}
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(m, backend="pt2onnx", options=opts)(x), m(x),
                                   atol=ATOL, rtol=RTOL)
    g = _new_graphs(before)[0]
    import onnx

    saved = onnx.load(str(tmp_path / f"graph_{g.graph}.onnx"))
    assert [o.version for o in saved.opset_import if o.domain == ""] == [20]
    assert any(n.op_type == "Gelu" for n in saved.graph.node)  # opset 20's own Gelu
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown option"):
        torch.compile(m, backend="pt2onnx", options={"fallbak": "partition"})(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="intra_op_num_thread"):
        with torch.no_grad():
            torch.compile(m, backend="pt2onnx",
                          options={"session_options": {"intra_op_num_thread": 1}})(x)


@torch.library.custom_op("pt2onnx_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2


@mystery.register_fake
def _(x):
    return torch.empty_like(x)


class WithMystery(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.b(mystery(torch.relu(self.a(x))) + 1)


def test_unsupported_ops_are_an_error_naming_them():
    m = WithMystery().eval()
    with torch.no_grad(), pytest.raises(Exception) as info:
        torch.compile(m, backend="pt2onnx")(torch.randn(2, 4))
    text = str(info.value)
    assert "torch.ops.pt2onnx_test.mystery.default" in text
    assert "fallback': 'partition'" in text


def test_partition_runs_unsupported_ops_in_pytorch():
    m = WithMystery().eval()
    before = len(dynamo_backend.stats())
    c = torch.compile(m, backend="pt2onnx", dynamic=True, options={"fallback": "partition"})
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (2, 5):
            x = torch.randn(n, 4)
            torch.testing.assert_close(c(x), m(x), atol=ATOL, rtol=RTOL)
    assert any("pt2onnx_test.mystery" in str(w.message) and "run in PyTorch" in str(w.message)
               for w in caught)
    graphs = _new_graphs(before)
    assert graphs[0].partitions == 2 and graphs[0].fallback_ops == [
        "torch.ops.pt2onnx_test.mystery.default"]
    assert all(g.conversions == 1 for g in graphs[1:]) and len(graphs) == 3


def test_debug_backend_passes_a_right_conversion():
    m = _convnet()
    c = torch.compile(m, backend="pt2onnx_debug", dynamic=True)
    with torch.no_grad():
        for n in (1, 3):
            x = torch.randn(n, 3, 8, 8)
            torch.testing.assert_close(c(x), m(x), atol=ATOL, rtol=RTOL)


def test_debug_backend_finds_a_wrong_converter():
    """A converter registered by the test gets relu wrong (Neg): the debug
    backend names the output that differs and the relu node behind it."""
    def wrong_relu(g, x):
        return g.op("Neg", x)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return x * 2, torch.tanh(torch.relu(self.fc(x)) + 1)

    c = torch.compile(M().eval(), backend="pt2onnx_debug",
                      options={"custom_translation_table": {torch.ops.aten.relu.default:
                                                            wrong_relu}})
    with torch.no_grad(), pytest.raises(pt2onnx.VerificationError) as info:
        c(torch.randn(3, 4))
    text = str(info.value)
    assert "output 1 differs from PyTorch eager" in text  # output 0 (x * 2) is right
    assert "onnxruntime:" in text and "onnx.reference:" in text
    assert "first node whose value differs: FX node 'relu'" in text
    assert "(Neg)" in text


def test_static_kv_cache_decoding_matches_eager():
    """transformers' LLaMA with a StaticCache: prefill, then decode steps whose
    cache update (index_copy_ into the cache tensors) onnxruntime writes in
    place; logits equal eager's at every step, and so do the caches."""
    import pt2onnx.hf

    pt2onnx.hf.prepare()
    from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    m = LlamaForCausalLM(cfg).eval()
    before = len(dynamo_backend.stats())

    def generate(fn):
        torch.manual_seed(1)
        cache = StaticCache(config=cfg, max_cache_len=32)
        ids = torch.randint(0, 256, (1, 7))
        out = fn(input_ids=ids, past_key_values=cache, cache_position=torch.arange(7)).logits
        logits = [out]
        for p in range(7, 12):
            nxt = out[:, -1:].argmax(-1)
            out = fn(input_ids=nxt, past_key_values=cache,
                     cache_position=torch.tensor([p])).logits
            logits.append(out)
        return logits, [layer.keys.clone() for layer in cache.layers]

    with torch.inference_mode():
        want, want_cache = generate(m)
        got, got_cache = generate(torch.compile(m, backend="pt2onnx"))
    for g, w in zip(got + got_cache, want + want_cache):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
    graphs = _new_graphs(before)
    assert len(graphs) == 2  # prefill, then one graph for every decode step
    # The prefill makes the cache tensors (transformers allocates them on their
    # first update); each decode step writes its keys and values into them.
    assert [g.in_place for g in graphs] == [0, 2 * cfg.num_hidden_layers], graphs


# (torch's CPU flash kernel takes float masks only.)
@pytest.mark.parametrize("causal,mask", [(False, None), (True, None), (False, "float")])
def test_flash_attention_for_cpu_converts_with_its_logsumexp(causal, mask, tmp_path):
    """AOTAutograd turns scaled_dot_product_attention into
    aten._scaled_dot_product_flash_attention_for_cpu on CPU: both outputs
    (attention, and the logsumexp of each query's scores) against PyTorch
    in onnxruntime, on inputs other than the export's."""
    import onnxruntime as ort

    class M(torch.nn.Module):
        def forward(self, q, k, v, m):
            kw = {} if mask is None else {"attn_mask": m}
            out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                q, k, v, 0.0, causal, **kw)
            return out, lse

    def inputs(b, t, s):
        m = torch.randn(b, 1, t, s)
        return torch.randn(b, 4, t, 8), torch.randn(b, 4, s, 8), torch.randn(b, 4, s, 8), m

    path = str(tmp_path / "flash.onnx")
    pt2onnx.export(M(), inputs(2, 5, 5), path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    new = inputs(2, 5, 5)
    feeds = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), new)}
    got = sess.run(None, feeds)
    want = M()(*new)
    for g, w in zip(got, want):
        torch.testing.assert_close(torch.from_numpy(g), w, atol=1e-5, rtol=1e-5)


def test_compiled_encoder_is_fused_as_its_export(tmp_path):
    """AOTAutograd writes Linear on [B, T, K] as view -> addmm -> view and SDPA
    as the CPU flash kernel: the graph still gets export()'s fusions
    (MultiHeadAttention, BiasGelu, SkipLayerNormalization; no Gemm left) and
    matches eager."""
    import collections

    import onnx

    import pt2onnx.hf

    pt2onnx.hf.prepare()
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64)
    m = BertModel(cfg).eval()
    ids = torch.randint(0, 128, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, -2:] = 0
    before = len(dynamo_backend.stats())
    c = torch.compile(m, backend="pt2onnx", options={"save_dir": str(tmp_path)})
    with torch.no_grad():
        got = c(input_ids=ids, attention_mask=mask).last_hidden_state
        want = m(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    g = _new_graphs(before)[0]
    ops = collections.Counter(n.op_type for n in onnx.load(
        str(tmp_path / f"graph_{g.graph}.onnx")).graph.node)
    assert ops["MultiHeadAttention"] == 2 and ops["BiasGelu"] == 2, ops
    assert ops["SkipLayerNormalization"] >= 4 and ops["Gemm"] <= 1, ops  # the pooler's is 2-D


def test_as_strided_of_a_tensor_as_it_lies_with_dynamic_sizes(tmp_path):
    """torch.compile's graphs restride size-1 dims with as_strided after a
    keepdim reduction (torchvision's Swin, dynamic batch): a view of the
    input as it lies converts whatever its symbolic sizes."""
    import onnxruntime as ort

    class M(torch.nn.Module):
        def forward(self, x):
            y = x.mean((2, 3), keepdim=True)  # [b, c, 1, 1]
            return torch.as_strided(y, y.shape, (y.shape[1], 1, y.shape[1], y.shape[1])) * 2

    path = str(tmp_path / "as_strided.onnx")
    pt2onnx.export(M(), (torch.randn(2, 6, 4, 4),), path,
                   dynamic_shapes={"x": {0: torch.export.Dim("b")}})
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = torch.randn(5, 6, 4, 4)
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), M()(x), atol=1e-6, rtol=1e-6)


def test_a_shared_session_options_object_serves_every_graph():
    """A SessionOptions object given by the user is shared by every session
    (weights then copied into each model: they cannot be registered on it
    twice); session_config entries go with a dict."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    m = _convnet()
    c = torch.compile(m, backend="pt2onnx", dynamic=False, options={"session_options": so})
    d = torch.compile(m, backend="pt2onnx", dynamic=False,
                      options={"session_options": {"intra_op_num_threads": 1},
                               "session_config": {"session.intra_op.allow_spinning": "0"}})
    with torch.no_grad():
        for x in (torch.randn(2, 3, 8, 8), torch.randn(3, 3, 6, 6)):  # two graphs each
            torch.testing.assert_close(c(x), m(x), atol=ATOL, rtol=RTOL)
            torch.testing.assert_close(d(x), m(x), atol=ATOL, rtol=RTOL)


class _LinearsAndConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 32)  # on [B, T, 16]: MatMul
        self.head = torch.nn.Linear(32, 8)  # on [B, 32]: Gemm
        self.conv = torch.nn.Conv2d(8, 16, 3)
        self.bn = torch.nn.BatchNorm2d(16)  # folded into the conv: new weights

    def forward(self, x, img):
        h = torch.relu(self.proj(x)).mean(1)
        return self.head(h), self.bn(self.conv(img))


def test_weights_reach_onnxruntime_by_reference_not_in_the_model():
    """No weight's bytes are in the model handed to onnxruntime: Linear
    weights are read in their own layout (FusedMatMul / Gemm with transB), so
    onnxruntime gets the parameters' own memory; folded conv weights go in
    buffers the conversion made. The model is graph only."""
    import onnx

    torch.manual_seed(0)
    m = _LinearsAndConv().eval()
    m.bn.running_mean.uniform_(-0.5, 0.5)
    m.bn.running_var.uniform_(0.5, 1.5)
    x, img = torch.randn(2, 5, 16), torch.randn(2, 8, 7, 7)
    before = len(dynamo_backend.stats())
    c = torch.compile(m, backend="pt2onnx")
    with torch.no_grad():
        got = c(x, img)
        want = m(x, img)
        x2, img2 = torch.randn(2, 5, 16), torch.randn(2, 8, 7, 7)
        got2, want2 = c(x2, img2), m(x2, img2)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(got2, want2, atol=ATOL, rtol=RTOL)
    (g,) = _new_graphs(before)
    session = next(s for s in dynamo_backend._sessions.values() if id(s) == g.session_id)
    model = onnx.load_from_string(session._model_bytes)
    assert len(session._model_bytes) < 8192, len(session._model_bytes)
    for init in model.graph.initializer:  # every large one is external, in memory
        if onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize * max(
                1, int(torch.tensor(list(init.dims)).prod())) >= 1024:
            assert init.data_location == onnx.TensorProto.EXTERNAL, init.name
    held = {name: view for name, (_, view) in session._pt2onnx_weights.items()}
    ptrs = {v.data_ptr() for v in held.values()}
    for p in (m.proj.weight, m.head.weight):
        assert p.data_ptr() in ptrs, "a Linear weight was copied"
    fused = [n for n in model.graph.node if n.op_type == "FusedMatMul"]
    gemm = [n for n in model.graph.node if n.op_type == "Gemm"]
    assert len(fused) == 1 and len(gemm) == 1, [n.op_type for n in model.graph.node]
    for n in fused + gemm:
        assert {a.name: a.i for a in n.attribute}.get("transB") == 1, n
    # The folded conv weight: a buffer of the conversion's, the folded values.
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    w = held[conv.input[1]]
    assert w.data_ptr() != m.conv.weight.data_ptr()
    scale = m.bn.weight / torch.sqrt(m.bn.running_var + m.bn.eps)
    torch.testing.assert_close(w, m.conv.weight.detach() * scale[:, None, None, None],
                               atol=1e-6, rtol=1e-5)
