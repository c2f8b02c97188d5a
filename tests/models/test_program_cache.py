"""The program cache of export_pretrained / pt2onnx-pretrained (issue 38 item 1): a config
exported before is converted from the kept program with the new checkpoint's weights, and
the file is the one a fresh capture writes, byte for byte. Every task, every transformers
model of the zoo; damaged, foreign and stale entries; the command's hit without torch or
transformers imported. Random weights from small configs; no hub."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import warnings

import pytest
import torch

import pt2onnx
import zoo
from program_cache_helpers import resign
from pt2onnx import _program_cache, hf

TRANSFORMERS_ZOO = sorted(n for n, e in zoo.ZOO.items() if e.family == "transformers")


def _task(model) -> str:
    name = type(model).__name__
    if name.endswith("ForCausalLM") or name.endswith("LMHeadModel"):
        return "text-generation-with-past"
    if name.endswith("ForConditionalGeneration"):
        return "seq2seq-with-past"
    if name.endswith("ForImageClassification"):
        return "image-classification"
    return "feature-extraction"


# Each transformers model of the zoo at the task its head serves, and the two tasks no head
# picks (GPT-2 without a cache, T5 without one); one model per task in the quick loop.
QUICK = {"hf_llama", "hf_bert", "hf_vit", "hf_bart", "hf_gpt2:text-generation", "hf_t5:seq2seq"}
CASES = [*TRANSFORMERS_ZOO, "hf_gpt2:text-generation", "hf_t5:seq2seq"]


def _checkpoint(name, path, shift=0.0):
    """The zoo model saved as a checkpoint; `shift` moves every weight (same config.json)."""
    model = zoo.build(name)[0]
    if shift:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(shift)
    model.save_pretrained(path)
    return model, str(path)


def _files(r):
    """The bytes of every file an export wrote (both parts' for seq2seq-with-past)."""
    results = [r.checks["encoder"], r] if "encoder" in r.checks else [r]
    return [open(p, "rb").read() for x in results for p in [x.path, *x.data_paths]]


@pytest.mark.parametrize("case", [pytest.param(c, marks=[] if c in QUICK else [pytest.mark.slow])
                                  for c in CASES])
def test_hit_writes_the_fresh_captures_file_with_the_new_weights(case, tmp_path):
    name, _, task = case.partition(":")
    cache = tmp_path / "cache"
    model, a = _checkpoint(name, tmp_path / "a")
    task = task or _task(model)
    # Each file in a folder of its own, named alike: a file names its data file.
    first = hf.export_pretrained(a, task, tmp_path / "first" / "model.onnx", verify=False,
                                 cache_dir=cache)
    assert first.checks["program_cache"]["result"] == "miss"
    assert first.checks["program_cache"]["entry"], "the program was not kept"
    # The same config with other weights: a hit, verified against PyTorch with those weights
    # (quick cases), and the bytes of a fresh capture of that checkpoint.
    _, b = _checkpoint(name, tmp_path / "b", shift=0.01)
    hit = hf.export_pretrained(b, task, tmp_path / "hit" / "model.onnx", verify=case in QUICK,
                               cache_dir=cache)
    assert hit.checks["program_cache"]["result"] == "hit"
    assert "capture" not in hit.timings and "cache lookup" in hit.timings
    fresh = hf.export_pretrained(b, task, tmp_path / "fresh" / "model.onnx", verify=False,
                                 cache=False)
    assert "program_cache" not in fresh.checks and "capture" in fresh.timings
    assert _files(hit) == _files(fresh)
    assert _files(hit) != _files(first)  # the weights did change


@pytest.fixture
def llama(tmp_path):
    """A checkpoint exported once into an empty cache: (checkpoint, cache dir, entry folder,
    the file's bytes)."""
    _, ckpt = _checkpoint("hf_llama", tmp_path / "ckpt")
    cache = tmp_path / "cache"
    r = hf.export_pretrained(ckpt, "text-generation-with-past", tmp_path / "first" / "model.onnx",
                             verify=False, cache_dir=cache)
    return ckpt, cache, r.checks["program_cache"]["entry"], _files(r)


def _again(ckpt, cache_dir, folder, **kw):
    """The fixture's export again, into `folder`/model.onnx."""
    return hf.export_pretrained(ckpt, "text-generation-with-past", folder / "model.onnx",
                                verify=False, cache_dir=cache_dir, **kw)


@pytest.mark.parametrize("damage", ["truncated program", "flipped byte", "garbage entry",
                                    "missing data", "foreign entry"])
def test_damaged_or_foreign_entry_is_a_miss_with_a_warning(llama, damage, tmp_path):
    ckpt, cache, entry, expected = llama
    if damage == "truncated program":
        with open(os.path.join(entry, "part0.json"), "r+b") as f:
            f.truncate(os.path.getsize(f.name) // 2)
    elif damage == "flipped byte":
        with open(os.path.join(entry, "part0.json"), "r+b") as f:
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 0x20]))
    elif damage == "garbage entry":
        with open(os.path.join(entry, "entry.json"), "wb") as f:
            f.write(b"\x00not json{")
    elif damage == "missing data":
        os.remove(os.path.join(entry, "part0.bin"))
    else:  # another export's entry under this key's folder
        other = hf.export_pretrained(ckpt, "text-generation", tmp_path / "other.onnx",
                                     verify=False, cache_dir=cache)
        shutil.rmtree(entry)
        shutil.copytree(other.checks["program_cache"]["entry"], entry)
    with pytest.warns(_program_cache.CacheWarning, match="not used"):
        r = _again(ckpt, cache, tmp_path / "again")
    assert r.checks["program_cache"]["result"] == "miss"
    assert _files(r) == expected
    # The fresh capture replaced the entry: the next export is a hit, with no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = _again(ckpt, cache, tmp_path / "third")
    assert r.checks["program_cache"]["result"] == "hit"
    assert _files(r) == expected


