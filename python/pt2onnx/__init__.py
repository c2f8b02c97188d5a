"""pt2onnx: a fast PyTorch-to-ONNX exporter with a C++ core.

    import pt2onnx
    result = pt2onnx.export(model, (x,), "model.onnx", dynamic_shapes={"x": {0: "batch"}})
    print(result.timings)

Capture uses torch.export; everything after capture runs in C++.
"""

import importlib
import importlib.util
from typing import TYPE_CHECKING

from ._core import MAX_OPSET, MIN_OPSET, ConversionError, __version__, supported_targets
from ._result import ExportResult

# The names below need torch: their modules are imported on first use, so that what only
# reads files (pt2onnx-pretrained converting a program kept in its cache) starts without
# importing torch. `from pt2onnx import export` and `pt2onnx.export` work as ever.
_NEEDS_TORCH = {
    "export": "_export",
    "unconvertible_ops": "_export",
    "init_empty_weights": "_export",
    "DEFAULT_OPSET": "_export",
    "is_in_onnx_export": "_compat",
    "pretty": "_pretty",
    "save_custom_converters": "_custom",
    "register_custom_op_symbolic": "_custom",
    "unregister_custom_op_symbolic": "_custom",
    "capture_rules": "_capture_rules",
    "TrainingMode": "_training",
    "VerificationError": "_verify",
}


if TYPE_CHECKING:  # for type checkers and the API reference (griffe): the same names
    from ._capture_rules import capture_rules
    from ._compat import is_in_onnx_export
    from ._custom import (register_custom_op_symbolic, save_custom_converters,
                          unregister_custom_op_symbolic)
    from ._export import DEFAULT_OPSET, export, init_empty_weights, unconvertible_ops
    from ._pretty import pretty
    from ._training import TrainingMode
    from ._verify import VerificationError


def __getattr__(name: str):
    module = _NEEDS_TORCH.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value
        return value
    # A submodule not imported yet (pt2onnx.hf, pt2onnx._export, ...): an attribute as
    # when this package imported its torch modules eagerly.
    if not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_NEEDS_TORCH))


__all__ = [
    "export",
    "unconvertible_ops",
    "is_in_onnx_export",
    "init_empty_weights",
    "pretty",
    "save_custom_converters",
    "register_custom_op_symbolic",
    "unregister_custom_op_symbolic",
    "capture_rules",
    "ExportResult",
    "TrainingMode",
    "ConversionError",
    "VerificationError",
    "supported_targets",
    "DEFAULT_OPSET",
    "MIN_OPSET",
    "MAX_OPSET",
    "__version__",
]
