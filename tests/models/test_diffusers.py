"""diffusers end to end: a tiny Stable Diffusion pipeline (random weights from
small configs, no hub, no tokenizer) saved with save_pretrained, exported by
pt2onnx.diffusers.export_pipeline, then a 2-step DDIM denoising loop with
classifier-free guidance run entirely in onnxruntime (text encoder -> unet
twice -> vae decoder; the scheduler's step written here in numpy from the
exported scheduler_config.json) against diffusers' own StableDiffusionPipeline
in PyTorch on the same latents and token ids. Plus the pt2onnx-diffusers
command and its errors."""

import json
import os
import subprocess
import sys
import tomllib

import numpy as np
import onnx
import pytest
import torch

import zoo  # noqa: F401  (keeps torchvision's operator registrations out)
from zoo_check import ort_session

from pt2onnx import diffusers as pd
from pt2onnx import export as pt2onnx_export

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCAB, SEQ, HIDDEN = 100, 12, 32
GUIDANCE = 5.0
# Image tolerance: 2 steps of a random-weight UNet amplified by guidance 5,
# then the VAE; every network alone agrees to ~1e-6 (export_pipeline's
# verify, 1e-4 bound). Measured: 1.4e-6 (image values in [0, 1]).
IMAGE_ATOL = 1e-4


def _pipeline():
    from diffusers import (AutoencoderKL, DDIMScheduler, StableDiffusionPipeline,
                           UNet2DConditionModel)
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(32, 64), layers_per_block=1, sample_size=16, in_channels=4,
        out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=HIDDEN,
        attention_head_dim=8, norm_num_groups=8)
    vae = AutoencoderKL(
        block_out_channels=(16, 32), in_channels=3, out_channels=3, latent_channels=4,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
        norm_num_groups=8, sample_size=32)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=37, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=SEQ, layer_norm_eps=1e-5,
        bos_token_id=0, eos_token_id=2, pad_token_id=1))
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    return StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=None, unet=unet,
                                   scheduler=scheduler, safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("sd")
    pipe = _pipeline()
    pipe.save_pretrained(str(d / "pipe"))
    return pipe, str(d / "pipe"), d


@pytest.fixture(scope="module")
def exported(saved):
    pipe, path, d = saved
    out = str(d / "onnx")
    results = pd.export_pipeline(path, out)
    return pipe, out, results


def _ddim(cfg, steps):
    """DDIM (eta 0) from a scheduler config: the timesteps ("leading" spacing)
    and the step x_t -> x_prev given the predicted noise eps."""
    assert cfg["beta_schedule"] == "scaled_linear" and cfg["prediction_type"] == "epsilon"
    assert cfg["timestep_spacing"] == "leading"
    n = cfg["num_train_timesteps"]
    betas = np.linspace(cfg["beta_start"] ** 0.5, cfg["beta_end"] ** 0.5, n,
                        dtype=np.float64) ** 2
    alphas_cumprod = np.cumprod(1.0 - betas)
    final = 1.0 if cfg["set_alpha_to_one"] else alphas_cumprod[0]
    ratio = n // steps
    timesteps = (np.arange(steps) * ratio)[::-1] + cfg["steps_offset"]

    def step(eps, t, x):
        prev = t - ratio
        a_t = alphas_cumprod[t]
        a_prev = alphas_cumprod[prev] if prev >= 0 else final
        x0 = (x - np.sqrt(1 - a_t) * eps) / np.sqrt(a_t)
        return (np.sqrt(a_prev) * x0 + np.sqrt(1 - a_prev) * eps).astype(np.float32)

    return timesteps, step


