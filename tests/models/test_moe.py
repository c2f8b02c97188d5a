"""Mixture-of-experts decoders from transformers (Mixtral, Qwen3-MoE): their
experts go through transformers' grouped_mm_fallback custom op (rows sorted by
expert, cumulative offsets), converted in src/convert/moe.cpp.

Small configs, random weights, fp32, onnxruntime as the judge against PyTorch
on inputs other than the export inputs. Besides the values, the exported graph
must multiply each (token, expert) pair's row by its own expert only, never all
experts for all tokens; checked twice (see _expert_products and
test_only_selected_rows_are_multiplied)."""
import collections

import numpy as np
import onnx
import pytest
import torch

import pt2onnx
import zoo  # noqa: F401  (keeps torchvision's operator registrations out)
from pt2onnx import hf
from test_hf import _ort_greedy, _save, no_network  # noqa: F401  (the fixture refuses the network)
from zoo_check import ort_session

VOCAB, EXPERTS, TOP_K, LAYERS = 128, 4, 2, 2


def _mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    return MixtralForCausalLM(MixtralConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2, pad_token_id=0))


def _qwen3_moe():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    return Qwen3MoeForCausalLM(Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=EXPERTS, num_experts_per_tok=TOP_K, decoder_sparse_step=1,
        norm_topk_prob=True, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2, pad_token_id=0))


MODELS = {"mixtral": _mixtral, "qwen3_moe": _qwen3_moe}


class _Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False).logits


def _build(arch):
    torch.manual_seed(0)
    model = MODELS[arch]().eval()
    assert model.config._experts_implementation == "grouped_mm"  # the path under test
    return model


def _expert_products(m):
    """The MatMul / Gemm nodes whose weight operand is one expert's matrix (an
    initializer of the layer's experts), grouped per (layer, projection).

    All-experts-for-all-tokens would show as a product with a stacked
    [E, ...] expert initializer, or as E products each fed every row; the
    first is ruled out here, the second by test_only_selected_rows_are_multiplied."""
    inits = {i.name: list(i.dims) for i in m.graph.initializer}
    groups = collections.defaultdict(list)
    for n in m.graph.node:
        if n.op_type not in ("MatMul", "Gemm", "FusedMatMul") or len(n.input) < 2:
            continue
        for w in n.input[:2]:
            if ".experts." in w and w in inits:
                assert len(inits[w]) == 2, f"{n.name} multiplies by stacked experts {w} {inits[w]}"
                layer, proj = w.split(".experts.")[0], w.split(".experts.")[1].split(".")[0]
                groups[(layer, proj)].append(n)
    return groups


@pytest.mark.parametrize("arch", sorted(MODELS))
def test_forward_matches_pytorch(arch, tmp_path):
    model = _build(arch)
    ids = torch.randint(3, VOCAB, (2, 5))
    mask = torch.ones_like(ids)
    path = str(tmp_path / f"{arch}.onnx")
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    pt2onnx.export(_Logits(model), (ids, mask), path, dynamic_shapes=dyn)

    m = onnx.load(path)
    groups = _expert_products(m)
    # Every layer's two projections (gate_up, down), one product per expert.
    assert len(groups) == 2 * LAYERS, sorted(groups)
    assert all(len(ns) == EXPERTS for ns in groups.values()), {k: len(v) for k, v in groups.items()}

    sess = ort_session(path)
    torch.manual_seed(1)
    for batch, seq in [(3, 7), (1, 1), (1, 11)]:
        ids = torch.randint(3, VOCAB, (batch, seq))
        mask = torch.ones_like(ids)
        if batch > 1:
            mask[1, :2] = 0  # left padding
        with torch.no_grad():
            ref = _Logits(model)(ids, mask).numpy()
        (got,) = sess.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        assert got.shape == ref.shape == (batch, seq, VOCAB)
        np.testing.assert_allclose(got, ref, atol=1e-4, rtol=0)


def test_eager_experts_loop(tmp_path):
    """A config selecting transformers' "eager" experts (a Python loop over
    the experts hit: data-dependent, torch.export cannot capture it) exports
    through pt2onnx's capture rule as grouped products, matches the eager
    model, and the model is left in "eager"."""
    model = _build("mixtral")
    model.config._experts_implementation = "eager"
    ids = torch.randint(3, VOCAB, (2, 5))
    mask = torch.ones_like(ids)
    path = str(tmp_path / "eager.onnx")
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    pt2onnx.export(_Logits(model), (ids, mask), path, dynamic_shapes=dyn)
    assert model.config._experts_implementation == "eager"
    groups = _expert_products(onnx.load(path))
    assert len(groups) == 2 * LAYERS and all(len(ns) == EXPERTS for ns in groups.values())
    sess = ort_session(path)
    torch.manual_seed(2)
    ids = torch.randint(3, VOCAB, (3, 6))
    mask = torch.ones_like(ids)
    mask[2, :3] = 0
    with torch.no_grad():
        ref = _Logits(model)(ids, mask).numpy()  # the eager loop itself
    (got,) = sess.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    assert got.shape == ref.shape == (3, 6, VOCAB)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=0)


