"""What the Python commands (pt2onnx-pretrained, pt2onnx-diffusers) share: an error as one line
(the C++ command does the same in src/cli/main.cpp), the output folder made for them, and the
check for their optional dependencies (pyproject.toml's extras `transformers` and `diffusers`: a
command whose packages are not installed stops with one line naming them and the extra)."""

from __future__ import annotations

import contextlib
import importlib.util
import os


def error_line(prog: str, e: BaseException) -> str:
    """`prog: error: Type: message`, the message's lines joined with '; ' (conversion errors
    name the node, its cause and source line on lines of their own)."""
    parts = [line.strip() for line in str(e).splitlines()]
    msg = "; ".join(p for p in parts if p)
    return f"{prog}: error: {type(e).__name__}: {msg}"


@contextlib.contextmanager
def output_folder(path: str | os.PathLike):
    """Creates the folder `path` and its parents where missing (as optimum does); if the body
    fails, removes those of them that it created and that are still empty, so a failed export
    leaves nothing behind."""
    made = []
    p = os.path.abspath(os.fspath(path))
    while p and not os.path.isdir(p):
        made.append(p)
        p = os.path.dirname(p)
    for d in reversed(made):
        os.mkdir(d)
    try:
        yield
    except BaseException:
        for d in made:  # deepest first
            with contextlib.suppress(OSError):
                os.rmdir(d)
        raise


def missing_message(prog: str, extra: str, modules: list[str]) -> str | None:
    """The error line for the `modules` that are not installed, or None when
    all are."""
    gone = [m for m in modules if importlib.util.find_spec(m) is None]
    if not gone:
        return None
    what = (f"the {gone[0]} package is" if len(gone) == 1
            else f"the packages {', '.join(gone)} are")
    return (f"{prog}: error: {what} not installed (the {extra!r} extra); "
            f"install it with: pip install 'pt2onnx[{extra}]'")
