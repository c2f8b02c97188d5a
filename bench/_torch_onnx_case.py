"""bench/hf_tasks.py --torch-onnx: one case exported with torch.onnx (the dynamo exporter) as a
new user of it would, on the module and example inputs pt2onnx captures, and checked in
onnxruntime against the same module in PyTorch at the sizes pt2onnx's own check uses.

    torch.onnx.export(module, (), f, kwargs=example, dynamic_shapes=ds, dynamo=True)

- the module, the example inputs (batch 2, sequence 8, past 4 with a cache) and the dynamic
  axes are `hf._TaskInputs`'s (seq2seq-with-past: `_hf_seq2seq._Seq2SeqInputs`'s encoder and
  decoder-step modules, two files); the model is `hf.load_pretrained`'s (real weights), after
  `hf.prepare()` (the caches as pytree nodes). pt2onnx's capture patches (its Mamba scan, its
  sliding-window cache rules) are not applied: torch.onnx gets the model as transformers has
  it.
- pt2onnx's dim names become `torch.export.Dim.DYNAMIC` per axis, same structure (shared
  names are not passed on: torch.export finds equal dims itself).
- the check: `hf.verify_into`'s sizes for the task (and its sliding-window sizes),
  inputs made by the same functions, seed 1, compared by `_verify.compare_or_raise` with
  `hf.verify_tolerance("float32")`, scaled as pt2onnx's check is. The file's inputs are fed
  in the order of the flattened example inputs: by name where every input's pytree path
  (non-alphanumerics as "_") is an input name of the file, else by position.

Returns {status: pass | fail | export-fail, error: first line, max_abs_error, seconds,
inputs_matched}. export-fail: torch.onnx.export raised (or the example inputs could not be
made: the error says "example inputs"); fail: the file did not load in onnxruntime, failed
there, or differs from PyTorch. Past the time limit: the status of the stage it was in, error
"TimeoutError: torch.onnx: over N s". (bench/hf_tasks.py sets "crash" when the child dies.)
"""

from __future__ import annotations

import os
import re
import signal
import time

import torch


def first_line(e: BaseException) -> str:
    """The exception's first line; for torch.onnx's wrapper errors ("Failed to export the
    model with torch.export. This is step 1/3 ...") also its cause's first line."""
    def line(x):
        text = re.sub(r"\x1b\[[0-9;]*m", "", f"{type(x).__name__}: {x}").strip()
        lines = [t.strip() for t in text.splitlines() if t.strip()] or [type(x).__name__]
        # "...: " followed by the details on the next line: that line too.
        return " ".join(lines[:2]) if lines[0].endswith(":") and len(lines) > 1 else lines[0]

    out = line(e)
    cause = e.__cause__ or e.__context__
    if cause is not None and type(e).__module__.startswith("torch.onnx"):
        # "Failed to export the model with torch.export. This is step 1/3 ...": the first
        # sentence, then the cause.
        out = out.split(". ")[0] + f" <- {line(cause)}"
    return out[:400]


def torch_dims(ds):
    """pt2onnx's dynamic shapes ({axis: "name"} per tensor, in dicts / lists / tuples) with every
    named axis torch.export.Dim.DYNAMIC, same structure."""
    if isinstance(ds, dict):
        if ds and all(isinstance(k, int) for k in ds):
            return {k: (torch.export.Dim.DYNAMIC if isinstance(v, str) else v)
                    for k, v in ds.items()}
        return {k: torch_dims(v) for k, v in ds.items()}
    if isinstance(ds, (list, tuple)):
        return type(ds)(torch_dims(v) for v in ds)
    return ds


class _Ordered:
    """An onnxruntime session whose get_inputs() lists the file's inputs in the order of the
    flattened example inputs, matched by name (compare_or_raise feeds by position)."""

    def __init__(self, sess, inputs):
        self._sess, self._inputs = sess, inputs

    def get_inputs(self):
        return self._inputs

    def __getattr__(self, name):
        return getattr(self._sess, name)


def _leaf_names(kwargs) -> list[str]:
    pytree = torch.utils._pytree
    flat, _ = pytree.tree_flatten_with_path(kwargs)
    return [re.sub(r"[^0-9a-zA-Z]+", "_", pytree.keystr(path)).strip("_")
            for path, v in flat if isinstance(v, (torch.Tensor, bool, int, float))]


def matched(sess, kwargs):
    """(session to compare with, "name" | "position")."""
    inputs = sess.get_inputs()
    by_name = {i.name: i for i in inputs}
    names = _leaf_names(kwargs)
    if len(names) == len(inputs) and set(names) == set(by_name):
        return _Ordered(sess, [by_name[n] for n in names]), "name"
    return sess, "position"