def test_changed_model_code_is_a_miss(llama, tmp_path):
    """An entry lists the source files the capture imported with their hashes: one that
    differs now (an edited modeling file) makes the entry stale, a plain miss."""
    ckpt, cache, entry, expected = llama
    with open(os.path.join(entry, "entry.json")) as f:
        meta = json.load(f)
    modeling = [k for k in meta["sources"] if k.endswith("models/llama/modeling_llama.py")]
    assert modeling, sorted(meta["sources"])[:20]
    assert any(k.startswith("pt2onnx/") for k in meta["sources"])
    meta["sources"][modeling[0]] = "0" * 64
    with open(os.path.join(entry, "entry.json"), "w") as f:
        json.dump(meta, f)
    resign(entry)  # as if the file had changed, not the entry: signed, so a plain miss
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = _again(ckpt, cache, tmp_path / "again")
    assert r.checks["program_cache"]["result"] == "miss"
    assert _files(r) == expected


def test_key_covers_options_task_and_config(llama, tmp_path):
    ckpt, cache, entry, _ = llama
    base = _program_cache.key_fields(ckpt, "text-generation-with-past",
                                     dict(opset=None, target="standard", dtype="float32",
                                          external_data=True, quantize=None))
    assert base["versions"]["torch"] and base["versions"]["transformers"]
    assert os.path.basename(entry) == _program_cache._key(base)
    # Another option or task: a miss, its own entry.
    r = _again(ckpt, cache, tmp_path / "o23", opset=23)
    assert r.checks["program_cache"]["result"] == "miss"
    assert r.checks["program_cache"]["entry"] != entry
    assert _again(ckpt, cache, tmp_path / "o23b", opset=23).checks[
        "program_cache"]["result"] == "hit"
    # Another config (one more head): a miss.
    cfg = json.loads(open(os.path.join(ckpt, "config.json")).read())
    cfg["num_attention_heads"] = 2
    other = tmp_path / "other"
    shutil.copytree(ckpt, other)
    (other / "config.json").write_text(json.dumps(cfg))
    assert _program_cache.key_fields(other, "text-generation-with-past", {}) != \
        _program_cache.key_fields(ckpt, "text-generation-with-past", {})


