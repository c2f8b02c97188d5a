"""pt2onnx: a fast PyTorch-to-ONNX exporter with a C++ core.

    import pt2onnx
    result = pt2onnx.export(model, (x,), "model.onnx", dynamic_shapes={"x": {0: "batch"}})
    print(result.timings)

Capture uses torch.export; everything after capture runs in C++.
"""

from ._core import MAX_OPSET, MIN_OPSET, ConversionError, __version__, supported_targets
from ._capture_rules import capture_rules
from ._custom import (register_custom_op_symbolic, save_custom_converters,
                      unregister_custom_op_symbolic)
from ._compat import is_in_onnx_export
from ._export import (DEFAULT_OPSET, ExportResult, export, init_empty_weights,
                      unconvertible_ops)
from ._pretty import pretty
from ._training import TrainingMode
from ._verify import VerificationError

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
