"""transformers end to end: decoder LLMs with a KV cache (greedy generation
run entirely in onnxruntime against transformers' generate), a DynamicCache
as an input, and local checkpoints through export_pretrained and the
pt2onnx-pretrained command. Random weights from small configs; no hub."""

import json
import os
import socket
import subprocess
import sys
import sysconfig

import numpy as np
import onnx
import pytest
import torch

import pt2onnx
import zoo  # noqa: F401  (keeps torchvision's operator registrations out)
from pt2onnx import hf
from zoo_check import ort_session

NEW_TOKENS = 8
# The command pip installed with the package, unless PT2ONNX_CLI names another.
CLI = os.environ.get("PT2ONNX_CLI", os.path.join(sysconfig.get_path("scripts"), "pt2onnx"))


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2, pad_token_id=0))


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2,
                                      n_head=4, bos_token_id=1, eos_token_id=2, pad_token_id=0))


def _decoder(config_cls, model_cls, **kw):
    def build():
        import transformers

        cfg = getattr(transformers, config_cls)(vocab_size=128, num_hidden_layers=2,
                                                 bos_token_id=1, eos_token_id=2, pad_token_id=0,
                                                 **kw)
        return getattr(transformers, model_cls)(cfg)

    return build


_GQA = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
DECODERS = {
    "llama": _llama,
    "gpt2": _gpt2,
    "qwen2": _decoder("Qwen2Config", "Qwen2ForCausalLM", **_GQA),
    "mistral": _decoder("MistralConfig", "MistralForCausalLM", **_GQA),
    "phi3": _decoder("Phi3Config", "Phi3ForCausalLM", **_GQA),
    "gemma": _decoder("GemmaConfig", "GemmaForCausalLM", head_dim=16, **_GQA),
    "gpt_neox": _decoder("GPTNeoXConfig", "GPTNeoXForCausalLM", hidden_size=64,
                         intermediate_size=128, num_attention_heads=4),
    "opt": _decoder("OPTConfig", "OPTForCausalLM", hidden_size=64, ffn_dim=128,
                    num_attention_heads=4, word_embed_proj_dim=64, max_position_embeddings=64),
    "falcon": _decoder("FalconConfig", "FalconForCausalLM", hidden_size=64,
                       num_attention_heads=4),
    "bloom": _decoder("BloomConfig", "BloomForCausalLM", hidden_size=64, n_head=4),
}


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test."""
    def refuse(*a, **k):
        raise AssertionError("tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _save(model, path):
    model.save_pretrained(path)
    return str(path)


def _ort_greedy(path, input_ids, attention_mask, new_tokens):
    """Prefill (an empty cache: attention caches of past length 0, state-space states zeros)
    then one token per step with present.* fed back as past_key_values.*, all in
    onnxruntime; positions from the mask as transformers does."""
    sess = ort_session(path)
    ins = {i.name: i for i in sess.get_inputs()}
    outs = [o.name for o in sess.get_outputs()]
    batch = input_ids.shape[0]

    def initial(shape):  # the batch as given, every other named dim (the past) 0
        return tuple(batch if d == "batch_size" else 0 if isinstance(d, str) else d
                     for d in shape)

    past = {n: np.zeros(initial(i.shape), np.float32) for n, i in ins.items()
            if n.startswith("past_key_values.")}
    ids, mask, tokens = input_ids, attention_mask, []
    for _ in range(new_tokens):
        feeds = {"input_ids": ids, "attention_mask": mask, **past}
        if "position_ids" in ins:
            pos = np.cumsum(mask, -1) - 1
            pos[mask == 0] = 1
            feeds["position_ids"] = pos[:, -ids.shape[1]:]
        got = dict(zip(outs, sess.run(None, feeds)))
        nxt = got["logits"][:, -1].argmax(-1).astype(np.int64)[:, None]
        tokens.append(nxt)
        past = {k: got["present" + k[len("past_key_values"):]] for k in past}
        ids = nxt
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], 1)
    return np.concatenate(tokens, 1)


# Each decoder with the fusions on: the default (opset 18), opset 23 (ONNX's
# Attention, RMSNormalization, RotaryEmbedding) and onnxruntime's operators.
GENERATION_CONFIGS = [("opset18", 18, "standard"), ("opset23", 23, "standard"),
                      ("ort", 18, "onnxruntime")]


@pytest.mark.parametrize("arch,opset,target", [
    pytest.param(a, opset, target, id=f"{a}-{cid}",
                 marks=[] if a in ("llama", "gpt2") else [pytest.mark.slow])
    for a in sorted(DECODERS) for cid, opset, target in GENERATION_CONFIGS])
def test_greedy_generation_in_onnxruntime(arch, opset, target, tmp_path):
    torch.manual_seed(0)
    model = DECODERS[arch]().eval()
    ckpt = _save(model, tmp_path / arch)
    onnx_path = str(tmp_path / f"{arch}.onnx")
    r = hf.export_pretrained(ckpt, "text-generation-with-past", onnx_path, opset=opset,
                             target=target)
    assert r.checks["max_abs_error"] < 1e-4

    m = onnx.load(onnx_path)
    n_layers = model.config.num_hidden_layers
    with_pos = ["position_ids"] if hf.accepts(model, "position_ids") else []  # not BLOOM's ALiBi
    expected_in = ["input_ids", "attention_mask"] + with_pos + [
        f"past_key_values.{i}.{kv}" for kv in ("key", "value") for i in range(n_layers)]
    expected_out = ["logits"] + [f"present.{i}.{kv}" for kv in ("key", "value")
                                 for i in range(n_layers)]
    assert [i.name for i in m.graph.input] == expected_in
    assert [o.name for o in m.graph.output] == expected_out
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in m.graph.input}
    assert dims["input_ids"] == ["batch_size", "sequence_length"]
    assert dims["past_key_values.0.key"][:3:2] == ["batch_size", "past_sequence_length"]

    # Two prompts, the second left-padded by two: the mask matters.
    torch.manual_seed(3)
    ids = torch.randint(3, 128, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    ids[1, :2] = 0
    mask[1, :2] = 0
    model.generation_config.eos_token_id = None  # exactly NEW_TOKENS, no early stop
    with torch.no_grad():
        ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                             min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    ref_tokens = ref[:, ids.shape[1]:].numpy()
    got = _ort_greedy(onnx_path, ids.numpy(), mask.numpy(), NEW_TOKENS)
    assert ref_tokens.shape == (2, NEW_TOKENS)
    np.testing.assert_array_equal(got, ref_tokens)


def test_dynamic_cache_input_after_transformers_registration(tmp_path):
    """A transformers DynamicCache passed straight to export (registered by
    transformers' own helper first, as its docs say): inputs and outputs take
    Hugging Face's names; the string dim names inside the cache's spec name
    the ONNX dims. torch.onnx fails on this capture in its decomposition
    ("Constant tensor lifted_tensor_... is not in the constants dictionary")."""
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    register_dynamic_cache_export_support()
    hf.prepare()  # idempotent after transformers' registration
    torch.manual_seed(0)
    model = _llama().eval()
    with torch.no_grad():
        cache = model(input_ids=torch.randint(0, 128, (2, 4)), use_cache=True).past_key_values
    kwargs = {"input_ids": torch.randint(0, 128, (2, 3)),
              "attention_mask": torch.ones(2, 7, dtype=torch.long),
              "past_key_values": cache}
    kv = {0: "batch", 2: "past"}
    ds = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
          "past_key_values": [[kv, kv], [kv, kv]]}
    path = str(tmp_path / "m.onnx")
    pt2onnx.export(model, (), path, kwargs=kwargs, dynamic_shapes=ds)
    sess = ort_session(path)
    assert [i.name for i in sess.get_inputs()][2:] == [
        "past_key_values.0.key", "past_key_values.1.key",
        "past_key_values.0.value", "past_key_values.1.value"]
    assert sess.get_inputs()[2].shape[:3] == ["batch", 2, "past"]
    # Other sizes: batch 3, 5 cached positions, 2 new tokens.
    with torch.no_grad():
        cache2 = model(input_ids=torch.randint(0, 128, (3, 5)), use_cache=True).past_key_values
        leaves = [layer.keys for layer in cache2.layers] + [layer.values for layer in cache2.layers]
        feeds = {"input_ids": torch.randint(0, 128, (3, 2)),
                 "attention_mask": torch.ones(3, 7, dtype=torch.long)}
        got = sess.run(None, {**{k: v.numpy() for k, v in feeds.items()},
                              **{i.name: t.numpy()
                                 for i, t in zip(sess.get_inputs()[2:], leaves)}})
        exp = model(**feeds, past_key_values=cache2, use_cache=True)
    np.testing.assert_allclose(got[0], exp.logits.numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(got[1], exp.past_key_values.layers[0].keys.numpy(),
                               atol=1e-5, rtol=1e-5)

    # The same names from a .pt2 through the command, byte for byte as the Python path.
    dyn = torch.export.Dim.DYNAMIC
    kv_d = {0: dyn, 2: dyn}
    ep = torch.export.export(model, (), kwargs=kwargs, dynamic_shapes={
        "input_ids": {0: dyn, 1: dyn}, "attention_mask": {0: dyn, 1: dyn},
        "past_key_values": [[kv_d, kv_d], [kv_d, kv_d]]})
    torch.export.save(ep, str(tmp_path / "m.pt2"))
    # Same file name in two directories: the external data `location` is the name.
    (tmp_path / "py").mkdir()
    (tmp_path / "cli").mkdir()
    py_path, cli_out = str(tmp_path / "py" / "m.onnx"), str(tmp_path / "cli" / "m.onnx")
    pt2onnx.export(ep, (), py_path)
    r = subprocess.run([CLI, str(tmp_path / "m.pt2"), "-o", cli_out], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for suffix in ("", ".data"):
        with open(py_path + suffix, "rb") as a, open(cli_out + suffix, "rb") as b:
            assert a.read() == b.read()
    assert [i.name for i in onnx.load(cli_out).graph.input][2:] == [
        "past_key_values.0.key", "past_key_values.1.key",
        "past_key_values.0.value", "past_key_values.1.value"]
    assert [o.name for o in sess.get_outputs()] == [
        "logits", "present.0.key", "present.1.key", "present.0.value", "present.1.value"]


def _bert():
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=4, intermediate_size=64))


def _vit():
    from transformers import ViTConfig, ViTForImageClassification

    return ViTForImageClassification(ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, num_labels=10))


def _t5():
    from transformers import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration(T5Config(
        vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        decoder_start_token_id=0, pad_token_id=0))


def _whisper():
    from zoo import build

    return build("hf_whisper")[0]


CHECKPOINTS = {  # id: (task, model, ONNX inputs, ONNX outputs)
    "bert": ("feature-extraction", _bert, ["input_ids", "attention_mask", "token_type_ids"],
             ["last_hidden_state"]),  # optimum's outputs of the task: no pooler_output
    "vit": ("image-classification", _vit, ["pixel_values"], ["logits"]),
    "t5": ("seq2seq", _t5, ["input_ids", "attention_mask", "decoder_input_ids"],
           ["logits"]),
    "whisper": ("automatic-speech-recognition", _whisper, ["input_features", "decoder_input_ids"],
                ["logits"]),
    "gpt2": ("text-generation", _gpt2, ["input_ids", "attention_mask"], ["logits"]),
}


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_export_pretrained(name, tmp_path):
    task, build, ins, outs = CHECKPOINTS[name]
    torch.manual_seed(0)
    ckpt = _save(build().eval(), tmp_path / "ckpt")
    assert os.path.exists(os.path.join(ckpt, "model.safetensors"))
    r = hf.export_pretrained(ckpt, task)
    path = os.path.join(ckpt, "model.onnx")
    assert r.path == path and os.path.exists(path)
    assert r.checks["max_abs_error"] < 1e-4
    assert len(r.checks["verified_sizes"]) == 2
    onnx.checker.check_model(path, full_check=True)
    m = onnx.load(path)
    assert [i.name for i in m.graph.input] == ins
    assert [o.name for o in m.graph.output] == outs
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch_size"


def test_export_pretrained_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        hf.export_pretrained(tmp_path, "feature-extraction")
    with pytest.raises(ValueError, match="unknown task 'speech-synthesis'"):
        hf.export_pretrained(tmp_path, "speech-synthesis")
    assert not os.path.exists(tmp_path / "model.onnx")


def test_pretrained_command(tmp_path):
    torch.manual_seed(0)
    ckpt = _save(_gpt2().eval(), tmp_path / "gpt2")
    # The output folder (and its parents) need not exist, as with optimum (issue 22).
    out = str(tmp_path / "new" / "folder" / "out.onnx")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-m", "pt2onnx.hf", ckpt, "--task",
                        "text-generation-with-past", "-o", out],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "verified in onnxruntime" in r.stdout and os.path.exists(out)
    names = [i.name for i in onnx.load(out).graph.input]
    assert "past_key_values.1.value" in names
    bad = subprocess.run([sys.executable, "-m", "pt2onnx.hf", str(tmp_path / "missing"),
                          "--task", "seq2seq"], capture_output=True, text=True, env=env,
                         timeout=600)
    assert bad.returncode == 1
    assert "no config.json" in bad.stderr and "Traceback" not in bad.stderr
    # Errors are one line, and a failed export leaves no folder it made behind: a model that
    # cannot be captured (its forward raises) with -o in a new folder.
    broken = _save(_gpt2().eval(), tmp_path / "broken")
    with open(os.path.join(broken, "config.json")) as f:
        cfg = json.load(f)
    cfg["n_positions"] = 4  # shorter than the export's sequence: torch.export fails
    with open(os.path.join(broken, "config.json"), "w") as f:
        json.dump(cfg, f)
    out2 = tmp_path / "made" / "here" / "m.onnx"
    bad = subprocess.run([sys.executable, "-m", "pt2onnx.hf", broken, "--task",
                          "text-generation-with-past", "-o", str(out2), "--weights", "memory"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert bad.returncode == 1, bad.stderr
    lines = bad.stderr.splitlines()  # torch's and torchao's warnings come first
    assert lines[-1].startswith("pt2onnx-pretrained: error: "), bad.stderr
    assert sum(ln.startswith("pt2onnx-pretrained") for ln in lines) == 1
    assert "Traceback" not in bad.stderr
    assert not (tmp_path / "made").exists()


# ---- weights read in place (issue 18): the model built without weight data ----------------------

TRANSFORMERS_ZOO = sorted(n for n, e in zoo.ZOO.items() if e.family == "transformers")


@pytest.mark.slow
@pytest.mark.parametrize("name", TRANSFORMERS_ZOO)
def test_empty_model_with_safetensors_equals_in_memory(name, tmp_path):
    """Every transformers model of the zoo, built from its config under
    init_empty_weights and exported with weights= its save_pretrained
    checkpoint (hf.checkpoint_weights: transformers' saved names), writes
    the same bytes as the model exported from memory."""
    model, make, dyn = zoo.build(name)
    ckpt = _save(model, tmp_path / "ckpt")
    with pt2onnx.init_empty_weights():
        empty = type(model)(model.config).eval()
    kwargs = make(*zoo.ZOO[name].export_size)
    files = []
    for sub, m, w in (("memory", model, None), ("empty", empty, hf.checkpoint_weights(empty, ckpt))):
        os.makedirs(tmp_path / sub)
        r = pt2onnx.export(m, (), str(tmp_path / sub / "model.onnx"), kwargs=kwargs,
                           dynamic_shapes=dyn, weights=w)
        files.append([open(p, "rb").read() for p in [r.path, *r.data_paths]])
    assert files[0] == files[1]


@pytest.mark.parametrize("name", ["llama", "gpt2"])
@pytest.mark.parametrize("stored", [torch.float32, torch.bfloat16])
def test_export_pretrained_reads_weights_in_place(name, stored, tmp_path):
    """export_pretrained's default (weights="empty": the model built on fake
    weights, safetensors copied or converted while streamed) writes what
    loading the model first writes, from a float32 and from a bfloat16
    checkpoint (read as float32, as from_pretrained(dtype=float32) loads
    it), and at dtype float16 (converted while streamed); verified in
    onnxruntime."""
    torch.manual_seed(0)
    ckpt = _save(DECODERS[name]().to(stored).eval(), tmp_path / "ckpt")
    for dtype in (None, torch.float16):
        files = []
        for weights in ("memory", "empty"):
            f = tmp_path / f"{weights}-{dtype}" / "model.onnx"
            f.parent.mkdir()
            r = hf.export_pretrained(ckpt, "text-generation-with-past", f, weights=weights,
                                     dtype=dtype, verify=weights == "empty")
            files.append([open(p, "rb").read() for p in [r.path, *r.data_paths]])
            if weights == "empty":
                assert "weights" in r.timings
                assert r.checks["max_abs_error"] < (1e-4 if dtype is None else 5e-2)
        assert files[0] == files[1]


def test_export_pretrained_weights_errors(tmp_path):
    torch.manual_seed(0)
    ckpt = tmp_path / "ckpt"
    _save(_llama().eval(), ckpt)
    with pytest.raises(ValueError, match="weights must be 'auto', 'empty' or 'memory'"):
        hf.export_pretrained(ckpt, "text-generation", weights="disk")
    # A checkpoint of another model (a shape differs): named, nothing written.
    import json

    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(pt2onnx.ConversionError, match=r"mlp.down_proj.weight.*shape \[64, 128\], "
                                                      r"but the model's is \[64, 96\]"):
        hf.export_pretrained(ckpt, "text-generation", verify=False)
    assert not (ckpt / "model.onnx").exists()


def test_checkpoint_naming_a_timm_backbone_exports_offline(tmp_path):
    """A DETR config.json as transformers 4.x saves it names a timm backbone ("resnet50" with
    backbone_kwargs): transformers 5 asks the hub whether that name is a hub repository
    before it takes it for a timm architecture. Found by the optimum side-by-side run:
    huggingface_hub had read HF_HUB_OFFLINE at its import, before pt2onnx set it, and the
    request went out; then it was refused offline. Now, offline, no name is a hub repository:
    the backbone is timm's architecture of that name, its weights the checkpoint's (the
    no_network fixture fails the test on any connection)."""
    import json

    import hf_tiny
    import huggingface_hub.constants as hub
    from transformers import AutoConfig, AutoModelForObjectDetection

    ckpt = tmp_path / "detr"
    hf_tiny.tiny_checkpoint("detr", "object-detection", str(ckpt))
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.pop("backbone_config", None)
    cfg.update(use_timm_backbone=True, backbone="resnet10t", use_pretrained_backbone=False,
               backbone_kwargs={"in_chans": 3, "out_indices": [1, 2, 3, 4]})
    (ckpt / "config.json").write_text(json.dumps(cfg))
    was = hub.HF_HUB_OFFLINE
    with hf.offline():  # the checkpoint of that config, its backbone timm's resnet10t
        torch.manual_seed(0)
        model = AutoModelForObjectDetection.from_config(AutoConfig.from_pretrained(ckpt))
    model.eval().save_pretrained(ckpt)
    (ckpt / "config.json").write_text(json.dumps(cfg))  # as 4.x wrote it
    assert any(type(m).__module__.startswith("timm.") for m in model.modules())
    r = hf.export_pretrained(ckpt, "object-detection", tmp_path / "m.onnx", cache=False)
    assert r.checks["max_abs_error"] < 1e-3
    assert hub.HF_HUB_OFFLINE == was  # restored


def test_encoder_model_as_decoder_and_a_model_without_cache(tmp_path):
    """Megatron-BERT run as a decoder returns an encoder-decoder cache whose cross-attention
    part is empty (before: "'EncoderDecoderCache' object has no attribute 'layers'"): its
    self-attention part is the file's cache, as BERT's decoders have it. GPT-1 returns no
    cache at all: one error saying so and what to export instead, nothing written."""
    import hf_tiny

    ckpt = str(tmp_path / "megatron")
    hf_tiny.tiny_checkpoint("megatron-bert", "text-generation", ckpt)
    r = hf.export_pretrained(ckpt, "text-generation-with-past", tmp_path / "m.onnx", cache=False)
    assert r.checks["max_abs_error"] < 1e-4
    import onnx

    names = [i.name for i in onnx.load(str(tmp_path / "m.onnx")).graph.input]
    assert "past_key_values.0.key" in names and not any("encoder" in n for n in names)

    gpt = str(tmp_path / "gpt")
    hf_tiny.tiny_checkpoint("openai-gpt", "text-generation", gpt)
    with pytest.raises(ValueError, match=r"OpenAIGPTLMHeadModel returns no cache .* export it "
                                         r"as text-generation"):
        hf.export_pretrained(gpt, "text-generation-with-past", tmp_path / "g.onnx", cache=False)
    assert not (tmp_path / "g.onnx").exists()
