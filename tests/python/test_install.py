"""The wheel a user builds (`pip wheel .`, build isolation on) installs into a
fresh virtual environment that holds only torch and works there: the module,
the C++ pt2onnx command (on PATH, beside the package), pt2onnx-pretrained and
pt2onnx-diffusers with their extras and, without them, a one-line error naming
the extra. The shared libraries the wheel carries (pt2onnx/_libs) are the ones
the installed binaries load: no Debian package is needed at run time.

The wheel builds in build/wheel (kept, so later runs are incremental; not
the editable install's build directory, which a wheel build would
reconfigure). The fresh environment is not --system-site-packages; pip takes
torch==2.13.0 from this machine's wheel directory and the rest from the
package index (the extras pinned to requirements-dev.txt's versions)."""

import json
import os
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

from conftest import ort_session

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WHEEL_BUILD = os.path.join(ROOT, "build", "wheel")
# What a manylinux system provides (auditwheel's policy, less the libraries
# nothing here links): every other library must load from the environment.
SYSTEM_LIBS = re.compile(r"^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|librt|libpthread|"
                         r"libstdc\+\+|libgcc_s)\.so")
ATOL = RTOL = 1e-4


def _run(cmd, env, cwd, timeout=900, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    if check:
        assert r.returncode == 0, f"{cmd}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


def _pins(tmp_path):
    """requirements-dev.txt's exact pins as a pip constraints file."""
    with open(os.path.join(ROOT, "requirements-dev.txt"), encoding="utf-8") as f:
        pins = [line.split("#")[0].strip() for line in f if "==" in line.split("#")[0]]
    path = tmp_path / "constraints.txt"
    path.write_text("\n".join(pins) + "\n")
    return str(path)


def _ldd(path, env):
    """{library: resolved path or None} of the ELF file at `path`."""
    r = _run(["ldd", str(path)], env, cwd=None)
    deps = {}
    for line in r.stdout.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(not found|\S+)", line)
        if m:
            deps[m.group(1)] = None if m.group(2) == "not found" else m.group(2)
        elif line.strip():
            deps[line.split()[0]] = line.split()[0]
    return deps


def _check_bundled(path, venv, env):
    deps = _ldd(path, env)
    bundled = {}
    for lib, where in deps.items():
        assert where is not None, f"{path}: {lib} not found"
        if not SYSTEM_LIBS.match(os.path.basename(lib)):
            assert os.path.realpath(where).startswith(str(venv) + os.sep), \
                f"{path}: {lib} loads from {where}, outside the environment"
            bundled[lib] = where
    return bundled


def _assert_matches(model, onnx_path, x):
    with torch.no_grad():
        expected = model(x).numpy()
    sess = ort_session(onnx_path)
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=RTOL)


