"""A transformers checkpoint's weight files, and the files export_pretrained
writes: no torch here (pt2onnx-pretrained's program cache reads them before
deciding whether torch is needed at all, python/pt2onnx/_program_cache.py)."""

from __future__ import annotations

import json
import os


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
        ValueError: The index is not a safetensors index (it has no weight_map).
    """
    path = os.fspath(source)
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"weights={path!r}: no such file or directory")
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as fh:
            try:
                weight_map = json.load(fh)["weight_map"]
                shards = sorted(set(weight_map.values()))
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ValueError(f"{index}: not a safetensors index (no weight_map: {e})") \
                    from None
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
