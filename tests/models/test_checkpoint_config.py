"""A checkpoint's config.json checked against its weights before the model is built (issue 56
item 4, python/pt2onnx/_checkpoint_config.py): a config that does not fit its checkpoint
(num_hidden_layers 1000000 over 2 layers' weights built layers for minutes, memory growing) is
refused at once in one line naming the field, through export_pretrained and the
pt2onnx-pretrained command, leaving no output; valid checkpoints of many shapes (tied,
sharded, multimodal, encoder-only, weight-shared) pass; an allocation failure while the model
is built names the fields that size it; config.json and the weights are read only as regular
files. Random weights from small configs; no hub."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

import pt2onnx
import zoo  # noqa: F401  (keeps torchvision's operator registrations out)
from pt2onnx import _checkpoint_config, _core, hf
from program_cache_helpers import deadline
from test_hf import _gpt2, _llama  # the same tiny checkpoints

# What "refused at once" allows on a loaded machine; the check itself takes milliseconds, the
# runaway it replaces ran for minutes.
AT_ONCE_S = 10


BUILD = {"llama": _llama, "gpt2": _gpt2}


def _checkpoint(tmp_path, name, **changes):
    """A tiny checkpoint of `name` saved to tmp_path/name, with `changes` written into its
    config.json afterwards (a config that no longer fits the weights)."""
    torch.manual_seed(0)
    path = tmp_path / name
    BUILD[name]().eval().save_pretrained(path)
    edit_config(path, **changes)
    return path


def edit_config(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def _refused(path, match, out, exc=ValueError, **kw):
    """export_pretrained(path) fails within AT_ONCE_S with `exc` whose one-line message matches
    `match`, and leaves nothing at `out` (a file in a folder that did not exist)."""
    t0 = time.perf_counter()
    with deadline(AT_ONCE_S), pytest.raises(exc, match=match) as e:
        hf.export_pretrained(path, kw.pop("task", "text-generation"), out, verify=False, **kw)
    assert time.perf_counter() - t0 < AT_ONCE_S
    assert "\n" not in str(e.value)
    assert not os.path.exists(os.path.dirname(out))
    return str(e.value)


# ---- configs that do not fit their weights --------------------------------------------------

@pytest.mark.parametrize("weights", ["empty", "memory"])
@pytest.mark.parametrize("name,field", [("llama", "num_hidden_layers"), ("gpt2", "n_layer")])
def test_runaway_layer_count_refused_at_once(name, field, weights, tmp_path):
    ckpt = _checkpoint(tmp_path, name, **{field: 1000000})
    prefix = "model.layers" if name == "llama" else "transformer.h"
    msg = _refused(ckpt, rf"config.json: {field} is 1000000, but the checkpoint's weights hold "
                         rf"2 layers \({prefix}.0 .. {prefix}.1\)",
                   str(tmp_path / "new" / "m.onnx"), weights=weights)
    assert msg.startswith(str(ckpt))


def test_runaway_alias_of_the_layer_count(tmp_path):
    """GPT-2 names its layer count n_layer; a num_hidden_layers added to its config.json is
    what transformers builds (its attribute_map), and is checked too."""
    ckpt = _checkpoint(tmp_path, "gpt2", num_hidden_layers=1000000)
    _refused(ckpt, "num_hidden_layers is 1000000", str(tmp_path / "new" / "m.onnx"))


@pytest.mark.parametrize("name,field,value,match", [
    ("llama", "hidden_size", 48, r"hidden_size is 48, but the checkpoint's token embedding "
                                 r"model.embed_tokens.weight is \[128, 64\] \(hidden size 64\)"),
    ("llama", "vocab_size", 256, r"vocab_size is 256, but the checkpoint's token embedding "
                                 r"model.embed_tokens.weight is \[128, 64\] \(a vocabulary of "
                                 r"128\)"),
    ("gpt2", "n_embd", 64, r"n_embd is 64, but .* transformer.wte.weight is \[128, 32\]"),
    ("gpt2", "vocab_size", 200, r"vocab_size is 200, but .* transformer.wte.weight"),
    ("llama", "num_hidden_layers", 3, r"num_hidden_layers is 3, but .* hold 2 layers"),
])
def test_field_that_disagrees_is_named(name, field, value, match, tmp_path):
    ckpt = _checkpoint(tmp_path, name, **{field: value})
    _refused(ckpt, match, str(tmp_path / "new" / "m.onnx"))


def test_command_refuses_runaway_config(tmp_path):
    """pt2onnx-pretrained: one error line naming the field, exit status 1, within seconds (the
    process's start-up, torch's import included, aside), no output folder."""
    ckpt = _checkpoint(tmp_path, "llama", num_hidden_layers=1000000)
    out = tmp_path / "made" / "here" / "m.onnx"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "pt2onnx.hf", str(ckpt), "--task",
                        "text-generation-with-past", "-o", str(out)],
                       capture_output=True, text=True, env=env, timeout=120)
    took = time.perf_counter() - t0
    assert p.returncode == 1, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("pt2onnx-pretrained")]
    assert len(lines) == 1 and lines == p.stderr.splitlines()[-1:], p.stderr[-2000:]
    assert lines[0].startswith("pt2onnx-pretrained: error: ValueError: ")
    assert "num_hidden_layers is 1000000, but the checkpoint's weights hold 2 layers" in lines[0]
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "made").exists()
    assert took < 60, took


def test_allocation_failure_names_the_fields(tmp_path):
    """A size no weight shows (BERT's max_position_embeddings sizes a buffer built with the
    model): the allocation failure reads as one line naming the fields that size the model,
    the largest first."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    ckpt = tmp_path / "bert"
    BertModel(BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=64)).save_pretrained(ckpt)
    edit_config(ckpt, max_position_embeddings=10**13)
    msg = _refused(ckpt, "ran out of memory", str(tmp_path / "new" / "m.onnx"), exc=MemoryError,
                   task="feature-extraction")
    assert "largest sizes: max_position_embeddings=10000000000000," in msg


