"""Side by side with optimum-onnx: the same tiny checkpoints, built and saved by transformers
4.57 (tests/models/hf_tiny.py), exported by optimum-onnx's exporter and by pt2onnx.

    python bench/hf_optimum.py                 # the default case list (a quick subset)
    python bench/hf_optimum.py --cases fill-mask:bert text-generation-with-past:llama
    python bench/hf_optimum.py --report        # bench/hf_optimum.md from bench/hf_optimum.json

optimum-onnx 0.1.0 needs transformers < 4.58, so this runs in an environment of its own
(tools/optimum_venv.sh: optimum-onnx, transformers 4.57.1, .venv's CPU torch); started from
another interpreter (.venv's), the script re-executes itself there. Per case:

1. the tiny checkpoint of (model type, task without -with-past), built and saved with
   transformers 4.57 (status `build` where that fails: transformers' side, neither exporter's);
2. optimum: `optimum.exporters.onnx.main_export(ckpt, output=dir, task=T)`, which validates the
   ONNX files in onnxruntime against PyTorch with the task's atol: `pass`; `fail` where it
   raises (its ShapeError and other validation errors included); `atol` where it exports but
   its validation finds values or output names that differ (optimum only logs those, as "The
   ONNX export succeeded with the warning: ..."); `timeout`; `crash`;
3. pt2onnx: `python -m pt2onnx.hf ckpt --task T -o F --no-cache -q` run by .venv's interpreter
   (transformers 5.x; PT2ONNX_MAIN_PYTHON names another), which exports the 4.57-saved
   checkpoint and verifies it in onnxruntime against transformers 5.x loading that same
   checkpoint: `pass` (exit status 0), `fail` (the error line it prints), `timeout`.

Each step runs in a child process with a time limit (CASE_TIMEOUT_S), cases one at a time.
Results per case in bench/hf_optimum.json (a rerun of some cases replaces their rows only);
bench/hf_optimum.md has the pass counts per task for both and every failure's first line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "hf_optimum.json")
REPORT = os.path.join(HERE, "hf_optimum.md")
CASE_TIMEOUT_S = 600

# (optimum task, model type): one to a few types per task.
DEFAULT_CASES = [
    *(("text-generation-with-past", m)
      for m in ("llama", "gpt2", "mistral", "qwen2", "phi3", "mixtral", "gemma2")),
    *(("text-classification", m) for m in ("bert", "roberta", "distilbert")),
    *(("token-classification", m) for m in ("bert", "roberta")),
    *(("question-answering", m) for m in ("bert", "distilbert")),
    *(("fill-mask", m) for m in ("bert", "albert")),
    ("multiple-choice", "bert"),
    *(("feature-extraction", m) for m in ("bert", "clip")),
    *(("image-classification", m) for m in ("vit", "resnet", "swin", "convnext")),
    *(("object-detection", m) for m in ("detr", "yolos")),
    ("semantic-segmentation", "segformer"),
    *(("automatic-speech-recognition", m) for m in ("wav2vec2", "hubert")),
    ("audio-classification", "wav2vec2"),
    ("zero-shot-image-classification", "clip"),
    *(("text2text-generation-with-past", m) for m in ("t5", "bart", "marian")),
]


def _main_python() -> str:
    return os.environ.get("PT2ONNX_MAIN_PYTHON") or os.path.join(ROOT, ".venv", "bin", "python")


def _in_optimum_env() -> bool:
    try:
        import importlib.metadata as md

        return (md.version("optimum-onnx") == "0.1.0"
                and md.version("transformers").startswith("4."))
    except Exception:
        return False


def _reexec() -> None:
    """Re-executes this script in tools/optimum_venv.sh's environment."""
    venv = subprocess.run([os.path.join(ROOT, "tools", "optimum_venv.sh")], cwd=ROOT,
                          check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    python = os.path.join(venv, "bin", "python")
    env = dict(os.environ)
    # The pt2onnx side runs in the interpreter that started this, where that is .venv's.
    if "PT2ONNX_MAIN_PYTHON" not in env and sys.prefix != sys.base_prefix:
        env["PT2ONNX_MAIN_PYTHON"] = sys.executable
    os.execve(python, [python, os.path.abspath(__file__), *sys.argv[1:]], env)


def _first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    line = text.splitlines()[0][:400] if text else type(e).__name__
    cause = e.__cause__ or e.__context__
    if cause is not None and "validation" in line:  # optimum's wrapper of the real error
        line += " <- " + _first_line(cause)
    return line


# ---- child: build the checkpoint, export with optimum --------------------------------------

def _child(task: str, model_type: str, tmp: str, out_path: str) -> None:
    import logging
    import warnings

    warnings.simplefilter("ignore")
    sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
    import hf_tiny

    row: dict = {}
    ckpt = os.path.join(tmp, "ckpt")
    t0 = time.perf_counter()
    try:
        info = hf_tiny.tiny_checkpoint(model_type, task.replace("-with-past", ""), ckpt)
        row.update({"class": info["class"], "parameters": info["parameters"]})
    except Exception as e:
        row.update(build="fail", build_error=_first_line(e))
    row["build_seconds"] = round(time.perf_counter() - t0, 2)
    _write(out_path, row)
    if "build" in row:
        return

    from optimum.exporters.onnx import main_export

    class Catch(logging.Handler):  # optimum logs atol / output mismatches, does not raise
        def __init__(self):
            super().__init__(logging.WARNING)
            self.messages: list[str] = []

        def emit(self, record):
            msg = record.getMessage()
            if "succeeded with the warning" in msg:
                self.messages.append(msg)

    catch = Catch()
    logging.getLogger("optimum.exporters.onnx.convert").addHandler(catch)
    t0 = time.perf_counter()
    try:
        main_export(ckpt, output=os.path.join(tmp, "optimum"), task=task, device="cpu",
                    local_files_only=True)
        if catch.messages:
            msg = catch.messages[0].split("The ONNX export succeeded with the warning: ", 1)[-1]
            row.update(optimum="atol", optimum_error=" ".join(msg.split())[:400])
        else:
            row["optimum"] = "pass"
    except Exception as e:
        row.update(optimum="fail", optimum_error=_first_line(e))
    row["optimum_seconds"] = round(time.perf_counter() - t0, 2)
    _write(out_path, row)


def _write(path: str, row: dict) -> None:
    with open(path, "w") as f:
        json.dump(row, f)


# ---- parent --------------------------------------------------------------------------------

def _tail(text: str) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("pt2onnx-pretrained:"):
            return ln[:400]
    return (lines[-1] if lines else "?")[:400]


def _case(task: str, model_type: str) -> dict:
    row = {"task": task, "model_type": model_type}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.json")
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", task,
                                   model_type, tmp, out], cwd=ROOT, capture_output=True,
                                  text=True, timeout=CASE_TIMEOUT_S)
            rc, err = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired:
            rc, err = None, None
        # the whole child: interpreter start, imports, build and export (as pt2onnx's is)
        child_seconds = round(time.perf_counter() - t0, 2)
        if os.path.exists(out):
            row.update(json.load(open(out)))
        if "build" not in row and "class" not in row:  # died before the checkpoint was saved
            row.update(build="crash" if rc is not None else "timeout",
                       build_error=f"exit {rc}: {_tail(err)}" if rc is not None
                       else f"over {CASE_TIMEOUT_S} s")
        elif "build" not in row and "optimum" not in row:
            row.update(optimum="crash" if rc is not None else "timeout",
                       optimum_error=f"exit {rc}: {_tail(err)}" if rc is not None
                       else f"over {CASE_TIMEOUT_S} s",
                       optimum_seconds=round(time.perf_counter() - t0, 2))
        if "build" in row:
            return row
        row["optimum_process_seconds"] = child_seconds
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [_main_python(), "-m", "pt2onnx.hf", os.path.join(tmp, "ckpt"), "--task", task,
                 "-o", os.path.join(tmp, "pt2onnx", "model.onnx"), "--no-cache", "-q"],
                cwd=ROOT, capture_output=True, text=True, timeout=CASE_TIMEOUT_S)
            if proc.returncode == 0:
                row["pt2onnx"] = "pass"
            else:
                row.update(pt2onnx="fail", pt2onnx_error=_tail(proc.stderr))
        except subprocess.TimeoutExpired:
            row.update(pt2onnx="timeout", pt2onnx_error=f"over {CASE_TIMEOUT_S} s")
        row["pt2onnx_seconds"] = round(time.perf_counter() - t0, 2)
    return row


