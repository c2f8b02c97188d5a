"""export(training=...): the module mode the model is captured in (torch.onnx's
TrainingMode), set around capture and restored after it. The converters only
learn whether the export is in training mode (TRAINING, or PRESERVE of a model
in train mode): then the buffers the program updates (batch norm's running
statistics) become outputs."""

from __future__ import annotations

import contextlib
import enum

import torch


class TrainingMode(enum.IntEnum):
    """The mode `export(training=...)` captures a model in.

    As `torch.onnx.TrainingMode`: the same names and values, and `export()` accepts
    torch.onnx's members too. The mode is set around capture and every submodule's own
    mode restored after it. In training mode (TRAINING, or PRESERVE of a model in train
    mode) the buffers the forward updates (batch norm's running statistics) become extra
    outputs of the graph.

    Attributes:
        PRESERVE: Capture in the model's current mode.
        EVAL: Capture in eval mode (`model.eval()`); the default.
        TRAINING: Capture in train mode (`model.train()`).
    """

    PRESERVE = 0  # capture in the model's current mode
    EVAL = 1  # model.eval() during capture (the default)
    TRAINING = 2  # model.train() during capture


def check(mode) -> TrainingMode:
    """`mode` as a TrainingMode; torch.onnx.TrainingMode values are accepted."""
    if isinstance(mode, TrainingMode):
        return mode
    name = getattr(mode, "name", None)
    if isinstance(mode, enum.Enum) or (name and type(mode).__name__ == "TrainingMode"):
        if name in TrainingMode.__members__:
            return TrainingMode[name]
    raise TypeError(f"training must be a pt2onnx.TrainingMode (EVAL, TRAINING, PRESERVE), "
                    f"not {mode!r}")


def core_mode(model, mode: TrainingMode) -> str:
    """What the C++ core is told: an nn.Module's PRESERVE is its mode now."""
    if mode is TrainingMode.PRESERVE and isinstance(model, torch.nn.Module):
        return "training" if model.training else "eval"
    return {TrainingMode.EVAL: "eval", TrainingMode.TRAINING: "training",
            TrainingMode.PRESERVE: "preserve"}[mode]


@contextlib.contextmanager
def module_mode(model, mode: TrainingMode):
    """model.eval() / model.train() for the block, then every submodule's own
    flag back as it was (a model may mix modes: a frozen batch norm in eval
    inside a model in train mode). Nothing for PRESERVE or a program."""
    if mode is TrainingMode.PRESERVE or not isinstance(model, torch.nn.Module):
        yield
        return
    saved = [(m, m.training) for m in model.modules()]
    if isinstance(model, torch.fx.GraphModule):
        # A graph module's behaviour is its graph; the flag only reaches the
        # submodules it calls. The one torch.export(...).module() returns
        # (PT2E-quantized models are such) refuses train() / eval().
        for m, _ in saved:
            m.training = mode is TrainingMode.TRAINING
    else:
        model.train(mode is TrainingMode.TRAINING)
    try:
        yield
    finally:
        for m, flag in saved:
            m.training = flag