def test_export_pipeline_files(exported):
    _, out, results = exported
    assert set(results) == {"text_encoder", "unet", "vae_decoder"}
    for r in results.values():
        assert r.checks["max_abs_error"] < 1e-4
    expect = {
        "text_encoder": ([("input_ids", onnx.TensorProto.INT32, ["batch_size", "sequence_length"])],
                         [("last_hidden_state", 3), ("pooler_output", 2)]),
        "unet": ([("sample", onnx.TensorProto.FLOAT, ["batch_size", 4, "height", "width"]),
                  ("timestep", onnx.TensorProto.FLOAT, ["steps"]),
                  ("encoder_hidden_states", onnx.TensorProto.FLOAT,
                   ["batch_size", "sequence_length", HIDDEN])],
                 [("out_sample", 4)]),
        "vae_decoder": ([("latent_sample", onnx.TensorProto.FLOAT,
                          ["batch_size", 4, "height", "width"])], [("sample", 4)]),
    }
    for folder, (inputs, outputs) in expect.items():
        g = onnx.load(os.path.join(out, folder, "model.onnx"), load_external_data=False).graph
        got = [(i.name, i.type.tensor_type.elem_type,
                [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim])
               for i in g.input]
        assert got == inputs, folder
        assert [(o.name, len(o.type.tensor_type.shape.dim)) for o in g.output] == outputs
    assert os.path.isfile(os.path.join(out, "scheduler", "scheduler_config.json"))
    index = json.load(open(os.path.join(out, "model_index.json")))
    assert index["vae_decoder"] == ["diffusers", "AutoencoderKL"] and "vae" not in index


def test_denoising_loop_in_onnxruntime(exported):
    """2 DDIM steps with classifier-free guidance, every network in
    onnxruntime, against StableDiffusionPipeline in PyTorch."""
    pipe, out, _ = exported
    te, unet, vae = (ort_session(os.path.join(out, f, "model.onnx"))
                     for f in ("text_encoder", "unet", "vae_decoder"))
    rng = np.random.default_rng(0)
    batch, h, w = 2, 16, 12  # latents; the image is 32 x 24
    ids = rng.integers(3, VOCAB, (batch, SEQ)).astype(np.int32)
    ids[:, -1] = 2  # eos: the pooled token
    neg = np.full((batch, SEQ), 1, np.int32)
    neg[:, 0], neg[:, 1] = 0, 2
    latents = rng.standard_normal((batch, 4, h, w)).astype(np.float32)

    # PyTorch: diffusers' pipeline, prompts encoded by its own text encoder.
    with torch.no_grad():
        pe = pipe.text_encoder(torch.from_numpy(ids).long())[0]
        npe = pipe.text_encoder(torch.from_numpy(neg).long())[0]
        ref = pipe(prompt_embeds=pe, negative_prompt_embeds=npe,
                   latents=torch.from_numpy(latents), height=2 * h, width=2 * w,
                   num_inference_steps=2, guidance_scale=GUIDANCE, output_type="np").images

    # onnxruntime: the whole loop; the scheduler from the exported config.
    cfg = json.load(open(os.path.join(out, "scheduler", "scheduler_config.json")))
    timesteps, step = _ddim(cfg, 2)
    assert list(timesteps) == [int(t) for t in pipe.scheduler.timesteps]
    text, pooled = te.run(None, {"input_ids": ids})
    uncond = te.run(None, {"input_ids": neg})[0]
    assert text.shape == (batch, SEQ, HIDDEN) and pooled.shape == (batch, HIDDEN)
    np.testing.assert_allclose(text, pe.numpy(), atol=1e-5, rtol=1e-4)
    cond = np.concatenate([uncond, text])
    x = latents * np.float32(pipe.scheduler.init_noise_sigma)
    for i, t in enumerate(timesteps):
        # timestep as one value for the batch (step 0) and one per row (step 1).
        ts = np.full(1 if i == 0 else 2 * batch, t, np.float32)
        eps = unet.run(None, {"sample": np.concatenate([x, x]), "timestep": ts,
                              "encoder_hidden_states": cond})[0]
        assert eps.shape == (2 * batch, 4, h, w)
        e_u, e_t = eps[:batch], eps[batch:]
        x = step(e_u + GUIDANCE * (e_t - e_u), int(t), x)
    scale = json.load(open(os.path.join(out, "vae_decoder", "config.json")))["scaling_factor"]
    decoded = vae.run(None, {"latent_sample": x / np.float32(scale)})[0]
    assert decoded.shape == (batch, 3, 2 * h, 2 * w)
    image = np.clip(decoded / 2 + 0.5, 0, 1).transpose(0, 2, 3, 1)

    assert ref.shape == image.shape == (batch, 2 * h, 2 * w, 3)
    live = (ref > 0.01) & (ref < 0.99)
    assert live.mean() > 0.5 and ref.std() > 0.01  # not a saturated / constant image
    diff = float(np.abs(image - ref).max())
    print(f"image max abs difference onnxruntime vs diffusers: {diff:.2e}")
    assert diff < IMAGE_ATOL


