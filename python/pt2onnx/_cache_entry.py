"""A program cache entry on disk, and whether to trust it (python/pt2onnx/_program_cache.py
stores, looks up and converts entries; docs/guides/transformers.md#the-program-cache states
the trust model for users). No torch here.

Whoever can write the cache folder chooses the models exported from it, so a hit is used
only when all of this holds:

- Ownership (`check_owner`): the folder, each entry's folder and each file in them belong to
  the current user and no group or other user can write them (the key, `.key`, not even
  read). Everything below the folder is opened relative to the folder's descriptor
  (`open_root`), symbolic links refused, so what is read is what was checked.
- Regular files only, sizes first (`read_file`): a file is opened without waiting (a FIFO
  opens at once) and checked on the open descriptor to be a regular file of at most its
  limit (a part: exactly its recorded size) before any byte is read: no FIFO, device or
  endless file is read. (The checkpoint's config.json, from which the key is computed, is
  read so too: _checkpoint_files.read_regular_file.)
- A signature over every byte (`mac`): `entry.mac` is an HMAC-SHA256 of entry.json's bytes
  keyed by the cache's `.key` (32 random bytes made by the first store, mode 0600);
  entry.json holds the sha256 and size of each part's files. An entry edited, damaged, or
  written without this key is not used. The key does not protect against whoever can read
  it: the user, root, anyone the folder is copied to with its `.key`.
- Every value checked before the C++ core sees it (`parse_entry`): the exact keys and JSON
  types, the weights' views (known dtypes, non-negative sizes and strides, byte counts that
  match them, offsets laid out as make_part lays them out and ending at the end of
  part<i>.bin), the parts' roles, and the call values a caller expects (what export()
  derives from this export's own options).

Layout: `<cache dir>/.key`; `<cache dir>/<key>/entry.json` (the key, sources, parts),
`entry.mac`, and per part `part<i>.json` (the program) and `part<i>.bin` (the buffers'
bytes). Entries are written into a `.new-*` folder and renamed into place, so a reader never
sees half an entry; a `.new-*` left by a killed process is removed STALE_S later
(`remove_stale`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import time
from typing import Any

from ._checkpoint_files import read_regular_file

MAX_ENTRY_BYTES = 64 << 20  # entry.json: the key, the source list, the views and calls
MAX_PART_BYTES = 1 << 40  # a part's files: read for the size the signed entry.json records
STALE_S = 600  # a `.new-*` this old is a killed store's: a store writes a few MB in seconds

KEY_FILE, MAC_FILE, NEW = ".key", "entry.mac", ".new-"
_MAC_CONTEXT = b"pt2onnx program cache entry\0"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
_I64 = 1 << 63
_MAX_AXIS = 1 << 16
MAX_RANK = 64

# Bytes per element of the dtypes a weight view may have, as str(torch.dtype) spells them
# (no torch here; a test checks them against torch's itemsize).
ITEMSIZE = {"torch." + k: v for k, v in {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "complex32": 4, "complex64": 8,
    "complex128": 16, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2,
    "uint32": 4, "uint64": 8, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1}.items()}


class Damaged(ValueError):
    """Why an entry (or a file read for the key) is not used: one line."""


class Untrusted(Exception):
    """A cache folder that others can write (or whose key others can read): not used."""

    def __init__(self, folder: str, why: str):
        super().__init__(
            f"program cache: {folder} is not used: {why}. Whoever can write the cache folder "
            "chooses the models exported from it: make it yours alone (chown it to yourself, "
            f"chmod go-w {folder}; its .key chmod 600) or use a folder of your own (cache_dir=, "
            "--cache-dir or $PT2ONNX_CACHE_DIR)")
        self.folder, self.why = folder, why


# -- files: regular files only, sizes first ---------------------------------------

def read_file(name: str, *, limit: int, dir_fd: int | None = None, exact: int | None = None,
              owned: bool = False, private: bool = False) -> bytes:
    """A regular file's bytes, read as every untrusted file is
    (_checkpoint_files.read_regular_file: no FIFO or device, the size checked on the open
    descriptor first). `owned` (the cache's files, opened relative to `dir_fd`): a symbolic
    link is refused and the file must be the user's alone (`check_owner`; `private`: readable
    by nobody else either). Raises Damaged, Untrusted, or OSError (FileNotFoundError: no such
    file)."""
    def owner(st):
        check_owner(st, name, private)

    try:
        return read_regular_file(name, limit, dir_fd=dir_fd, exact=exact, nofollow=owned,
                                 check_stat=owner if owned else None)
    except Damaged:
        raise
    except ValueError as e:
        raise Damaged(str(e)) from None


def write_file(dir_fd: int, name: str, data: bytes) -> None:
    """A new file of the cache, the user's alone (0600 whatever the umask), never through a
    link or over an existing file."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600,
                 dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def exists(root: int, name: str) -> bool:
    """Whether `name` is in folder `root` (a link counts, whatever it names)."""
    try:
        os.stat(name, dir_fd=root, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def rmtree(root: int, name: str) -> None:
    """Removes folder `name` of the cache, an entry (files only); a symbolic link in it is
    removed, never followed. Nothing there: nothing to do."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=root)
    except FileNotFoundError:
        return
    except OSError:  # a symbolic link or a file where an entry's folder belongs
        os.unlink(name, dir_fd=root)
        return
    try:
        for f in os.listdir(fd):
            os.unlink(f, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=root)


def remove_stale(root: int) -> None:
    """Removes what killed stores left: `.new-*` older than STALE_S (a younger one may be a
    store under way in another process)."""
    now = time.time()
    for name in os.listdir(root):
        if not name.startswith(NEW):
            continue
        try:
            st = os.stat(name, dir_fd=root, follow_symlinks=False)
            if now - st.st_mtime < STALE_S:
                continue
            if stat.S_ISDIR(st.st_mode):
                rmtree(root, name)
            else:
                os.unlink(name, dir_fd=root)
        except OSError:
            pass  # removed by another process first, or not ours to remove


# -- trust: the user's alone, signed ---------------------------------------------

def check_owner(st: os.stat_result, what: str, private: bool = False) -> None:
    """Only the current user can change what the cache trusts: `what` (its stat `st`) must
    be theirs, and no group or other user may write it (`private`: nor read it)."""
    if not hasattr(os, "geteuid"):
        raise Damaged("its owner cannot be checked on this system")
    if st.st_uid != os.geteuid():
        raise Damaged(f"{what} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})")
    others = stat.S_IRWXG | stat.S_IRWXO if private else stat.S_IWGRP | stat.S_IWOTH
    if st.st_mode & others:
        raise Damaged(f"{what} can be {'read or written' if private else 'written'} by its group "
                      f"or others (mode {stat.S_IMODE(st.st_mode):04o})")


def open_root(cache_dir: str, create: bool) -> int:
    """The cache folder, opened and checked (`check_owner`); everything below it is opened
    relative to this descriptor, so the folder read is the folder checked even if its path
    changes meanwhile (the path itself may be a symbolic link: the folder it names is
    checked). Raises FileNotFoundError (no folder and not `create`), Untrusted or OSError."""
    if create:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    fd = os.open(cache_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    try:
        check_owner(os.fstat(fd), "it")
    except Damaged as e:
        os.close(fd)
        raise Untrusted(cache_dir, str(e)) from None
    return fd


def signing_key(root: int, cache_dir: str, create: bool) -> bytes | None:
    """The cache's key (`.key`: 32 random bytes, mode 0600) that signs its entries; made by
    the first store (`create`). None: there is none yet. Raises Untrusted when others may
    read or write it."""
    try:
        return read_file(KEY_FILE, dir_fd=root, limit=32, exact=32, owned=True, private=True)
    except FileNotFoundError:
        if not create:
            return None
    except Damaged as e:
        raise Untrusted(cache_dir, f"its key {e}") from None
    tmp = NEW + "key-" + secrets.token_hex(8)
    write_file(root, tmp, secrets.token_bytes(32))
    try:  # a link never replaces: two first stores at once share the first one's key
        os.link(tmp, KEY_FILE, src_dir_fd=root, dst_dir_fd=root, follow_symlinks=False)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp, dir_fd=root)
    return signing_key(root, cache_dir, create=False)


def mac(key: bytes, entry_json: bytes) -> str:
    """An entry's signature (entry.mac): HMAC-SHA256 of its entry.json, which records the
    hash and size of every part file."""
    return hmac.new(key, _MAC_CONTEXT + entry_json, hashlib.sha256).hexdigest()


# -- values: each one checked --------------------------------------------------

def extent(dtype: str, sizes: list[int], strides: list[int]) -> int:
    """Bytes from a view's address that its elements span (`ITEMSIZE`'s dtypes only)."""
    if any(s == 0 for s in sizes):
        return 0
    return (sum((s - 1) * st for s, st in zip(sizes, strides)) + 1) * ITEMSIZE[dtype]


# What every value of an entry must be (JSON types; bool is not an int here).
def _is_int(v: Any, lo: int = 0, hi: int = _I64) -> bool:
    return type(v) is int and lo <= v < hi


def _is_bool(v: Any) -> bool:
    return type(v) is bool


def _is_str(v: Any) -> bool:
    return type(v) is str


def _is_hex64(v: Any) -> bool:
    return type(v) is str and re.fullmatch(r"[0-9a-f]{64}", v) is not None


def _list_of(ok):
    return lambda v: type(v) is list and all(ok(x) for x in v)


def _dict_of(ok):
    return lambda v: type(v) is dict and all(ok(x) for x in v.values())


def _one_of(*values):
    return lambda v: type(v) is str and v in values


def _pair(ok_a, ok_b):
    return lambda v: type(v) is list and len(v) == 2 and ok_a(v[0]) and ok_b(v[1])


_AXIS_NAMES = _list_of(_pair(lambda a: _is_int(a, 0, _MAX_AXIS), _is_str))
# A part's stored call: the keys of a _core.convert call besides the program, the weights,
# the paths and the progress line (`decode_call`), each with what its value must be.
CALL_TYPES = {
    "opset": lambda v: _is_int(v, 1, _MAX_AXIS),
    "optimize": _is_bool,
    "external_data": _one_of("auto", "always", "never"),
    "input_names": _list_of(_is_str),
    "output_names": _list_of(_is_str),
    "fallback": _one_of("", "custom_domain"),
    "custom_opsets": _dict_of(lambda v: _is_int(v, -_I64)),
    "training": _one_of("eval", "training", "preserve"),
    "all_modules_as_functions": _is_bool,
    "modules_as_functions": _list_of(_is_str),
    "inline_functions": _is_bool,
    "target": _is_str,
    "dtype": _is_str,
    "quantize": _is_str,
    "source_aliases": _dict_of(_list_of(_is_str)),
    "allow_unused": _is_bool,
    "convert_floats": _is_bool,
    "shard_bytes": _is_int,
    "export_params": _is_bool,
    "keep_initializers_as_inputs": _is_bool,
    "weight_names": _dict_of(_is_str),
    "input_dim_names": _dict_of(_AXIS_NAMES),
    "output_dim_names": _list_of(_pair(lambda i: _is_int(i, 0, 1 << 31), _AXIS_NAMES)),
}
STORED = tuple(k for k in CALL_TYPES if not k.endswith("_dim_names"))
_ENTRY_KEYS = {"fields", "sources", "parts", "created"}
_PART_KEYS = {"role", "call", "views", "program_sha256", "program_bytes", "data_sha256",
              "data_bytes"}
_SOURCE_ROOTS = ("pt2onnx", "transformers", "transformers_modules")


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise Damaged(f"{what} is not valid")


def parse_entry(meta: bytes, fields: dict[str, Any], roles: tuple[str, ...],
                expect: dict[str, Any] | None, model_views: bool) -> dict[str, Any]:
    """entry.json's values, each checked (raises Damaged naming the first wrong one)."""
    try:
        entry = json.loads(meta)
    except (ValueError, RecursionError) as e:
        raise Damaged(f"entry.json is not JSON ({str(e)[:80]})") from None
    _need(type(entry) is dict and set(entry) == _ENTRY_KEYS, "entry.json's keys")
    if entry["fields"] != fields:
        raise Damaged("it holds another export's entry (its key differs)")
    _need(type(entry["created"]) in (int, float), "created")
    _need(type(entry["sources"]) is dict and all(
        _is_source(k) and _is_hex64(v) for k, v in entry["sources"].items()), "sources")
    parts = entry["parts"]
    _need(type(parts) is list and len(parts) == len(roles), "parts")
    for i, (part, role) in enumerate(zip(parts, roles)):
        where = f"part {i}"
        _need(type(part) is dict and set(part) == _PART_KEYS and part["role"] == role, where)
        for what in ("program", "data"):
            _need(_is_hex64(part[f"{what}_sha256"]), f"{where}'s {what}_sha256")
            _need(_is_int(part[f"{what}_bytes"], 0, MAX_PART_BYTES + 1), f"{where}'s {what}_bytes")
        _check_call(part["call"], where, expect)
        _check_views(part["views"], part["data_bytes"], where, model_views)
    return entry