def test_only_selected_rows_are_multiplied(tmp_path):
    """At run time, the rows each layer's expert products see add up to
    tokens * top_k (each (token, expert) pair once), not tokens * experts:
    the expert products' outputs are made graph outputs and their rows
    counted in onnxruntime."""
    model = _build("mixtral")
    ids = torch.randint(3, VOCAB, (2, 5))
    mask = torch.ones_like(ids)
    path = str(tmp_path / "mixtral.onnx")
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    pt2onnx.export(_Logits(model), (ids, mask), path, dynamic_shapes=dyn, external_data=False)
    m = onnx.load(path)
    groups = _expert_products(m)
    names = {k: [n.output[0] for n in ns] for k, ns in groups.items()}
    for outs in names.values():
        for o in outs:
            m.graph.output.append(onnx.helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None))
    probe = str(tmp_path / "probe.onnx")
    onnx.save(m, probe)
    sess = ort_session(probe)
    batch, seq = 3, 9
    ids = torch.randint(3, VOCAB, (batch, seq))
    got = dict(zip([o.name for o in sess.get_outputs()],
                   sess.run(None, {"input_ids": ids.numpy(),
                                   "attention_mask": np.ones((batch, seq), np.int64)})))
    for key, outs in names.items():
        rows = [got[o].shape[0] for o in outs]
        assert sum(rows) == batch * seq * TOP_K, (key, rows)
        assert max(rows) < batch * seq, (key, rows)  # no expert saw every token


@pytest.mark.parametrize("arch,opset,target", [
    ("mixtral", 18, "standard"),
    pytest.param("mixtral", 18, "onnxruntime", marks=pytest.mark.slow),
    pytest.param("mixtral", 23, "standard", marks=pytest.mark.slow),
    pytest.param("qwen3_moe", 18, "standard", marks=pytest.mark.slow),
    pytest.param("qwen3_moe", 23, "standard", marks=pytest.mark.slow),
    ("qwen3_moe", 18, "onnxruntime")])
def test_decode_step_and_greedy_generation(arch, opset, target, tmp_path):
    model = _build(arch)
    ckpt = _save(model, tmp_path / arch)
    onnx_path = str(tmp_path / f"{arch}.onnx")
    # weights="memory": save_pretrained writes Mixtral's experts one tensor per
    # expert, which transformers stacks while loading (not read in place).
    r = hf.export_pretrained(ckpt, "text-generation-with-past", onnx_path, opset=opset,
                             target=target, weights="memory")
    assert r.checks["max_abs_error"] < 1e-4
    groups = _expert_products(onnx.load(onnx_path))
    assert len(groups) == 2 * LAYERS and all(len(ns) == EXPERTS for ns in groups.values())

    # One decode step with the cache, against PyTorch's logits for the whole
    # sequence: prefill 6 tokens (the second prompt left-padded), then 1.
    torch.manual_seed(2)
    ids = torch.randint(3, VOCAB, (2, 7))
    mask = torch.ones_like(ids)
    ids[1, :2] = 0
    mask[1, :2] = 0
    sess = ort_session(onnx_path)
    ins = {i.name: i for i in sess.get_inputs()}
    outs = [o.name for o in sess.get_outputs()]
    heads, head_dim = ins["past_key_values.0.key"].shape[1], ins["past_key_values.0.key"].shape[3]
    past = {f"past_key_values.{i}.{kv}": np.zeros((2, heads, 0, head_dim), np.float32)
            for i in range(LAYERS) for kv in ("key", "value")}
    pos = np.cumsum(mask.numpy(), -1) - 1
    pos[mask.numpy() == 0] = 1
    first = dict(zip(outs, sess.run(None, {"input_ids": ids[:, :6].numpy(),
                                           "attention_mask": mask[:, :6].numpy(),
                                           "position_ids": pos[:, :6], **past})))
    past = {k: first["present" + k[len("past_key_values"):]] for k in past}
    step = dict(zip(outs, sess.run(None, {"input_ids": ids[:, 6:].numpy(),
                                          "attention_mask": mask.numpy(),
                                          "position_ids": pos[:, 6:], **past})))
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask, position_ids=torch.from_numpy(pos),
                    use_cache=False).logits[:, -1:].numpy()
    assert step["logits"].shape == ref.shape == (2, 1, VOCAB)
    assert step["present.0.key"].shape == (2, heads, 7, head_dim)
    np.testing.assert_allclose(step["logits"], ref, atol=1e-4, rtol=0)

    # Greedy generation in onnxruntime equals transformers' generate.
    model.generation_config.eos_token_id = None  # exactly 8 new tokens, no early stop
    with torch.no_grad():
        gen = model.generate(input_ids=ids[:, :6], attention_mask=mask[:, :6], max_new_tokens=8,
                             min_new_tokens=8, do_sample=False, pad_token_id=0)
    ref_tokens = gen[:, 6:].numpy()
    got = _ort_greedy(onnx_path, ids[:, :6].numpy(), mask[:, :6].numpy(), 8)
    assert ref_tokens.shape == got.shape == (2, 8)
    np.testing.assert_array_equal(got, ref_tokens)