def test_diffusers_command(saved, tmp_path):
    _, path, _ = saved
    out = str(tmp_path / "out")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    # --no-verify: the verification is export_pipeline's, tested above; this
    # checks the command's plumbing and keeps the test short.
    r = subprocess.run([sys.executable, "-m", "pt2onnx.diffusers", path, "-o", out, "--opset",
                        "17", "--no-verify"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("pt2onnx export:") == 3 and "verified" not in r.stdout
    for folder, first in (("text_encoder", "input_ids"), ("unet", "sample"),
                          ("vae_decoder", "latent_sample")):
        m = onnx.load(os.path.join(out, folder, "model.onnx"), load_external_data=False)
        assert m.graph.input[0].name == first
        assert [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")] == [17]
    # The command pyproject registers.
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts["pt2onnx-diffusers"] == "pt2onnx.diffusers:main"


def test_errors(saved, tmp_path):
    _, path, _ = saved
    with pytest.raises(FileNotFoundError, match="not a diffusers pipeline directory"):
        pd.export_pipeline(tmp_path)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    bad = subprocess.run([sys.executable, "-m", "pt2onnx.diffusers", str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert bad.returncode == 1
    assert "not a diffusers pipeline directory" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    # A pipeline whose denoiser is a transformer: named, not attempted.
    other = tmp_path / "dit"
    other.mkdir()
    index = json.load(open(os.path.join(path, "model_index.json")))
    index["transformer"] = ["diffusers", "DiTTransformer2DModel"]
    del index["unet"]
    (other / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="supports UNet2DConditionModel and "
                                         "PixArtTransformer2DModel denoisers"):
        pd.export_pipeline(other)


# ---- transformer denoisers (DiT-style) ----------------------------------------------------------
# A PixArt pipeline through export_pipeline; SD3's and PixArt's denoisers alone
# (export_pipeline does not take SD3 pipelines): they convert with dynamic batch, height, width and
# sequence length (PixArt's position embedding divides sizes with Python's
# `/`, a SymFloat in the graph).

def _sd3():
    from diffusers import SD3Transformer2DModel

    return SD3Transformer2DModel(
        sample_size=16, patch_size=2, in_channels=4, out_channels=4, num_layers=2,
        attention_head_dim=8, num_attention_heads=4, joint_attention_dim=32,
        caption_projection_dim=32, pooled_projection_dim=64), {"pooled_projections": 64}


def _pixart():
    from diffusers import PixArtTransformer2DModel

    return PixArtTransformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, out_channels=8, num_layers=2,
        attention_head_dim=8, num_attention_heads=3, caption_channels=32,
        cross_attention_dim=24, attention_bias=True, activation_fn="gelu-approximate",
        num_embeds_ada_norm=1000, norm_type="ada_norm_single", norm_elementwise_affine=False,
        norm_eps=1e-6), {}


class _Denoiser(torch.nn.Module):
    def __init__(self, model, pooled):
        super().__init__()
        self.model, self.pooled = model, pooled

    def forward(self, hidden_states, timestep, encoder_hidden_states, pooled_projections=None):
        kw = {"pooled_projections": pooled_projections} if self.pooled else {
            "added_cond_kwargs": {"resolution": None, "aspect_ratio": None}}
        return self.model(hidden_states=hidden_states, timestep=timestep,
                          encoder_hidden_states=encoder_hidden_states, return_dict=False,
                          **kw)[0]


@pytest.mark.parametrize("build", [_sd3, _pixart], ids=["sd3", "pixart"])
def test_transformer_denoiser(build, tmp_path):
    torch.manual_seed(0)
    model, extra = build()
    module = _Denoiser(model.eval(), bool(extra))

    def inputs(batch, h, w, seq):
        d = {"hidden_states": torch.randn(batch, 4, h, w),
             "timestep": torch.rand(batch) * 999,
             "encoder_hidden_states": torch.randn(batch, seq, 32)}
        if extra:
            d["pooled_projections"] = torch.randn(batch, extra["pooled_projections"])
        return d

    axes = {"hidden_states": {0: "batch_size", 2: "height", 3: "width"},
            "timestep": {0: "batch_size"},
            "encoder_hidden_states": {0: "batch_size", 1: "sequence_length"}}
    if extra:
        axes["pooled_projections"] = {0: "batch_size"}
    f = str(tmp_path / "transformer.onnx")
    example = inputs(2, 16, 12, 7)
    names = list(example)
    pt2onnx_export(module, tuple(example.values()), f, dynamic_axes=axes, input_names=names,
                   output_names=["out_hidden_states"])
    sess = ort_session(f)
    for size in [(1, 8, 20, 5), (3, 12, 12, 9)]:
        feeds = inputs(*size)
        with torch.no_grad():
            ref = module(**feeds).numpy()
        got = sess.run(None, {k: v.numpy() for k, v in feeds.items()})[0]
        assert got.shape == ref.shape == (size[0], model.config.out_channels, *size[1:3])
        np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def test_pixart_pipeline(tmp_path):
    """A PixArt-style pipeline (T5 text encoder, PixArt transformer, VAE):
    export_pipeline writes text_encoder / transformer / vae_decoder files with
    their names and dims, each verified against PyTorch at other sizes (batch,
    prompt length with padding, height, width; both timestep forms)."""
    from diffusers import AutoencoderKL, DDIMScheduler, PixArtAlphaPipeline
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    model, _ = _pixart()
    text = T5EncoderModel(T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=37, num_layers=2,
                                   num_heads=4, relative_attention_num_buckets=8))
    vae = AutoencoderKL(block_out_channels=(16, 32), latent_channels=4, norm_num_groups=8,
                        down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2)
    pipe = PixArtAlphaPipeline(tokenizer=None, text_encoder=text, vae=vae, transformer=model,
                               scheduler=DDIMScheduler())
    path, out = str(tmp_path / "pixart"), str(tmp_path / "onnx")
    pipe.save_pretrained(path)
    results = pd.export_pipeline(path, out)
    assert sorted(results) == ["text_encoder", "transformer", "vae_decoder"]
    for r in results.values():
        assert r.checks["max_abs_error"] < 1e-4 and len(r.checks["verified_inputs"]) >= 2
    m = onnx.load(os.path.join(out, "transformer", "model.onnx"), load_external_data=False)
    assert [i.name for i in m.graph.input] == ["hidden_states", "timestep",
                                               "encoder_hidden_states", "encoder_attention_mask"]
    assert [o.name for o in m.graph.output] == ["out_hidden_states"]
    dims = [d.dim_param or d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch_size", 4, "height", "width"]
    m = onnx.load(os.path.join(out, "text_encoder", "model.onnx"), load_external_data=False)
    assert [i.name for i in m.graph.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in m.graph.output] == ["last_hidden_state"]
    index = json.load(open(os.path.join(out, "model_index.json")))
    assert "vae_decoder" in index and "transformer" in index
