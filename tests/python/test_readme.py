"""The README's examples run as printed (issue 11 item 8): every ```python
block, and every ```sh block made only of `pt2onnx` / `pt2onnx-pretrained` / `pt2onnx-diffusers`
command lines (run with the installed commands). The blocks of one section run
in order, in one namespace and one fresh directory; a plain ``` block right
after a command block is that command's expected output and must match it
exactly. Other shell blocks (`make demo`, `make test`) are what CI runs."""
import os
import re
import subprocess
import sysconfig

import pytest

import conftest

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
COMMANDS = ("pt2onnx", "pt2onnx-pretrained", "pt2onnx-diffusers")


def _sections():
    text = open(README, encoding="utf-8").read()
    sections, current = [], None
    pos = 0
    fence = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.S | re.M)
    heading = re.compile(r"^(#{2,4}) (.+)$", re.M)
    events = [(m.start(), "h", m) for m in heading.finditer(text)]
    events += [(m.start(), "c", m) for m in fence.finditer(text)]
    # Headings inside code blocks (comments) are not headings.
    blocks = [(m.start(), m.end()) for m in fence.finditer(text)]
    for start, kind, m in sorted(events, key=lambda e: e[0]):
        if kind == "h":
            if any(a < start < b for a, b in blocks):
                continue
            current = {"title": m.group(2).strip(), "blocks": []}
            sections.append(current)
        elif current is not None and start >= pos:
            current["blocks"].append((m.group(1), m.group(2)))
            pos = m.end()
    return [s for s in sections if any(_runnable(lang, body) for lang, body in s["blocks"])]


def _command_lines(body):
    lines = []
    for line in body.splitlines():
        code = line.split("#", 1)[0].strip()
        if code:
            lines.append(code)
    return lines


def _runnable(lang, body):
    if lang == "python":
        return True
    if lang == "sh":
        lines = _command_lines(body)
        return bool(lines) and all(line.split()[0] in COMMANDS for line in lines)
    return False


SECTIONS = _sections()


def _command(name):
    if name == "pt2onnx":
        return conftest.cli_path()
    return os.path.join(sysconfig.get_path("scripts"), name)


@pytest.mark.parametrize("section", SECTIONS, ids=[s["title"] for s in SECTIONS])
def test_readme_section_runs(section, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__readme__"}
    blocks = section["blocks"]
    ran = 0
    for i, (lang, body) in enumerate(blocks):
        if not _runnable(lang, body):
            continue
        if lang == "python":
            exec(compile(body, f"README.md[{section['title']}]", "exec"), namespace)
            ran += 1
            continue
        outputs = []
        for line in _command_lines(body):
            argv = line.split()
            p = subprocess.run([_command(argv[0]), *argv[1:]], capture_output=True, text=True)
            assert p.returncode == 0, f"{line}\n{p.stderr}"
            outputs.append(p.stdout)
            ran += 1
        # A plain block right after shows the (single) command's output.
        if i + 1 < len(blocks) and blocks[i + 1][0] == "" and len(outputs) == 1:
            assert outputs[0] == blocks[i + 1][1], \
                f"README shows different output for {body.strip()}:\n{outputs[0]}"
    assert ran > 0


def test_readme_covers_each_feature():
    """Each feature of issue 11 has a runnable example in the README."""
    titles = " | ".join(s["title"] for s in SECTIONS)
    for feature in ("Custom converters", "Ops without a converter", "Modules as ONNX functions",
                    "Training mode", "Checking an export in onnxruntime", "Looking at an ONNX model",
                    "Command line", "Files that load fast"):
        assert feature in titles, f"no runnable README example under '{feature}' ({titles})"
