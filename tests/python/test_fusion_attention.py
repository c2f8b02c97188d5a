"""Attention fusions: scaled_dot_product_attention -> ONNX Attention (opset
23, standard target) and com.microsoft GroupQueryAttention (onnxruntime
target, decoders with a KV cache). Each export is run in onnxruntime on fresh
inputs of other shapes than the export's and compared with PyTorch (fp32,
atol / rtol 1e-5)."""
import collections

import onnx
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_matches

from torch_releases import EXPAND_RESHAPE_GUARD
import pt2onnx

TOL = dict(atol=1e-5, rtol=1e-5)
B, L = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=256)


def ops(path):
    return collections.Counter(n.op_type for n in onnx.load(path, load_external_data=False).graph.node)


def attention_node(path):
    (n,) = [n for n in onnx.load(path, load_external_data=False).graph.node if n.op_type == "Attention"]
    return n, {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}


class BoolMask(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class AddMask(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class Causal(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.37)


class Gqa(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


class RepeatKv(torch.nn.Module):
    """transformers' repeat_kv before a plain SDPA."""

    def forward(self, q, k, v, mask):
        def rep(x):
            b, h, s, d = x.shape
            return x[:, :, None].expand(b, h, 2, s, d).reshape(b, h * 2, s, d)

        return F.scaled_dot_product_attention(q, rep(k), rep(v), attn_mask=mask)


class Cache(torch.nn.Module):
    """k / v = Concat(past, new) on the sequence axis, written back as outputs."""

    def forward(self, q, k, v, past_k, past_v, mask):
        k = torch.cat([past_k, k], 2)
        v = torch.cat([past_v, v], 2)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), k, v


def qkv(b, l, s=None, hq=4, hkv=4, d=16):
    s = l if s is None else s
    return torch.randn(b, hq, l, d), torch.randn(b, hkv, s, d), torch.randn(b, hkv, s, d)


def padded_mask(b, l, s):
    m = torch.ones(b, 1, l, s, dtype=torch.bool).tril(s - l)
    m[0, :, :, :2] = False  # left padding: rows 0, 1 see nothing
    return m


def export(model, args, path, dyn, opset=23, target="standard"):
    pt2onnx.export(model, args, str(path), dynamic_shapes=dyn, opset=opset, target=target)
    return str(path)


def feeds(names, tensors):
    return dict(zip(names, tensors))


@pytest.mark.parametrize("opset", [18, 23])
def test_bool_mask(tmp_path, opset):
    q, k, v = qkv(2, 5)
    dyn = ({0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L, 3: L})
    p = export(BoolMask(), (q, k, v, padded_mask(2, 5, 5)), tmp_path / "m.onnx", dyn, opset)
    assert ops(p)["Attention"] == (1 if opset >= 23 else 0)
    if opset >= 23:
        n, attrs = attention_node(p)
        assert attrs["scale"] == pytest.approx(0.25) and "is_causal" not in attrs
        assert len(n.input) == 4
    q, k, v = qkv(3, 7)
    assert_matches(BoolMask(), p, feeds("q k v mask".split(), (q, k, v, padded_mask(3, 7, 7))), **TOL)


def test_additive_mask(tmp_path):
    q, k, v = qkv(2, 5)
    m = torch.where(padded_mask(2, 5, 5), 0.0, float("-inf")) + torch.randn(2, 1, 5, 5) * 0.1
    dyn = ({0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L, 3: L})
    p = export(AddMask(), (q, k, v, m), tmp_path / "m.onnx", dyn)
    assert ops(p)["Attention"] == 1
    q, k, v = qkv(3, 6)
    m = torch.where(padded_mask(3, 6, 6), 0.0, float("-inf")) + torch.randn(3, 1, 6, 6) * 0.1
    assert_matches(AddMask(), p, feeds("q k v mask".split(), (q, k, v, m)), **TOL)


def test_causal_custom_scale(tmp_path):
    q, k, v = qkv(2, 5)
    dyn = ({0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L})
    p = export(Causal(), (q, k, v), tmp_path / "m.onnx", dyn)
    n, attrs = attention_node(p)
    assert attrs["is_causal"] == 1 and attrs["scale"] == pytest.approx(0.37)
    assert len(n.input) == 3  # no mask: the op's own causal mask, same lengths
    assert_matches(Causal(), p, feeds("q k v".split(), qkv(3, 9)), **TOL)


def test_causal_other_lengths_keeps_top_left(tmp_path):
    # L != S: torch aligns the causal mask top-left, Attention bottom-right,
    # so the decomposition's own mask is passed instead of is_causal.
    q, k, v = qkv(2, 3, 6)
    S = torch.export.Dim("kv", min=2, max=256)
    dyn = ({0: B, 2: L}, {0: B, 2: S}, {0: B, 2: S})
    p = export(Causal(), (q, k, v), tmp_path / "m.onnx", dyn)
    n, attrs = attention_node(p)
    assert "is_causal" not in attrs and len(n.input) == 4
    assert_matches(Causal(), p, feeds("q k v".split(), qkv(3, 4, 9)), **TOL)


def test_enable_gqa(tmp_path):
    q, k, v = qkv(2, 5, hq=4, hkv=2)
    dyn = ({0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L})
    p = export(Gqa(), (q, k, v), tmp_path / "m.onnx", dyn)
    c = ops(p)
    assert c["Attention"] == 1 and c["Expand"] == 0  # the repeat is gone: 4-D GQA
    assert_matches(Gqa(), p, feeds("q k v".split(), qkv(3, 8, hq=4, hkv=2)), **TOL)


@EXPAND_RESHAPE_GUARD
def test_repeat_kv_upstream(tmp_path):
    q, k, v = qkv(2, 5, hq=4, hkv=2)
    dyn = ({0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L, 3: L})
    p = export(RepeatKv(), (q, k, v, padded_mask(2, 5, 5)), tmp_path / "m.onnx", dyn)
    c = ops(p)
    assert c["Attention"] == 1 and c["Expand"] == 0
    q, k, v = qkv(3, 6, hq=4, hkv=2)
    assert_matches(RepeatKv(), p, feeds("q k v mask".split(), (q, k, v, padded_mask(3, 6, 6))),
                   **TOL)


def test_kv_cache_past_inputs(tmp_path):
    P = torch.export.Dim("past", min=1, max=256)
    q, k, v = qkv(2, 3)
    pk, pv = torch.randn(2, 4, 4, 16), torch.randn(2, 4, 4, 16)
    T = torch.export.Dim.AUTO  # past + seq
    dyn = ({0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L}, {0: B, 2: P}, {0: B, 2: P}, {0: B, 2: L, 3: T})
    p = export(Cache(), (q, k, v, pk, pv, padded_mask(2, 3, 7)), tmp_path / "m.onnx", dyn)
    n, _ = attention_node(p)
    assert list(n.input[4:]) == ["past_k", "past_v"] and len(n.output) == 3
    assert ops(p)["Concat"] == 0
    q, k, v = qkv(3, 2)
    pk, pv = torch.randn(3, 4, 6, 16), torch.randn(3, 4, 6, 16)
    assert_matches(Cache(), p, feeds("q k v past_k past_v mask".split(),
                                     (q, k, v, pk, pv, padded_mask(3, 2, 8))), **TOL)


def test_kv_cache_mask_not_causal_stays_standard(tmp_path):
    # A cache but a mask nothing proves causal: GroupQueryAttention (always
    # causal) would differ, so the onnxruntime target keeps the standard op.
    P = torch.export.Dim("past", min=1, max=256)
    q, k, v = qkv(2, 3)
    pk, pv = torch.randn(2, 4, 4, 16), torch.randn(2, 4, 4, 16)
    dyn = ({0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L}, {0: B, 2: P}, {0: B, 2: P},
           {0: B, 2: L, 3: torch.export.Dim.AUTO})
    p = export(Cache(), (q, k, v, pk, pv, padded_mask(2, 3, 7)), tmp_path / "m.onnx", dyn,
               target="onnxruntime")
    c = ops(p)
    assert c["GroupQueryAttention"] == 0 and c["Attention"] == 1
    q, k, v = qkv(1, 2)
    mask = torch.rand(1, 1, 2, 9) > 0.3  # not causal
    mask[..., 0] = True
    assert_matches(Cache(), p, feeds("q k v past_k past_v mask".split(),
                                     (q, k, v, torch.randn(1, 4, 7, 16), torch.randn(1, 4, 7, 16),
                                      mask)), **TOL)


def tiny_llama(tmp_path, heads=4, kv_heads=2, hidden=128, layers=2):
    from pt2onnx import hf

    hf.prepare()
    import transformers as tr

    cfg = tr.LlamaConfig(hidden_size=hidden, intermediate_size=256, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=1000,
                         max_position_embeddings=256)
    torch.manual_seed(0)
    d = tmp_path / "llama"
    tr.LlamaForCausalLM(cfg).eval().save_pretrained(d)
    return d


@pytest.mark.parametrize("opset,target,op", [(23, "standard", "Attention"),
                                             (18, "onnxruntime", "GroupQueryAttention"),
                                             (23, "onnxruntime", "GroupQueryAttention")])
def test_llama_with_past(tmp_path, opset, target, op):
    from pt2onnx import hf

    d = tiny_llama(tmp_path)
    out = tmp_path / "m.onnx"
    # export_pretrained verifies against PyTorch at (batch, seq, past)
    # (1, 1, 7), (3, 5, 0), (2, 3, 2), a left-padded row in each batch > 1.
    r = hf.export_pretrained(str(d), "text-generation-with-past", str(out), opset=opset,
                             target=target, atol=1e-4, rtol=1e-4)
    assert r.checks["max_abs_error"] < 1e-4
    c = ops(str(out))
    assert c[op] == 2
    assert c["Softmax"] == 0
    if op == "Attention":
        assert c["Expand"] == 0  # repeat_kv gone
    else:
        # Rotary inside GQA, and q / k / v one packed projection read as its query:
        # per layer q|k|v, o, gate, up, down, then the LM head.
        assert c["RotaryEmbedding"] == 0 and c["MatMul"] == 2 * 5 + 1
        for n in onnx.load(str(out)).graph.node:
            if n.op_type == "GroupQueryAttention":
                a = {x.name: x.i for x in n.attribute}
                assert a["do_rotary"] == 1 and n.input[1] == n.input[2] == ""


def test_llama_with_past_every_layer_fused(tmp_path):
    # Each layer's present key and value lengths are one sum of dims (past +
    # seq); torch prints its terms in the order of its own symbol names, which
    # differed between a layer's key and value from the sixth layer on, and
    # the differing dim_param strings kept that layer's attention unfused.
    from pt2onnx import hf

    d = tiny_llama(tmp_path, hidden=64, layers=7)
    out = tmp_path / "m.onnx"
    hf.export_pretrained(str(d), "text-generation-with-past", str(out), target="onnxruntime",
                         atol=1e-4, rtol=1e-4)
    assert ops(str(out))["GroupQueryAttention"] == 7
    m = onnx.load(str(out), load_external_data=False)
    lengths = {d.dim_param for o in m.graph.output if o.name.startswith("present")
               for d in o.type.tensor_type.shape.dim if d.dim_param and "+" in d.dim_param}
    assert lengths == {"past_sequence_length + sequence_length"}, lengths


def test_llama_with_past_float16_onnxruntime(tmp_path):
    # onnxruntime's float16 GroupQueryAttention gives NaN rows where every key is
    # masked (a left-padded position): the fusion zeroes them as torch does, so
    # verification (a left-padded row at (3, 5, 0), in float32 PyTorch) passes and
    # no NaN reaches the next layer's cache.
    from pt2onnx import hf

    d = tiny_llama(tmp_path)
    out = tmp_path / "m.onnx"
    r = hf.export_pretrained(str(d), "text-generation-with-past", str(out),
                             target="onnxruntime", dtype=torch.float16)
    assert r.checks["max_abs_error"] < 1e-2
    assert ops(str(out))["GroupQueryAttention"] == 2


@pytest.mark.parametrize("opset,attention", [(18, 0), (23, 2)])
def test_llama_head_size_not_multiple_of_8_falls_back(tmp_path, opset, attention):
    # head size 12: onnxruntime's GroupQueryAttention refuses it; the
    # standard Attention where the opset has it, else the decomposition.
    from pt2onnx import hf

    d = tiny_llama(tmp_path, heads=4, kv_heads=2, hidden=48)
    out = tmp_path / "m.onnx"
    hf.export_pretrained(str(d), "text-generation-with-past", str(out), opset=opset,
                         target="onnxruntime", atol=1e-4, rtol=1e-4)
    c = ops(str(out))
    assert c["GroupQueryAttention"] == 0 and c["Attention"] == attention


class CausalCache(torch.nn.Module):
    """A decoder step: k / v = Concat(past, new), mask = causal (rows at
    cache_position) & padding, as transformers builds it."""

    def forward(self, q, k, v, past_k, past_v, padding):
        p = past_k.shape[2]
        k = torch.cat([past_k, k], 2)
        v = torch.cat([past_v, v], 2)
        rows = torch.arange(q.shape[2]) + p
        cols = torch.arange(k.shape[2])
        mask = (cols[None, None, None, :] <= rows[None, None, :, None]) & padding[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), k, v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_group_query_attention_hand_written_decoder(tmp_path, dtype):
    P = torch.export.Dim("past", min=1, max=256)

    def inputs(b, l, past):
        q, k, v = (x.to(dtype) for x in qkv(b, l, hq=4, hkv=2))
        pk, pv = (torch.randn(b, 2, past, 16, dtype=dtype) for _ in range(2))
        pad = torch.ones(b, past + l, dtype=torch.bool)
        pad[0, :3] = False  # left padding
        return q, k, v, pk, pv, pad

    dyn = ({0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L}, {0: B, 2: P}, {0: B, 2: P},
           {0: B, 1: torch.export.Dim.AUTO})
    p = export(CausalCache(), inputs(2, 3, 4), tmp_path / "m.onnx", dyn, opset=18,
               target="onnxruntime")
    c = ops(p)
    assert c["GroupQueryAttention"] == 1 and c["Softmax"] == 0
    nodes = onnx.load(str(p), load_external_data=False).graph.node
    assert not [n for n in nodes if n.op_type == "Concat" and "past_k" in n.input]  # the cache's
    # float32: the causal leaf is GroupQueryAttention's own mask, left out of the
    # bias (only the padding leaf is computed); float16 keeps the whole mask, for
    # the rows it hides.
    assert c["LessOrEqual"] == (0 if dtype == torch.float32 else 1)
    tol = TOL if dtype == torch.float32 else dict(atol=2e-3, rtol=2e-3)
    for b, l, past in ((3, 4, 6), (2, 1, 9)):
        x = inputs(b, l, past)
        if dtype == torch.float16:
            # PyTorch's reference in float32 (its CPU half SDPA rounds differently).
            model = lambda *a: tuple(t.half() for t in CausalCache()(*(t.float() if t.is_floating_point() else t for t in a)))  # noqa: E731
            model = type("M", (), {"__call__": staticmethod(model)})()
        else:
            model = CausalCache()
        assert_matches(model, p, feeds("q k v past_k past_v padding".split(), x), **tol)


@pytest.mark.parametrize("model,mask", [(BoolMask, "bool"), (AddMask, "additive")])
def test_multi_head_attention_onnxruntime(tmp_path, model, mask):
    def inputs(b, l):
        q, k, v = qkv(b, l)
        m = padded_mask(b, l, l)  # rows 0, 1 of batch 0 see nothing
        if mask == "additive":
            m = torch.where(m, 0.0, float("-inf")) + torch.randn(b, 1, l, l) * 0.1
        return q, k, v, m

    dyn = ({0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L, 3: L})
    p = export(model(), inputs(2, 5), tmp_path / "m.onnx", dyn, opset=18, target="onnxruntime")
    c = ops(p)
    assert c["MultiHeadAttention"] == 1 and c["Softmax"] == 0
    assert_matches(model(), p, feeds("q k v mask".split(), inputs(3, 7)), **TOL)


def test_multi_head_attention_causal(tmp_path):
    dyn = ({0: B, 2: L}, {0: B, 2: L}, {0: B, 2: L})
    p = export(Causal(), qkv(2, 5), tmp_path / "m.onnx", dyn, opset=18, target="onnxruntime")
    assert ops(p)["MultiHeadAttention"] == 1
    assert_matches(Causal(), p, feeds("q k v".split(), qkv(3, 9)), **TOL)


def test_bert_feature_extraction_multi_head_attention(tmp_path):
    from pt2onnx import hf

    hf.prepare()
    import transformers as tr

    cfg = tr.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, vocab_size=500, max_position_embeddings=128)
    torch.manual_seed(0)
    d = tmp_path / "bert"
    tr.BertModel(cfg).eval().save_pretrained(d)
    out = tmp_path / "m.onnx"
    # Verified against PyTorch at several (batch, seq), a left-padded row in each batch > 1.
    r = hf.export_pretrained(str(d), "feature-extraction", str(out), opset=18,
                             target="onnxruntime", atol=1e-4, rtol=1e-4)
    assert r.checks["max_abs_error"] < 1e-4
    c = ops(str(out))
    assert c["MultiHeadAttention"] == 2 and c["Softmax"] == 0