def test_diffusers_component_checked(tmp_path):
    """A pipeline's component is checked the same way before from_pretrained builds it (the
    PixArt transformer's num_layers against its transformer_blocks)."""
    from diffusers import PixArtTransformer2DModel

    from pt2onnx import diffusers as pd

    torch.manual_seed(0)
    PixArtTransformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, out_channels=8, num_layers=2,
        attention_head_dim=8, num_attention_heads=3, caption_channels=32,
        cross_attention_dim=24, attention_bias=True, activation_fn="gelu-approximate",
        num_embeds_ada_norm=1000, norm_type="ada_norm_single", norm_elementwise_affine=False,
        norm_eps=1e-6).save_pretrained(tmp_path / "pipe" / "transformer")
    (tmp_path / "pipe" / "model_index.json").write_text(json.dumps(
        {"_class_name": "PixArtAlphaPipeline",
         "transformer": ["diffusers", "PixArtTransformer2DModel"]}))
    edit_config(tmp_path / "pipe" / "transformer", num_layers=1000000)
    with deadline(AT_ONCE_S), pytest.raises(ValueError, match=r"num_layers is 1000000, but the "
                                             r"checkpoint's weights hold 2 layers "
                                             r"\(transformer_blocks.0 .. transformer_blocks.1\)"):
        pd.load_pipeline_models(tmp_path / "pipe")


# ---- files that are not regular -------------------------------------------------------------

@pytest.mark.parametrize("what", ["config fifo", "config /dev/zero", "config oversized",
                                  "weights fifo", "weights /dev/zero"])
def test_checkpoint_files_must_be_regular(what, tmp_path):
    """config.json and the safetensors files are opened without waiting on a FIFO and read only
    when they are regular files of sane size, through the command (a subprocess: a read that
    blocks fails the test by its timeout instead of hanging the suite)."""
    ckpt = _checkpoint(tmp_path, "llama")
    target = ckpt / ("config.json" if what.startswith("config") else "model.safetensors")
    target.unlink()
    if what.endswith("fifo"):
        os.mkfifo(target)
    elif what.endswith("/dev/zero"):
        target.symlink_to("/dev/zero")
    else:
        with open(target, "wb") as f:
            f.truncate(65 << 20)
    out = tmp_path / "made" / "m.onnx"
    p = subprocess.run([sys.executable, "-m", "pt2onnx.hf", str(ckpt), "--task",
                        "text-generation", "-o", str(out), "--no-cache", "--no-verify"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert p.returncode == 1, p.stderr[-2000:]
    last = p.stderr.splitlines()[-1]
    assert last.startswith("pt2onnx-pretrained: error: ") and str(target) in last, last
    assert ("more than the 64 MiB" if what.endswith("oversized") else "not a regular file") \
        in last, last
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "made").exists()


def test_index_names_shards_in_the_folder_only(tmp_path):
    ckpt = _checkpoint(tmp_path, "llama")
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.embed_tokens.weight": "../elsewhere.safetensors"}}))
    _refused(ckpt, r"weight_map names '../elsewhere.safetensors', not a file name",
             str(tmp_path / "new" / "m.onnx"))


# ---- what passes ----------------------------------------------------------------------------

def _small(**kw):
    return dict(dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4), **kw)


