"""optimum's tasks through `pt2onnx-pretrained`: one model type per task (the quick subset of
the sweep over transformers' auto mappings, bench/hf_tasks.py), each a tiny random-weight
checkpoint saved with save_pretrained (tests/models/hf_tiny.py) and exported by the command,
which checks the file in onnxruntime against transformers at two sizes other than the
export's (batch 1 x 5 and 3 x 11). The file's inputs and outputs must carry optimum's names,
in optimum's order."""

from __future__ import annotations

import contextlib
import io
import os

import onnx
import pytest

import hf_tiny
from pt2onnx import _hf_tasks, hf

# task: (model type, the file's inputs, its outputs); outputs None: the task table's.
QUICK = {
    "text-classification": ("bert", ["input_ids", "attention_mask", "token_type_ids"], None),
    "token-classification": ("roberta", None, None),
    "question-answering": ("distilbert", ["input_ids", "attention_mask"], None),
    "fill-mask": ("albert", ["input_ids", "attention_mask", "token_type_ids"], None),
    "multiple-choice": ("bert", ["input_ids", "attention_mask", "token_type_ids"], None),
    "automatic-speech-recognition": ("wav2vec2", ["input_values"], None),
    "audio-classification": ("hubert", ["input_values"], None),
    "audio-frame-classification": ("wav2vec2", ["input_values"], None),
    "audio-xvector": ("wavlm", ["input_values"], None),
    "semantic-segmentation": ("segformer", ["pixel_values"], None),
    "object-detection": ("yolos", ["pixel_values"], None),
    "depth-estimation": ("glpn", ["pixel_values"], None),
    "masked-im": ("vit", ["pixel_values"], None),
    "image-to-image": ("swin2sr", ["pixel_values"], None),
    "zero-shot-image-classification": ("clip", ["input_ids", "attention_mask", "pixel_values"],
                                       None),
    # CLIP as feature-extraction: both towers, as optimum exports it.
    "feature-extraction": ("clip", ["input_ids", "attention_mask", "pixel_values"],
                           ["logits_per_image", "logits_per_text", "text_embeds",
                            "image_embeds"]),
    # A mixture-of-experts decoder with its cache: transformers 5 saves its experts one by one
    # where the model holds them merged; weights "auto" loads it with from_pretrained.
    "text-generation-with-past": ("mixtral", None, None),
    "feature-extraction-with-past": ("qwen2", None, None),
    # A vision encoder-decoder's forward (the with-past pair: tests/models/test_seq2seq.py).
    "image-to-text": ("pix2struct", ["flattened_patches", "attention_mask",
                                     "decoder_input_ids"], None),
    # A Decision Transformer over an episode (AutoModel's class, as optimum loads it).
    "reinforcement-learning": ("decision_transformer",
                               ["states", "actions", "timesteps", "returns_to_go",
                                "attention_mask"], None),
}


def _command(*args) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = hf.main(list(args))
    return rc, out.getvalue()


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PT2ONNX_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("task", sorted(QUICK))
def test_task_through_the_command(task, tmp_path):
    model_type, inputs, outputs = QUICK[task]
    ckpt = str(tmp_path / "ckpt")
    hf_tiny.tiny_checkpoint(model_type, task.replace("-with-past", ""), ckpt)
    f = str(tmp_path / "out" / "model.onnx")
    rc, out = _command(ckpt, "--task", task, "-o", f, "--no-cache", "-q")
    assert rc == 0, out
    assert "verified in onnxruntime" in out
    m = onnx.load(f, load_external_data=False)
    if inputs is not None:
        assert [i.name for i in m.graph.input] == inputs
    names = [o.name for o in m.graph.output]
    want = outputs or list(_hf_tasks.TASKS_BY_NAME[task].outputs)
    if want:
        assert names == want
    else:  # a decoder step: logits (the base model's last hidden state), then the cache
        first = "logits" if task.startswith("text-generation") else "last_hidden_state"
        assert names[0] == first and names[1] == "present.0.key"
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param.endswith("batch_size")


