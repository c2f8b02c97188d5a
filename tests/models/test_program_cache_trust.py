"""The program cache as a trust boundary (issue 56): a cache entry is checked whole before it
is used, and a cache folder others can write is not used. Each probe of the issue damages or
crafts an entry (or the folder, or the checkpoint's config.json) and asserts: a miss with one
one-line CacheWarning naming the entry (or the folder), a fresh capture whose file is the
fresh export's, byte for byte, nothing touched outside the output and nothing left behind.
"Signed" variants sign the edited entry again with the cache's key, as a writer holding the
key would (a bug, the user): the value checks behind the signature must then refuse it too.
The fuzzing of the entry reader is tests/models/test_program_cache_fuzz.py."""

import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import types
import warnings

import pytest
import torch

import pt2onnx
import zoo
from program_cache_helpers import (deadline, edit_entry, entry_of, first_stored_view, rewrite_part,
                                   tree)
from pt2onnx import _cache_entry, _program_cache, hf

TASK = "text-generation-with-past"
OPTIONS = dict(opset=None, target="standard", dtype="float32", external_data=True,
               quantize=None)


def _files(r):
    results = [r.checks["encoder"], r] if "encoder" in r.checks else [r]
    return [open(p, "rb").read() for x in results for p in [x.path, *x.data_paths]]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A LLaMA checkpoint exported once into an empty cache: the checkpoint, that cache (kept
    pristine: each test edits a copy) and the file of that fresh capture."""
    d = tmp_path_factory.mktemp("trust")
    zoo.build("hf_llama")[0].save_pretrained(d / "ckpt")
    r = hf.export_pretrained(d / "ckpt", TASK, d / "first" / "model.onnx", verify=False,
                             cache_dir=d / "cache")
    assert r.checks["program_cache"]["result"] == "miss"
    return types.SimpleNamespace(ckpt=str(d / "ckpt"), cache=str(d / "cache"), fresh=_files(r),
                                 name=os.path.basename(r.checks["program_cache"]["entry"]))


@pytest.fixture
def cache(base, tmp_path):
    """A copy of the base cache (modes kept); its entry folder is entry_of(cache)."""
    shutil.copytree(base.cache, tmp_path / "cache", symlinks=True)
    return str(tmp_path / "cache")


def _cache_warnings(caught):
    return [w for w in caught if issubclass(w.category, _program_cache.CacheWarning)]


def _export(base, cache, out, **kw):
    """export_pretrained of the base checkpoint into `out`/model.onnx: (result, the
    CacheWarnings it gave)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = hf.export_pretrained(base.ckpt, TASK, os.path.join(out, "model.onnx"),
                                 **{"verify": False, "cache_dir": cache, **kw})
    return r, _cache_warnings(caught)


