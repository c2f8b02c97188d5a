#!/usr/bin/env bash
# Creates (once) and prints the absolute path of a virtual environment holding optimum-onnx and
# the transformers release it supports (< 4.58), for bench/hf_optimum.py: the side-by-side of
# optimum-onnx's exporter and pt2onnx on the same tiny checkpoints, saved by transformers 4.57.
#
# Kept, as tools/torch_venv.sh keeps its environments, in the user's cache directory
# (PT2ONNX_ENV_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/pt2onnx/torch-envs), one per key: the
# requirements below and the interpreter's version; a change to them makes a new one, and older
# ones unused for 3 days are removed then. A stamp written last marks one complete; creation is
# serialized by a lock (flock).
#
# torch is pinned to .venv's release exactly (torch==2.13.0: the CPU build, +cpu, that pip's
# configuration here finds; a range would let the resolver take PyPI's CUDA build and its GB of
# nvidia packages), torchvision to its matching release (timm needs it; timm: DETR's default
# backbone in transformers 4.x). After installing, the script checks that the torch is the +cpu
# build and that no nvidia package came in.
set -euo pipefail
cd "$(dirname "$0")/.."
requirements=(
  "optimum-onnx==0.1.0"
  "optimum==2.1.0"          # optimum-onnx 0.1.0: optimum~=2.1.0
  "transformers==4.57.1"    # optimum-onnx 0.1.0: transformers>=4.36,<4.58
  "torch==2.13.0"
  "torchvision==0.28.0"
  "timm"
  "onnx"
  "onnxruntime"
)
python="${PYTHON:-python3}"
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
cache="${PT2ONNX_ENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pt2onnx/torch-envs}"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
want="${requirements[*]} python$pyver"
key=$(echo "$want" | sha1sum | cut -c1-12)
dir="$cache/optimum-onnx-$key"
stamp="$dir/.pt2onnx-stamp"

ready() {
  [ -f "$stamp" ] || return 1
  touch "$stamp"
  tools/venv_hook/install.sh "$dir/bin/python"
  echo "$dir"
}
ready && exit 0

exec 9>"$dir.lock"
flock 9
ready && exit 0  # made by another call while this one waited
echo "tools/optimum_venv.sh: creating $dir ($want)" >&2
rm -rf "$dir"
"$python" -m venv "$dir" >&2
# By uv with pip's configuration (tools/uv_install.sh); .venv's uv where there is one, so the
# environment gets nothing but what was asked for.
[ -x .venv/bin/uv ] && export UV="${UV:-$PWD/.venv/bin/uv}"
tools/uv_install.sh "$dir/bin/python" "${requirements[@]}" >&2
# The CPU torch, and nothing of CUDA's.
"$dir/bin/python" - <<'EOF' >&2
import importlib.metadata as md
import torch
assert torch.__version__.endswith("+cpu"), f"torch {torch.__version__} is not the CPU build"
cuda = sorted(d.metadata["Name"] for d in md.distributions()
              if d.metadata["Name"].lower().startswith("nvidia"))
assert not cuda, f"CUDA packages installed: {cuda}"
print(f"tools/optimum_venv.sh: torch {torch.__version__}, no nvidia packages")
EOF
echo "$want" > "$stamp"
# Older environments of optimum-onnx nobody has used for 3 days.
for old in "$cache"/optimum-onnx-*/.pt2onnx-stamp; do
  [ "$old" = "$stamp" ] && continue
  if [ -n "$(find "$old" -mtime +3 2>/dev/null)" ]; then
    echo "tools/optimum_venv.sh: removing unused $(dirname "$old")" >&2
    rm -rf "$(dirname "$old")" "$(dirname "$old").lock"
  fi
done
ready