def _is_source(rel: Any) -> bool:
    """An entry's source file: `<root>/<relative .py path>` inside that root."""
    if type(rel) is not str:
        return False
    name, _, sub = rel.partition("/")
    return (name in _SOURCE_ROOTS and sub.endswith(".py")
            and all(p not in ("", ".", "..") for p in sub.split("/")))


def _check_call(call: Any, where: str, expect: dict[str, Any] | None) -> None:
    _need(type(call) is dict and set(call) == set(CALL_TYPES), f"{where}'s call")
    for k, ok in CALL_TYPES.items():
        _need(ok(call[k]), f"{where}'s call.{k}")
    for k, v in (expect or {}).items():
        if call[k] != v:
            raise Damaged(f"{where}'s call has {k}={call[k]!r:.60} where this export passes "
                          f"{v!r:.60}")


def _check_views(views: Any, data_bytes: int, where: str, model_views: bool) -> None:
    """The weight views of a part: each well formed, and those with bytes in part<i>.bin laid
    out as make_part lays them out (each span new at the end of the ones before, or the
    same span as an earlier view's: a tied tensor), ending where part<i>.bin ends."""
    _need(type(views) is list, f"{where}'s views")
    names, spans, end = set(), set(), 0
    for j, view in enumerate(views):
        what = f"{where}'s view {j}"
        _need(type(view) is list and len(view) in ((6, 7) if model_views else (6,)), what)
        name, offset, dtype, sizes, strides, n = view[:6]
        _need(_is_str(name) and name not in names and _is_str(dtype) and dtype in ITEMSIZE,
              what)
        names.add(name)
        _need(_list_of(_is_int)(sizes) and len(sizes) <= MAX_RANK
              and _list_of(_is_int)(strides) and len(strides) in (0, len(sizes)), what)
        if offset is None or len(view) == 7:  # read from the checkpoint or the model
            _need(offset is None and _is_int(n, 0, 1) and view[6:] in ([], ["model"]), what)
            continue
        _need(_is_int(offset) and len(strides) == len(sizes) and _is_int(n)
              and n == extent(dtype, sizes, strides), what)
        if offset == end:
            end += n
            spans.add((offset, n))
        else:
            _need((offset, n) in spans, f"{what}'s offset")
    _need(end == data_bytes, f"{where}'s data size")
