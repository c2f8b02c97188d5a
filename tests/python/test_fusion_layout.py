"""collapse_layout_chains and fold_shape_arithmetic on real models: the chains
and the index / mask arithmetic the converters emit are gone from the file,
and onnxruntime still equals PyTorch on fresh inputs of other shapes."""
import collections

import onnx
import pytest
import torch
from torch import nn

import pt2onnx
from conftest import assert_matches

CHAIN_OPS = ("Transpose", "Unsqueeze", "Squeeze", "Reshape", "Cast")


def graph_of(path):
    return onnx.load(path, load_external_data=False).graph


def histogram(graph):
    return collections.Counter(n.op_type for n in graph.node)


def chains(graph):
    """Pairs op(op(x)) of one layout op whose inner value has no other
    reader: what collapse_layout_chains merges."""
    producer = {o: n for n in graph.node for o in n.output}
    readers = collections.Counter(i for n in graph.node for i in n.input)
    outputs = {o.name for o in graph.output}
    found = []
    for n in graph.node:
        if n.op_type in CHAIN_OPS and n.input:
            p = producer.get(n.input[0])
            if (p is not None and p.op_type == n.op_type and readers[n.input[0]] == 1
                    and n.input[0] not in outputs):
                found.append((p.name, n.name))
    return found


def save_llama(path):
    from pt2onnx import hf
    hf.prepare()
    import transformers as tr
    cfg = tr.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                         max_position_embeddings=256)
    torch.manual_seed(0)
    tr.LlamaForCausalLM(cfg).eval().save_pretrained(path)


@pytest.mark.parametrize("target", ["standard", "onnxruntime"])
def test_llama_with_cache(tmp_path, target):
    from pt2onnx import hf
    save_llama(tmp_path / "ckpt")
    f = str(tmp_path / "llama.onnx")
    # export_pretrained checks onnxruntime against PyTorch at several batch /
    # sequence / past lengths, left padding included (atol = rtol = 1e-4).
    r = hf.export_pretrained(tmp_path / "ckpt", "text-generation-with-past", f, opset=18,
                             target=target)
    assert r.checks["max_abs_error"] < 1e-4
    g = graph_of(f)
    h = histogram(g)
    # The index wrap Where(Less(i, 0), Add(i, n), i) of i = arange(...) and the
    # mask's And(ones, .) are gone: only the attention's Where-s are left.
    assert h["Less"] == 0
    assert h["ConstantOfShape"] == 0
    if target == "standard":
        assert h["Where"] == 2 * 2  # 2 per decomposed attention, 2 layers
    assert chains(g) == []
    # Was 194 nodes before these passes (ed578ab); the rules remove 17.
    assert len(g.node) <= 177


@pytest.mark.parametrize("target", ["standard", "onnxruntime"])
def test_bert_tiny(tmp_path, target):
    from pt2onnx import hf
    hf.prepare()
    import transformers as tr
    cfg = tr.BertConfig(hidden_size=128, intermediate_size=512, num_hidden_layers=2,
                        num_attention_heads=2, vocab_size=1000, max_position_embeddings=128)
    torch.manual_seed(0)
    tr.BertModel(cfg).eval().save_pretrained(tmp_path / "ckpt")
    f = str(tmp_path / "bert.onnx")
    # Verified against PyTorch on fresh batch / sequence sizes (1e-4).
    r = hf.export_pretrained(tmp_path / "ckpt", "feature-extraction", f, opset=18, target=target)
    assert r.checks["max_abs_error"] < 1e-4
    g = graph_of(f)
    h = histogram(g)
    # The all-true query-side factor of the padding mask (arange >= 0) and its
    # And-s, the index wraps and ones are gone.
    # The padding mask lookup mask[arange(b)[:, None, None, None],
    # arange(s)[None, None, None, :]] is an Unsqueeze of the mask.
    for op in ("Less", "GreaterOrEqual", "And", "ConstantOfShape", "GatherND", "Range"):
        assert h[op] == 0, op
    assert chains(g) == []
    assert len(g.node) <= 83  # 116 before


