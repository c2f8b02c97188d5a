"""The code blocks of README.md and docs/ (the documentation site's sources), read into sections.

A page's sections start at its headings (## to ####, outside code blocks); the blocks of one
section run in order in one namespace (tests/python/test_docs.py). What a block is:

- ```python: run. A plain ``` block right after it is the output it prints, checked exactly.
- ```sh made only of pt2onnx / pt2onnx-pretrained / pt2onnx-diffusers command lines: each line
  run with the installed command; a plain ``` block right after a single command is its output.
- any other code block (```sh with other commands, ```cpp, ...) must say why it is not run, in
  an HTML comment on the line before its fence: `<!-- not run: REASON -->`.
- plain ``` / ```text blocks not right after a run block are text (listings, trees), not code.
"""
import glob
import os
import re
import shlex

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
COMMANDS = ("pt2onnx", "pt2onnx-pretrained", "pt2onnx-diffusers")
TEXT_LANGS = ("", "text")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->\s*$")
_FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)
_HEADING = re.compile(r"^(#{1,4}) (.+)$", re.M)


def doc_files():
    """README.md and every page under docs/, relative to the checkout."""
    pages = sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    return ["README.md"] + [os.path.relpath(p, ROOT) for p in pages]


def command_lines(body):
    """The shell lines of a block, comments and blank lines left out, split as a shell would."""
    lines = []
    for line in body.splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            lines.append(argv)
    return lines


def _is_command_block(lang, body):
    lines = command_lines(body) if lang == "sh" else []
    return bool(lines) and all(argv[0] in COMMANDS for argv in lines)


def blocks(path):
    """Every fenced block of a page: dicts with lang, body, line, kind ('python', 'command',
    'output', 'text' or 'not-run'), reason (for not-run: the comment's text, None when a block
    that is not run gives no reason), and section (the heading above it)."""
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    fences = list(_FENCE.finditer(text))
    headings = [m for m in _HEADING.finditer(text)
                if not any(f.start() < m.start() < f.end() for f in fences)]
    found, previous = [], None
    for m in fences:
        lang, body = m.group(1), m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        above = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marked = NOT_RUN.match(above.strip())
        section = None
        for h in headings:
            if h.start() < m.start():
                section = h.group(2).strip()
        block = {"lang": lang, "body": body, "line": line, "section": section, "reason": None}
        if marked:
            block["kind"], block["reason"] = "not-run", marked.group(1)
        elif lang == "python":
            block["kind"] = "python"
        elif _is_command_block(lang, body):
            block["kind"] = "command"
        elif lang in TEXT_LANGS:
            # Right after a run block (same section, nothing but blank lines between): its output.
            between = text[previous["end"]:m.start()] if previous else "x"
            block["kind"] = ("output" if previous and previous["kind"] in ("python", "command")
                             and previous["section"] == section and not between.strip()
                             else "text")
        else:
            block["kind"] = "not-run"  # with no reason: test_docs fails on it
        block["end"] = m.end()
        found.append(block)
        previous = block
    return found


def sections():
    """The sections with at least one block to run: dicts with path, title, blocks."""
    out = []
    for path in doc_files():
        current = None
        for b in blocks(path):
            if current is None or current["title"] != b["section"]:
                current = {"path": path, "title": b["section"], "blocks": []}
                out.append(current)
            current["blocks"].append(b)
    return [s for s in out if any(b["kind"] in ("python", "command") for b in s["blocks"])]


def section_code(path, title):
    """The python blocks of one section, joined (for tests that check a page's example more
    closely than test_docs does)."""
    for s in sections():
        if s["path"] == path and s["title"] == title:
            return "\n".join(b["body"] for b in s["blocks"] if b["kind"] == "python")
    raise KeyError(f"{path}: no section '{title}' with python blocks")
