"""Every code block of the README and the documentation site's pages (docs/) runs as printed, or
says why it is not run (tests/python/doc_blocks.py has the rules). The blocks of one section run
in order, in one namespace and one fresh directory; a plain block right after a python block is
what it prints, right after a single command what the command prints, and must match exactly."""
import contextlib
import io
import os
import subprocess
import sysconfig

import pytest

import conftest
import doc_blocks

SECTIONS = doc_blocks.sections()


def _command(name):
    if name == "pt2onnx":
        return conftest.cli_path()
    return os.path.join(sysconfig.get_path("scripts"), name)


def test_every_code_block_runs_or_says_why():
    unmarked, total, run = [], 0, 0
    for path in doc_blocks.doc_files():
        for b in doc_blocks.blocks(path):
            if b["kind"] in ("text", "output"):
                continue
            total += 1
            run += b["kind"] in ("python", "command")
            if b["kind"] == "not-run" and not b["reason"]:
                unmarked.append(f"{path}:{b['line']} (```{b['lang']})")
    assert not unmarked, ("code blocks neither run nor marked `<!-- not run: REASON -->`: "
                          + ", ".join(unmarked))
    assert run > 30 and total > run, (run, total)  # the parser found the pages' blocks


@pytest.mark.parametrize("section", SECTIONS,
                         ids=[f"{s['path']}::{s['title']}" for s in SECTIONS])
def test_doc_section_runs(section, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    blocks = section["blocks"]
    where = f"{section['path']}[{section['title']}]"
    for i, b in enumerate(blocks):
        expected = blocks[i + 1]["body"] if i + 1 < len(blocks) and \
            blocks[i + 1]["kind"] == "output" else None
        if b["kind"] == "python":
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(b["body"], f"{where}:{b['line']}", "exec"), namespace)
            if expected is not None:
                assert out.getvalue() == expected, \
                    f"{where}:{b['line']} prints other than the page shows:\n{out.getvalue()}"
        elif b["kind"] == "command":
            outputs = []
            for argv in doc_blocks.command_lines(b["body"]):
                p = subprocess.run([_command(argv[0]), *argv[1:]], capture_output=True,
                                   text=True)
                assert p.returncode == 0, f"{where}: {' '.join(argv)}\n{p.stderr}"
                outputs.append(p.stdout)
            if expected is not None:
                assert len(outputs) == 1, f"{where}:{b['line']}: output shown for several lines"
                assert outputs[0] == expected, \
                    f"{where}:{b['line']} prints other than the page shows:\n{outputs[0]}"


def test_readme_is_a_front_page():
    """The README stays short: setup, three examples, links into the docs."""
    lines = open(os.path.join(doc_blocks.ROOT, "README.md"), encoding="utf-8").read()
    assert len(lines.splitlines()) <= 150


def test_every_bench_page_says_how_and_on_what_machine():
    """The benchmark pages the site shows (bench/*.md) each name the command that wrote them and
    the machine (its core count)."""
    import glob
    import re

    lacking = []
    for path in sorted(glob.glob(os.path.join(doc_blocks.ROOT, "bench", "*.md"))):
        text = open(path, encoding="utf-8").read()
        if not re.search(r"bench/\w+\.py|make (bench|zoo)", text):
            lacking.append(f"{os.path.basename(path)}: no command")
        if not re.search(r"\b\d+ (cores|CPUs)\b", text):
            lacking.append(f"{os.path.basename(path)}: no machine (core count)")
    assert not lacking, lacking


def test_site_navigation_lists_every_page():
    """mkdocs.yml's nav names every page under docs/ (the generated benchmark pages included),
    and every page it names exists or is generated from bench/."""
    import glob
    import re

    nav = re.findall(r":\s*([\w./-]+\.md)\s*$|^\s*-\s*([\w./-]+\.md)\s*$",
                     open(os.path.join(doc_blocks.ROOT, "mkdocs.yml"), encoding="utf-8").read(),
                     re.M)
    named = {a or b for a, b in nav}
    pages = {os.path.relpath(p, os.path.join(doc_blocks.ROOT, "docs"))
             for p in glob.glob(os.path.join(doc_blocks.ROOT, "docs", "**", "*.md"),
                                recursive=True)}
    generated = {f"benchmarks/{os.path.basename(p)}"
                 for p in glob.glob(os.path.join(doc_blocks.ROOT, "bench", "*.md"))}
    assert pages - named == set(), f"pages missing from the nav: {sorted(pages - named)}"
    assert named - pages - generated == set(), sorted(named - pages - generated)


def test_api_reference_documents_every_argument():
    """Each object the Python API page shows (`::: pt2onnx...` in docs/reference/python.md) has a
    docstring, and each of its arguments an entry under Args (the reference is generated from
    them); every name pt2onnx exports is on the page."""
    import importlib
    import inspect
    import re

    import pt2onnx

    page = open(os.path.join(doc_blocks.ROOT, "docs", "reference", "python.md"),
                encoding="utf-8").read()
    shown = re.findall(r"^::: ([\w.]+)$", page, re.M)
    problems = []
    for name in shown:
        module, _, attr = name.rpartition(".")
        obj = getattr(importlib.import_module(module), attr)
        doc = inspect.getdoc(obj) or ""
        if not doc:
            problems.append(f"{name}: no docstring")
            continue
        if inspect.isclass(obj):  # dataclasses and enums list their fields under Attributes
            target = obj.__init__ if "Args:" in doc else None
        else:
            target = obj
        try:
            params = inspect.signature(target).parameters if target else {}
        except (TypeError, ValueError):  # a nanobind function: its signature as nanobind gives it
            sig = obj.__nb_signature__[0][0]
            params = dict.fromkeys(re.findall(r"(\w+):", sig[sig.index("("):sig.rindex(")")]))
        for p in params:
            if p.startswith("_") or p in ("self", "cls"):
                continue
            if not re.search(rf"^\s+\**{p}( \(.*?\))?:", doc, re.M):
                problems.append(f"{name}: argument {p} not under Args")
    listed = {n.split(".")[-1] for n in shown} | set(re.findall(r"`pt2onnx\.(\w+)`", page))
    problems += [f"pt2onnx.{n} is not on the page" for n in pt2onnx.__all__ if n not in listed]
    assert not problems, problems
