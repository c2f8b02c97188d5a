"""The sweep of issue 57: every model type of every optimum task's transformers auto mapping,
as a tiny random-weight checkpoint (tests/models/hf_tiny.py: built from its config, saved with
save_pretrained), exported by `hf.export_pretrained` (what `pt2onnx-pretrained DIR --task T`
runs) and checked in onnxruntime against transformers at sizes other than the export's.

    python bench/hf_tasks.py                       # every task (hours on 2 cores)
    python bench/hf_tasks.py --tasks fill-mask text-classification
    python bench/hf_tasks.py --report              # bench/hf_tasks.md from bench/hf_tasks.json
    python bench/hf_tasks.py --torch-onnx --tasks fill-mask   # torch.onnx beside pt2onnx
    python bench/hf_tasks.py --results /tmp/r.json ...        # results elsewhere (/tmp/r.md)

Each case runs in a child process of its own (a crash or a hang in one model, transformers'
or ours, is that case's result: "crash" / "timeout"), several cases per child to pay the
imports once. Results are kept per case in bench/hf_tasks.json (a rerun of some cases replaces
their rows only); bench/hf_tasks.md has the pass counts per task and every failure's first
line. Statuses: pass; build (the tiny checkpoint could not be built or saved: transformers'
side, not an export); fail (the export or its check raised: the message says which);
timeout; crash.

--torch-onnx: each case whose checkpoint was built is also exported with torch.onnx
(dynamo=True), on the module and example inputs pt2onnx captures, and checked in onnxruntime
at pt2onnx's sizes (bench/_torch_onnx_case.py), in the same child after pt2onnx's case, under
its own time limit: the row's `torch_onnx` {status: pass | fail | export-fail | crash, error,
max_abs_error, seconds, inputs_matched}. pt2onnx's fields are written first and stay as they
are whatever torch.onnx does; a rerun without --torch-onnx keeps a case's torch_onnx result.
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
RESULTS = os.path.join(HERE, "hf_tasks.json")
REPORT = os.path.join(HERE, "hf_tasks.md")
CASE_TIMEOUT_S = 300
CASES_PER_CHILD = 25
TORCH_ONNX_TIMEOUT_S = 300


def _tasks() -> list[str]:
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from pt2onnx._hf_tasks import TASK_TABLE

    return [t.name for t in TASK_TABLE]


def _child(cases: list[tuple[str, str]], out_path: str, torch_onnx: bool = False) -> None:
    """Runs cases in this process, appending one JSON line per case as it ends. torch_onnx:
    a built case's line is written before its torch.onnx part runs, which then appends a
    line {"part": "torch_onnx", ...} of its own; after a torch.onnx timeout the child ends
    (the parent goes on in a new one: nothing torch.onnx was interrupted in is reused)."""
    import signal
    import warnings

    sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
    import hf_tiny

    from pt2onnx import hf

    warnings.simplefilter("ignore")

    def alarm(*_):
        raise TimeoutError(f"over {CASE_TIMEOUT_S} s")

    signal.signal(signal.SIGALRM, alarm)
    for task, model_type in cases:
        row = {"task": task, "model_type": model_type}
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            signal.alarm(CASE_TIMEOUT_S)
            try:
                try:
                    info = hf_tiny.tiny_checkpoint(model_type, task.replace("-with-past", ""),
                                                   os.path.join(tmp, "ckpt"))
                    row["class"] = info["class"]
                except Exception as e:  # transformers' side
                    row.update(status="build", error=_first_line(e))
                else:
                    r = hf.export_pretrained(os.path.join(tmp, "ckpt"), task,
                                             os.path.join(tmp, "out", "model.onnx"),
                                             cache=False, verbose=False)
                    row.update(status="pass", max_abs_error=r.checks.get("max_abs_error"),
                               weights=r.checks.get("weights", "empty"))
            except TimeoutError as e:
                row.update(status="timeout", error=str(e))
            except Exception as e:
                row.update(status="fail", error=_first_line(e))
            finally:
                signal.alarm(0)
            part = None
            if torch_onnx and "class" in row:  # the checkpoint was built
                import _torch_onnx_case

                row["seconds"] = round(time.perf_counter() - t0, 2)
                _append(out_path, row)  # first: a crash in torch.onnx is torch.onnx's
                part = {"task": task, "model_type": model_type, "part": "torch_onnx",
                        "torch_onnx": _torch_onnx_case.run(
                            os.path.join(tmp, "ckpt"), task, os.path.join(tmp, "torch_onnx"),
                            TORCH_ONNX_TIMEOUT_S)}
        if part is None:
            row["seconds"] = round(time.perf_counter() - t0, 2)
            _append(out_path, row)
        else:
            _append(out_path, part)
            if part["torch_onnx"].get("error", "").startswith("TimeoutError"):
                return


def _append(out_path: str, row: dict) -> None:
    with open(out_path, "a") as f:
        f.write(json.dumps(row) + "\n")


def _first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:400] if text else type(e).__name__


def _model_types(task: str) -> list[str]:
    """The model types the task's auto classes map (pt2onnx's table; text2text's speech
    fallback left out: the speech tasks sweep those), and optimum's custom classes."""
    code = ("import sys, json; sys.path.insert(0, 'python'); import transformers as tr;"
            "from pt2onnx._hf_tasks import TASKS_BY_NAME, CUSTOM_CLASSES;"
            f"t = TASKS_BY_NAME[{task!r}];"
            "autos = [a for a in t.auto if not (t.name.startswith('text2text') and 'Speech' in a)];"
            "types = {m for a in autos if hasattr(tr, a)"
            "         for m in getattr(tr, a)._model_mapping._model_mapping};"
            "types |= {m for (n, m) in CUSTOM_CLASSES if n == t.name};"
            # With a cache, the base model of the decoders only (as optimum exports it).
            "types &= (set(tr.AutoModelForCausalLM._model_mapping._model_mapping)"
            "          if t.name == 'feature-extraction-with-past' else types);"
            # Trajectories: the configs with a state size (AutoModel maps every base model).
            "from transformers.models.auto.configuration_auto import CONFIG_MAPPING as C;"
            "import inspect;"
            "types = {m for m in types if t.inputs != 'trajectory' or m in C and 'state_dim' in"
            "         inspect.signature(C[m].__init__).parameters};"
            # Images to text: the encoder-decoders (AutoModelForImageTextToText maps
            # vision-language decoders too, which optimum does not export as this task).
            "types = {m for m in types if not t.name.startswith('image-to-text') or m in C and"
            "         getattr(C[m](), 'is_encoder_decoder', False)};"
            "print(json.dumps(sorted(types)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run(cases: list[tuple[str, str]], torch_onnx: bool = False) -> list[dict]:
    """Runs cases in children, CASES_PER_CHILD each; a child that dies ends the case it was
    running as a crash (with torch_onnx, after the case's pt2onnx line: its torch.onnx part's
    crash), and the rest go on in a new child."""
    rows: list[dict] = []
    todo = list(cases)
    while todo:
        batch = todo[:CASES_PER_CHILD]
        limit = (CASE_TIMEOUT_S + (TORCH_ONNX_TIMEOUT_S if torch_onnx else 0)) * len(batch)
        with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as out:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", json.dumps(batch), out.name]
                + (["--torch-onnx"] if torch_onnx else []),
                cwd=ROOT, capture_output=True, text=True, timeout=limit + 120)
            lines = [json.loads(line) for line in open(out.name) if line.strip()]
        done = [r for r in lines if "part" not in r]
        for p in (r for r in lines if "part" in r):
            next(r for r in done if (r["task"], r["model_type"]) == (p["task"], p["model_type"])
                 )["torch_onnx"] = p["torch_onnx"]
        todo = todo[len(done):]
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1][:300]
        if (proc.returncode != 0 and torch_onnx and done and "class" in done[-1]
                and "torch_onnx" not in done[-1]):
            done[-1]["torch_onnx"] = {"status": "crash",
                                      "error": f"exit {proc.returncode}: {tail}"}
        elif proc.returncode != 0 and todo:
            task, mt = todo.pop(0)
            done.append({"task": task, "model_type": mt, "status": "crash",
                         "error": f"exit {proc.returncode}: {tail}"})
        for r in done:
            print(f"{r['task']:32} {r['model_type']:28} {r['status']:8} "
                  f"{r.get('seconds', 0):7.1f}s {r.get('error', '')[:120]}", flush=True)
            if "torch_onnx" in r:
                t = r["torch_onnx"]
                print(f"{'':32} {'  torch.onnx':28} {t['status']:8} "
                      f"{t.get('seconds', 0):7.1f}s {t.get('error', '')[:120]}", flush=True)
        rows += done
        _save(done, torch_onnx)  # kept as they come: a run stopped part way keeps what it did
    return rows