def test_vit_tiny(tmp_path):
    from pt2onnx import hf
    hf.prepare()
    import transformers as tr
    cfg = tr.ViTConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=2, image_size=32, patch_size=8, num_labels=10)
    torch.manual_seed(0)
    tr.ViTForImageClassification(cfg).eval().save_pretrained(tmp_path / "ckpt")
    f = str(tmp_path / "vit.onnx")
    r = hf.export_pretrained(tmp_path / "ckpt", "image-classification", f, opset=18)
    assert r.checks["max_abs_error"] < 1e-4
    g = graph_of(f)
    h = histogram(g)
    # The all-true mask (positions >= 0, expanded) and the Where-s on it go.
    assert h["Where"] == 0 and h["GreaterOrEqual"] == 0
    assert chains(g) == []
    assert len(g.node) <= 77  # 86 before


class Layout(nn.Module):
    """Permutes and views that cancel or chain, a dtype round trip, and the
    advanced indexing / mask code that produces index wraps."""

    def forward(self, x, ids, mask):
        y = x.permute(0, 2, 1, 3).transpose(2, 3)  # Transpose(Transpose)
        y = y.transpose(2, 3).permute(0, 2, 1, 3)  # back to x
        z = y.reshape(-1, 8, 4).reshape(-1, 32)  # Reshape(Reshape)
        z = z.unsqueeze(0).unsqueeze(-1).unsqueeze(1)  # Unsqueeze chain
        w = ids.to(torch.int64).to(torch.float32)  # widening Cast chain
        w = w.to(torch.float64).to(torch.float32)  # round trip
        b, s = mask.shape
        rows = torch.arange(b)[:, None]
        cols = torch.arange(s)[None, :]
        picked = mask.to(torch.bool)[rows, cols]  # wraps of non-negative indices
        keep = (cols >= 0) & picked  # an all-true factor
        return z, torch.where(keep, w, torch.zeros_like(w)), y.permute(0, 2, 3, 1)


def layout_inputs(b, s, seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(b, s, 8, 4, generator=g),
            "ids": torch.randint(0, 9, (b, s), dtype=torch.int32, generator=g),
            "mask": torch.randint(0, 2, (b, s), generator=g)}


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("target", ["standard", "onnxruntime"])
def test_layout_module(tmp_onnx, opset, target):
    m = Layout().eval()
    dims = {0: torch.export.Dim("b"), 1: torch.export.Dim("s")}
    ex = layout_inputs(2, 5, 0)
    r = pt2onnx.export(m, tuple(ex.values()), tmp_onnx, opset=opset, target=target,
                       dynamic_shapes=(dims, dims, dims))
    g = graph_of(tmp_onnx)
    h = histogram(g)
    assert chains(g) == []
    # Four transposes cancel, the last permute stays; the two views and the
    # three unsqueezes are one Reshape.
    assert h["Transpose"] == 1
    assert h["Reshape"] == 1
    # int32 -> int64 -> float -> double -> float is one Cast; mask -> bool is the other.
    assert h["Cast"] == 2
    # mask[arange(b)[:, None], arange(s)[None, :]] is the mask itself, and
    # arange(s) >= 0 all true: no index arithmetic, no gather, no And.
    for op in ("Less", "GreaterOrEqual", "And", "GatherND", "Range", "Unsqueeze"):
        assert h[op] == 0, op
    assert r.nodes <= 7  # 44 (opset 18) / 45 (opset 13) without the two passes
    # Data movement and exact casts only: equal up to float rounding (1e-6).
    for b, s, seed in ((3, 7, 1), (1, 2, 2), (4, 1, 3)):
        assert_matches(m, tmp_onnx, layout_inputs(b, s, seed), atol=1e-6, rtol=1e-6)
