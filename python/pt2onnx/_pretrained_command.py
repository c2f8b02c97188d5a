"""The `pt2onnx-pretrained` command (`hf.export_pretrained` from the command line).

It imports neither torch nor transformers before it needs them: an export whose program
is in the program cache (python/pt2onnx/_program_cache.py) is decided from files and
package metadata and converted by the C++ core with the checkpoint's weights read in
place, so with --no-verify the whole process runs without torch (checking the file
against PyTorch needs both). A miss calls `hf.export_pretrained`.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from . import _checkpoint_config, _cli, _hf_tasks, _program_cache
from ._hf_tasks import TASKS  # noqa: F401 - the task names, optimum's


class _Miss(Exception):
    pass


def from_cache(cache_dir: str, path: str, task: str, f: str, options: dict, verify: bool,
               atol: float | None = None, rtol: float | None = None):
    """export_pretrained from the program cache (python/pt2onnx/_program_cache.py), verified
    against PyTorch when asked (only then are torch and transformers imported); None on a
    miss. The command and `hf.export_pretrained` both start here."""
    try:
        with _cli.output_folder(os.path.dirname(os.path.abspath(f))):
            r = _program_cache.export_hit(cache_dir, path, task, f, options)
            if r is None:
                raise _Miss  # the folders made for the file go again, as after a failure
    except _Miss:
        return None
    if verify:
        from . import hf

        try:  # a hit whose file fails verification: removed, and exported anew without it
            with _program_cache.verifying_hit(r.checks["program_cache"]["entry"], r):
                hf.verify_into(r, None, path, task, f,
                               *hf.verify_tolerance(options["dtype"], atol, rtol),
                               options.get("pad_token_id"))
        except _program_cache.HitFailed as e:
            warnings.warn(str(e), _program_cache.CacheWarning, stacklevel=2)
            return None
    return r


def export_options(opset, target, dtype: str, external_data, quantize, pad_token_id) -> dict:
    """What an export of a checkpoint depends on besides the checkpoint (the program cache's
    key; `export_pretrained` and the command build it alike). pad_token_id is in it only when
    given, so the keys of entries made before the option existed still match."""
    options = dict(opset=opset, target=target, dtype=dtype, external_data=external_data,
                   quantize=quantize)
    if pad_token_id is not None:
        options["pad_token_id"] = pad_token_id
    return options


def main(argv: list[str] | None = None) -> int:
    """Run the `pt2onnx-pretrained` command (`export_pretrained` from the command line).

    Args:
        argv: The command's arguments; None: `sys.argv[1:]`.

    Returns:
        int: The exit status: 0, or 1 after printing the error on stderr.
    """
    p = argparse.ArgumentParser(
        prog="pt2onnx-pretrained",
        description="Export a local transformers checkpoint directory to ONNX and verify it "
                    "in onnxruntime (never reaches the network).")
    p.add_argument("path", help="checkpoint directory (config.json + weights)")
    p.add_argument("--task", default=None, metavar="TASK",
                   help="one of optimum's task names (or its synonyms): "
                        f"{', '.join(TASKS)}; default: inferred from config.json's "
                        "architectures, as optimum-cli does")
    p.add_argument("--list-tasks", action="store_true",
                   help="print the tasks the checkpoint can be exported as (the inferred one "
                        "first) and exit")
    p.add_argument("-o", "--output", help="ONNX file to write (default: PATH/model.onnx; "
                                          "seq2seq-with-past writes model.encoder.onnx and "
                                          "model.decoder.onnx beside it)")
    p.add_argument("--opset", type=int, default=None)
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime check")
    p.add_argument("--target", choices=("standard", "onnxruntime"), default="standard",
                   help="standard (default): ONNX operators; onnxruntime: onnxruntime's "
                        "fused contrib operators where they run faster")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32",
                   help="float type of the weights, inputs, outputs and compute (default "
                        "float32); norm statistics, softmax and sums stay float32")
    p.add_argument("--weights", choices=("auto", "empty", "memory"), default="auto",
                   help="empty: build the model without weight data and copy the checkpoint's "
                        "safetensors into the output file-to-file (any size fits); memory: load "
                        "the model first (from_pretrained); auto (default): empty, or memory "
                        "when the checkpoint's tensors need transformers' conversion (experts "
                        "saved one by one)")
    p.add_argument("--external-data", default=None, metavar="MODE",
                   help="always (default), never, auto, or shards:SIZE (e.g. shards:2GB: "
                        "data files of at most that size)")
    p.add_argument("--quantize", default=None, metavar="SPEC",
                   help="int4 or int8: Linear weights quantized while written (settings after "
                        "commas: block_size=N, asymmetric, accuracy_level=N, embeddings); implies "
                        "--no-verify (a quantized file differs from PyTorch by more than "
                        "rounding)")
    p.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="the program cache's folder (default: $PT2ONNX_CACHE_DIR, else "
                        "pt2onnx/programs under the user's cache directory)")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the program cache (an export of a config "
                        "exported before otherwise skips the capture, and imports no torch "
                        "with --no-verify)")
    p.add_argument("--pad_token_id", "--pad-token-id", type=int, default=None, metavar="ID",
                   help="the padding token's id, for a checkpoint whose config.json states none "
                        "(a decoder's text classifier finds each row's last token by it); "
                        "optimum-cli's option")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line on stderr")
    a = p.parse_args(argv)
    verify = not a.no_verify and not a.quantize
    missing = _cli.missing_message("pt2onnx-pretrained", "transformers",
                                   ["transformers"] + (["onnxruntime"] if verify else []))
    if missing:
        print(missing, file=sys.stderr)
        return 1
    external_data = {None: True, "always": True, "never": False,
                     "auto": None}.get(a.external_data, a.external_data)
    try:
        if a.list_tasks:
            from . import hf

            print("\n".join(hf.tasks_of_checkpoint(a.path)))
            return 0
        task = (_hf_tasks.resolve(a.task) if a.task is not None
                else _hf_tasks.infer(_checkpoint_config.read_config(a.path))).name
        r = None
        if not a.no_cache and a.weights != "memory":
            r = from_cache(a.cache_dir or _program_cache.default_dir(), a.path, task,
                           a.output or os.path.join(a.path, "model.onnx"),
                           export_options(a.opset, a.target, a.dtype, external_data,
                                          a.quantize, a.pad_token_id), verify)
        if r is None:
            from . import hf

            r = hf.export_pretrained(a.path, task, a.output, opset=a.opset,
                                     verify=verify, quantize=a.quantize,
                                     target=a.target, dtype=a.dtype, weights=a.weights,
                                     verbose=False if a.quiet else None,
                                     external_data=external_data, cache=not a.no_cache,
                                     cache_dir=a.cache_dir, pad_token_id=a.pad_token_id)
    except Exception as e:  # one clear line, no traceback, for the command
        print(_cli.error_line("pt2onnx-pretrained", e), file=sys.stderr)
        return 1
    if "encoder" in r.checks:
        print(r.checks["encoder"])
    print(r)
    if "weights" in r.checks:
        print(f"  weights: {r.checks['weights']}")
    cache = r.checks.get("program_cache")
    if cache is not None:
        print(f"  program cache: {cache['result']} ({cache['entry'] or 'not kept'})")
    if "verified_sizes" in r.checks:
        what = ("(batch, encoder length, decoder length, past)" if "encoder" in r.checks
                else "(batch, seq, past)")
        print(f"  verified in onnxruntime at {what} {r.checks['verified_sizes']}: "
              f"max abs error {r.checks['max_abs_error']:.2e}")
    return 0


def entry() -> None:
    """The `pt2onnx-pretrained` console script: `main()` with Python's cyclic garbage collector
    run less often (an export allocates millions of small objects, and a tiny checkpoint's
    export spent ~0.8 s of ~8 s in collections), then the process ends without the
    interpreter's teardown (~1 s freeing every module's objects one by one): stdout and stderr
    are flushed, and every file the command writes is closed by then.
    Measured in bench/pretrained_speed.md."""
    import gc

    gc.set_threshold(50_000, 20, 20)
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    entry()