def _valid_models():
    import transformers as tr

    return {
        # tied embeddings (no lm_head saved), sharded with an index
        "tied": lambda: tr.Qwen2ForCausalLM(tr.Qwen2Config(
            vocab_size=100, num_key_value_heads=2, tie_word_embeddings=True, **_small())),
        "sharded": lambda: tr.Qwen2ForCausalLM(tr.Qwen2Config(
            vocab_size=100, num_key_value_heads=2, **_small())),
        # text_config + vision_config with layer counts of their own
        "llava": lambda: tr.LlavaForConditionalGeneration(tr.LlavaConfig(
            text_config=tr.LlamaConfig(vocab_size=160, num_key_value_heads=2, **_small()),
            vision_config=tr.CLIPVisionConfig(image_size=32, patch_size=8,
                                              **_small(num_hidden_layers=3)),
            image_token_index=150)),
        # an encoder-only model whose config states a decoder of more layers
        "t5-encoder": lambda: tr.T5EncoderModel(tr.T5Config(
            vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=6,
            num_heads=4)),
        # 6 layers sharing one group's weights; embeddings narrower than the hidden size
        "albert": lambda: tr.AlbertModel(tr.AlbertConfig(
            vocab_size=100, embedding_size=16, **_small(num_hidden_layers=6))),
        # blocks of blocks (num_hidden_layers = sum(block_sizes))
        "funnel": lambda: tr.FunnelModel(tr.FunnelConfig(
            vocab_size=100, block_sizes=[1, 2], num_decoder_layers=1, d_model=32, n_head=4,
            d_head=8, d_inner=64)),
        # the embedding projected to the hidden size (OPT-350m's word_embed_proj_dim)
        "opt-proj": lambda: tr.OPTForCausalLM(tr.OPTConfig(
            vocab_size=100, hidden_size=64, word_embed_proj_dim=32, num_hidden_layers=2,
            ffn_dim=64, num_attention_heads=4)),
        # encoder and decoder sub-configs of different depths
        "vit-gpt2": lambda: tr.VisionEncoderDecoderModel(
            tr.VisionEncoderDecoderConfig.from_encoder_decoder_configs(
                tr.ViTConfig(image_size=32, patch_size=8, **_small()),
                tr.GPT2Config(vocab_size=100, n_embd=32, n_layer=3, n_head=4,
                              add_cross_attention=True))),
    }


@pytest.mark.parametrize("name", sorted(_valid_models()))
def test_valid_checkpoints_pass(name, tmp_path):
    torch.manual_seed(0)
    model = _valid_models()[name]()
    model.save_pretrained(tmp_path, **({"max_shard_size": "20KB"} if name == "sharded" else {}))
    if name == "sharded":
        assert (tmp_path / "model.safetensors.index.json").exists()
    _checkpoint_config.check(tmp_path, _checkpoint_config.read_config(tmp_path))


def test_fewer_layers_than_the_weights_pass_the_check(tmp_path):
    """A truncated config (or multi-token-prediction layers beyond num_hidden_layers) is not
    refused here: transformers loads it (weights="memory") and drops the other layers."""
    ckpt = _checkpoint(tmp_path, "llama", num_hidden_layers=1)
    _checkpoint_config.check(ckpt, _checkpoint_config.read_config(ckpt))
    r = hf.export_pretrained(ckpt, "text-generation", str(tmp_path / "out" / "m.onnx"),
                             weights="memory", cache=False, verbose=False)
    assert r.checks["max_abs_error"] < 1e-4


def test_more_embedding_rows_than_vocab_pass_the_check(tmp_path):
    """An embedding with rows beside the vocabulary (MLlama's text model has vocab_size + 8) is
    not refused; fewer rows than vocab_size are (test_field_that_disagrees_is_named)."""
    ckpt = _checkpoint(tmp_path, "llama", vocab_size=120)
    _checkpoint_config.check(ckpt, _checkpoint_config.read_config(ckpt))


def test_safetensors_shapes_reads_headers(tmp_path):
    ckpt = _checkpoint(tmp_path, "llama")
    shapes = _core.safetensors_shapes([str(ckpt / "model.safetensors")])
    assert shapes["model.embed_tokens.weight"] == ("float32", [128, 64])
    assert len([n for n in shapes if n.startswith("model.layers.1.")]) == 9
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes((10**9).to_bytes(8, "little") + b"{}")
    with pytest.raises(pt2onnx.ConversionError, match="header length 1000000000 exceeds"):
        _core.safetensors_shapes([str(bad)])