def test_checkpoint_that_does_not_fit_the_kept_program(llama, tmp_path):
    """A hit the C++ core refuses (a tensor of another shape) falls back to the fresh
    capture, which reports the error as without the cache; no file is written."""
    ckpt, cache, entry, _ = llama
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "bad"
    shutil.copytree(ckpt, bad)
    tensors = load_file(str(bad / "model.safetensors"))
    key = next(k for k in tensors if k.endswith("mlp.down_proj.weight"))
    tensors[key] = tensors[key][:, :96].contiguous()
    save_file(tensors, str(bad / "model.safetensors"), metadata={"format": "pt"})
    out = tmp_path / "out"
    with pytest.warns(_program_cache.CacheWarning, match="did not convert"):
        with pytest.raises(Exception, match=r"down_proj.weight.*shape") as e:
            _again(str(bad), cache, out)
    with pytest.raises(type(e.value), match=r"down_proj.weight.*shape"):
        _again(str(bad), cache, out, cache=False)
    assert not out.exists()


def test_no_cache_and_weights_memory_leave_the_cache_alone(tmp_path):
    _, ckpt = _checkpoint("hf_gpt2", tmp_path / "ckpt")
    cache = tmp_path / "cache"
    for kw in (dict(cache=False), dict(weights="memory")):
        r = hf.export_pretrained(ckpt, "text-generation", tmp_path / "m.onnx", verify=False,
                                 cache_dir=cache, **kw)
        assert "program_cache" not in r.checks
    assert not cache.exists()


# The command in a process that reports which of torch and transformers it imported.
_RUN = ("import sys; from pt2onnx._pretrained_command import main; rc = main(sys.argv[1:]); "
        "print('imported:', [m for m in ('torch', 'transformers') if m in sys.modules]); "
        "print('metadata imported:', 'importlib.metadata' in sys.modules); "
        "sys.exit(rc)")


def test_dist_version_reads_what_importlib_metadata_reads():
    """The key's package versions, read without importing importlib.metadata, are its
    versions: every distribution of this environment, and a missing one."""
    import importlib.metadata

    names = {d.metadata["Name"] for d in importlib.metadata.distributions()}
    assert {"torch", "transformers"} <= {n.lower() for n in names}
    for name in sorted(names):
        assert _program_cache.dist_version(name) == importlib.metadata.version(name), name
    assert _program_cache.dist_version("no-such-distribution-here") is None


def test_command_hit_imports_neither_torch_nor_transformers(tmp_path):
    _, ckpt = _checkpoint("hf_llama", tmp_path / "ckpt")
    cache = str(tmp_path / "cache")
    env = dict(os.environ, HF_HUB_OFFLINE="1")

    def run(out, *more):
        return subprocess.run([sys.executable, "-c", _RUN, ckpt, "--task",
                               "text-generation-with-past", "--no-verify", "--cache-dir", cache,
                               "-o", str(tmp_path / out / "model.onnx"), *more],
                              capture_output=True, text=True, env=env, timeout=600)

    r = run("miss")
    assert r.returncode == 0, r.stderr
    assert "program cache: miss" in r.stdout
    assert "imported: ['torch', 'transformers']" in r.stdout
    r = run("hit")
    assert r.returncode == 0, r.stderr
    assert "program cache: hit" in r.stdout
    assert "imported: []" in r.stdout, r.stdout
    assert "metadata imported: False" in r.stdout, r.stdout  # a hit's start-up stays short
    for name in ("model.onnx", "model.onnx.data"):
        assert (tmp_path / "miss" / name).read_bytes() == (tmp_path / "hit" / name).read_bytes()
    # --no-cache: captured again, the cache neither read nor written.
    before = sorted(os.listdir(cache))
    r = run("nc", "--no-cache")
    assert r.returncode == 0, r.stderr
    assert "program cache" not in r.stdout and "imported: ['torch', 'transformers']" in r.stdout
    assert sorted(os.listdir(cache)) == before


