"""Regenerates tests/data/compat/<torch version>/: small .pt2 archives saved by
each torch release pt2onnx reads, with inputs and the program's outputs on them
(tools/compat_archives_gen.py, run in that release's own environment).

  python tools/make_compat_archives.py [VERSION ...]   (default: every release below)

Environments: the pinned torch is .venv; another release uses the environment
tools/torch_venv.sh VERSION --torch-only prints: the full one of `make
test-torch` when it exists, else one with torch alone (the CUDA build from
PyPI: several GB, cached in the user's cache directory).

tests/python/test_compat_archives.py converts every archive with the pt2onnx
command and compares onnxruntime with the saved outputs.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The latest patch of every release pt2onnx is tested with (keep in sync with
# src/schema/versions.h and the README's paragraph on .pt2 archives).
RELEASES = ["2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1"]
PINNED = "2.13.0"


def torch_of(python):
    r = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                       capture_output=True, text=True)
    return r.stdout.strip().split("+")[0] if r.returncode == 0 else None


def environment(version):
    if version == PINNED:
        return os.path.join(ROOT, ".venv", "bin", "python")
    venv = subprocess.run([os.path.join(ROOT, "tools", "torch_venv.sh"), version, "--torch-only"],
                          cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    return os.path.join(ROOT, venv, "bin", "python")


def main():
    versions = sys.argv[1:] or RELEASES
    for v in versions:
        python = environment(v)
        got = torch_of(python)
        if got != v:
            sys.exit(f"{python} holds torch {got}, not {v}")
        out = os.path.join(ROOT, "tests", "data", "compat", v)
        for f in os.listdir(out) if os.path.isdir(out) else []:
            os.remove(os.path.join(out, f))
        # The generator needs only torch and numpy; the environment's own packages
        # (not this checkout's pt2onnx) and no GPU.
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore")
        subprocess.run([python, os.path.join(ROOT, "tools", "compat_archives_gen.py"), out],
                       check=True, env=env, cwd=ROOT)


if __name__ == "__main__":
    main()
