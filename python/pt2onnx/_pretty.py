"""pt2onnx.pretty(): an ONNX model as readable text (the C++ core reads and
prints it; the same text as the `pt2onnx show` command)."""

from __future__ import annotations

import os

from . import _core


def pretty(model) -> str:
    """Render an ONNX model as readable text.

    The C++ core reads and prints the model: a header, the inputs with their dtypes and
    symbolic shapes, the initializers summed up, one line per node
    (`%y = Op[attr=..](%x)   # module.path`), the outputs, the functions, and subgraphs
    indented under their node. The same text as the `pt2onnx show` command.

    Args:
        model: A path (str or `os.PathLike`; the file is memory-mapped and its external
            data files are not read), the serialized bytes (`bytes`, `bytearray`,
            `memoryview`, e.g. `result.model_bytes`), or an `onnx.ModelProto`.

    Returns:
        str: The model as text.

    Raises:
        pt2onnx.ConversionError: The model is malformed.
        TypeError: `model` is none of the above.

    Runnable examples:
    [checking and debugging](../guides/debugging.md#looking-at-an-onnx-model-pt2onnx-show-and-pretty).
    """
    if isinstance(model, (str, os.PathLike)):
        return _core.pretty_file(os.fspath(model))
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _core.pretty_bytes(bytes(model), "<bytes>")
    if hasattr(model, "SerializeToString"):
        return _core.pretty_bytes(model.SerializeToString(), "<onnx.ModelProto>")
    raise TypeError(
        f"pretty() takes a path, bytes or an onnx.ModelProto, not {type(model).__name__}")