def _check(path, modules_inputs, atol, rtol, where) -> tuple[float, str]:
    """modules_inputs: [(module, kwargs)] at one size per item, all for the file at path."""
    import onnxruntime as ort

    from pt2onnx import _verify

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    worst, how = 0.0, set()
    for (module, kw), size in modules_inputs:
        s, m = matched(sess, kw)
        how.add(m)
        worst = max(worst, _verify.compare_or_raise(
            s, module, kw, atol, rtol, scaled=True,
            refused=f"verify: PyTorch fails at {size}",
            differs=f"verify: torch.onnx's {os.path.basename(path)} differs from PyTorch at "
                    f"{where} {size}"))
    return worst, "+".join(sorted(how))


def _export(module, kwargs, ds, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.onnx.export(module, (), path, kwargs=kwargs, dynamic_shapes=torch_dims(ds),
                      dynamo=True, verbose=False)


def run(ckpt: str, task_name: str, folder: str, limit_s: int) -> dict:
    """The torch.onnx result of one case (never raises; restores SIGALRM to none)."""
    from pt2onnx import _hf_seq2seq, hf

    out: dict = {}
    t0 = time.perf_counter()
    stage = "export-fail"

    fired = []

    def alarm(*_):
        fired.append(True)
        raise TimeoutError(f"torch.onnx: over {limit_s} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(limit_s)
    try:
        hf.prepare()
        task = hf.task_of(ckpt, task_name)
        model = hf.load_pretrained(ckpt, task)
        atol, rtol = hf.verify_tolerance("float32", None, None)
        path = os.path.join(folder, "model.onnx")
        if hf._pair(task, model):
            # Two files, as pt2onnx writes them: the encoder and one decoder step.
            inputs = _hf_seq2seq._Seq2SeqInputs(model)
            torch.manual_seed(0)
            try:
                enc_in, dec_in = inputs.make(2, 8, 3, 4)
            except Exception as e:
                raise RuntimeError(f"example inputs: {first_line(e)}") from e
            enc_ds, dec_ds = inputs.dynamic_shapes(enc_in, dec_in)
            encoder, decoder = inputs.parts()
            enc_path, dec_path = _hf_seq2seq.seq2seq_paths(path)
            _export(encoder, enc_in, enc_ds, enc_path)
            _export(decoder, dec_in, dec_ds, dec_path)
            stage = "fail"
            torch.manual_seed(1)
            sizes = [(1, 5, 1, 0), (3, 11, 1, 6), (2, 6, 3, 2)]
            made = [inputs.make(*s) for s in sizes]
            worst, how = 0.0, []
            for part, p, i in ((encoder, enc_path, 0), (decoder, dec_path, 1)):
                w, m = _check(p, [((part, kw[i]), s) for kw, s in zip(made, sizes)], atol, rtol,
                              "(batch, encoder length, decoder length, past)")
                worst, how = max(worst, w), how + [m]
            out.update(status="pass", max_abs_error=worst, inputs_matched="/".join(how))
        else:
            inputs = hf._TaskInputs(model, task, ckpt)
            torch.manual_seed(0)
            try:
                example = inputs.make(2, 8, 4 if task.with_past else 0)
            except Exception as e:
                raise RuntimeError(f"example inputs: {first_line(e)}") from e
            module = inputs.module(example)
            _export(module, example, inputs.dynamic_shapes(example), path)
            stage = "fail"
            torch.manual_seed(1)
            sizes = ([(1, 1, 7), (3, 5, 0), (2, 3, 2)] if task.with_past
                     else [(1, 5, 0), (3, 11, 0)])
            if inputs.kind == "decoder" and task.with_past:
                sizes += hf.window_sizes(inputs.make(1, 1, 1)["past_key_values"], sizes)
            worst, how = _check(path, [((inputs.module(kw), kw), s)
                                       for s in sizes for kw in [inputs.make(*s)]],
                                atol, rtol, "(batch, seq, past)")
            out.update(status="pass", max_abs_error=worst, inputs_matched=how)
    except BaseException as e:  # noqa: BLE001 - one tool's failure is its result
        if isinstance(e, KeyboardInterrupt):
            raise
        # A timeout torch.onnx wrapped in its own error says so first.
        out.update(status=stage, error=(f"TimeoutError: torch.onnx: over {limit_s} s"
                                        if fired else first_line(e)))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out
