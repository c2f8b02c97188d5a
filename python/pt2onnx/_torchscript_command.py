"""The pt2onnx command on a TorchScript file (torch.jit.save): the C++ command
(src/cli/main.cpp) tells the file's kind from its contents and hands such a
file here, since only PyTorch runs TorchScript code. The options are the
command's; `--input NAME:DTYPE[DIMS]` gives each input (TorchScript files
do not record their inputs' shapes): ints are static dims, names dynamic
ones (example size 2, or NAME=N)."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from . import _torchscript

_DIM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:=(\d+))?$|^(\d+)$")


def parse_input(spec: str):
    """'x:float32[batch,3,224,224]' -> (name, dtype, [dims]), a dim an int
    or (name, example size)."""
    import torch

    m = re.fullmatch(r"\s*([A-Za-z_][\w.]*)\s*:\s*([a-z0-9]+)\s*\[([^\]]*)\]\s*", spec)
    if not m:
        raise ValueError(f"--input wants NAME:DTYPE[DIMS] (e.g. 'x:float32[batch,3,224,224]'), "
                         f"got {spec!r}")
    name, dtype_name, dims_text = m.groups()
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"--input {name}: unknown dtype {dtype_name!r} (float32, float16, int64, "
                         "bool, ...)")
    dims = []
    for d in (x.strip() for x in dims_text.split(",") if x.strip()):
        dm = _DIM.match(d)
        if not dm:
            raise ValueError(f"--input {name}: dim {d!r} is neither an int nor a name")
        if dm.group(3) is not None:
            dims.append(int(dm.group(3)))
        else:
            dims.append((dm.group(1), int(dm.group(2) or 2)))
    return name, dtype, dims


def example(dtype, dims):
    import torch

    shape = [d if isinstance(d, int) else d[1] for d in dims]
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    if dtype == torch.bool:
        return torch.ones(shape, dtype=torch.bool)
    return torch.zeros(shape, dtype=dtype)


def main(argv: list[str]) -> int:
    from ._cli import error_line

    parser = argparse.ArgumentParser(prog="pt2onnx", add_help=False)
    parser.add_argument("file")
    parser.add_argument("-o", "--output")
    parser.add_argument("--input", action="append", default=[])
    parser.add_argument("--opset", type=int)
    parser.add_argument("--external-data", default="always")
    parser.add_argument("--target", default="standard")
    parser.add_argument("--dtype")
    parser.add_argument("--no-optimize", action="store_true")
    parser.add_argument("--fallback")
    parser.add_argument("--training", default="eval")
    parser.add_argument("--input-names", nargs="+", default=[])
    parser.add_argument("--output-names", nargs="+", default=[])
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true")
    try:
        a, unknown = parser.parse_known_args(argv)
    except SystemExit:
        return 2
    if unknown:
        print(f"pt2onnx: error: {' '.join(unknown)}: not an option for TorchScript files "
              "(usage: pt2onnx --help)", file=sys.stderr)
        return 2
    try:
        t0 = time.perf_counter()
        # The arguments first, then the file's code, and only then torch.jit.load, which runs
        # the file's code (its __setstate__ methods): nothing of it runs unless all of it is
        # tensor code (src/archive/torchscript_check.cpp).
        if not a.input:
            raise ValueError(f"{a.file} is a TorchScript model, which does not record its "
                             "inputs: give each with --input NAME:DTYPE[DIMS], e.g. "
                             "--input 'x:float32[batch,3,224,224]'")
        specs = [parse_input(s) for s in a.input]
        if a.training.upper() not in ("EVAL", "TRAINING", "PRESERVE"):
            raise ValueError(f"--training must be eval, training or preserve, not {a.training!r}")
        import torch

        import pt2onnx
        from pt2onnx import _core

        _core.check_torchscript_file(a.file)
        try:
            model = torch.jit.load(a.file, map_location="cpu")
        except Exception as e:  # noqa: BLE001 - one line, naming the file
            raise ValueError(f"{a.file}: torch.jit.load cannot read it ({type(e).__name__}: "
                             f"{str(e).strip().splitlines()[0] if str(e).strip() else ''})") \
                from None
        _torchscript.check_loaded_graphs(model, a.file)
        args = tuple(example(dtype, dims) for _, dtype, dims in specs)
        names = [n.split(",") for n in a.input_names]
        input_names = [x for n in names for x in n] or [n for n, _, _ in specs]
        dynamic_axes = {}
        for (name, _, dims), graph_name in zip(specs, input_names):
            axes = {i: d[0] for i, d in enumerate(dims) if not isinstance(d, int)}
            if axes:
                dynamic_axes[graph_name] = axes
        external = {"always": True, "never": False, "auto": None}.get(a.external_data,
                                                                      a.external_data)
        output = a.output or (os.path.splitext(a.file)[0] + ".onnx")
        r = pt2onnx.export(
            model, args, output, opset=a.opset, input_names=input_names,
            output_names=[x for n in a.output_names for x in n.split(",")] or None,
            dynamic_axes=dynamic_axes or None, external_data=external, target=a.target,
            dtype=a.dtype, optimize=not a.no_optimize, fallback=a.fallback,
            training=getattr(pt2onnx.TrainingMode, a.training.upper()),
            verbose=False if a.quiet else None)
    except Exception as e:  # noqa: BLE001 - the command's one-line errors
        print(error_line("pt2onnx", e), file=sys.stderr)
        return 1
    if not a.quiet:
        data = "".join(f", data in {p}" for p in r.data_paths)
        print(f"wrote {output} (opset {r.opset}, {r.nodes} nodes, {r.initializers} initializers"
              f"{data}) in {time.perf_counter() - t0:.3f} s")
        if a.verbose:
            for stage, secs in r.timings.items():
                print(f"  {stage:<9} {secs * 1e3:9.3f} ms")
    return 0
