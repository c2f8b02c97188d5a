"""What an export returns (`ExportResult`), made from the C++ core's answer:
no torch here, so that a conversion that skips capture (pt2onnx-pretrained's
program cache, python/pt2onnx/_program_cache.py) builds it without importing
torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ExportResult:
    """What `export()` did: the files written, the graph's size, and seconds per stage.

    `export()` returns one; `str(result)` is a two-line summary (path, opset, node and
    initializer counts, megabytes of weights, then the time of each stage).

    Attributes:
        path: The ONNX file written; None when the model was returned in memory (`f` None
            or a file object).
        data_paths: The external data files written beside `path` (empty when the weights
            are inline).
        opset: The ONNX opset of the written model.
        ir_version: The ONNX IR version of the written model.
        nodes: The number of nodes in the graph.
        initializers: The number of initializers in the graph.
        weight_bytes: The size of the weights written, in bytes.
        timings: Seconds per stage, in order: "capture", "serialize", the C++ core's own
            stages, "total", then "verify" with verify=True.
        model_bytes: The serialized model when `f` was None or a file object; else None.
        checks: The results of checks and extras: "verify" (verify=True: one entry per
            input set, with its input shapes and the max abs difference of each output),
            "profile" and "exported_program" (the files of profile=True and
            dump_exported_program=True). `hf.export_pretrained` and
            `diffusers.export_pipeline` add their verification ("max_abs_error", ...).
        fallback_ops: The ops written as `pkg.torch.ops` nodes (fallback="custom_domain"),
            one dict each: "target", "count", "where" (the first node's place).
        node_histogram: `(op type, count)` for the written graph, most frequent first.
    """

    path: str | None
    data_paths: list[str]
    opset: int
    ir_version: int
    nodes: int
    initializers: int
    weight_bytes: int
    timings: dict[str, float] = field(default_factory=dict)
    model_bytes: bytes | None = None  # set when f=None
    checks: dict[str, Any] = field(default_factory=dict)  # verify=True, export_pretrained
    # Ops written as pkg.torch.ops nodes (fallback="custom_domain"): target, count, where.
    fallback_ops: list[dict[str, Any]] = field(default_factory=list)
    # Node count per op type of the written graph, most frequent first.
    node_histogram: list[tuple[str, int]] = field(default_factory=list)

    def __str__(self) -> str:
        stages = ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in self.timings.items())
        return (
            f"pt2onnx export: {self.path or '<in memory>'} (opset {self.opset}, "
            f"{self.nodes} nodes, {self.initializers} initializers, "
            f"{self.weight_bytes / 1e6:.1f} MB of weights)\n  {stages}"
        )


def result_from_core(r: dict[str, Any], path: str | None, timings: dict[str, float]) -> ExportResult:
    """The ExportResult of one `_core.convert` call `r` (its stages appended to `timings`)."""
    timings = dict(timings)
    timings.update(dict(r["timings"]))
    return ExportResult(
        path=path,
        data_paths=list(r["data_paths"]),
        opset=r["opset"],
        ir_version=r["ir_version"],
        nodes=r["nodes"],
        initializers=r["initializers"],
        weight_bytes=r["weight_bytes"],
        timings=timings,
        model_bytes=r["model_bytes"],
        fallback_ops=list(r["fallback_ops"]),
        node_histogram=[tuple(x) for x in r["node_histogram"]],
    )
