"""pt2onnx.pretty(): an ONNX model as readable text (the C++ core reads and
prints it; the same text as the `pt2onnx show` command)."""

from __future__ import annotations

import os

from . import _core


def pretty(model) -> str:
    """The model as text: header, inputs with dtypes and symbolic shapes,
    initializers summed up, one line per node (``%y = Op[attr=..](%x)   #
    module.path``), outputs, functions, subgraphs indented under their node.

    `model`: a path (str or os.PathLike; the file is memory-mapped and its
    external data files are not read), the serialized bytes, or an
    onnx.ModelProto. Raises pt2onnx.ConversionError on a malformed model."""
    if isinstance(model, (str, os.PathLike)):
        return _core.pretty_file(os.fspath(model))
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _core.pretty_bytes(bytes(model), "<bytes>")
    if hasattr(model, "SerializeToString"):
        return _core.pretty_bytes(model.SerializeToString(), "<onnx.ModelProto>")
    raise TypeError(
        f"pretty() takes a path, bytes or an onnx.ModelProto, not {type(model).__name__}")
