"""The documentation site's generated pages (run by mkdocs-gen-files during `make docs`; they are
made from sources kept elsewhere, so they cannot go stale and are never committed):

- benchmarks/<name>.md and the plots: bench/*.md and bench/*.png as committed (one source for
  the numbers: the benchmark scripts write bench/);
- reference/cli.md: the hand-written page, then each command's `--help` as it prints it (the
  installed commands of the Python running mkdocs: `make docs` runs .venv's, after `make python`);
- reference/cpp.md: the hand-written page, then every public declaration of the C++ API headers
  (include/pt2onnx/*.h) with the comment above it, one section each.
"""
import glob
import os
import re
import subprocess
import sys
import sysconfig

import mkdocs_gen_files

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))


def bench_pages():
    for path in sorted(glob.glob(os.path.join(ROOT, "bench", "*.md"))):
        with open(path, encoding="utf-8") as src, \
                mkdocs_gen_files.open(f"benchmarks/{os.path.basename(path)}", "w") as out:
            out.write(src.read())
        mkdocs_gen_files.set_edit_path(f"benchmarks/{os.path.basename(path)}",
                                       os.path.relpath(path, os.path.join(ROOT, "docs")))
    for path in sorted(glob.glob(os.path.join(ROOT, "bench", "*.png"))):
        with open(path, "rb") as src, \
                mkdocs_gen_files.open(f"benchmarks/{os.path.basename(path)}", "wb") as out:
            out.write(src.read())


COMMANDS = [("pt2onnx", "`.pt2` archives and TorchScript files (the C++ command)"),
            ("pt2onnx-pretrained", "transformers checkpoints (`python -m pt2onnx.hf`)"),
            ("pt2onnx-diffusers", "diffusers pipelines (`python -m pt2onnx.diffusers`)")]


def command_help():
    scripts = os.environ.get("PT2ONNX_DOCS_BIN") or sysconfig.get_path("scripts")
    with mkdocs_gen_files.open("reference/cli.md", "a") as out:
        for name, what in COMMANDS:
            exe = os.path.join(scripts, name)
            if not os.path.exists(exe):
                sys.exit(f"docs: {exe} not found: the commands' help is generated from the "
                         "installed commands (run `make python` first, or `make docs`)")
            p = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                sys.exit(f"docs: `{name} --help` failed ({p.returncode}):\n{p.stderr}")
            out.write(f"\n## `{name}`\n\nFor {what}. `{name} --help`:\n\n```text\n"
                      f"{p.stdout.rstrip()}\n```\n")


_NAME = [re.compile(p) for p in (r"^(?:struct|class)\s+(\w+)\s*[{:]", r"^enum class (\w+)",
                                 r"^using (\w+)", r"^(?:struct|class) (\w+);",
                                 r"(\w+)\s*\(")]


def header_items(path):
    """(name, text) of each top-level declaration of a header, its comment above it included."""
    lines = open(path, encoding="utf-8").read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("namespace pt2onnx"))
    items, comment, i = [], [], start + 1
    while i < len(lines):
        line = lines[i]
        if line.startswith("}  // namespace") or line == "}":
            break
        if not line.strip():
            comment = []
            i += 1
            continue
        if line.startswith("//"):
            comment.append(line)
            i += 1
            continue
        decl = [line]
        opens_body = line.rstrip().endswith("{")
        while not (decl[-1].startswith("};") if opens_body else decl[-1].rstrip().endswith(";")):
            i += 1
            decl.append(lines[i])
        i += 1
        name = next((m.group(1) for p in _NAME for m in [p.search(decl[0])] if m), decl[0])
        items.append((name, "\n".join(comment + decl)))
        comment = []
    return items


def cpp_reference():
    with mkdocs_gen_files.open("reference/cpp.md", "a") as out:
        out.write("\n## Declarations\n\nEvery public declaration of the headers in "
                  "`include/pt2onnx/`, with the comment above it, as the header has them.\n")
        for header in sorted(glob.glob(os.path.join(ROOT, "include", "pt2onnx", "*.h"))):
            rel = os.path.relpath(header, ROOT)
            out.write(f"\n### {os.path.basename(header)}\n\n`{rel}`\n")
            for name, text in header_items(header):
                out.write(f"\n#### `{name}`\n\n```cpp\n{text}\n```\n")


bench_pages()
command_help()
cpp_reference()
