"""fuse_rotary: hand-written rotary position embedding exported as one
RotaryEmbedding (ONNX opset 23 for the standard target, com.microsoft's for
target="onnxruntime"), checked against PyTorch in onnxruntime on inputs of
other shapes than the export's (fp32, atol = rtol = 1e-5)."""
import collections

import onnx
import pytest
import torch
from torch.export import Dim

from conftest import assert_matches

from torch_releases import EXPAND_RESHAPE_GUARD
import pt2onnx
from pt2onnx import hf

hf.prepare()

import transformers as tr  # noqa: E402
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaRotaryEmbedding, apply_rotary_pos_emb)

TOL = 1e-5
TARGETS = [(23, "standard", ""), (18, "onnxruntime", "com.microsoft")]


def rotary_nodes(path):
    model = onnx.load(path, load_external_data=False)
    return [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


class LlamaRope(torch.nn.Module):
    """transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb on q and k."""

    def __init__(self):
        super().__init__()
        cfg = tr.LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2)
        self.rot = LlamaRotaryEmbedding(cfg)

    def forward(self, q, k, position_ids):
        cos, sin = self.rot(q, position_ids)
        return apply_rotary_pos_emb(q, k, cos, sin)


class UnequalHalves(torch.nn.Module):
    """rotate_half with a cos / sin whose halves differ: not a RotaryEmbedding."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 16, 2).float() / 16))

    def forward(self, q, position_ids):
        f = position_ids[..., None].float() * self.inv_freq
        emb = torch.cat((f, f + 0.5), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        rot = torch.cat((-q[..., 8:], q[..., :8]), dim=-1)
        return q * cos + rot * sin


def rotate_every_two(x):
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


class GPTJRope(torch.nn.Module):
    """GPT-J's partial interleaved rotary (rotary_dim 16 of head_dim 32) on
    k [B, S, H, D], sin / cos looked up from a sinusoid table."""

    def __init__(self, rotary_dim=16, max_pos=64):
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))
        sinusoid = torch.einsum("i,j->ij", torch.arange(max_pos, dtype=torch.float), inv)
        self.register_buffer("embed_positions",
                             torch.cat((torch.sin(sinusoid), torch.cos(sinusoid)), dim=1))
        self.rotary_dim = rotary_dim

    def forward(self, k, position_ids):
        sincos = self.embed_positions[position_ids]
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        k_rot, k_pass = k[:, :, :, :self.rotary_dim], k[:, :, :, self.rotary_dim:]
        sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
        cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
        k_rot = (k_rot * cos) + (rotate_every_two(k_rot) * sin)
        return torch.cat([k_rot, k_pass], dim=-1)


def export(model, args, dynamic_shapes, path, opset, target):
    pt2onnx.export(model, args, path, dynamic_shapes=dynamic_shapes, opset=opset, target=target)


B, S = Dim("batch"), Dim("seq")


@pytest.mark.parametrize("opset,target,domain", TARGETS)
def test_llama_rotate_half(tmp_onnx, opset, target, domain):
    m = LlamaRope().eval()
    args = (torch.randn(2, 4, 5, 16), torch.randn(2, 2, 5, 16), torch.arange(5).expand(2, 5))
    export(m, args, ({0: B, 2: S}, {0: B, 2: S}, {0: B, 1: S}), tmp_onnx, opset, target)
    nodes = rotary_nodes(tmp_onnx)
    assert len(nodes) == 2  # q and k
    assert all(n.domain == domain and attrs(n).get("interleaved", 0) == 0 for n in nodes)
    ops = collections.Counter(n.op_type for n in onnx.load(tmp_onnx).graph.node)
    assert ops["Neg"] == 0 and ops["Concat"] == 0
    torch.manual_seed(1)
    fresh = {"q": torch.randn(3, 4, 7, 16), "k": torch.randn(3, 2, 7, 16),
             "position_ids": torch.randint(0, 200, (3, 7))}
    assert_matches(m, tmp_onnx, fresh, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("opset,target,domain", TARGETS)
def test_llama_rotate_half_float16(tmp_onnx, opset, target, domain):
    # cos / sin computed in float32 and Cast to float16 (rotary_emb's
    # .to(x.dtype)): the Cast is replayed on the half-size cache.
    m = LlamaRope().eval().half()
    args = (torch.randn(2, 4, 5, 16).half(), torch.randn(2, 2, 5, 16).half(),
            torch.arange(5).expand(2, 5))
    export(m, args, ({0: B, 2: S}, {0: B, 2: S}, {0: B, 1: S}), tmp_onnx, opset, target)
    assert len(rotary_nodes(tmp_onnx)) == 2
    torch.manual_seed(3)
    fresh = {"q": torch.randn(3, 4, 7, 16).half(), "k": torch.randn(3, 2, 7, 16).half(),
             "position_ids": torch.randint(0, 200, (3, 7))}
    # PyTorch rounds each of x * cos, rot * sin and their sum to float16; the
    # fused kernel's rounding differs: a couple of float16 ulps at |values| < 8
    # (measured max 2e-3).
    assert_matches(m, tmp_onnx, fresh, atol=8e-3, rtol=1e-3)


def test_llama_rotate_half_opset18_standard_unfused(tmp_onnx):
    m = LlamaRope().eval()
    args = (torch.randn(2, 4, 5, 16), torch.randn(2, 2, 5, 16), torch.arange(5).expand(2, 5))
    export(m, args, ({0: B, 2: S}, {0: B, 2: S}, {0: B, 1: S}), tmp_onnx, 18, "standard")
    assert rotary_nodes(tmp_onnx) == []


@pytest.mark.parametrize("opset,target,domain", TARGETS)
def test_unequal_halves_left_alone(tmp_onnx, opset, target, domain):
    m = UnequalHalves().eval()
    export(m, (torch.randn(2, 4, 5, 16), torch.arange(5).expand(2, 5)),
           ({0: B, 2: S}, {0: B, 1: S}), tmp_onnx, opset, target)
    assert rotary_nodes(tmp_onnx) == []
    fresh = {"q": torch.randn(3, 4, 7, 16), "position_ids": torch.randint(0, 50, (3, 7))}
    assert_matches(m, tmp_onnx, fresh, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("opset,target,domain", TARGETS)
def test_gptj_interleaved_partial(tmp_onnx, opset, target, domain):
    m = GPTJRope().eval()
    export(m, (torch.randn(2, 5, 4, 32), torch.arange(5).expand(2, 5)),
           ({0: B, 1: S}, {0: B, 1: S}), tmp_onnx, opset, target)
    nodes = rotary_nodes(tmp_onnx)
    assert len(nodes) == 1
    a = attrs(nodes[0])
    assert nodes[0].domain == domain
    assert a["interleaved"] == 1 and a["rotary_embedding_dim"] == 16 and a["num_heads"] == 4
    torch.manual_seed(2)
    fresh = {"k": torch.randn(3, 7, 4, 32), "position_ids": torch.randint(0, 64, (3, 7))}
    assert_matches(m, tmp_onnx, fresh, atol=TOL, rtol=TOL)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama")
    cfg = tr.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                         max_position_embeddings=256)
    torch.manual_seed(0)
    tr.LlamaForCausalLM(cfg).eval().save_pretrained(d)
    return str(d)


@pytest.mark.parametrize("opset,target,domain", TARGETS)
def test_llama_for_causal_lm(tiny_llama, tmp_path, opset, target, domain):
    path = str(tmp_path / "llama.onnx")
    # Verification (on by default) compares onnxruntime with PyTorch at
    # several (batch, seq, past) sizes, a left-padded row included; it raises
    # on a mismatch.
    r = hf.export_pretrained(tiny_llama, "text-generation-with-past", path, opset=opset,
                             target=target)
    assert r.checks["max_abs_error"] < 1e-4
    nodes = rotary_nodes(path)
    if target == "onnxruntime":
        # Rotary inside GroupQueryAttention (do_rotary), one per layer; cos / sin
        # caches (inputs 7, 8) and position ids (9) made once for every layer.
        assert nodes == []
        gqa = [n for n in onnx.load(path).graph.node if n.op_type == "GroupQueryAttention"]
        assert len(gqa) == 2 and all(attrs(n)["do_rotary"] == 1 for n in gqa)
        assert len({tuple(n.input[7:10]) for n in gqa}) == 1
        return
    assert len(nodes) == 4  # q and k in each of 2 layers
    assert all(n.domain == domain for n in nodes)
    # cos / sin made once, shared by every layer.
    assert len({tuple(n.input[1:]) for n in nodes}) == 1


class LlamaNoPositionIds(torch.nn.Module):
    """LlamaForCausalLM called without position_ids: transformers' positions are
    cache_position[None], so cos / sin have batch 1 and the rotation broadcasts
    them over the batch."""

    def __init__(self, path):
        super().__init__()
        self.m = tr.LlamaForCausalLM.from_pretrained(path).eval()

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


@EXPAND_RESHAPE_GUARD
@pytest.mark.parametrize("opset,target,domain", TARGETS)
def test_llama_without_position_ids_batch_one_caches(tiny_llama, tmp_path, opset, target,
                                                      domain):
    m = LlamaNoPositionIds(tiny_llama)
    path = str(tmp_path / "llama.onnx")
    ids = torch.randint(0, 1000, (2, 6))
    export(m, (ids,), ({0: B, 1: S},), path, opset, target)
    nodes = rotary_nodes(path)
    assert len(nodes) == 4 and all(n.domain == domain for n in nodes)
    assert len({tuple(n.input[1:]) for n in nodes}) == 1
    # Fresh batch and length, batch 1 included.
    for b, s in ((3, 9), (1, 4)):
        torch.manual_seed(b)
        assert_matches(m, path, {"input_ids": torch.randint(0, 1000, (b, s))}, atol=1e-4,
                       rtol=1e-4)