def _save(rows: list[dict], torch_onnx: bool = False) -> list[dict]:
    kept, ran = [], {(r["task"], r["model_type"]) for r in rows}
    if os.path.exists(RESULTS):
        old = json.load(open(RESULTS))["cases"]
        kept = [r for r in old if (r["task"], r["model_type"]) not in ran]
        if not torch_onnx:  # a run without torch.onnx keeps the cases' torch.onnx results
            earlier = {(r["task"], r["model_type"]): r["torch_onnx"]
                       for r in old if "torch_onnx" in r}
            for r in rows:
                if (r["task"], r["model_type"]) in earlier and "torch_onnx" not in r:
                    r["torch_onnx"] = earlier[(r["task"], r["model_type"])]
    import torch
    import transformers

    allrows = sorted(kept + rows, key=lambda r: (r["task"], r["model_type"]))
    with open(RESULTS, "w") as f:
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                   "date": time.strftime("%Y-%m-%d"), "cases": allrows}, f, indent=1)
        f.write("\n")
    return allrows


def report() -> None:
    data = json.load(open(RESULTS))
    rows = data["cases"]
    tasks = sorted({r["task"] for r in rows})
    lines = ["# optimum's tasks over transformers' auto mappings (bench/hf_tasks.py)", "",
             f"Tiny random-weight checkpoints of every model type the task's auto classes map "
             f"(tests/models/hf_tiny.py), exported with `hf.export_pretrained` and checked in "
             f"onnxruntime against transformers at sizes other than the export's. "
             f"torch {data['torch']}, transformers {data['transformers']}, {data['date']}, "
             f"2 cores. `build`: the tiny checkpoint could not be built (transformers' side).",
             "", "| task | model types | built | pass | pass / built |", "|---|---|---|---|---|"]
    with_to = any("torch_onnx" in r for r in rows)
    if with_to:
        lines[-4] += (
            " torch.onnx (`--torch-onnx`, bench/_torch_onnx_case.py): the same module and "
            "example inputs exported with `torch.onnx.export(..., dynamo=True)` (every dynamic "
            "axis `Dim.DYNAMIC`), checked in onnxruntime at pt2onnx's sizes and tolerance; "
            "`with torch.onnx`: the cases that have a torch.onnx result, and pt2onnx's and "
            "torch.onnx's passes among them.")
        lines[-2] += " with torch.onnx | pt2onnx pass | torch.onnx pass |"
        lines[-1] += "---|---|---|"

    def beside(rs):  # torch.onnx's columns over the cases that have its result
        if not with_to:
            return ""
        both = [r for r in rs if "torch_onnx" in r]
        return (f" {len(both)} | {sum(r['status'] == 'pass' for r in both)} | "
                f"{sum(r['torch_onnx']['status'] == 'pass' for r in both)} |")

    for t in tasks:
        rs = [r for r in rows if r["task"] == t]
        built = [r for r in rs if r["status"] != "build"]
        ok = [r for r in rs if r["status"] == "pass"]
        lines.append(f"| {t} | {len(rs)} | {len(built)} | {len(ok)} | "
                     f"{100 * len(ok) / max(len(built), 1):.0f}% |" + beside(rs))
    allb = [r for r in rows if r["status"] != "build"]
    allp = [r for r in rows if r["status"] == "pass"]
    lines += [f"| all | {len(rows)} | {len(allb)} | {len(allp)} | "
              f"{100 * len(allp) / max(len(allb), 1):.0f}% |" + beside(rows), "",
              "## Failures", ""]
    for r in rows:
        if r["status"] != "pass":
            lines.append(f"- {r['task']} / `{r['model_type']}`: {r['status']}: "
                         f"{_code(r.get('error', '')[:300])}")
    if with_to:
        lines += ["", "## torch.onnx failures", ""]
        for r in rows:
            t = r.get("torch_onnx")
            if t is not None and t["status"] != "pass":
                lines.append(f"- {r['task']} / `{r['model_type']}`: {t['status']}: "
                             f"{_code(t.get('error', '')[:300])}")
    with open(REPORT, "w") as f:
        f.write("\n".join(lines) + "\n")