def _versions() -> dict:
    import importlib.metadata as md

    main = subprocess.run(
        [_main_python(), "-c", "import torch, transformers, onnxruntime; "
         "print(torch.__version__, transformers.__version__, onnxruntime.__version__)"],
        capture_output=True, text=True).stdout.split()
    return {"optimum_env": {p: md.version(p) for p in
                            ("optimum-onnx", "optimum", "transformers", "torch", "onnxruntime",
                             "onnx")},
            "pt2onnx_env": dict(zip(("torch", "transformers", "onnxruntime"), main))}


def _save(rows: list[dict], cases: list[tuple[str, str]]) -> None:
    kept, ran = [], set(cases)
    if os.path.exists(RESULTS):
        kept = [r for r in json.load(open(RESULTS))["cases"]
                if (r["task"], r["model_type"]) not in ran]
    order = {c: i for i, c in enumerate(DEFAULT_CASES)}
    allrows = sorted(kept + rows, key=lambda r: (order.get((r["task"], r["model_type"]), 1e9),
                                                 r["task"], r["model_type"]))
    with open(RESULTS, "w") as f:
        json.dump({**_versions(), "date": time.strftime("%Y-%m-%d"), "cases": allrows}, f,
                  indent=1)
        f.write("\n")


def _same(r: dict) -> str:
    """A note where both exporters failed with the same message: the model's own forward
    (the tiny config), not either exporter."""
    o, p = r.get("optimum_error") or "", r.get("pt2onnx_error") or ""
    if o and p and o.split(": ", 1)[-1].strip(" )") in p:
        return " (both exporters: the same error)"
    return ""


