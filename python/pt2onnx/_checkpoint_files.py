"""A transformers checkpoint's weight files, and the files export_pretrained
writes: no torch here (pt2onnx-pretrained's program cache reads them before
deciding whether torch is needed at all, python/pt2onnx/_program_cache.py)."""

from __future__ import annotations

import json
import os
import stat

# A checkpoint's JSON files (config.json, model.safetensors.index.json) are a few kB to a few MB.
MAX_JSON_BYTES = 64 << 20


def read_regular_file(name: str, limit: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of a file of an untrusted folder, which must be a regular file of at most
    `limit` bytes: a FIFO is refused at once (opened without waiting for a writer), and a
    device (a link to /dev/zero) or an oversized file is never read.

    Raises:
        FileNotFoundError: `name` does not exist (other OSErrors of `open` likewise).
        ValueError: It is not a regular file, or it is larger than `limit`.
    """
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{name}: not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{name}: {st.st_size} bytes, more than the {limit >> 20} MiB "
                             "such a file may have")
        data = fh.read(limit + 1)
    if len(data) > limit:  # grew while read
        raise ValueError(f"{name}: more than the {limit >> 20} MiB such a file may have")
    return data


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