def test_time_series_forecasting(tmp_path):
    """optimum's own class for PatchTST (no auto class maps it)."""
    import torch
    from transformers import PatchTSTConfig, PatchTSTForPrediction

    torch.manual_seed(0)
    config = PatchTSTConfig(num_input_channels=3, context_length=32, patch_length=8,
                            patch_stride=8, prediction_length=8, d_model=32,
                            num_attention_heads=4, num_hidden_layers=2, ffn_dim=64)
    ckpt = str(tmp_path / "ckpt")
    PatchTSTForPrediction(config).eval().save_pretrained(ckpt)
    f = str(tmp_path / "model.onnx")
    rc, out = _command(ckpt, "-o", f, "--no-cache", "-q")  # inferred: ...ForPrediction
    assert rc == 0 and "verified in onnxruntime" in out, out
    m = onnx.load(f)
    assert [i.name for i in m.graph.input] == ["past_values"]
    assert [o.name for o in m.graph.output] == ["prediction_outputs"]


def test_decision_transformer_inferred_and_listed(tmp_path):
    """A Decision Transformer checkpoint (architectures: DecisionTransformerModel) is exported
    as reinforcement-learning without --task, and lists only the tasks with its inputs."""
    ckpt = str(tmp_path / "ckpt")
    hf_tiny.tiny_checkpoint("decision_transformer", "reinforcement-learning", ckpt)
    rc, out = _command(ckpt, "--list-tasks")
    assert rc == 0 and out.split() == ["reinforcement-learning", "feature-extraction"], out
    assert _hf_tasks.infer({"architectures": ["DecisionTransformerModel"]}).name == \
        "reinforcement-learning"
    assert _hf_tasks.infer({"architectures": ["BertModel"]}).name == "feature-extraction"
    # A hostile state size: one error naming the field, no file (nothing the size of it made).
    import json

    cfg = os.path.join(ckpt, "config.json")
    with open(cfg) as fh:
        d = json.load(fh)
    with open(cfg, "w") as fh:
        json.dump(dict(d, state_dim=10**12), fh)
    f = str(tmp_path / "out" / "model.onnx")
    rc, _ = _command(ckpt, "-o", f, "--no-cache", "-q")
    assert rc == 1 and not os.path.exists(f)
    from types import SimpleNamespace

    from pt2onnx import _hf_inputs

    hostile = SimpleNamespace(config=SimpleNamespace(**dict(d, state_dim=10**12)))
    with pytest.raises(ValueError, match="state_dim"):  # the inputs' own bound
        _hf_inputs.trajectory_inputs(hostile, 2, 3)