def report() -> None:
    data = json.load(open(RESULTS))
    rows = data["cases"]
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    oe, pe = data["optimum_env"], data["pt2onnx_env"]
    lines = [
        "# optimum-onnx and pt2onnx on checkpoints saved by transformers 4.57 "
        "(bench/hf_optimum.py)", "",
        f"Tiny random-weight checkpoints (tests/models/hf_tiny.py) built and saved with "
        f"transformers {oe['transformers']}, exported by optimum-onnx {oe['optimum-onnx']} "
        f"(optimum {oe['optimum']}, torch {oe['torch']}; `main_export`, validated by it in "
        f"onnxruntime {oe['onnxruntime']} with the task's atol) and by pt2onnx "
        f"(`python -m pt2onnx.hf CKPT --task T`, torch {pe.get('torch')}, transformers "
        f"{pe.get('transformers')}: verified in onnxruntime against transformers "
        f"{pe.get('transformers')} loading the same 4.57-saved checkpoint). {data['date']}, "
        f"2 cores, one case at a time. optimum `atol`: exported, but its validation logged "
        f"a difference beyond atol (or in output names), which optimum reports as a warning; "
        f"not counted as a pass. Seconds, wall, median per task: optimum s is the "
        f"`main_export` call (export + validation) in a process that has imported "
        f"transformers; optimum proc s its whole child process (interpreter start, imports, "
        f"building the checkpoint, the export); pt2onnx s the whole command (interpreter start, "
        f"imports, export, verification).", "",
        "| task | cases | built | optimum pass | optimum atol | pt2onnx pass | "
        "optimum s | optimum proc s | pt2onnx s |", "|---|---|---|---|---|---|---|---|---|"]

    def med(xs):
        xs = sorted(x for x in xs if x is not None)
        return f"{xs[len(xs) // 2]:.1f}" if xs else "-"

    def counts(rs):
        built = [r for r in rs if "build" not in r]
        return (len(rs), len(built), sum(r.get("optimum") == "pass" for r in built),
                sum(r.get("optimum") == "atol" for r in built),
                sum(r.get("pt2onnx") == "pass" for r in built),
                med(r.get("optimum_seconds") for r in built),
                med(r.get("optimum_process_seconds") for r in built),
                med(r.get("pt2onnx_seconds") for r in built))

    for t in tasks:
        c = counts([r for r in rows if r["task"] == t])
        lines.append(f"| {t} | " + " | ".join(str(x) for x in c) + " |")
    c = counts(rows)
    lines += ["| all | " + " | ".join(str(x) for x in c) + " |", ""]
    for title, key in (("pt2onnx failures (checkpoints saved by transformers 4.57)", "pt2onnx"),
                       ("optimum-onnx failures and atol warnings", "optimum")):
        bad = [r for r in rows if "build" not in r and r.get(key) != "pass"]
        lines += [f"## {title}", ""]
        lines += [f"- {r['task']} / `{r['model_type']}`: {r.get(key)}: "
                  f"{r.get(key + '_error', '')[:300]}{_same(r)}" for r in bad] or ["None."]
        lines.append("")
    bad = [r for r in rows if "build" in r]
    lines += ["## Build failures (transformers 4.57 / hf_tiny)", ""]
    lines += [f"- {r['task']} / `{r['model_type']}`: {r['build']}: {r['build_error'][:300]}"
              for r in bad] or ["None."]
    with open(REPORT, "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(*sys.argv[2:6])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="*", metavar="TASK:MODEL_TYPE",
                    help="cases (default: the quick subset DEFAULT_CASES)")
    ap.add_argument("--report", action="store_true", help="only write the report")
    a = ap.parse_args()
    if a.report:
        report()
        return 0
    if not _in_optimum_env():
        _reexec()
    cases = [tuple(c.split(":", 1)) for c in a.cases] if a.cases else list(DEFAULT_CASES)
    print(f"{len(cases)} cases; pt2onnx side: {_main_python()}", flush=True)
    rows = []
    for task, mt in cases:
        r = _case(task, mt)
        rows.append(r)
        if "build" in r:
            print(f"{task:32} {mt:12} build {r['build']}: {r['build_error'][:150]}", flush=True)
        else:
            print(f"{task:32} {mt:12} optimum {r['optimum']:7} {r.get('optimum_seconds', 0):6.1f}s"
                  f"  pt2onnx {r['pt2onnx']:7} {r['pt2onnx_seconds']:6.1f}s  "
                  f"{r.get('optimum_error', '')[:100]} | {r.get('pt2onnx_error', '')[:150]}",
                  flush=True)
        _save(rows, [(r["task"], r["model_type"]) for r in rows])  # as it goes
    report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