def _tiny_pipeline():
    from diffusers import (AutoencoderKL, DDIMScheduler, StableDiffusionPipeline,
                           UNet2DConditionModel)
    from transformers import CLIPTextConfig, CLIPTextModel

    unet = UNet2DConditionModel(
        block_out_channels=(16, 32), layers_per_block=1, sample_size=8, in_channels=4,
        out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=16,
        attention_head_dim=8, norm_num_groups=8)
    vae = AutoencoderKL(
        block_out_channels=(8, 16), in_channels=3, out_channels=3, latent_channels=4,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
        norm_num_groups=8, sample_size=16)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=8, bos_token_id=0, eos_token_id=2,
        pad_token_id=1))
    scheduler = DDIMScheduler(beta_schedule="scaled_linear", clip_sample=False, steps_offset=1)
    return StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=None, unet=unet,
                                   scheduler=scheduler, safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_environment(tmp_path):
    # The wheel, as a user builds it (build isolation: the build requirements
    # come from the package index into a temporary environment).
    # PT2ONNX_WERROR as `make` builds: the same compiler flags, so that ccache
    # (where installed) serves the objects the editable build compiled.
    dist = tmp_path / "dist"
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist),
              f"--config-settings=build-dir={WHEEL_BUILD}", ROOT],
             dict(os.environ, PT2ONNX_WERROR="ON"), ROOT, timeout=3600)
    (wheel,) = dist.glob("pt2onnx-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"pt2onnx/_libs/libsimdjson.so.14", "pt2onnx/_libs/libmimalloc.so.2",
            "pt2onnx/_libs/libz.so.1"} <= set(names)
    assert any(re.fullmatch(r"pt2onnx-[^/]+\.data/scripts/pt2onnx", n) for n in names)

    # A fresh environment with torch only; nothing of this one leaks in.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], dict(os.environ), str(tmp_path))
    bin_dir = venv / "bin"
    py = str(bin_dir / "python")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "VIRTUAL_ENV")}
    env.update(PATH=f"{bin_dir}{os.pathsep}/usr/bin:/bin", HF_HUB_OFFLINE="1")
    pins = _pins(tmp_path)
    # torch, the precondition, by uv (.venv's: nothing else enters the environment): 8 s where
    # pip took 24 (it compiles torch's byte code on one core). The wheel and its extras below are
    # installed by pip, as users install them.
    _run(["bash", os.path.join(ROOT, "tools", "uv_install.sh"), py, "-c", pins, "torch==2.13.0"],
         dict(env, UV=os.path.join(os.path.dirname(sys.executable), "uv")), str(tmp_path))
    pip = [py, "-m", "pip", "install", "-q", "-c", pins]
    _run(pip + [str(wheel)], env, str(tmp_path))
    versions = json.loads(_run([py, "-c", "import json, importlib.metadata as m; print(json.dumps("
                                "{d.metadata['Name'].lower(): d.version for d in m.distributions()}))"],
                               env, str(tmp_path)).stdout)
    assert versions["torch"] == "2.13.0+cpu" and "pt2onnx" in versions
    assert not {"transformers", "diffusers", "onnxruntime", "onnx"} & set(versions)

    # The installed binaries load the libraries the wheel carries, nothing
    # outside the environment but the C/C++ runtime.
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (core,) = (site / "pt2onnx").glob("_core*.so")
    for binary, expected in ((core, {"libsimdjson.so.14", "libz.so.1"}),
                             (bin_dir / "pt2onnx", {"libsimdjson.so.14", "libmimalloc.so.2"})):
        bundled = _check_bundled(binary, venv, env)
        assert set(bundled) == expected, (binary, bundled)
        for lib in expected:
            assert os.path.samefile(bundled[lib], site / "pt2onnx" / "_libs" / lib)

    # The module: a model exported there, checked here in onnxruntime at
    # another batch size (dynamic) against PyTorch.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 3)).eval()
    torch.save(model, tmp_path / "model.pt")
    script = ("import sys, torch, pt2onnx\n"
              "m = torch.load(sys.argv[1], weights_only=False)\n"
              "b = torch.export.Dim('batch')\n"
              "pt2onnx.export(m, (torch.randn(2, 6),), sys.argv[2], "
              "dynamic_shapes=({0: b},))\n"
              "print(pt2onnx.__version__)\n")
    r = _run([py, "-c", script, str(tmp_path / "model.pt"), str(tmp_path / "module.onnx")], env,
             str(tmp_path))
    module_version = r.stdout.strip().splitlines()[-1]
    _assert_matches(model, str(tmp_path / "module.onnx"), torch.randn(5, 6))

    # The C++ command: on PATH from the environment's scripts directory, the
    # package's version, converts a .pt2 saved here.
    which = _run(["sh", "-c", "command -v pt2onnx"], env, str(tmp_path))
    assert which.stdout.strip() == str(bin_dir / "pt2onnx")
    v = _run(["pt2onnx", "--version"], env, str(tmp_path))
    assert v.stdout.splitlines()[0] == f"pt2onnx {module_version}"
    assert "allocator: mimalloc" in v.stdout  # the bundled libmimalloc
    ep = torch.export.export(model, (torch.randn(2, 6),),
                             dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(ep, str(tmp_path / "model.pt2"))
    _run(["pt2onnx", str(tmp_path / "model.pt2"), "-o", str(tmp_path / "cli.onnx")], env,
         str(tmp_path))
    _assert_matches(model, str(tmp_path / "cli.onnx"), torch.randn(7, 6))

    # A tiny local transformers checkpoint and diffusers pipeline, made here.
    from pt2onnx import hf

    hf.prepare()
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2,
                                      n_head=4, bos_token_id=1, eos_token_id=2,
                                      pad_token_id=0)).eval()
    ckpt = tmp_path / "gpt2"
    gpt2.save_pretrained(str(ckpt))
    pipe_dir = tmp_path / "pipe"
    _tiny_pipeline().save_pretrained(str(pipe_dir))

    # Without the extras: one line naming the package and the extra.
    for cmd, args, extra in (
            ("pt2onnx-pretrained", [str(ckpt), "--task", "text-generation"], "transformers"),
            ("pt2onnx-diffusers", [str(pipe_dir)], "diffusers")):
        bad = _run([cmd, *args, "-o", str(tmp_path / "never")], env, str(tmp_path), check=False)
        assert bad.returncode == 1, bad.stderr
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in bad.stderr, bad.stderr
        assert lines[0].startswith(f"{cmd}: error: ") and extra in lines[0]
        assert f"pip install 'pt2onnx[{extra}]'" in lines[0]
        assert not os.path.exists(tmp_path / "never")

    # pt2onnx-pretrained with the transformers extra: exported, verified
    # there in onnxruntime against PyTorch at other sizes, and checked here.
    _run(pip + [f"{wheel}[transformers]"], env, str(tmp_path))
    out = tmp_path / "gpt2.onnx"
    r = _run(["pt2onnx-pretrained", str(ckpt), "--task", "text-generation", "-o", str(out)],
             env, str(tmp_path))
    assert "verified in onnxruntime" in r.stdout, r.stdout
    sess = ort_session(str(out))
    ids = torch.randint(3, 96, (3, 11))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding in one row
    feeds = {"input_ids": ids, "attention_mask": mask,
             "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
    names = [i.name for i in sess.get_inputs()]
    assert {"input_ids", "attention_mask"} <= set(names) <= set(feeds)
    (logits,) = [o for o, meta in zip(sess.run(None, {n: feeds[n].numpy() for n in names}),
                                      sess.get_outputs()) if meta.name == "logits"]
    with torch.no_grad():
        ref = gpt2(**{n: feeds[n] for n in names}).logits.numpy()
    assert logits.shape == ref.shape == (3, 11, 96)
    keep = mask.numpy().astype(bool)  # padded positions are not compared
    np.testing.assert_allclose(logits[keep], ref[keep], atol=ATOL, rtol=RTOL)

    # pt2onnx-diffusers with the diffusers extra: text encoder, UNet and VAE
    # decoder, each verified there in onnxruntime against PyTorch.
    _run(pip + [f"{wheel}[diffusers]"], env, str(tmp_path))
    r = _run(["pt2onnx-diffusers", str(pipe_dir), "-o", str(tmp_path / "sd")], env,
             str(tmp_path))
    assert r.stdout.count("verified in onnxruntime") == 3, r.stdout
    for part in ("text_encoder", "unet", "vae_decoder"):
        assert (tmp_path / "sd" / part / "model.onnx").is_file()
    # torch is still the one installed first.
    r = _run([py, "-c", "import torch; print(torch.__version__)"], env, str(tmp_path))
    assert r.stdout.strip() == "2.13.0+cpu"