class _GroupedMM(torch.nn.Module):
    """transformers' grouped_mm_fallback alone: weight a parameter [E, N, K]
    read transposed (nn.Linear layout, as the MoE layers pass it), or an input
    [E, K, N] (read per expert at run time)."""

    def __init__(self, weight_is_input):
        super().__init__()
        self.weight_is_input = weight_is_input
        self.stacked = torch.nn.Parameter(torch.randn(4, 6, 8))

    def forward(self, x, offs, w=None):
        import transformers.integrations.moe  # noqa: F401  (registers the op)

        w = w if self.weight_is_input else self.stacked.transpose(-2, -1)
        return torch.ops.transformers.grouped_mm_fallback(x, w, offs) * 2.0


@pytest.mark.parametrize("weight_is_input", [False, True])
@pytest.mark.parametrize("offs_dtype", [torch.int32, torch.int64])
def test_grouped_mm_fallback_op(weight_is_input, offs_dtype, tmp_path):
    """Empty groups, the first and last group empty, and rows past the last
    offset (zeros), on other offsets and row counts than the export's."""
    hf.prepare()
    torch.manual_seed(0)
    model = _GroupedMM(weight_is_input)
    w = torch.randn(4, 8, 6)
    x, offs = torch.randn(10, 8), torch.tensor([2, 5, 9, 10], dtype=offs_dtype)
    args = (x, offs, w) if weight_is_input else (x, offs)
    dyn = ({"x": {0: "rows"}, "offs": None, "w": None} if weight_is_input
           else {"x": {0: "rows"}, "offs": None})
    path = str(tmp_path / "gmm.onnx")
    pt2onnx.export(model, args, path, dynamic_shapes=dyn)
    m = onnx.load(path)
    assert sum(n.op_type in ("MatMul", "Gemm") for n in m.graph.node) == 4  # one per expert
    if not weight_is_input:  # the parameter is read as 4 views, no Gather of it
        assert not [n for n in m.graph.node if n.op_type == "Gather"]
    sess = ort_session(path)
    names = [i.name for i in sess.get_inputs()]
    for rows, o in [(7, [0, 3, 3, 7]), (12, [0, 0, 5, 9]), (1, [1, 1, 1, 1]), (0, [0, 0, 0, 0])]:
        x, offs = torch.randn(rows, 8), torch.tensor(o, dtype=offs_dtype)
        args = (x, offs, w) if weight_is_input else (x, offs)
        with torch.no_grad():
            ref = model(*args).numpy()
        (got,) = sess.run(None, dict(zip(names, [a.numpy() for a in args])))
        assert got.shape == ref.shape == (rows, 6)
        np.testing.assert_allclose(got, ref, atol=1e-5, rtol=0)
        assert not got[o[-1]:].any()  # rows past the last offset


def test_aten_grouped_mm_bfloat16(tmp_path):
    """torch's own _grouped_mm (what transformers calls with bfloat16 weights):
    captured only in bfloat16, which onnxruntime's CPU MatMul lacks, so ONNX's
    reference evaluator is the judge."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from onnx.reference import ReferenceEvaluator

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3, 8, 16).bfloat16())

        def forward(self, x, offs):
            return torch._grouped_mm(x, self.w, offs=offs)

    torch.manual_seed(0)
    model = M()
    x, offs = torch.randn(10, 8).bfloat16(), torch.tensor([2, 2, 7], dtype=torch.int32)
    path = str(tmp_path / "gmm.onnx")
    pt2onnx.export(model, (x, offs), path, external_data=False)
    ev = ReferenceEvaluator(onnx.load(path))
    with torch.no_grad():
        ref = model(x, offs).float().numpy()
    got = ev.run(None, {"x": x.float().numpy().astype(ml_dtypes.bfloat16),
                        "offs": offs.numpy()})[0].astype(np.float32)
    assert got.shape == ref.shape == (10, 16)
    np.testing.assert_allclose(got[:7], ref[:7], atol=1e-2, rtol=1e-2)  # bfloat16 products
    assert not got[7:].any()