# ---- export(model, ..., cache_dir=...): nn.Modules ---------------------------------------

MODULE_CASES = sorted(n for n, e in zoo.ZOO.items() if e.quick)


@pytest.mark.parametrize("name", MODULE_CASES)
def test_module_hit_writes_the_fresh_captures_file(name, tmp_path):
    """Another model of the same classes and configuration with other weights (the zoo's
    entry built from another seed): a hit, verified against that model in PyTorch, and the
    bytes a fresh capture of it writes."""
    entry = zoo.ZOO[name]
    cache = tmp_path / "cache"

    def export(model, folder, **kw):
        _, make, dyn = built
        torch.manual_seed(0)
        (tmp_path / folder).mkdir()
        return pt2onnx.export(model, (), tmp_path / folder / "model.onnx",
                              kwargs=make(*entry.export_size), dynamic_shapes=dyn, **kw)

    built = zoo.build(name)
    first = export(built[0], "first", cache_dir=cache)
    assert first.checks["program_cache"]["result"] == "miss"
    assert first.checks["program_cache"]["entry"], "the program was not kept"
    other = zoo.build(name, seed=1)[0]
    hit = export(other, "hit", cache_dir=cache, verify=True)
    assert hit.checks["program_cache"]["result"] == "hit"
    assert "capture" not in hit.timings and "cache lookup" in hit.timings
    fresh = export(other, "fresh")
    assert _files(hit) == _files(fresh)
    assert _files(hit) != _files(first)


_MODULE_SOURCE = '''
import torch


class Scaled(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.scale = scale

    def forward(self, x):
        return self.fc(x) * self.scale {op}
'''


def _module_from_source(tmp_path, name, op):
    import importlib.util

    path = tmp_path / f"{name}.py"
    path.write_text(_MODULE_SOURCE.format(op=op))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_module_key_sees_code_attributes_and_inputs(tmp_path):
    cache = tmp_path / "cache"
    x = torch.randn(2, 4)
    mod = _module_from_source(tmp_path, "cache_model_a", "+ 1")

    def export(model, folder, inp=x):
        (tmp_path / folder).mkdir()
        return pt2onnx.export(model, (inp,), tmp_path / folder / "m.onnx", cache_dir=cache,
                              verify=True)

    assert export(mod.Scaled(2.0), "a").checks["program_cache"]["result"] == "miss"
    assert export(mod.Scaled(2.0), "b").checks["program_cache"]["result"] == "hit"
    # Another value of a non-tensor attribute, another input shape: misses.
    assert export(mod.Scaled(3.0), "c").checks["program_cache"]["result"] == "miss"
    assert export(mod.Scaled(2.0), "d", torch.randn(3, 4)).checks[
        "program_cache"]["result"] == "miss"
    # The class's source file edited (the forward changed): a miss, and the new code's file.
    (tmp_path / "cache_model_a.py").write_text(_MODULE_SOURCE.format(op="- 1"))
    spec = importlib.util.spec_from_file_location("cache_model_a", tmp_path / "cache_model_a.py")
    changed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(changed)
    m = changed.Scaled(2.0)
    r = export(m, "e")  # verify=True: the file computes the edited forward
    assert r.checks["program_cache"]["result"] == "miss"


def test_module_cache_refusals(tmp_path):
    import threading

    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    model.lock = threading.Lock()  # an attribute the key cannot describe: not cached
    with pytest.warns(UserWarning, match="not cached.*lock"):
        r = pt2onnx.export(model, (torch.randn(2, 4),), tmp_path / "m.onnx",
                           cache_dir=tmp_path / "cache")
    assert "program_cache" not in r.checks and not (tmp_path / "cache").exists()
    ep = torch.export.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
    with pytest.raises(ValueError, match="cache_dir= keeps the capture of an nn.Module"):
        pt2onnx.export(ep, (), tmp_path / "ep.onnx", cache_dir=tmp_path / "cache")