def _code(text: str) -> str:
    """An error message as inline code: its brackets and parentheses (an FX node's
    "](args = ...)") are not read as Markdown links."""
    return f"`{text.replace('`', chr(39))}`" if text else ""


def main() -> int:
    global RESULTS, REPORT
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child([tuple(c) for c in json.loads(sys.argv[2])], sys.argv[3],
               torch_onnx="--torch-onnx" in sys.argv[4:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", nargs="*", help="tasks (default: all)")
    ap.add_argument("--model-types", nargs="*", help="only these model types")
    ap.add_argument("--report", action="store_true", help="only write the report")
    ap.add_argument("--torch-onnx", action="store_true",
                    help="also export each case with torch.onnx (dynamo=True) and check it")
    ap.add_argument("--results", help=f"the results file (default {RESULTS}); the report is "
                                      "written beside it, .md for .json")
    a = ap.parse_args()
    if a.results:
        RESULTS = os.path.abspath(a.results)
        REPORT = os.path.splitext(RESULTS)[0] + ".md"
    if not a.report:
        # feature-extraction last: AutoModel maps every model type (about 600).
        tasks = a.tasks or sorted(_tasks(), key=lambda t: t == "feature-extraction")
        cases = [(t, mt) for t in tasks for mt in _model_types(t)
                 if not a.model_types or mt in a.model_types]
        print(f"{len(cases)} cases", flush=True)
        _run(cases, a.torch_onnx)
    report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
