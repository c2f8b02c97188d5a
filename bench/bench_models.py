"""Benchmark models, defined here with random weights.

- llama_*: LLaMA-style decoder (RMSNorm, rotary embeddings, SwiGLU MLP,
  grouped-query attention through scaled_dot_product_attention, causal mask),
  a series growing in width and depth up to more than 2 GB of weights.
- resnet50: the ResNet-50 layout (bottleneck blocks [3, 4, 6, 3]).
- bert_base: BERT-base-style encoder (12 layers, hidden 768, padding mask).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int = 32000
    max_len: int = 4096


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.h, self.kv, self.d = c.heads, c.kv_heads, c.hidden // c.heads
        self.q_proj = nn.Linear(c.hidden, c.hidden, bias=False)
        self.k_proj = nn.Linear(c.hidden, self.kv * self.d, bias=False)
        self.v_proj = nn.Linear(c.hidden, self.kv * self.d, bias=False)
        self.o_proj = nn.Linear(c.hidden, c.hidden, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.down_proj = nn.Linear(c.intermediate, c.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        d = c.hidden // c.heads
        self.embed_tokens = nn.Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden)
        self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


LLAMA_SERIES = {
    "llama_h256_l2": LlamaConfig(256, 2, 4, 2, 688, vocab=8000),
    "llama_h512_l4": LlamaConfig(512, 4, 8, 2, 1376, vocab=16000),
    "llama_h1024_l8": LlamaConfig(1024, 8, 16, 4, 2752),
    "llama_h2048_l12": LlamaConfig(2048, 12, 16, 4, 5504),  # ~2.8 GB fp32
}


class Bottleneck(nn.Module):
    def __init__(self, cin, mid, stride):
        super().__init__()
        cout = mid * 4
        self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for i, (mid, n) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
            for j in range(n):
                blocks.append(Bottleneck(cin, mid, 2 if (j == 0 and i > 0) else 1))
                cin = mid * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class BertLayer(nn.Module):
    def __init__(self, d=768, heads=12, ff=3072):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d, eps=1e-12)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, t, d)))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class BertBase(nn.Module):
    def __init__(self, vocab=30522, d=768, layers=12, max_len=512):
        super().__init__()
        self.word = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(d) for _ in range(layers))

    def forward(self, input_ids, attention_mask):
        t = input_ids.shape[1]
        x = self.ln(self.word(input_ids) + self.pos(torch.arange(t, device=input_ids.device)))
        mask = attention_mask[:, None, None, :].to(torch.bool)  # keys that may be attended
        for layer in self.layers:
            x = layer(x, mask)
        return x


def build(name: str, seed: int = 0):
    """(model, example args, new args for checking, dynamic_shapes, dynamic_axes)."""
    torch.manual_seed(seed)
    B = torch.export.Dim("batch", min=1, max=64)
    if name in LLAMA_SERIES:
        c = LLAMA_SERIES[name]
        m = Llama(c).eval()
        S = torch.export.Dim("seq", min=2, max=c.max_len)
        args = (torch.randint(0, c.vocab, (2, 16)),)
        new = (torch.randint(0, c.vocab, (3, 21)),)
        return m, args, new, {"input_ids": {0: B, 1: S}}, {"input_ids": {0: "batch", 1: "seq"}}
    if name == "resnet50":
        m = ResNet50().eval()
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
        return (m, (torch.randn(2, 3, 224, 224),), (torch.randn(3, 3, 224, 224),),
                {"x": {0: B}}, {"x": {0: "batch"}})
    if name == "bert_base":
        m = BertBase().eval()
        S = torch.export.Dim("seq", min=2, max=512)
        ids = torch.randint(0, 30522, (2, 32))
        mask = torch.ones(2, 32, dtype=torch.int64)
        new_mask = torch.ones(3, 40, dtype=torch.int64)
        new_mask[1, 30:] = 0
        return (m, (ids, mask), (torch.randint(0, 30522, (3, 40)), new_mask),
                {"input_ids": {0: B, 1: S}, "attention_mask": {0: B, 1: S}},
                {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}})
    raise KeyError(name)


ALL = [*LLAMA_SERIES, "resnet50", "bert_base"]
