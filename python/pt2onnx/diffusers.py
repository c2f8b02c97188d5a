"""diffusers pipelines, end to end: the one module of pt2onnx that knows about
diffusers.

`export_pipeline(path, out_dir)` exports the networks of a local
Stable-Diffusion-style pipeline directory (as `pipeline.save_pretrained`
writes it: model_index.json and one folder per component) to one ONNX file
each, with the input / output names and dynamic axes that ONNX diffusion
runtimes (optimum's ORT pipelines, diffusers' OnnxStableDiffusionPipeline)
expect:

- `text_encoder/model.onnx`: input_ids (int32, [batch_size, sequence_length])
  -> last_hidden_state, pooler_output (a CLIPTextModel);
- `unet/model.onnx`: sample ([batch_size, channels, height, width]),
  timestep (float32, [steps]: one value for the whole batch, or one per row),
  encoder_hidden_states ([batch_size, sequence_length, dim]) -> out_sample
  (a UNet2DConditionModel without added conditioning, i.e. SD 1.x / 2.x).
  height and width must be multiples of 2 ** (len(block_out_channels) - 1)
  (8 for SD's UNet), as the file is captured on such sizes: diffusers'
  resampling branch for other sizes is not in it, and onnxruntime then stops
  with a shape error in a Concat;
- or, for a PixArt-style pipeline (a PixArtTransformer2DModel denoiser and a
  T5EncoderModel text encoder): `text_encoder/model.onnx`: input_ids,
  attention_mask (int64) -> last_hidden_state; `transformer/model.onnx`:
  hidden_states, timestep (as the UNet's), encoder_hidden_states,
  encoder_attention_mask -> out_hidden_states (with a learned variance its
  channels are twice the latent's, as the model returns them); height and
  width multiples of the patch size;
- `vae_decoder/model.onnx`: latent_sample -> sample (AutoencoderKL.decode;
  the pipeline divides the latents by the VAE's scaling_factor first, as
  diffusers' pipelines do).

Every file is checked in onnxruntime against PyTorch at sizes other than the
export's (verify=True). The scheduler, tokenizer and the denoising loop stay
with the runtime; their configs are copied beside the files (scheduler/,
tokenizer/, model_index.json) so that a runtime finds them.

`main()` is the `pt2onnx-diffusers` command. Nothing here reaches the
network: components load with local_files_only and the hub's offline mode.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from . import _checkpoint_config, _cli
from . import _verify as _verify_mod
from ._export import ExportResult, export

ATOL, RTOL = 1e-4, 1e-4
# Folders copied as they are: what a runtime needs besides the networks.
_COPIED = ("scheduler", "tokenizer", "feature_extractor")


class _TextEncoder(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        out = self.model(input_ids=input_ids, return_dict=True)
        return out.last_hidden_state, out.pooler_output


class _UNet(torch.nn.Module):
    """timestep [steps] with steps 1 (one value for the batch) or batch_size
    (one per row): row i takes timestep[i % steps], so both forms run on one
    file without a shape guard tying steps to the batch."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, sample, timestep, encoder_hidden_states):
        rows = torch.arange(sample.shape[0], device=sample.device)
        t = timestep.to(sample.dtype)[rows % timestep.shape[0]]
        return self.model(sample, t, encoder_hidden_states, return_dict=False)[0]


class _T5TextEncoder(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          return_dict=True).last_hidden_state


