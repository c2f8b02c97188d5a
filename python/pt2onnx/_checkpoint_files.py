"""A transformers checkpoint's weight files, and the files export_pretrained
writes: no torch here (pt2onnx-pretrained's program cache reads them before
deciding whether torch is needed at all, python/pt2onnx/_program_cache.py)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable

# A checkpoint's JSON files (config.json, model.safetensors.index.json) are a few kB to a few MB.
MAX_JSON_BYTES = 64 << 20


def read_regular_file(name: str, limit: int = MAX_JSON_BYTES, *, dir_fd: int | None = None,
                      exact: int | None = None, nofollow: bool = False,
                      check_stat: Callable[[os.stat_result], None] | None = None) -> bytes:
    """The bytes of a file of an untrusted folder, which must be a regular file of at most
    `limit` bytes (`exact`: that many): a FIFO is refused at once (opened without waiting for a
    writer), and a device (a link to /dev/zero) or an oversized file is never read; everything
    is checked on the open descriptor before a byte is read, and the file is read for its size
    only. `dir_fd`: `name` relative to that folder; `nofollow`: a symbolic link refused;
    `check_stat`: more checks of the open file's stat (the program cache's owner check).

    Raises:
        FileNotFoundError: `name` does not exist (other OSErrors of `open` likewise).
        ValueError: It is not a regular file, its size is not allowed, or it changed while read.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(name, flags | (getattr(os, "O_NOFOLLOW", 0) if nofollow else 0), dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{name}: not a regular file")
        if check_stat is not None:
            check_stat(st)
        size = st.st_size
        if size > limit:
            raise ValueError(f"{name}: {size} bytes, more than the {_bytes(limit)} such a file "
                             "may have")
        if exact is not None and size != exact:
            raise ValueError(f"{name}: {size} bytes, not {exact}")
        data = fh.read(size + 1)  # one byte more: a file that grew is refused
    if len(data) != size:
        raise ValueError(f"{name}: changed while it was read")
    return data


def _bytes(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def safetensors_files(source: str | os.PathLike) -> list[str]:
    """List the safetensors files of a checkpoint.

    Args:
        source: A .safetensors file, or a checkpoint directory holding
            model.safetensors.index.json (then its shards are listed) or *.safetensors files
            (then all of them, sorted).

    Returns:
        list[str]: The paths of the files.

    Raises:
        FileNotFoundError: `source` does not exist, the index names a shard that is not
            there, or the directory holds no .safetensors file.
        ValueError: The index is not a safetensors index (it has no weight_map, or names
            a shard by a path rather than a file name in the folder), or is not a regular
            file of at most `MAX_JSON_BYTES`.
    """
    path = os.fspath(source)
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"weights={path!r}: no such file or directory")
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        text = read_regular_file(index)
        try:
            weight_map = json.loads(text)["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            raise ValueError(f"{index}: not a safetensors index (no weight_map: {e})") \
                from None
        for s in shards:  # file names in the folder, never a path out of it
            if not isinstance(s, str) or s in ("", ".", "..") or "/" in s or os.sep in s:
                raise ValueError(f"{index}: weight_map names {s!r}, not a file name in the "
                                 "checkpoint's folder")
        files = [os.path.join(path, s) for s in shards]
        absent = [f for f in files if not os.path.isfile(f)]
        if absent:
            raise FileNotFoundError(f"{index} names shards that are not there: {absent}")
        return files
    files = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"weights={path!r}: no .safetensors file in the directory "
                                "(only safetensors checkpoints are read in place)")
    return files


def seq2seq_paths(f: str | os.PathLike) -> tuple[str, str]:
    """Name the two files `export_pretrained(task="seq2seq-with-past")` writes for `f`.

    Args:
        f: The path given to `export_pretrained` (`<stem>.onnx`).

    Returns:
        tuple[str, str]: The encoder and decoder files, `<stem>.encoder.onnx` and
            `<stem>.decoder.onnx`, beside `f`.

    Runnable examples: [LLMs and transformers](../guides/transformers.md).
    """
    f = os.fspath(f)
    stem = f[:-5] if f.endswith(".onnx") else f
    return stem + ".encoder.onnx", stem + ".decoder.onnx"