def test_task_inferred_listed_and_synonyms(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    hf_tiny.tiny_checkpoint("bert", "text-classification", ckpt)
    # No --task: config.json's architectures (BertForSequenceClassification) decide.
    assert _hf_tasks.infer({"architectures": ["BertForSequenceClassification"]}).name == \
        "text-classification"
    rc, out = _command(ckpt, "--list-tasks")
    assert rc == 0
    listed = out.split()
    assert listed[0] == "text-classification"
    assert {"feature-extraction", "fill-mask", "multiple-choice", "question-answering",
            "token-classification"} <= set(listed)
    assert "image-classification" not in listed
    f = str(tmp_path / "model.onnx")
    rc, out = _command(ckpt, "-o", f, "--no-cache", "-q")
    assert rc == 0 and "verified in onnxruntime" in out
    assert [o.name for o in onnx.load(f).graph.output] == ["logits"]
    # optimum's synonyms and pt2onnx's earlier names.
    assert _hf_tasks.resolve("sequence-classification").name == "text-classification"
    assert _hf_tasks.resolve("seq2seq-with-past").name == "text2text-generation-with-past"
    assert _hf_tasks.resolve("causal-lm-with-past").name == "text-generation-with-past"
    with pytest.raises(ValueError, match="unknown task 'sentiment'"):
        _hf_tasks.resolve("sentiment")


def test_task_errors_name_the_cause(tmp_path, capsys):
    ckpt = str(tmp_path / "ckpt")
    hf_tiny.tiny_checkpoint("vit", "image-classification", ckpt)
    f = str(tmp_path / "out" / "model.onnx")
    # A vision checkpoint has no question-answering class: one line naming the model type.
    assert hf.main([ckpt, "--task", "question-answering", "-o", f, "--no-cache"]) == 1
    err = capsys.readouterr().err
    assert "AutoModelForQuestionAnswering" in err and "'vit'" in err
    assert not os.path.exists(f)
    # reinforcement-learning's AutoModel maps ViT, but ViT reads no trajectories.
    assert hf.main([ckpt, "--task", "reinforcement-learning", "-o", f, "--no-cache"]) == 1
    assert "'vit' does not read trajectories" in capsys.readouterr().err
    assert not os.path.exists(f)
    # No architectures to infer from.
    cfg = os.path.join(ckpt, "config.json")
    with open(cfg) as fh:
        text = fh.read().replace('"ViTForImageClassification"', '"SomethingElse"')
    with open(cfg, "w") as fh:
        fh.write(text)
    assert hf.main([ckpt, "-o", f, "--no-cache"]) == 1
    assert "pass --task" in capsys.readouterr().err


def test_pad_token_id_option(tmp_path, capsys):
    """optimum-cli's --pad_token_id: GPT-2's classifier finds each row's last token by the
    padding id, which its config.json often lacks (transformers then refuses a batch). The
    id is part of the program cache's key, and a cache hit's check builds the model with it."""
    import json

    ckpt = str(tmp_path / "ckpt")
    hf_tiny.tiny_checkpoint("gpt2", "text-classification", ckpt)
    cfg = os.path.join(ckpt, "config.json")
    with open(cfg) as fh:
        d = json.load(fh)
    d.pop("pad_token_id", None)
    with open(cfg, "w") as fh:
        json.dump(d, fh)
    f = str(tmp_path / "out" / "model.onnx")
    assert hf.main([ckpt, "-o", f, "-q"]) == 1
    assert "pass --pad_token_id" in capsys.readouterr().err and not os.path.exists(f)
    for expect in ("miss", "hit"):
        rc, out = _command(ckpt, "-o", f, "-q", "--pad_token_id", "5")
        assert rc == 0 and "verified in onnxruntime" in out and f"cache: {expect}" in out, out
    assert hf.main([ckpt, "-o", f, "-q", "--pad_token_id", "-1"]) == 1
    assert "pad_token_id must be a token id" in capsys.readouterr().err


def test_sub_model_saved_alone_loads_as_its_architecture():
    """Emu3's text decoder saved alone: config.json's type (emu3_text_model) is no auto class's,
    its architectures (Emu3ForCausalLM) is AutoModelForCausalLM's for another type; the class
    is taken only when it is in the task's mapping and its config class is the config's."""
    import transformers

    task = _hf_tasks.resolve("text-generation-with-past")
    config = transformers.Emu3TextConfig(architectures=["Emu3ForCausalLM"])
    assert hf._model_class(task, config) is transformers.Emu3ForCausalLM
    for archs in (["LlamaForCausalLM"], ["Emu3TextModel"], ["os.system"], [], None):
        config.architectures = archs
        with pytest.raises(ValueError, match="no AutoModelForCausalLM class"):
            hf._model_class(task, config)


def test_image_to_text_needs_an_encoder_decoder():
    """AutoModelForImageTextToText also maps vision-language decoders (LLaVA): image-to-text
    names the kind it exports rather than failing inside the capture."""
    import transformers

    task = _hf_tasks.resolve("image-to-text-with-past")
    with pytest.raises(ValueError, match="'llava' is not an encoder-decoder"):
        hf._model_class(task, transformers.LlavaConfig())
    assert hf._model_class(task, transformers.Pix2StructConfig()).__name__ == \
        "AutoModelForImageTextToText"
    assert _hf_tasks.infer({"architectures": ["VisionEncoderDecoderModel"]}) is task
    assert _hf_tasks.infer({"architectures": ["Pix2StructForConditionalGeneration"]}) is task


def test_image_to_text_refuses_prompts_with_image_tokens(tmp_path, capsys):
    """Florence-2 is an encoder-decoder whose encoder reads a prompt with the image's
    placeholder tokens: refused by name (not exported as a text model without its image)."""
    ckpt = str(tmp_path / "ckpt")
    hf_tiny.tiny_checkpoint("florence2", "image-to-text", ckpt)
    f = str(tmp_path / "out" / "model.onnx")
    for task in ("image-to-text", "image-to-text-with-past"):
        assert hf.main([ckpt, "--task", task, "-o", f, "--no-cache", "-q"]) == 1
        assert "placeholder tokens" in capsys.readouterr().err and not os.path.exists(f)


@pytest.mark.parametrize("archs", [{"a": 1}, "BertModel", [5], ["x" * 100_000], None, []])
def test_hostile_architectures_are_an_error_naming_the_field(archs):
    """config.json is the user's file: an architectures field of another type, or a huge
    name, gives one ValueError asking for --task (its text cut short), not a KeyError."""
    with pytest.raises(ValueError, match="pass --task") as e:
        _hf_tasks.infer({"architectures": archs})
    assert len(str(e.value)) < 2000