class _Transformer(torch.nn.Module):
    """A PixArt-style transformer denoiser (text conditioning with a mask, no
    added resolution / aspect-ratio conditioning); timestep as _UNet's."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, hidden_states, timestep, encoder_hidden_states, encoder_attention_mask):
        rows = torch.arange(hidden_states.shape[0], device=hidden_states.device)
        t = timestep.to(hidden_states.dtype)[rows % timestep.shape[0]]
        return self.model(hidden_states, encoder_hidden_states=encoder_hidden_states,
                          timestep=t, encoder_attention_mask=encoder_attention_mask,
                          added_cond_kwargs={"resolution": None, "aspect_ratio": None},
                          return_dict=False)[0]


class _VaeDecoder(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, latent_sample):
        return self.model.decode(latent_sample, return_dict=False)[0]


@dataclass
class _Component:
    """How one network is exported: its wrapper, names, dynamic axes and
    example inputs at (batch, a, b) sizes (a, b: sequence or height/width)."""

    folder: str
    source: str  # the pipeline component it wraps
    wrap: Callable[[Any], torch.nn.Module]
    input_names: list[str]
    output_names: list[str]
    axes: dict[str, dict[int, str]]
    make: Callable[[Any, int, int, int], dict[str, torch.Tensor]]
    export_size: tuple[int, int, int]
    verify_sizes: list[tuple[int, int, int]] = field(default_factory=list)


def _text_inputs(model, batch, seq, _):
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), dtype=torch.int32)
    eos = model.config.eos_token_id
    if eos is not None and 0 <= eos < model.config.vocab_size:
        ids[:, -1] = eos  # the pooled token is live data
    return {"input_ids": ids}


def _unet_inputs(model, batch, h, w):
    cfg = model.config
    cross = cfg.cross_attention_dim
    cross = cross[0] if isinstance(cross, (list, tuple)) else cross
    steps = 1 if batch % 2 else batch  # both timestep forms are exercised
    return {"sample": torch.randn(batch, cfg.in_channels, h, w),
            "timestep": torch.rand(steps) * 999.0,
            "encoder_hidden_states": torch.randn(batch, 7 + batch, cross)}


def _t5_inputs(model, batch, seq, _):
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.long)
    if batch > 1 and seq > 1:
        mask[0, -1] = 0  # a padded prompt: the mask is live data
    return {"input_ids": ids, "attention_mask": mask}


def _transformer_inputs(model, batch, h, w):
    cfg = model.config
    steps = 1 if batch % 2 else batch
    seq = 5 + batch
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, -2:] = 0
    return {"hidden_states": torch.randn(batch, cfg.in_channels, h, w),
            "timestep": torch.rand(steps) * 999.0,
            "encoder_hidden_states": torch.randn(batch, seq, cfg.caption_channels),
            "encoder_attention_mask": mask}


def _vae_inputs(model, batch, h, w):
    return {"latent_sample": torch.randn(batch, model.config.latent_channels, h, w)}


def _latent_multiple(unet) -> int:
    """The UNet's height / width must be multiples of this (one halving per
    downsampling block)."""
    return 2 ** (len(unet.config.block_out_channels) - 1)


def _components(models: dict[str, torch.nn.Module]) -> list[_Component]:
    out = []
    if "text_encoder" in models and "transformer" in models:  # PixArt: a T5 encoder
        out.append(_Component(
            "text_encoder", "text_encoder", _T5TextEncoder, ["input_ids", "attention_mask"],
            ["last_hidden_state"],
            {"input_ids": {0: "batch_size", 1: "sequence_length"},
             "attention_mask": {0: "batch_size", 1: "sequence_length"}}, _t5_inputs, (2, 8, 0),
            [(1, 5, 0), (3, 13, 0)]))
    elif "text_encoder" in models:
        max_pos = models["text_encoder"].config.max_position_embeddings
        seq = min(8, max_pos)
        out.append(_Component(
            "text_encoder", "text_encoder", _TextEncoder, ["input_ids"],
            ["last_hidden_state", "pooler_output"],
            {"input_ids": {0: "batch_size", 1: "sequence_length"}}, _text_inputs, (2, seq, 0),
            [(1, max(seq - 3, 1), 0), (3, max_pos, 0)]))
    if "unet" in models:
        m = _latent_multiple(models["unet"])
        out.append(_Component(
            "unet", "unet", _UNet, ["sample", "timestep", "encoder_hidden_states"], ["out_sample"],
            {"sample": {0: "batch_size", 2: "height", 3: "width"}, "timestep": {0: "steps"},
             "encoder_hidden_states": {0: "batch_size", 1: "sequence_length"}},
            _unet_inputs, (2, 4 * m, 2 * m), [(1, 2 * m, 3 * m), (3, 3 * m, 2 * m),
                                               (4, m, m)]))
    if "transformer" in models:
        p = models["transformer"].config.patch_size
        out.append(_Component(
            "transformer", "transformer", _Transformer,
            ["hidden_states", "timestep", "encoder_hidden_states", "encoder_attention_mask"],
            ["out_hidden_states"],
            {"hidden_states": {0: "batch_size", 2: "height", 3: "width"}, "timestep": {0: "steps"},
             "encoder_hidden_states": {0: "batch_size", 1: "sequence_length"},
             "encoder_attention_mask": {0: "batch_size", 1: "sequence_length"}},
            _transformer_inputs, (2, 8 * p, 6 * p), [(1, 4 * p, 10 * p), (3, 6 * p, 6 * p)]))
    if "vae" in models:
        out.append(_Component(
            "vae_decoder", "vae", _VaeDecoder, ["latent_sample"], ["sample"],
            {"latent_sample": {0: "batch_size", 2: "height", 3: "width"}},
            _vae_inputs, (2, 8, 6), [(1, 5, 7), (3, 6, 4)]))
    return out


# ---- loading ----------------------------------------------------------------------

def _read_index(path: str) -> dict[str, Any]:
    index = os.path.join(path, "model_index.json")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: no such directory")
    if not os.path.isfile(index):
        raise FileNotFoundError(f"{path}: not a diffusers pipeline directory (no "
                                "model_index.json; save one with pipeline.save_pretrained(path))")
    with open(index, encoding="utf-8") as f:
        return json.load(f)


def _load(path: str, name: str, spec: Any) -> torch.nn.Module:
    """Component `name` of the pipeline at `path`, in eval mode, in fp32,
    from the class model_index.json names for it (diffusers or transformers)."""
    if not (isinstance(spec, list) and len(spec) == 2 and all(isinstance(s, str) for s in spec)):
        raise ValueError(f"{path}: model_index.json's {name!r} is {spec!r}, not "
                         "[library, class]")
    library, cls_name = spec
    if library not in ("diffusers", "transformers"):
        raise ValueError(f"{path}: {name} is {library}.{cls_name}; only diffusers and "
                         "transformers classes load")
    cls = getattr(importlib.import_module(library), cls_name, None)
    if cls is None:
        raise ValueError(f"{path}: {name} is {library}.{cls_name}, which this {library} "
                         "does not have")
    folder = os.path.join(path, name)
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise FileNotFoundError(f"{folder}: no config.json for the pipeline's {name}")
    # Checked against the component's weights before anything is built from it
    # (python/pt2onnx/_checkpoint_config.py).
    config = _checkpoint_config.read_config(folder)
    _checkpoint_config.check(folder, config)
    kw = {"dtype" if library == "transformers" else "torch_dtype": torch.float32}
    with _checkpoint_config.allocation_errors(folder, config):
        return cls.from_pretrained(folder, local_files_only=True, **kw).eval()


def load_pipeline_models(path: str | os.PathLike) -> dict[str, torch.nn.Module]:
    """Load the networks `export_pipeline` exports from a pipeline directory.

    Each component loads from the class model_index.json names for it (a diffusers or
    transformers class), with local_files_only and the hub's offline mode
    (`HF_HUB_OFFLINE=1` in the environment unless it is set); `hf.prepare()` runs first
    when transformers is installed.

    Args:
        path: The pipeline directory (model_index.json and one folder per component, as
            `pipeline.save_pretrained` writes it).

    Returns:
        dict[str, torch.nn.Module]: The networks present among "text_encoder", "unet" or
            "transformer", and "vae", in eval mode and float32.

    Raises:
        ValueError: The pipeline is not supported, the error naming what: another
            denoiser than a UNet2DConditionModel or a PixArtTransformer2DModel, added
            conditioning, several text encoders, a text encoder other than CLIP's beside a
            UNet or T5's beside a transformer, no denoiser, or a component whose class is not
            one of this diffusers' or transformers' classes.
        FileNotFoundError: `path` is not a directory, has no model_index.json, or a
            component's folder has no config.json.
    """
    path = os.fspath(path)
    index = _read_index(path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:  # before diffusers imports transformers' models (torchvision's operators)
        from . import hf

        hf.prepare()
    except ImportError:
        pass
    def present(name):
        spec = index.get(name)
        return isinstance(spec, list) and bool(spec) and spec[0] is not None

    for other in ("prior", "decoder", "text_encoder_2", "text_encoder_3"):
        if present(other):
            raise ValueError(f"{path}: the pipeline has a {other} ({'.'.join(index[other])}); "
                             "export_pipeline supports Stable Diffusion 1.x / 2.x style UNet "
                             "pipelines and PixArt-style transformer pipelines (one text "
                             "encoder)")
    if present("transformer") and index["transformer"][1] != "PixArtTransformer2DModel":
        raise ValueError(f"{path}: the pipeline's denoiser is {'.'.join(index['transformer'])}; "
                         "export_pipeline supports UNet2DConditionModel and "
                         "PixArtTransformer2DModel denoisers")
    models = {}
    for name in ("text_encoder", "unet", "transformer", "vae"):
        if present(name):
            models[name] = _load(path, name, index[name])
    if "transformer" in models:
        te = models.get("text_encoder")
        if te is not None and type(te).__name__ != "T5EncoderModel":
            raise ValueError(f"{path}: text_encoder is {type(te).__name__}; export_pipeline "
                             "supports a T5EncoderModel beside a PixArt transformer")
        if models["transformer"].use_additional_conditions:
            raise ValueError(f"{path}: the transformer takes resolution / aspect-ratio "
                             "conditioning (PixArt-alpha 1024px); export_pipeline supports "
                             "text conditioning only")
        return models
    if "unet" not in models:
        raise ValueError(f"{path}: the pipeline has no unet or transformer (model_index.json "
                         f"lists {', '.join(k for k in index if not k.startswith('_'))})")
    unet = models["unet"]
    if type(unet).__name__ != "UNet2DConditionModel":
        raise ValueError(f"{path}: unet is {type(unet).__name__}; export_pipeline supports "
                         "UNet2DConditionModel")
    cfg = unet.config
    extra = [k for k in ("addition_embed_type", "class_embed_type", "encoder_hid_dim_type")
             if getattr(cfg, k, None)]
    if extra:
        raise ValueError(f"{path}: the unet takes added conditioning ({', '.join(extra)}: "
                         "SDXL-style or class-conditioned); export_pipeline supports text "
                         "conditioning only (encoder_hidden_states)")
    te = models.get("text_encoder")
    if te is not None and not (hasattr(te.config, "max_position_embeddings")
                               and type(te).__name__ == "CLIPTextModel"):
        raise ValueError(f"{path}: text_encoder is {type(te).__name__}; export_pipeline "
                         "supports CLIPTextModel")
    return models


# ---- export -----------------------------------------------------------------------

def _verify(path: str, module, comp: _Component, model, atol: float, rtol: float) -> float:
    sess = _verify_mod.session(path)
    worst = 0.0
    for size in comp.verify_sizes:
        try:
            run = _verify_mod._compare(sess, module, (), comp.make(model, *size), atol, rtol)
        except _verify_mod._TorchRefused as e:
            raise _verify_mod.VerificationError(
                f"verify: PyTorch fails on {comp.folder} at {size}: {e}") from e
        if "failures" in run:
            raise _verify_mod.VerificationError(
                f"verify: {path} differs from PyTorch at inputs {run['inputs']}: "
                + "; ".join(run["failures"]))
        worst = max([worst, *run["max_abs_diff"].values()])
    return worst


def export_pipeline(
    path: str | os.PathLike,
    out_dir: str | os.PathLike | None = None,
    *,
    opset: int | None = None,
    verify: bool = True,
    atol: float = ATOL,
    rtol: float = RTOL,
    verbose: bool | None = None,
) -> dict[str, ExportResult]:
    """Export the networks of a local diffusers pipeline directory to ONNX files.

    Writes text_encoder/model.onnx, unet/model.onnx (or transformer/model.onnx) and
    vae_decoder/model.onnx under `out_dir`, with the input / output names and dynamic axes
    ONNX diffusion runtimes expect (the module docstring lists them), weights in
    model.onnx.data beside each, and the component's config.json. The scheduler, tokenizer
    and feature_extractor folders (those present) and model_index.json (its "vae" entry
    renamed "vae_decoder") are copied, so that a runtime finds them. Supported: Stable
    Diffusion 1.x / 2.x style UNet pipelines and PixArt-style transformer pipelines (see
    `load_pipeline_models`).

    Args:
        path: The pipeline directory, as `pipeline.save_pretrained` writes it
            (model_index.json and one folder per component).
        out_dir: The output directory; None: `<path>/onnx`. Created if missing.
        opset: `export()`'s opset; None: `pt2onnx.DEFAULT_OPSET`.
        verify: Compare every file in onnxruntime with PyTorch on fresh inputs of other
            sizes than the export's (batch, sequence length, height, width; both timestep
            forms), within `atol` / `rtol` (default True; needs onnxruntime).
        atol: The comparison's absolute tolerance.
        rtol: The comparison's relative tolerance.
        verbose: `export()`'s progress line on stderr (False: none).

    Returns:
        dict[str, ExportResult]: `{folder: result}`; with verify=True each result's
            `checks` has "max_abs_error" and "verified_inputs" (the sizes compared).

    Raises:
        ValueError: The pipeline is not supported (see `load_pipeline_models`).
        FileNotFoundError: `path` is not a pipeline directory.
        pt2onnx.ConversionError: A network does not convert.
        pt2onnx.VerificationError: A file differs from PyTorch; the error names the
            output and inputs that differ.

    Runnable examples: [diffusers pipelines](../guides/diffusers.md).
    """
    path = os.fspath(path)
    models = load_pipeline_models(path)
    out_dir = os.fspath(out_dir) if out_dir is not None else os.path.join(path, "onnx")
    os.makedirs(out_dir, exist_ok=True)
    results: dict[str, ExportResult] = {}
    for comp in _components(models):
        model = models[comp.source]
        module = comp.wrap(model).eval()
        os.makedirs(os.path.join(out_dir, comp.folder), exist_ok=True)
        f = os.path.join(out_dir, comp.folder, "model.onnx")
        torch.manual_seed(0)
        example = comp.make(model, *comp.export_size)
        args = tuple(example[n] for n in comp.input_names)
        result = export(module, args, f, dynamic_axes=comp.axes, input_names=comp.input_names,
                        output_names=comp.output_names, opset=opset, verbose=verbose)
        if verify:
            torch.manual_seed(1)
            result.checks["max_abs_error"] = _verify(f, module, comp, model, atol, rtol)
            result.checks["verified_inputs"] = comp.verify_sizes
        results[comp.folder] = result
        # The component's config beside its file (a runtime reads e.g. the
        # VAE's scaling_factor, the UNet's sample size from it).
        shutil.copyfile(os.path.join(path, comp.source, "config.json"),
                        os.path.join(out_dir, comp.folder, "config.json"))
    for name in _COPIED:
        src = os.path.join(path, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(out_dir, name), dirs_exist_ok=True)
    index = _read_index(path)
    index["vae_decoder"] = index.pop("vae", [None, None])
    with open(os.path.join(out_dir, "model_index.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=2)
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the `pt2onnx-diffusers` command (`export_pipeline` from the command line).

    Args:
        argv: The command's arguments; None: `sys.argv[1:]`.

    Returns:
        int: The exit status: 0, or 1 after printing the error on stderr.
    """
    p = argparse.ArgumentParser(
        prog="pt2onnx-diffusers",
        description="Export a local diffusers pipeline directory (Stable Diffusion style: "
                    "text_encoder, unet, vae decoder; or PixArt style: text_encoder, "
                    "transformer, vae decoder) to ONNX files and verify them in "
                    "onnxruntime (never reaches the network).")
    p.add_argument("path", help="pipeline directory (model_index.json, as save_pretrained "
                                "writes it)")
    p.add_argument("-o", "--output", help="output directory (default: PATH/onnx)")
    p.add_argument("--opset", type=int, default=None)
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime check")
    a = p.parse_args(argv)
    missing = _cli.missing_message(
        "pt2onnx-diffusers", "diffusers",
        ["diffusers", "transformers"] + ([] if a.no_verify else ["onnxruntime"]))
    if missing:
        print(missing, file=sys.stderr)
        return 1
    try:
        results = export_pipeline(a.path, a.output, opset=a.opset, verify=not a.no_verify,
                                  verbose=False)
    except Exception as e:  # one clear line, no traceback, for the command
        print(_cli.error_line("pt2onnx-diffusers", e), file=sys.stderr)
        return 1
    for name, r in results.items():
        print(r)
        if r.checks:
            print(f"  {name}: verified in onnxruntime at {len(r.checks['verified_inputs'])} "
                  f"other input sizes: max abs error {r.checks['max_abs_error']:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