def _hit(base, cache, out):
    """_program_cache.export_hit alone (no fresh capture after a miss): (result or None, the
    CacheWarnings it gave)."""
    os.makedirs(out, exist_ok=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = _program_cache.export_hit(cache, base.ckpt, TASK, os.path.join(out, "model.onnx"),
                                      OPTIONS)
    return r, _cache_warnings(caught)


def _one_warning(cw, names, *fragments):
    """One CacheWarning, one line, naming `names` (the entry or the folder)."""
    assert len(cw) == 1, [str(w.message) for w in cw]
    msg = str(cw[0].message)
    assert names in msg and "\n" not in msg, msg
    for f in fragments:
        assert f in msg, msg


def _assert_replaced(base, cache, out, r, cw, *fragments):
    """The refused entry's export: one warning naming it, a miss written as the fresh capture
    writes it, nothing else in the output or the cache, and the next export a clean hit."""
    entry = os.path.join(cache, base.name)
    _one_warning(cw, entry, *fragments)
    assert r.checks["program_cache"] == {"result": "miss", "entry": entry}
    assert _files(r) == base.fresh
    assert sorted(os.listdir(out)) == ["model.onnx", "model.onnx.data"]
    assert sorted(os.listdir(cache)) == [".key", base.name]
    again, cw = _export(base, cache, out + "-again")
    assert not cw and again.checks["program_cache"]["result"] == "hit"
    assert _files(again) == base.fresh


def _set_offset(offset):
    return lambda meta: first_stored_view(meta).__setitem__(1, offset)


def _set_call(key, value):
    return lambda meta: meta["parts"][0]["call"].__setitem__(key, value)


def _drop_call(key):
    return lambda meta: meta["parts"][0]["call"].pop(key)


# The edits of entry.json: a bit flip (a weight view's offset 0 -> 4), the opset
# 18 -> 17, offsets into the process's heap and far outside it, wrong types, missing keys.
EDITS = {
    "offset 0->4": _set_offset(4),
    "opset 18->17": _set_call("opset", 17),
    "offset -4096": _set_offset(-4096),
    "offset -2**40": _set_offset(-(1 << 40)),
    "offset as a string": _set_offset("0"),
    "shard_bytes 'x'": _set_call("shard_bytes", "x"),
    "no call.opset": _drop_call("opset"),
    "no call.input_dim_names": _drop_call("input_dim_names"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_edited_entry_is_a_miss_and_replaced(base, cache, edit, tmp_path):
    """Unsigned edits (damage, or another hand): the signature refuses them; the export is
    the fresh capture's."""
    before = tree(base.ckpt)
    edit_entry(entry_of(cache), EDITS[edit])
    r, cw = _export(base, cache, str(tmp_path / "out"))
    _assert_replaced(base, cache, str(tmp_path / "out"), r, cw, "not signed")
    assert tree(base.ckpt) == before


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_signed_edit_is_refused_by_the_value_checks(base, cache, edit, tmp_path):
    """The same edits signed again: each value is checked (types, keys, offsets within
    part0.bin, the opset this export asks for), so each is a miss, not a crash or a file."""
    entry = entry_of(cache)
    edit_entry(entry, EDITS[edit], sign=True)
    r, cw = _hit(base, cache, str(tmp_path / "out"))
    assert r is None
    _one_warning(cw, entry, "is not used")
    assert "not signed" not in str(cw[0].message)  # refused by the checks behind it
    assert os.listdir(tmp_path / "out") == []


def _swap(program: bytes, a: bytes, b: bytes) -> bytes:
    assert a in program and b in program
    return program.replace(a, b"\0").replace(b, a).replace(b"\0", b)


GATE, UP = b"model.layers.0.mlp.gate_proj.weight", b"model.layers.0.mlp.up_proj.weight"


@pytest.mark.parametrize("quantize", [None, "int8"])
def test_swapped_weights_with_recomputed_hashes(base, quantize, tmp_path):
    """Two same-shape weights' names swapped in part0.json, its hash and size in entry.json
    recomputed (what anyone who can write the folder can do): not signed, so a miss, also
    where nothing verifies the file (verify=False, quantize)."""
    cache = str(tmp_path / "cache")
    first, _ = _export(base, cache, str(tmp_path / "first"), quantize=quantize)
    entry = first.checks["program_cache"]["entry"]
    program = open(os.path.join(entry, "part0.json"), "rb").read()
    rewrite_part(entry, "part0.json", _swap(program, GATE, UP))
    r, cw = _export(base, cache, str(tmp_path / "out"), quantize=quantize)
    _one_warning(cw, entry, "not signed")
    assert r.checks["program_cache"]["result"] == "miss"
    assert _files(r) == _files(first)


def _replace_with_fifo(path):
    os.remove(path)
    os.mkfifo(path)


def _link_to_copy(path, folder):
    """`path` replaced by a symbolic link to itself moved into `folder`."""
    copy = os.path.join(folder, os.path.basename(path) + ".moved")
    shutil.move(path, copy)
    os.symlink(copy, path)


FILE_DAMAGE = {
    "FIFO part0.json": lambda e: _replace_with_fifo(os.path.join(e, "part0.json")),
    "FIFO entry.json": lambda e: _replace_with_fifo(os.path.join(e, "entry.json")),
    "part0.bin a symbolic link": lambda e: _link_to_copy(os.path.join(e, "part0.bin"), e),
    "entry folder a symbolic link": lambda e: _link_to_copy(e, os.path.dirname(
        os.path.dirname(e))),
    "part0.bin writable by the group": lambda e: os.chmod(os.path.join(e, "part0.bin"), 0o660),
    "entry folder writable by others": lambda e: os.chmod(e, 0o707),
    "no entry.mac": lambda e: os.remove(os.path.join(e, "entry.mac")),
    "no .key": lambda e: os.remove(os.path.join(os.path.dirname(e), ".key")),
}


@pytest.mark.parametrize("damage", sorted(FILE_DAMAGE))
def test_entry_files_are_regular_files_of_this_user_alone(base, cache, damage, tmp_path):
    """Files opened as regular files only, relative to the checked folder, no link followed,
    none others can write: each damage a miss without waiting or reading outside the entry,
    and replaced by the fresh capture."""
    FILE_DAMAGE[damage](entry_of(cache))
    with deadline(60):
        r, cw = _export(base, cache, str(tmp_path / "out"))
    _assert_replaced(base, cache, str(tmp_path / "out"), r, cw, "is not used")


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757], ids=oct)
def test_cache_folder_others_can_write_is_not_used(base, cache, mode, tmp_path):
    """A folder a group or others can write: neither read nor written, one warning per
    process saying why and how to fix it."""
    os.chmod(cache, mode)
    before = tree(cache)
    for out in ("a", "b"):
        r, cw = _export(base, cache, str(tmp_path / out))
        assert r.checks["program_cache"]["result"] == "miss"
        assert _files(r) == base.fresh
        if out == "a":
            _one_warning(cw, cache, "can be written by its group or others",
                         f"chmod go-w {cache}")
        else:
            assert not cw  # said once per process
    assert tree(cache) == before


def test_key_others_can_read_is_not_used(base, cache, tmp_path):
    os.chmod(os.path.join(cache, ".key"), 0o644)
    before = tree(cache)
    r, cw = _export(base, cache, str(tmp_path / "out"))
    _one_warning(cw, cache, "its key .key can be read or written by its group or others")
    assert r.checks["program_cache"]["result"] == "miss" and _files(r) == base.fresh
    assert tree(cache) == before


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="chown to another user needs root")
@pytest.mark.parametrize("what", ["folder", "entry", "part0.json"])
def test_folder_or_entry_of_another_user_is_not_used(base, cache, what, tmp_path):
    entry = entry_of(cache)
    target = {"folder": cache, "entry": entry, "part0.json": os.path.join(entry, "part0.json")}
    os.chown(target[what], 65534, 65534)  # nobody
    if what == "folder":
        before = tree(cache)
        r, cw = _export(base, cache, str(tmp_path / "out"))
        _one_warning(cw, cache, "belongs to uid 65534, not to this user (uid 0)")
        assert r.checks["program_cache"]["result"] == "miss" and _files(r) == base.fresh
        assert tree(cache) == before
    else:
        r, cw = _export(base, cache, str(tmp_path / "out"))
        _assert_replaced(base, cache, str(tmp_path / "out"), r, cw, "uid 65534")


