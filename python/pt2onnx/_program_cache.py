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
(tests/models/test_program_cache.py).

No torch and no transformers here: the key is made of files and package
metadata, so `pt2onnx-pretrained` decides hit or miss, and converts a hit,
without importing either (python/pt2onnx/_pretrained_command.py).

The key (`key_fields`): config.json's bytes, the task, every export option,
the versions of torch, transformers and pt2onnx, and the Python version. The
entry also lists every source file of transformers, of pt2onnx and of remote
code (transformers_modules) that was imported when the program was captured,
with its hash: a hit re-hashes them, so an edited modeling file (or a
different model class chosen from the same config) is a plain miss.

Trust (issue 56): whoever can write the cache folder chooses the models
exported from it, so an entry is used only after python/pt2onnx/_cache_entry.py
has checked it whole: the folder, the entry and its files the current user's
alone, regular files read for their checked sizes, a signature (HMAC keyed by
the cache's `.key`) over every byte, and every value, including the call
against what this export passes (`pretrained_call`; for export(cache_dir=),
`check_request`). An entry that fails a check is a miss with one warning
(`CacheWarning`) naming it, or the folder, and the fresh capture replaces it. A
hit the C++ core refuses, or whose file fails verification, is captured anew
(`converting_hit`, `verifying_hit`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import importlib.util
import json
import os
import re
import secrets
import sys
import time
import warnings
from typing import Any

from . import _core
from ._cache_entry import (CALL_TYPES, DIR_FLAGS, ITEMSIZE, MAC_FILE, MAX_ENTRY_BYTES,
                           MAX_PART_BYTES, MAX_RANK, NEW, STORED, Damaged, Untrusted,
                           check_owner, exists, extent, mac, open_root, parse_entry, read_file,
                           remove_stale, rmtree, signing_key, write_file)
from . import _hf_tasks
from ._checkpoint_files import read_regular_file, safetensors_files, seq2seq_paths
from ._result import ExportResult, result_from_core

FORMAT = 2  # 2: signed entries (entry.mac), checked whole
ENV_DIR = "PT2ONNX_CACHE_DIR"
# export()'s default opset (_export.DEFAULT_OPSET: that module imports torch); a test checks
# that the two agree.
DEFAULT_OPSET = 18

# Entries this process does not use again (refused by a check, or failed to convert or to
# verify), so that a second lookup (the command's, then export_pretrained's) neither warns
# nor tries again: folder -> its identity then (`_identity`); an entry stored anew there is
# another folder, and is read.
_DISCARDED: dict[str, tuple[int, int] | None] = {}
# Untrusted folders already warned about in this process: one warning each, not one per export.
_WARNED: set[tuple[str, str]] = set()


class CacheWarning(UserWarning):
    """A program cache entry that could not be used (unreadable, damaged or foreign)."""


class HitFailed(Exception):
    """A kept program that gave no file this export can use: export(cache_dir=) captures anew."""

    def __init__(self, folder: str, why: str):
        super().__init__(f"program cache: entry {folder} {why}: capturing anew without it")
        self.folder = folder


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
    besides the source files an entry lists; read from files and package metadata only.
    config.json is read as export_pretrained reads it (`read_regular_file`: a FIFO or a link
    to a device raises ValueError instead of hanging or reading without end)."""
    config = read_regular_file(os.path.join(os.fspath(path), "config.json"))
    return {
        "format": FORMAT,
        "config_sha256": hashlib.sha256(config).hexdigest(),
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
    out = {k: call[k] for k in STORED}
    out["input_dim_names"] = {k: sorted(v.items()) for k, v in call["input_dim_names"].items()}
    out["output_dim_names"] = sorted((k, sorted(v.items()))
                                     for k, v in call["output_dim_names"].items())
    try:
        stored = json.loads(json.dumps(out, sort_keys=True))
    except (TypeError, ValueError):
        return None
    back = decode_call(stored)
    if any(back[k] != call[k] for k in (*STORED, "input_dim_names", "output_dim_names")):
        return None  # a value JSON does not keep as it is (a tuple, say)
    if any(not ok(stored[k]) for k, ok in CALL_TYPES.items()):
        return None  # a value a lookup would refuse (an axis past _MAX_AXIS, say)
    return stored


def decode_call(stored: dict[str, Any]) -> dict[str, Any]:
    call = {k: stored[k] for k in STORED}
    call["input_dim_names"] = {k: {int(a): n for a, n in v}
                               for k, v in stored["input_dim_names"].items()}
    call["output_dim_names"] = {int(k): {int(a): n for a, n in v}
                                for k, v in stored["output_dim_names"]}
    return call


def make_part(role: str, program_json: bytes, call: dict[str, Any],
              from_model: frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """One exported file's entry part, from the JSON of its program and the _core.convert
    call export() made (`_state["convert"]`; its weight views' memory must still be
    alive). Weights without data (the checkpoint's) are kept as name, dtype and shape, and
    so are those named in `from_model` (an nn.Module's parameters and buffers, read from the
    model on a hit: python/pt2onnx/_module_cache.py); the others (buffers computed at init,
    constants) with their bytes, one copy per address and span, as the C++ core may tell
    tied tensors by their address. None: not cacheable."""
    import ctypes

    stored = _encode_call(call)
    if stored is None:
        return None
    blob, at, views = bytearray(), {}, []
    for name, address, dtype, sizes, strides, readable in call["weights"]:
        if dtype not in ITEMSIZE or len(sizes) > MAX_RANK:
            return None  # a lookup would refuse it
        if name in from_model:
            views.append([name, None, dtype, list(sizes), list(strides), 0, "model"])
            continue
        if address == 0:
            views.append([name, None, dtype, list(sizes), list(strides), 0])
            continue
        n = extent(dtype, sizes, strides)
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
    """Writes an entry, signed (replacing one of the same key); returns its folder. A cache
    folder that cannot be written, or that others can write, is a warning, not an error:
    the export itself succeeded."""
    cache_dir = os.fspath(cache_dir)
    name = _key(fields)
    try:
        root = open_root(cache_dir, create=True)
    except Untrusted as e:
        _warn_untrusted(e)
        return None
    except OSError as e:
        _warn_not_stored(cache_dir, e)
        return None
    try:
        remove_stale(root)
        key = signing_key(root, cache_dir, create=True)
        tmp = _write_entry(root, key, fields, parts, sources)
        _replace(root, tmp, name)  # False: another process's entry of this key is there
        return os.path.join(cache_dir, name)
    except Untrusted as e:
        _warn_untrusted(e)
        return None
    except (OSError, Damaged) as e:
        _warn_not_stored(cache_dir, e)
        return None
    finally:
        os.close(root)


def store_pretrained(cache_dir: str | os.PathLike, path: str | os.PathLike, task: str,
                     options: dict[str, Any], parts: list[dict[str, Any]]) -> str | None:
    """export_pretrained's store after a capture: the key from config.json read again
    through the lookup's checked read (a config.json replaced meanwhile by a FIFO is a
    warning, not a hang)."""
    try:
        fields = key_fields(path, task, options)
    except (OSError, ValueError) as e:
        _warn_not_stored(os.fspath(cache_dir), e)
        return None
    return store(cache_dir, fields, parts, sources_in_use())


def _warn_not_stored(cache_dir: str, e: Exception) -> None:
    warnings.warn(f"program cache: could not store an entry in {cache_dir}: {e}",
                  CacheWarning, stacklevel=4)


def _warn_untrusted(e: Untrusted) -> None:
    """One warning per folder and reason in a process, not one per export."""
    if (e.folder, e.why) not in _WARNED:
        _WARNED.add((e.folder, e.why))
        warnings.warn(str(e), CacheWarning, stacklevel=4)


def _write_entry(root: int, key: bytes, fields: dict[str, Any], parts: list[dict[str, Any]],
                 sources: dict[str, str]) -> str:
    """Writes an entry into a new `.new-<random>` folder of the cache; returns its name."""
    tmp = NEW + secrets.token_hex(8)
    os.mkdir(tmp, 0o700, dir_fd=root)
    try:
        fd = os.open(tmp, DIR_FLAGS, dir_fd=root)
        try:
            meta_parts = []
            for i, part in enumerate(parts):
                write_file(fd, f"part{i}.json", part["program"])
                write_file(fd, f"part{i}.bin", part["data"])
                meta_parts.append({"role": part["role"], "call": part["call"],
                                   "views": part["views"],
                                   "program_sha256": hashlib.sha256(part["program"]).hexdigest(),
                                   "program_bytes": len(part["program"]),
                                   "data_sha256": hashlib.sha256(part["data"]).hexdigest(),
                                   "data_bytes": len(part["data"])})
            meta = json.dumps({"fields": fields, "sources": sources, "parts": meta_parts,
                               "created": time.time()}).encode()
            write_file(fd, "entry.json", meta)
            write_file(fd, MAC_FILE, mac(key, meta).encode())
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            rmtree(root, tmp)
        raise
    return tmp


def _replace(root: int, tmp: str, name: str) -> bool:
    """Renames entry folder `tmp` to `name`, replacing an entry there; False (and `tmp`
    removed) when another process stored that key meanwhile: theirs is kept."""
    rmtree(root, name)
    try:
        os.rename(tmp, name, src_dir_fd=root, dst_dir_fd=root)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            rmtree(root, tmp)
        if exists(root, name):
            return False
        raise


def discard(folder: str) -> None:
    """Stops using entry `folder` in this process and removes it: a hit that failed (its
    program did not convert, its file failed verification); the fresh capture stores anew."""
    _DISCARDED[folder] = _identity(folder)
    try:
        root = open_root(os.path.dirname(folder), create=False)
    except (OSError, Untrusted):
        return
    try:
        rmtree(root, os.path.basename(folder))
    except OSError:
        pass
    finally:
        os.close(root)


# -- reading -----------------------------------------------------------------------------

def lookup(cache_dir: str | os.PathLike, fields: dict[str, Any], roles: tuple[str, ...] = ("",),
           expect: dict[str, Any] | None = None, model_views: bool = False
           ) -> dict[str, Any] | None:
    """The entry of `fields`, checked whole (see the module's docstring), its parts' files
    read; None on a miss. `roles`: its parts' roles; `expect`: call values this export
    passes (`pretrained_call`); `model_views`: views may be marked "model" (export(
    cache_dir=)'s parameters and buffers, read from the model). An entry that is not used
    (unsigned, damaged, foreign, not the user's alone, holding a value this export would not
    pass) is a miss with one CacheWarning naming it; model code that changed since the
    capture, a plain miss."""
    cache_dir = os.fspath(cache_dir)
    folder = os.path.join(cache_dir, _key(fields))
    if folder in _DISCARDED and _DISCARDED[folder] == _identity(folder):
        return None
    try:
        root = open_root(cache_dir, create=False)
    except FileNotFoundError:
        return None
    except Untrusted as e:
        _warn_untrusted(e)
        return None
    except OSError as e:
        warnings.warn(f"program cache: {cache_dir} cannot be opened ({e.strerror}): not used",
                      CacheWarning, stacklevel=3)
        return None
    try:
        remove_stale(root)
        return _read_entry(root, cache_dir, folder, fields, roles, expect, model_views)
    except Untrusted as e:
        _warn_untrusted(e)
    except Exception as e:  # a hit never crashes: whatever is wrong, the entry is a miss
        _DISCARDED[folder] = _identity(folder)
        warnings.warn(f"program cache: entry {folder} is not used ({_reason(e)[:300]}): "
                      "capturing anew", CacheWarning, stacklevel=3)
    finally:
        os.close(root)
    return None


def _identity(folder: str) -> tuple[int, int] | None:
    """Which folder is at `folder` now (inode, change time); None: none."""
    try:
        st = os.lstat(folder)
    except OSError:
        return None
    return st.st_ino, st.st_ctime_ns


def _reason(e: Exception) -> str:
    """Why an entry is not used: what a check (Damaged, a ValueError) or the system
    (OSError) says; anything else is a check missing in _cache_entry.py, and says so."""
    if isinstance(e, OSError) and e.strerror:
        name = f"{e.filename}: " if isinstance(e.filename, str) else ""
        if e.errno == errno.ELOOP:  # what O_NOFOLLOW gives for a link
            return f"{name}a symbolic link"
        return name + e.strerror
    if isinstance(e, (OSError, ValueError, RecursionError)):
        return str(e)
    return f"unexpected {type(e).__name__}: {e}"


def _read_entry(root: int, cache_dir: str, folder: str, fields: dict[str, Any],
                roles: tuple[str, ...], expect: dict[str, Any] | None,
                model_views: bool) -> dict[str, Any] | None:
    """lookup's reading: the signature first, then the values, then the sources (a stale
    entry is a plain miss: None), then the parts."""
    try:
        fd = os.open(os.path.basename(folder), DIR_FLAGS, dir_fd=root)
    except FileNotFoundError:
        return None
    except OSError:
        raise Damaged("its folder is a symbolic link or not a folder") from None
    try:
        check_owner(os.fstat(fd), "its folder")
        key = signing_key(root, cache_dir, create=False)
        meta = read_file("entry.json", dir_fd=fd, limit=MAX_ENTRY_BYTES, owned=True)
        signature = read_file(MAC_FILE, dir_fd=fd, limit=64, exact=64, owned=True)
        if key is None or not hmac.compare_digest(signature, mac(key, meta).encode()):
            raise Damaged("entry.json is not signed with this cache's key: edited, damaged, "
                          "or written by another cache")
        entry = parse_entry(meta, fields, roles, expect, model_views)
        if _sources_changed(entry["sources"]) is not None:
            return None
        for i, part in enumerate(entry["parts"]):
            for suffix, what in (("json", "program"), ("bin", "data")):
                data = read_file(f"part{i}.{suffix}", dir_fd=fd, limit=MAX_PART_BYTES,
                                 exact=part[f"{what}_bytes"], owned=True)
                if hashlib.sha256(data).hexdigest() != part[f"{what}_sha256"]:
                    raise Damaged(f"part{i}.{suffix} does not match its recorded hash")
                part[what] = data
        entry["folder"] = folder
        return entry
    finally:
        os.close(fd)


def stored_views(part: dict[str, Any]):
    """The weight views of a part checked by lookup: those without data as stored, the
    others pointing into a buffer that must outlive the conversion (returned with them)."""
    import ctypes

    buf = bytearray(part["data"]) + b"\0"  # never empty: from_buffer needs a byte
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    out = []
    for name, offset, dtype, sizes, strides, n, *_ in part["views"]:
        if offset is None:
            out.append((name, 0, dtype, sizes, strides, 0))
        else:
            if not 0 <= offset <= offset + n <= len(part["data"]):  # lookup checked it
                raise Damaged(f"weight '{name}' lies outside the entry's data")
            out.append((name, base + offset, dtype, sizes, strides, n))
    return out, buf


# -- converting --------------------------------------------------------------------------

def pretrained_call(options: dict[str, Any]) -> dict[str, Any]:
    """The call values export() derives from export_pretrained's `options` (hf.py passes no
    other option to export(), so the rest are export()'s defaults): a hit's stored call must
    hold these. Mirrors export() without importing it (torch); a test compares it with the
    call of fresh exports."""
    ext = options["external_data"]
    if isinstance(ext, str):
        mode, shards = "always", _core.external_data_shards(ext)
    else:
        mode, shards = ("auto" if ext is None else "always" if ext else "never"), 0
    return {"opset": DEFAULT_OPSET if options["opset"] is None else options["opset"],
            "optimize": True, "external_data": mode, "shard_bytes": shards,
            "input_names": [], "output_names": [], "weight_names": {}, "fallback": "",
            "custom_opsets": {}, "training": "eval", "all_modules_as_functions": False,
            "modules_as_functions": [], "inline_functions": False,
            "target": options["target"], "dtype": options["dtype"],
            "quantize": _quantize_spec(options["quantize"]), "export_params": True,
            "keep_initializers_as_inputs": False}


def _quantize_spec(q: Any) -> str:
    """_export._quantize_spec for the values it accepts."""
    if q is None or q == "":
        return ""
    if isinstance(q, str):
        return q
    d = dict(q)
    return ",".join([str(d.pop("dtype", None))] + [f"{k}={int(v)}" for k, v in d.items()])


def check_request(entry: dict[str, Any], call: dict[str, Any]) -> None:
    """export(cache_dir=)'s hit: the stored call's values that export() takes from its own
    arguments (all but the names and dims the capture decides) must be this call's. Raises
    HitFailed."""
    stored = entry["parts"][0]["call"]
    for k in STORED:
        if k in ("input_names", "weight_names"):
            continue
        try:
            same = json.loads(json.dumps(call[k], sort_keys=True)) == stored[k]
        except (TypeError, ValueError):
            same = False
        if not same:
            raise HitFailed(entry["folder"], f"is not used (its call has {k}="
                            f"{stored[k]!r:.60} where this export passes {call[k]!r:.60})")


@contextlib.contextmanager
def converting_hit(folder: str | None):
    """Around export(cache_dir=)'s conversion: a kept program (entry `folder`; None: no hit)
    that the C++ core refuses raises HitFailed, and export() captures anew."""
    if folder is None:
        yield
        return
    try:
        yield
    except _core.ConversionError as e:
        raise HitFailed(folder, f"did not convert with this model ({_first_line(e)})") from e


@contextlib.contextmanager
def verifying_hit(folder: str | None, result: ExportResult):
    """Around the verification of a hit's file (entry `folder`; None: no hit): a file that
    fails it is removed, the entry discarded, and HitFailed raised: the caller exports once
    more with a fresh capture."""
    if folder is None:
        yield
        return
    from ._verify import VerificationError

    try:
        yield
    except VerificationError as e:
        for r in (result.checks.get("encoder"), result):
            if isinstance(r, ExportResult) and r.path:
                for p in (r.path, *r.data_paths):
                    with contextlib.suppress(OSError):
                        os.remove(p)
        discard(folder)
        raise HitFailed(folder, f"gave a file that failed verification "
                                f"({_first_line(e)})") from e


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:300]


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
        expect = pretrained_call(options)
    except (OSError, ValueError, TypeError):
        return None  # no config.json, not a regular file, bad options: the fresh export says so
    roles = ("encoder", "decoder") if task in _hf_tasks.PAIRED else ("",)
    entry = lookup(cache_dir, fields, roles, expect)
    if entry is None:
        return None
    lookup_s = time.perf_counter() - t0
    try:
        results = convert(entry, path, f)
    except (_core.ConversionError, ValueError, OSError) as e:
        _DISCARDED[entry["folder"]] = _identity(entry["folder"])  # kept for others
        warnings.warn(f"program cache: entry {entry['folder']} did not convert with this "
                      f"checkpoint ({_first_line(e)}): capturing anew",
                      CacheWarning, stacklevel=3)
        return None
    result = results[-1]
    if len(results) > 1:
        result.checks["encoder"] = results[0]
    result.timings = {"cache lookup": lookup_s, **result.timings}
    result.timings["total"] = time.perf_counter() - t0
    result.checks["program_cache"] = {"result": "hit", "entry": entry["folder"]}
    return result
