"""torch.onnx.export's arguments that pt2onnx.export takes under torch.onnx's
names and meanings (both of its exporters: dynamo=True and the TorchScript
one), turned into pt2onnx's own here, at the edge, so the rest of export()
sees one set of options. Also torch.onnx.is_in_onnx_export() during capture
and f given as a binary file object. docs/guides/migrating.md lists each argument."""

from __future__ import annotations

import contextlib
import datetime
import os
import threading
from typing import Any

import torch

_state = threading.local()


def is_in_onnx_export() -> bool:
    """Tell whether a model is being captured for export.

    As `torch.onnx.is_in_onnx_export()`: model code may test it to take an export-friendly
    path. While pt2onnx captures a model it also sets torch.onnx's flag (where this torch
    has it), so `torch.onnx.is_in_onnx_export()` is True then as well; both are False again
    after the capture, also when it fails.

    Returns:
        bool: True while pt2onnx (or torch.onnx) captures a model.

    Runnable examples: [migrating from torch.onnx](../guides/migrating.md).
    """
    if getattr(_state, "depth", 0) > 0:
        return True
    return bool(torch.onnx.is_in_onnx_export())


@contextlib.contextmanager
def exporting():
    """torch.onnx.is_in_onnx_export() (and pt2onnx's) True for the block and
    False again after it, also when it raises. torch.onnx keeps the flag in
    torch.onnx._internal.exporter._flags (dynamo exporter) and in the
    TorchScript exporter's GLOBALS; the first is set (feature-detected: a
    torch without it still gets pt2onnx.is_in_onnx_export())."""
    try:
        from torch.onnx._internal.exporter import _flags
    except ImportError:  # pragma: no cover - torch without the dynamo exporter
        _flags = None
    saved = getattr(_flags, "_is_onnx_exporting", None)
    _state.depth = getattr(_state, "depth", 0) + 1
    if _flags is not None:
        _flags._is_onnx_exporting = True
    try:
        yield
    finally:
        _state.depth -= 1
        if _flags is not None:
            _flags._is_onnx_exporting = saved


@contextlib.contextmanager
def trace_hint(capture: str, model: Any):
    """A failed torch.export capture of an nn.Module gets a note naming the
    other capture (torch.onnx's old default): capture='trace' / dynamo=False."""
    try:
        yield
    except Exception as e:
        if "Suggested fixes:" in str(e):
            fixes = str(e).split("Suggested fixes:", 1)[1].strip().split("\n\n")[0]
            e.add_note(
                "pt2onnx: torch.export refuses the dynamic dims as given and suggests "
                f"({' ; '.join(line.strip() for line in fixes.splitlines())}). As pt2onnx "
                "arguments: add fix_dynamic_shapes=True (the dynamic dims become Dim.AUTO: "
                "torch.export derives the constraints, a warning says which), or give "
                "dynamic_shapes with the suggested Dims (e.g. torch.export.Dim('_samples') and "
                "20 * that Dim for the input's dim)")
        if capture == "export" and isinstance(model, torch.nn.Module) and \
                not isinstance(model, torch.fx.GraphModule):
            e.add_note("pt2onnx: torch.export could not capture the model (above: where and "
                       "why). capture='trace' (or dynamo=False, as with torch.onnx) records it "
                       "with torch.jit.trace instead, its Python control flow fixed to the "
                       "example inputs'")
        raise


def _export_type_name(v: Any) -> str:
    name = getattr(v, "name", None)
    if isinstance(name, str):
        return name
    if isinstance(v, str):
        return v.upper()
    raise TypeError(f"operator_export_type must be a torch.onnx.OperatorExportTypes, not {v!r}")


def operator_export_fallback(operator_export_type: Any, fallback: str | None) -> str | None:
    """operator_export_type as pt2onnx's fallback: ONNX (default) none,
    ONNX_FALLTHROUGH and ONNX_ATEN_FALLBACK the custom-domain fallback (ops
    without a converter kept as nodes, listed in the result); ONNX_ATEN (every
    op as an ATen node) and RAW (the TorchScript IR) have no equivalent."""
    if operator_export_type is None:
        return fallback
    name = _export_type_name(operator_export_type)
    if name == "ONNX":
        return fallback
    if name in ("ONNX_FALLTHROUGH", "ONNX_ATEN_FALLBACK"):
        if fallback not in (None, "custom_domain"):
            raise ValueError(f"operator_export_type={name} and fallback={fallback!r} disagree")
        return "custom_domain"
    raise ValueError(
        f"operator_export_type={name} has no pt2onnx equivalent: pt2onnx writes ONNX operators "
        "(ONNX), and with ONNX_FALLTHROUGH / ONNX_ATEN_FALLBACK (or fallback='custom_domain') "
        "keeps ops it cannot convert as nodes of domain pkg.torch.ops; it never writes every op "
        "as an ATen node (ONNX_ATEN) nor TorchScript IR (RAW)")


def check_bools(**flags: Any) -> None:
    for arg, v in flags.items():
        if not isinstance(v, bool):
            raise TypeError(f"{arg} must be True or False, not {v!r}")


def resolve_opset(opset: Any, opset_version: Any) -> Any:
    if opset_version is None:
        return opset
    if opset is not None and opset != opset_version:
        raise ValueError(f"opset={opset!r} and opset_version={opset_version!r} disagree "
                         "(opset_version is torch.onnx's name for opset)")
    return opset_version


def report_path(report: Any, artifacts_dir: Any, model: Any) -> Any:
    """report=True (torch.onnx's form): a markdown report in artifacts_dir,
    named after the model class and the time; a path: that file."""
    if report is True:
        return os.path.join(os.fspath(artifacts_dir), f"pt2onnx_{_stamp(model)}_report.md")
    if report is False:
        return None
    return report


def _stamp(model: Any) -> str:
    name = type(model).__name__
    if isinstance(model, torch.jit.ScriptFunction):
        name = model.name
    return f"{name}_{datetime.datetime.now().strftime('%Y-%m-%d_%H-%M-%S-%f')}"


def artifact(artifacts_dir: Any, model: Any, suffix: str) -> str:
    os.makedirs(os.fspath(artifacts_dir), exist_ok=True)
    return os.path.join(os.fspath(artifacts_dir), f"pt2onnx_{_stamp(model)}{suffix}")


@contextlib.contextmanager
def profiled(on: bool, artifacts_dir: Any, model: Any, result_box: list):
    """profile=True: the export under cProfile; the 40 costliest functions
    (cumulative) written to artifacts_dir, the path in result.checks["profile"]."""
    if not on:
        yield
        return
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
        path = artifact(artifacts_dir, model, "_profile.txt")
        with open(path, "w") as fh:
            fh.write(out.getvalue())
        result_box.append(path)


def is_file_object(f: Any) -> bool:
    return f is not None and not isinstance(f, (str, os.PathLike)) and hasattr(f, "write")


def write_to_file_object(f: Any, data: bytes) -> None:
    try:
        f.write(data)
    except TypeError as e:
        raise TypeError("f must be a path or a binary file object (opened with 'wb', or "
                        f"io.BytesIO): writing the model's bytes failed: {e}") from None
