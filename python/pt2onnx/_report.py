"""export(report="export.md"): a markdown account of one export, written
after it ends, whether it succeeded or failed: stages and times, inputs and
outputs with their shapes, the op histogram of the written graph, ops without
a converter, the verification. What the C++ core measured, formatted."""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch

from . import _core


def _shape(dims) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def _ops_table(ops: list[dict[str, Any]]) -> list[str]:
    lines = ["| target | nodes | first at | converts from opset |", "|---|--:|---|--:|"]
    for op in ops:
        since = op["converts_from"] or "-"
        lines.append(f"| `{op['target']}` | {op['count']} | {op['where']} | {since} |".replace(
            "\n", " "))
    return lines


def write(path: str | os.PathLike, *, model: Any, opset: int, outcome: dict[str, Any],
          error: BaseException | None = None,
          unsupported: list[dict[str, Any]] | None = None) -> None:
    """outcome: the core's result dict (plus 'path', 'timings', 'checks');
    empty when the export failed before the core returned."""
    name = type(model).__name__
    now = datetime.datetime.now(datetime.timezone.utc)
    lines = [f"# pt2onnx export report: {name}", "",
             f"pt2onnx {_core.__version__}, torch {torch.__version__}, opset {opset}, "
             f"{now:%Y-%m-%d %H:%M} UTC.", ""]
    if error is not None:
        lines += ["## Result: failed", "", "```", str(error).strip(), "```", ""]
    else:
        written = outcome.get("path") or "(in memory)"
        data = ", ".join(outcome.get("data_paths") or []) or "none"
        lines += ["## Result: written", "",
                  f"- file: `{written}` (external data: {data})",
                  f"- {outcome['nodes']} nodes, {outcome['initializers']} initializers, "
                  f"{outcome['weight_bytes'] / 1e6:.1f} MB of weights, IR version "
                  f"{outcome['ir_version']}", ""]
    if outcome.get("timings"):
        lines += ["## Stages", "", "| stage | ms |", "|---|--:|"]
        lines += [f"| {k} | {v * 1e3:.1f} |" for k, v in outcome["timings"].items()]
        lines.append("")
    for title, key in (("Inputs", "inputs"), ("Outputs", "outputs")):
        if outcome.get(key):
            lines += [f"## {title}", "", "| name | dtype | shape |", "|---|---|---|"]
            lines += [f"| `{n}` | {t} | {_shape(d)} |" for n, t, d in outcome[key]]
            lines.append("")
    if outcome.get("node_histogram"):
        lines += ["## Operators in the written graph", "", "| op | nodes |", "|---|--:|"]
        lines += [f"| {op} | {n} |" for op, n in outcome["node_histogram"]]
        lines.append("")
    if unsupported:
        lines += ["## Ops without a converter", ""] + _ops_table(unsupported) + [""]
    if outcome.get("fallback_ops"):
        lines += ["## Ops written as pkg.torch.ops nodes (fallback)", ""]
        lines += _ops_table(outcome["fallback_ops"]) + [""]
    runs = (outcome.get("checks") or {}).get("verify")
    if runs:
        lines += ["## Verification in onnxruntime", ""]
        for i, run in enumerate(runs):
            if "skipped" in run:
                lines.append(f"- run {i + 1}: skipped ({run['skipped']})")
                continue
            shapes = ", ".join(f"{n} {_shape(s)}" for n, s in run["inputs"].items())
            diffs = ", ".join(f"{n} {d:.2e}" for n, d in run["max_abs_diff"].items())
            lines.append(f"- run {i + 1}, inputs {shapes}: max abs difference {diffs}")
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def around(export, call: dict[str, Any], path: str | os.PathLike):
    """Runs export(**call) with a state dict it fills as it goes, and writes
    the report of its result or of its failure (then re-raises)."""
    state: dict[str, Any] = {}
    try:
        result = export(**call, _state=state)
    except Exception as e:
        unsupported = None
        if "program" in state:
            unsupported = list(_core.unsupported_ops(state["program"], state["opset"],
                                                      state.get("custom_functions", [])))
        write(path, model=call["model"], opset=state.get("opset", call["opset"]), error=e,
              outcome=state.get("core", {}), unsupported=unsupported)
        raise
    write(path, model=call["model"], opset=result.opset,
          outcome={**state["core"], "path": result.path, "timings": result.timings,
                   "checks": result.checks})
    return result