# The command in a process, killed (SIGKILL) when the store renames its new entry into place.
_KILLED_STORE = ("import os, signal, sys\n"
                 "os.rename = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
                 "from pt2onnx._pretrained_command import main\n"
                 "sys.exit(main(sys.argv[1:]))\n")


def test_store_killed_midway_leaves_nothing_for_good(base, tmp_path):
    """A store killed before its rename leaves its `.new-*` folder; a later lookup removes it
    once it is older than any store takes (STALE_S), not before (it could be a store under
    way in another process)."""
    cache = str(tmp_path / "cache")
    r = subprocess.run([sys.executable, "-c", _KILLED_STORE, base.ckpt, "--task", TASK,
                        "--no-verify", "--cache-dir", cache, "-o", str(tmp_path / "k.onnx")],
                       capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"),
                       timeout=600)
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    left = [n for n in os.listdir(cache) if n.startswith(".new-")]
    assert len(left) == 1, os.listdir(cache)
    _export(base, cache, str(tmp_path / "a"))  # a miss that stores: the young one stays
    assert left[0] in os.listdir(cache)
    old = time.time() - _cache_entry.STALE_S - 60
    os.utime(os.path.join(cache, left[0]), (old, old))
    r, cw = _export(base, cache, str(tmp_path / "b"))  # a hit: its lookup removes it
    assert r.checks["program_cache"]["result"] == "hit" and not cw
    assert sorted(os.listdir(cache)) == [".key", base.name]


# config.json a FIFO or a link to /dev/zero: the cache's key is computed from a checked read
# (a process with 2 GiB of address space, so a read without end fails instead of taking the
# machine's memory; export_hit imports no torch).
_KEY_OF = ("import resource, sys, warnings\n"
           "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
           "from pt2onnx import _program_cache\n"
           "r = _program_cache.export_hit(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], "
           "dict(opset=None, target='standard', dtype='float32', external_data=True, "
           "quantize=None))\n"
           "print('miss' if r is None else 'hit')\n")


