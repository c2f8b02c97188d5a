"""The program cache of export_pretrained / pt2onnx-pretrained: a repeated
architecture exported without capturing it again.

A transformers checkpoint's program (what torch.export captures) depends on
its config, the task, the export options and the code that runs (torch,
transformers, pt2onnx), not on its weights, which the C++ core reads from the
checkpoint's safetensors files anyway. After a capture, each program is kept
as torch.export.save's JSON (`serialize_program`) with what the C++ core was
called with besides (names, dims, options; the data of the buffers the model
computed at init, a rotary inv_freq, which no checkpoint holds). The next
export of the same key converts that JSON with the new checkpoint's files:
the same call as after a fresh capture, so the same file, byte for byte
(tests/python/test_program_cache.py).

No torch and no transformers here: the key is made of files and package
metadata, so `pt2onnx-pretrained` decides hit or miss, and converts a hit,
without importing either (python/pt2onnx/_pretrained_command.py).

The key (`key_fields`): config.json's bytes, the task, every export option,
the versions of torch, transformers and pt2onnx, and the Python version. The
entry also lists every source file of transformers, of pt2onnx and of remote
code (transformers_modules) that was imported when the program was captured,
with its hash: a hit re-hashes them, so an edited modeling file (or a
different model class chosen from the same config) is a miss. An entry that
cannot be read, whose files do not match their recorded hashes, or whose key
is not the one looked up is a miss with a warning, never a crash or a file
made from it; the checkpoint's tensors are checked against the program's
names, dtypes and shapes by the C++ core as on every export, and a hit that
the core refuses falls back to a fresh capture.

Layout: `<cache dir>/<key>/entry.json` (the key, sources, parts) and per
part `part<i>.json` (the program) and `part<i>.bin` (the buffers' bytes).
Entries are written into a temporary folder and renamed into place, so a
reader never sees half an entry.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from typing import Any

from . import _core
from ._checkpoint_files import safetensors_files, seq2seq_paths
from ._result import ExportResult, result_from_core

FORMAT = 1
ENV_DIR = "PT2ONNX_CACHE_DIR"

# _core.convert's arguments that a part stores (the rest are the program, the
# weights' views, the output path, the checkpoint's files and the progress line).
_STORED = ("opset", "optimize", "external_data", "input_names", "output_names", "fallback",
           "custom_opsets", "training", "all_modules_as_functions", "modules_as_functions",
           "inline_functions", "target", "dtype", "quantize", "source_aliases", "allow_unused",
           "convert_floats", "shard_bytes", "export_params", "keep_initializers_as_inputs",
           "weight_names")


class CacheWarning(UserWarning):
    """A program cache entry that could not be used (unreadable, damaged or foreign)."""


def default_dir() -> str:
    """`$PT2ONNX_CACHE_DIR`, else `pt2onnx/programs` under the user's cache directory
    (`$XDG_CACHE_HOME`, default ~/.cache)."""
    if os.environ.get(ENV_DIR):
        return os.environ[ENV_DIR]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pt2onnx", "programs")


def dist_version(dist: str) -> str | None:
    """An installed distribution's version from its metadata (nothing imported); None if absent.

    Read from the first `<name>-<version>.dist-info/METADATA` on sys.path, the one
    importlib.metadata.version() reads; importlib.metadata itself only where that is not how the
    distribution is installed (an .egg-info, no METADATA, no Version line): importing it took
    32 ms of a cached export's ~0.2 s start-up with a cold page cache (bench/program_cache.md)."""
    want = _normalized(dist)
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            stem, dot, kind = name.rpartition(".")
            if kind not in ("dist-info", "egg-info") or _normalized(stem.rpartition("-")[0]) != want:
                continue
            if kind == "dist-info":
                try:
                    with open(os.path.join(entry or ".", name, "METADATA"), encoding="utf-8") as fh:
                        for line in fh:
                            if line.startswith("Version:"):
                                return line[len("Version:"):].strip()
                            if not line.strip():
                                break  # the end of the headers
                except OSError:
                    pass
            return _metadata_version(dist)
    return _metadata_version(dist)


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _metadata_version(dist: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def key_fields(path: str | os.PathLike, task: str, options: dict[str, Any]) -> dict[str, Any]:
    """What the program of checkpoint `path` exported for `task` with `options` depends on,
    besides the source files an entry lists; read from files and package metadata only."""
    with open(os.path.join(os.fspath(path), "config.json"), "rb") as fh:
        config = hashlib.sha256(fh.read()).hexdigest()
    return {
        "format": FORMAT,
        "config_sha256": config,
        "task": task,
        "options": json.loads(json.dumps(options, sort_keys=True)),
        "versions": {"torch": dist_version("torch"),
                     "transformers": dist_version("transformers"),
                     "pt2onnx": _core.__version__,
                     "python": "%d.%d" % sys.version_info[:2]},
    }


def _key(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:40]


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _roots() -> dict[str, str]:
    """The folders whose imported .py files an entry lists, by name: transformers', pt2onnx's
    and remote code's (found without importing them)."""
    roots = {"pt2onnx": os.path.dirname(os.path.abspath(__file__))}
    for name in ("transformers", "transformers_modules"):
        mod = sys.modules.get(name)
        locations = getattr(mod, "__path__", None) if mod is not None else None
        if locations is None and name == "transformers":
            spec = importlib.util.find_spec(name)
            locations = spec.submodule_search_locations if spec is not None else None
        if locations:
            roots[name] = os.path.abspath(list(locations)[0])
    return roots


def sources_in_use() -> dict[str, str]:
    """`{"<root>/<relative path>": sha256}` of every imported module file under _roots():
    the code a capture ran (called right after it)."""
    roots = _roots()
    out = {}
    for mod in list(sys.modules.values()):
        file = getattr(mod, "__file__", None)
        if not file or not file.endswith(".py"):
            continue
        file = os.path.abspath(file)
        for name, root in roots.items():
            if file.startswith(root + os.sep):
                rel = f"{name}/{os.path.relpath(file, root)}"
                if rel not in out and os.path.isfile(file):
                    out[rel] = _sha256_file(file)
                break
    return dict(sorted(out.items()))


def _sources_changed(sources: dict[str, str]) -> str | None:
    """The first listed source file that is gone or differs now; None if all are the same."""
    roots = _roots()
    for rel, digest in sources.items():
        name, _, sub = rel.partition("/")
        root = roots.get(name)
        file = os.path.join(root, sub) if root else None
        if file is None or not os.path.isfile(file) or _sha256_file(file) != digest:
            return rel
    return None


# -- storing -----------------------------------------------------------------------------

def _encode_call(call: dict[str, Any]) -> dict[str, Any] | None:
    """The stored part of a _core.convert call as JSON, or None when it cannot be stored (a
    custom converter, an in-memory export): those are not cached."""
    if call.get("custom_functions") or call.get("in_memory") or call.get("source_tensors"):
        return None
    out = {k: call[k] for k in _STORED}
    out["input_dim_names"] = {k: sorted(v.items()) for k, v in call["input_dim_names"].items()}
    out["output_dim_names"] = sorted((k, sorted(v.items()))
                                     for k, v in call["output_dim_names"].items())
    try:
        stored = json.loads(json.dumps(out, sort_keys=True))
    except (TypeError, ValueError):
        return None
    back = decode_call(stored)
    if any(back[k] != call[k] for k in (*_STORED, "input_dim_names", "output_dim_names")):
        return None  # a value JSON does not keep as it is (a tuple, say)
    return stored


def decode_call(stored: dict[str, Any]) -> dict[str, Any]:
    call = {k: stored[k] for k in _STORED}
    call["input_dim_names"] = {k: {int(a): n for a, n in v}
                               for k, v in stored["input_dim_names"].items()}
    call["output_dim_names"] = {int(k): {int(a): n for a, n in v}
                                for k, v in stored["output_dim_names"]}
    return call


def _extent(view) -> int:
    """Bytes from a view's address that its elements span. Only called after a capture, so
    torch is imported already and its dtypes give the element sizes."""
    import torch

    _, _, dtype, sizes, strides, _ = view
    if any(s == 0 for s in sizes):
        return 0
    size = getattr(torch, dtype.removeprefix("torch.")).itemsize
    return (sum((s - 1) * st for s, st in zip(sizes, strides)) + 1) * size


def make_part(role: str, program_json: bytes, call: dict[str, Any],
              from_model: frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """One exported file's entry part, from the JSON of its program and the _core.convert
    call export() made (`_state["convert"]`; its weight views' memory must still be
    alive). Weights without data (the checkpoint's) are kept as name, dtype and shape, and
    so are those named in `from_model` (an nn.Module's parameters and buffers, read from the
    model on a hit: python/pt2onnx/_module_cache.py); the others (buffers computed at init,
    constants) with their bytes, one copy per address and span, as the C++ core may tell
    tied tensors by their address. None: not cacheable."""
    stored = _encode_call(call)
    if stored is None:
        return None
    blob, at, views = bytearray(), {}, []
    for view in call["weights"]:
        name, address, dtype, sizes, strides, readable = view
        if name in from_model:
            views.append([name, None, dtype, list(sizes), list(strides), 0, "model"])
            continue
        if address == 0:
            views.append([name, None, dtype, list(sizes), list(strides), 0])
            continue
        n = _extent(view)
        if n > readable:
            return None
        where = at.get((address, n))
        if where is None:
            where = at[(address, n)] = len(blob)
            blob += ctypes.string_at(address, n) if n else b""
        views.append([name, where, dtype, list(sizes), list(strides), n])
    return {"role": role, "call": stored, "views": views,
            "program": bytes(program_json), "data": bytes(blob)}


def store(cache_dir: str | os.PathLike, fields: dict[str, Any], parts: list[dict[str, Any]],
          sources: dict[str, str]) -> str | None:
    """Writes an entry (replacing one of the same key); returns its folder. A cache folder
    that cannot be written is a warning, not an error: the export itself succeeded."""
    cache_dir = os.fspath(cache_dir)
    final = os.path.join(cache_dir, _key(fields))
    tmp = None
    try:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".new-", dir=cache_dir)
        meta_parts = []
        for i, part in enumerate(parts):
            for suffix, data in (("json", part["program"]), ("bin", part["data"])):
                with open(os.path.join(tmp, f"part{i}.{suffix}"), "wb") as fh:
                    fh.write(data)
            meta_parts.append({"role": part["role"], "call": part["call"],
                               "views": part["views"],
                               "program_sha256": hashlib.sha256(part["program"]).hexdigest(),
                               "data_sha256": hashlib.sha256(part["data"]).hexdigest()})
        entry = {"fields": fields, "sources": sources, "parts": meta_parts,
                 "created": time.time()}
        with open(os.path.join(tmp, "entry.json"), "w") as fh:
            json.dump(entry, fh)
        if os.path.isdir(final):
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:  # another process stored the same key meanwhile: theirs is kept
            shutil.rmtree(tmp, ignore_errors=True)
        return final
    except OSError as e:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        warnings.warn(f"program cache: could not store an entry in {cache_dir}: {e}",
                      CacheWarning, stacklevel=3)
        return None


# -- reading -----------------------------------------------------------------------------

def lookup(cache_dir: str | os.PathLike, fields: dict[str, Any]) -> dict[str, Any] | None:
    """The entry of `fields`, its parts' files read and checked; None on a miss. A damaged or
    foreign entry is a miss with a CacheWarning; model code that changed since the capture,
    a plain miss."""
    folder = os.path.join(os.fspath(cache_dir), _key(fields))
    meta = os.path.join(folder, "entry.json")
    if not os.path.isfile(meta):
        return None
    try:
        with open(meta, "rb") as fh:
            entry = json.loads(fh.read())
        if entry.get("fields") != fields:
            warnings.warn(f"program cache: {folder} holds another export's entry (its key "
                          "differs): not used", CacheWarning, stacklevel=3)
            return None
        if _sources_changed(entry["sources"]) is not None:
            return None
        for i, part in enumerate(entry["parts"]):
            for suffix, what in (("json", "program"), ("bin", "data")):
                with open(os.path.join(folder, f"part{i}.{suffix}"), "rb") as fh:
                    data = fh.read()
                if hashlib.sha256(data).hexdigest() != part[f"{what}_sha256"]:
                    raise ValueError(f"part{i}.{suffix} does not match its recorded hash")
                part[what] = data
        entry["folder"] = folder
        return entry
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        warnings.warn(f"program cache: entry {folder} is damaged ({type(e).__name__}: {e}): "
                      "not used", CacheWarning, stacklevel=3)
        return None


def stored_views(part: dict[str, Any]):
    """The weight views of a stored part: fake ones as stored, the others pointing into a
    buffer that must outlive the conversion (returned with them)."""
    buf = bytearray(part["data"]) + b"\0"  # never empty: from_buffer needs a byte
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    out = []
    for name, offset, dtype, sizes, strides, n, *_ in part["views"]:
        if offset is None:
            out.append((name, 0, dtype, sizes, strides, 0))
        else:
            if offset + n > len(part["data"]):
                raise ValueError(f"weight '{name}' lies past the entry's data")
            out.append((name, base + offset, dtype, sizes, strides, n))
    return out, buf


def convert(entry: dict[str, Any], checkpoint: str | os.PathLike,
            f: str) -> list[ExportResult]:
    """Converts every part of `entry` with `checkpoint`'s safetensors files, writing `f` (or,
    for seq2seq-with-past, its encoder and decoder files); one result per part, in order.
    Raises what the C++ core raises (ConversionError)."""
    files = safetensors_files(checkpoint)
    results = []
    for part in entry["parts"]:
        t0 = time.perf_counter()
        path = f if not part["role"] else seq2seq_paths(f)[0 if part["role"] == "encoder" else 1]
        weights, buf = stored_views(part)
        call = decode_call(part["call"])
        r = _core.convert(program=part["program"], weights=weights, output_path=path,
                          custom_functions=[], source_files=files, source_tensors=[],
                          in_memory=False, progress=None, **call)
        del buf
        result = result_from_core(r, path, {})
        result.timings["total"] = time.perf_counter() - t0
        results.append(result)
    return results


def export_hit(cache_dir: str | os.PathLike, path: str | os.PathLike, task: str,
               f: str, options: dict[str, Any]) -> ExportResult | None:
    """export_pretrained's export from the cache: the result (the decoder's with the
    encoder's in checks["encoder"] for seq2seq-with-past), or None on a miss. A hit the C++
    core refuses (a checkpoint whose tensors do not fit the program) is a miss with a
    warning: the fresh capture then reports the error as usual."""
    t0 = time.perf_counter()
    try:
        fields = key_fields(path, task, options)
    except OSError:
        return None  # no config.json: the fresh export says so
    entry = lookup(cache_dir, fields)
    if entry is None:
        return None
    lookup_s = time.perf_counter() - t0
    try:
        results = convert(entry, path, f)
    except (_core.ConversionError, ValueError, OSError) as e:
        warnings.warn(f"program cache: entry {entry['folder']} did not convert with this "
                      f"checkpoint ({str(e).splitlines()[0]}): capturing anew",
                      CacheWarning, stacklevel=3)
        return None
    result = results[-1]
    if len(results) > 1:
        result.checks["encoder"] = results[0]
    result.timings = {"cache lookup": lookup_s, **result.timings}
    result.timings["total"] = time.perf_counter() - t0
    result.checks["program_cache"] = {"result": "hit", "entry": entry["folder"]}
    return result