@pytest.mark.parametrize("kind", ["FIFO", "link to /dev/zero"])
def test_config_json_that_is_not_a_file(base, cache, kind, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(base.ckpt, ckpt)
    os.remove(ckpt / "config.json")
    if kind == "FIFO":
        os.mkfifo(ckpt / "config.json")
    else:
        os.symlink("/dev/zero", ckpt / "config.json")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", _KEY_OF, cache, str(ckpt), TASK,
                        str(tmp_path / "m.onnx")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "miss", r.stderr[-2000:]
    assert time.perf_counter() - t0 < 60
    # In export_pretrained, the same clean refusal with or without the cache.
    for use_cache in (True, False):
        with deadline(60), pytest.raises(ValueError, match="config.json: not a regular file"):
            hf.export_pretrained(ckpt, TASK, tmp_path / "out" / "m.onnx", verify=False,
                                 cache_dir=cache, cache=use_cache)
    assert not (tmp_path / "out").exists()


def _scale_floats(data: bytes, factor: float) -> bytes:
    values = struct.unpack(f"<{len(data) // 4}f", data)
    return struct.pack(f"<{len(values)}f", *(v * factor for v in values))


def test_hit_that_fails_verification_is_exported_anew(base, cache, tmp_path):
    """A signed entry whose kept buffer (the rotary inv_freq) is wrong: the hit's file fails
    verification, is removed, and the export is made once more without the cache, saying
    so; the fresh capture replaces the entry."""
    entry = entry_of(cache)
    data = open(os.path.join(entry, "part0.bin"), "rb").read()
    rewrite_part(entry, "part0.bin", _scale_floats(data, 3.0), sign=True)
    r, cw = _export(base, cache, str(tmp_path / "out"), verify=True)
    _one_warning(cw, entry, "failed verification", "capturing anew without it")
    assert r.checks["program_cache"] == {"result": "miss", "entry": entry}
    assert "max_abs_error" in r.checks and _files(r) == base.fresh
    again, cw = _export(base, cache, str(tmp_path / "again"), verify=True)
    assert not cw and again.checks["program_cache"]["result"] == "hit"


@pytest.mark.parametrize("case", ["bit flip, --no-verify", "wrong buffer signed, verified"])
def test_command_warns_once_and_exports_anew(base, cache, case, tmp_path):
    """pt2onnx-pretrained looks up twice on a miss (its own lookup, then export_pretrained's):
    a refused entry still gives one warning, exit 0, and the fresh capture's file."""
    entry = entry_of(cache)
    if case.startswith("bit flip"):
        edit_entry(entry, EDITS["offset 0->4"])
    else:
        data = open(os.path.join(entry, "part0.bin"), "rb").read()
        rewrite_part(entry, "part0.bin", _scale_floats(data, 3.0), sign=True)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "pt2onnx._pretrained_command", base.ckpt, "--task",
                        TASK, "--cache-dir", cache, "-o", str(out / "model.onnx"),
                        *(["--no-verify"] if "no-verify" in case else [])],
                       capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"),
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    warned = [ln for ln in r.stderr.splitlines() if "CacheWarning" in ln]
    assert len(warned) == 1 and entry in warned[0], r.stderr[-3000:]
    assert f"program cache: miss ({entry})" in r.stdout
    assert [(out / n).read_bytes() for n in ("model.onnx", "model.onnx.data")] == base.fresh


def test_pretrained_call_is_what_export_passes():
    """_program_cache.pretrained_call (what a hit's stored call must hold) mirrors export()
    for export_pretrained's options, without importing it."""
    from pt2onnx import _export

    assert _program_cache.DEFAULT_OPSET == _export.DEFAULT_OPSET
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    x = torch.randn(2, 64)
    for options in (OPTIONS,
                    dict(opset=17, target="onnxruntime", dtype="float16",
                         external_data="shards:1MB", quantize=None),
                    dict(opset=21, target="standard", dtype="float32", external_data=None,
                         quantize={"dtype": "int4", "block_size": 32}),
                    dict(opset=None, target="standard", dtype="bfloat16", external_data=False,
                         quantize="int8")):
        state = {}
        pt2onnx.export(model, (x,), None, _state=state, **options)
        expected = _program_cache.pretrained_call(options)
        assert {k: state["convert"][k] for k in expected} == expected, options


def test_dtype_sizes_are_torchs():
    for name, size in _cache_entry.ITEMSIZE.items():
        assert getattr(torch, name.removeprefix("torch.")).itemsize == size, name


# ---- export(model, ..., cache_dir=...) -------------------------------------------------------

class TwoLayers(torch.nn.Module):
    """Two same-shape Linear layers (their weights can be swapped), a buffer, and a plain
    tensor attribute: a constant of the program, whose bytes the entry keeps."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.register_buffer("shift", torch.randn(8))
        self.table = torch.linspace(0.5, 1.5, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x) + self.shift)) * self.table


def _module_export(cache, out, **kw):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = TwoLayers().eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = pt2onnx.export(model, (torch.randn(2, 8),), os.path.join(out, "m.onnx"),
                           cache_dir=cache, **kw)
    return r, _cache_warnings(caught)


@pytest.fixture
def module_entry(tmp_path):
    """export(cache_dir=) of TwoLayers once: (cache, entry folder, the fresh capture's file)."""
    cache = str(tmp_path / "cache")
    r, cw = _module_export(cache, str(tmp_path / "first"))
    assert not cw and r.checks["program_cache"]["result"] == "miss"
    return cache, r.checks["program_cache"]["entry"], _files(r)


def _assert_module_replaced(cache, entry, fresh, r, cw, tmp_path, *fragments):
    _one_warning(cw, entry, *fragments)
    assert r.checks["program_cache"] == {"result": "miss", "entry": entry}
    assert _files(r) == fresh
    assert sorted(os.listdir(cache)) == [".key", os.path.basename(entry)]
    again, cw = _module_export(cache, str(tmp_path / "again"))
    assert not cw and again.checks["program_cache"]["result"] == "hit"
    assert _files(again) == fresh


def test_module_swapped_weights_with_recomputed_hashes(module_entry, tmp_path):
    """export(cache_dir=) never verifies: an entry whose program reads fc2's weight as fc1's
    (hashes recomputed) is not signed, so a miss."""
    cache, entry, fresh = module_entry
    program = open(os.path.join(entry, "part0.json"), "rb").read()
    rewrite_part(entry, "part0.json", _swap(program, b'"fc1.weight"', b'"fc2.weight"'))
    r, cw = _module_export(cache, str(tmp_path / "out"))
    _assert_module_replaced(cache, entry, fresh, r, cw, tmp_path, "not signed")


@pytest.mark.parametrize("sign", [False, True])
def test_module_parameter_from_stored_bytes_is_refused(module_entry, sign, tmp_path):
    """An entry that would have fc1's weight read from bytes it keeps (zeros) instead of from
    the model: refused by the signature, and, signed, by the rule that a view naming one of
    the model's tensors is read from the model."""
    cache, entry, fresh = module_entry
    data = open(os.path.join(entry, "part0.bin"), "rb").read()
    rewrite_part(entry, "part0.bin", data + bytes(8 * 8 * 4))

    def change(meta):
        views = meta["parts"][0]["views"]  # last: its bytes where part0.bin's end were
        views.remove(next(v for v in views if v[0] == "fc1.weight"))
        views.append(["fc1.weight", len(data), "torch.float32", [8, 8], [8, 1], 8 * 8 * 4])

    edit_entry(entry, change, sign=sign)
    r, cw = _module_export(cache, str(tmp_path / "out"))
    _assert_module_replaced(cache, entry, fresh, r, cw, tmp_path,
                            "would be read from the entry" if sign else "not signed")


def test_module_kept_program_that_does_not_convert_is_captured_anew(module_entry, tmp_path):
    """A kept program the C++ core refuses (signed: a relu renamed to an op nobody converts)
    falls back to a fresh capture, as export_pretrained's does."""
    cache, entry, fresh = module_entry
    program = open(os.path.join(entry, "part0.json"), "rb").read()
    assert b"torch.ops.aten.relu.default" in program
    rewrite_part(entry, "part0.json", program.replace(b"torch.ops.aten.relu.default",
                                                      b"torch.ops.aten.no_such_op.default"),
                 sign=True)
    r, cw = _module_export(cache, str(tmp_path / "out"))
    _assert_module_replaced(cache, entry, fresh, r, cw, tmp_path, "did not convert",
                            "capturing anew without it")


def test_module_hit_that_fails_verification_is_exported_anew(module_entry, tmp_path):
    """A signed entry whose kept constant (`table`) is wrong: with verify=True the hit's file
    fails, is removed, and the export is captured anew, with a warning saying so."""
    cache, entry, fresh = module_entry
    data = open(os.path.join(entry, "part0.bin"), "rb").read()
    rewrite_part(entry, "part0.bin", _scale_floats(data, -1.0), sign=True)
    r, cw = _module_export(cache, str(tmp_path / "out"), verify=True)
    _assert_module_replaced(cache, entry, fresh, r, cw, tmp_path, "failed verification")
    assert r.checks["verify"]
